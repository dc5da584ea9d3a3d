#!/usr/bin/env python3
"""Markdown tables of bench/slowlink.sh's results (docs/data/slowlink*.jsonl), stdlib only.
   python3 bench/tables_slowlink.py [p2p|ushape|ddp|links]..."""
import json
import sys
from pathlib import Path

from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"
RATES = ["loopback", "1gbit", "100mbit", "20mbit"]
SET_BYTES = {"1gbit": 1e9 / 8, "100mbit": 100e6 / 8, "20mbit": 20e6 / 8}


def rows(name):
    path = DATA / name
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def epochs(name):
    """Per run tag, its median round (by samples/s; the lower middle of an even count) and
    the number of rounds. Accuracy is the median round's (same seed: equal in every round of
    a fixed codec)."""
    by_tag = {}
    for r in rows(name):
        if K.epoch in r:
            by_tag.setdefault(r["run"], []).append(r)
    out = {}
    for tag, rs in by_tag.items():
        rs.sort(key=lambda r: r[K.samples_per_s])
        out[tag] = dict(rs[(len(rs) - 1) // 2], rounds=len(rs))
    return out


def p2p():
    print("| set rate | size | latency (us) | bandwidth (MB/s) | set rate (MB/s) | measured / set |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows("slowlink-p2p.jsonl"):
        bw = r[K.bandwidth_gbps] * 1e3
        ratio = r[K.bandwidth_gbps] * 1e9 / SET_BYTES[r["rate"]]
        print(f"| {r['rate']} | {r[K.bytes]} | {r[K.latency_us]:.0f} | {bw:.2f} | "
              f"{SET_BYTES[r['rate']] / 1e6:.2f} | {ratio:.3f} |")


def codec_table(name, prefix, codecs):
    runs = epochs(name)
    print("| codec | " + " | ".join(f"{r} samples/s (x none) / acc" for r in RATES) + " |")
    print("|---|" + "---:|" * len(RATES))
    for codec in codecs:
        cells = []
        for rate in RATES:
            r = runs.get(f"{prefix}/{rate}/{codec}")
            base = runs.get(f"{prefix}/{rate}/none")
            if r is None or base is None:
                cells.append("-")
                continue
            x = r[K.samples_per_s] / base[K.samples_per_s]
            cells.append(f"{r[K.samples_per_s]:.0f} ({x:.2f}x) / {100 * r[K.test_acc]:.1f}")
        print(f"| {codec} | " + " | ".join(cells) + " |")
    counts = [f"{rate} {runs[f'{prefix}/{rate}/none']['rounds']}" for rate in RATES
              if f"{prefix}/{rate}/none" in runs]
    print(f"\nRounds per codec (median shown): {', '.join(counts)}. auto / best fixed codec of >= 8 bits "
          "(none, fp16, sortquant:8): " + ", ".join(auto_vs_best(runs, prefix)) + ".")


def auto_vs_best(runs, prefix):
    out = []
    for rate in RATES:
        auto = runs.get(f"{prefix}/{rate}/auto")
        fixed = [runs.get(f"{prefix}/{rate}/{c}") for c in ("none", "fp16", "sortquant:8")]
        if auto is None or None in fixed:
            continue
        best = max(fixed, key=lambda r: r[K.samples_per_s])
        out.append(f"{rate} {auto[K.samples_per_s] / best[K.samples_per_s]:.2f} "
                   f"(vs {best['run'].split('/')[-1]})")
    return out


def ushape():
    for model in ("cnn", "mobilenetv2"):
        print(f"\nU-shape {model}:\n")
        codec_table("slowlink.jsonl", f"ushape/{model}",
                    ["none", "fp16", "sortquant:8", "sortquant:4", "kmeans:4", "auto"])


def ddp():
    print("\nDDP cnn, compressed gradients with error feedback:\n")
    codec_table("slowlink-ddp.jsonl", "ddp/cnn", ["none", "fp16", "sortquant:8", "sortquant:4", "kmeans:4", "auto"])


def links():
    """Per-link bandwidth, both definitions (docs/measurement.md): recv bytes / recv time, and bytes per
    second of the epoch's wall time; with auto, the probe's rate and the chosen codec."""
    runs = epochs("slowlink.jsonl")
    print("| run | link | bytes | recv bytes / recv time (MB/s) | bytes / wall time (MB/s) | auto: probed rate (Mbit/s), codec |")
    print("|---|---|---:|---:|---:|---|")
    for tag, r in runs.items():
        if not tag.startswith("ushape/cnn/") or tag.split("/")[-1] not in ("none", "sortquant:8", "auto"):
            continue
        tuned = {(a[K.src], a[K.dst]): a for a in r.get(K.auto_links, [])}
        for l in r[K.links]:
            a = tuned.get((l[K.src], l[K.dst]))
            auto = f"{a[K.rate_mbps]:.1f}, {a[K.codec]}" if a else ""
            print(f"| {tag} | {l[K.src]}->{l[K.dst]} {l[K.direction]} | {l[K.bytes]} | "
                  f"{l[K.bytes] / max(l[K.recv_time_s], 1e-9) / 1e6:.2f} | {l[K.bytes] / r[K.epoch_s] / 1e6:.2f} | {auto} |")


if __name__ == "__main__":
    for section in sys.argv[1:] or ["p2p", "ushape", "ddp", "links"]:
        {"p2p": p2p, "ushape": ushape, "ddp": ddp, "links": links}[section]()
