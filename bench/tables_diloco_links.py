#!/usr/bin/env python3
"""Markdown tables of bench/diloco_links.sh's results (docs/data/diloco-links.jsonl), stdlib
only: per link, every run's samples/s (the mean over rounds, and each round), its test
accuracy and outer codec; then per link auto against the fastest fixed codec, and streaming
against blocking with the same codec."""
import json
import statistics
import sys
from pathlib import Path

from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "diloco-links.jsonl"


def runs(data):
    """{link: {tag: [epoch rows, one a round]}} in file order, each run's latest invocation
    (its "stamp") only."""
    out = {}
    for line in data.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            out.setdefault(r["link"], {}).setdefault(r["run"], []).append(r)
    for by_tag in out.values():
        for tag, rows in by_tag.items():
            latest = max(r.get("stamp", 0) for r in rows)
            by_tag[tag] = [r for r in rows if r.get("stamp", 0) == latest]
    return out


def sps(rows):
    return statistics.mean(r[K.samples_per_s] for r in rows)


def main():
    data = runs(Path(sys.argv[1]) if len(sys.argv) > 1 else DATA)
    print("| link | run | samples/s (mean; rounds) | test acc % | outer codec | probe read |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    for link, by_tag in data.items():
        for tag, rows in by_tag.items():
            each = " / ".join(f"{r[K.samples_per_s]:.0f}" for r in rows)
            probe = (f"{rows[0]['probe_mbps']:.1f} Mbit/s, {rows[0]['probe_one_way_ms']:.1f} ms"
                     if "probe_mbps" in rows[0] else "")
            print(f"| {link} | {tag} | {sps(rows):.0f} ({each}) | "
                  f"{100 * statistics.mean(r[K.test_acc] for r in rows):.2f} | "
                  f"{rows[0][K.outer_codec]} | {probe} |")
    print()
    print("| link | auto (blocking) | fastest fixed | auto / fastest | streaming / blocking, "
          "none | streaming / blocking, rot:tile:2 | streaming auto / blocking auto |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: |")
    for link, by_tag in data.items():
        fixed = {t: sps(rs) for t, rs in by_tag.items()
                 if t.startswith("blocking/") and t != "blocking/auto"}
        best = max(fixed, key=fixed.get) if fixed else None
        auto = by_tag.get("blocking/auto")
        ratio = lambda a, b: (f"{sps(by_tag[a]) / sps(by_tag[b]):.2f}x"
                              if a in by_tag and b in by_tag else "-")  # runs narrowed
        chosen = f"{auto[0][K.outer_codec]} {sps(auto):.0f}" if auto else "-"
        fastest = f"{best.split('/')[1]} {fixed[best]:.0f}" if best else "-"
        against = f"{sps(auto) / fixed[best]:.2f}x" if auto and best else "-"
        print(f"| {link} | {chosen} | {fastest} | {against} | "
              f"{ratio('streaming/F5/d4/none', 'blocking/none')} | "
              f"{ratio('streaming/F5/d4/rot:tile:2', 'blocking/rot:tile:2')} | "
              f"{ratio('streaming/F5/d4/auto', 'blocking/auto')} |")


if __name__ == "__main__":
    main()
