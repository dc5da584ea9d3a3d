"""Tables of bench/links.sh's lab section (docs/data/links-lab.jsonl): p2p bandwidth per
delay, all-reduce auto against the fastest algorithm and the ring against Gloo's native per
delay and world size, and busbw of every algorithm at one delay.

    python3 bench/tables_links.py [docs/data/links-lab.jsonl] [--delay 25]
"""
import argparse
import json
from collections import defaultdict

LINK_GBPS = 0.125  # 1 Gbit/s


def size_name(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", default="docs/data/links-lab.jsonl")
    ap.add_argument("--delay", type=int, default=25)
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.path) if line.strip()]
    p2p = [r for r in rows if r.get("bench") == "p2p"]
    coll = [r for r in rows if r.get("bench") != "p2p" and "algo" in r]

    delays = sorted({r["delay_ms"] for r in p2p})
    print("| size | " + " | ".join(f"{d} ms (streams)" for d in delays) + " |")
    print("| ---: |" + " ---: |" * len(delays))
    by = {(r["delay_ms"], r["bytes"]): r for r in p2p}
    for b in sorted({r["bytes"] for r in p2p if r["bytes"] >= 1 << 20}):
        cells = []
        for d in delays:
            r = by.get((d, b))
            cells.append(f"{r['bandwidth_gbps']:.3f} ({r['bandwidth_gbps'] / LINK_GBPS:.0%}, "
                         f"{r['streams']})" if r else "")
        print(f"| {size_name(b)} | " + " | ".join(cells) + " |")
    print()

    cell = defaultdict(dict)  # (delay, world, bytes) -> algo -> row
    for r in coll:
        cell[(r["delay_ms"], r["world"], r["bytes"])][r["algo"]] = r
    print("| delay | ranks | auto / fastest, 4 KiB - 256 KiB | 1 MiB - 256 MiB | "
          "ring / native at 64 and 256 MiB | exchange / ring, 4 KiB - 4 MiB |")
    print("| ---: | ---: | --- | --- | --- | --- |")
    for d, w in sorted({(k[0], k[1]) for k in cell}):
        small, large, vs_native, exch = [], [], [], []
        for (d2, w2, b), algos in sorted(cell.items()):
            if (d2, w2) != (d, w) or "auto" not in algos:
                continue
            fastest = max(r["busbw_gbps"] for k, r in algos.items() if k != "auto")
            ratio = algos["auto"]["busbw_gbps"] / fastest if fastest > 0 else 1
            (small if b < 1 << 20 else large).append(ratio)
            if b in (64 << 20, 256 << 20) and "native" in algos:
                vs_native.append(algos["ring"]["busbw_gbps"] / algos["native"]["busbw_gbps"])
            if b <= 4 << 20 and "exchange" in algos:
                exch.append(algos["exchange"]["busbw_gbps"] / algos["ring"]["busbw_gbps"])
        rng = lambda v: f"{min(v):.2f}-{max(v):.2f}" if v else ""
        print(f"| {d} ms | {w} | {rng(small)} | {rng(large)} | "
              f"{', '.join(f'{x:.2f}' for x in vs_native)} | {rng(exch)} |")
    print()

    for w in sorted({k[1] for k in cell}):
        names = ["ring", "butterfly", "direct", "exchange", "native", "auto"]
        print(f"all-reduce busbw GB/s, {w} ranks, {a.delay} ms")
        print()
        print("| size | " + " | ".join(names) + " | auto / fastest (chosen) |")
        print("|---:|" + "---:|" * (len(names) + 1))
        for (d, w2, b), algos in sorted(cell.items()):
            if d != a.delay or w2 != w:
                continue
            vals = [f"{algos[n]['busbw_gbps']:.4f}" if n in algos else "" for n in names]
            fastest = max(r["busbw_gbps"] for k, r in algos.items() if k != "auto")
            auto = algos.get("auto")
            tail = (f"{auto['busbw_gbps'] / fastest:.2f} ({auto.get('chosen', '')})"
                    if auto and fastest > 0 else "")
            print(f"| {size_name(b)} | " + " | ".join(vals) + f" | {tail} |")
        print()


if __name__ == "__main__":
    main()
