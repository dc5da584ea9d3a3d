#!/usr/bin/env python3
"""Tables of bench/text.sh's JSON lines (markdown, for docs/results.md).

usage: tables_text.py [DIR]                      DIR/codecs.jsonl, DIR/modes.jsonl
                                                 (default out/bench/text)
       tables_text.py CODECS.jsonl MODES.jsonl   e.g. docs/data/text-*.jsonl
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from metrics_keys import K  # noqa: E402


def runs(path):
    """(last epoch row, summary row) per run, in file order."""
    out, last = [], None
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if row.get(K.summary):
                out.append((last, row))
            else:
                last = row
    return out


def flag(command, name, default="none"):
    words = command.split()
    return words[words.index(name) + 1] if name in words else default


def codecs_table(path):
    print("| codec | wire/fp32 | test acc | test MCC | bandwidth (recv bytes / recv time) | samples/s |")
    print("|---|---|---|---|---|---|")
    for last, summary in runs(path):
        links = last.get(K.links, [])
        recv_bytes = sum(l[K.bytes] for l in links)
        recv_s = sum(l[K.recv_time_s] for l in links)
        bandwidth = f"{recv_bytes / recv_s / 1e9:.2f} GB/s" if recv_s > 0 else "-"
        print(f"| {flag(summary[K.command], '--compress')} "
              f"| {last.get(K.compression_ratio, 1.0):.3f} "
              f"| {100 * summary[K.final_test_acc]:.2f}% "
              f"| {summary.get(K.final_test_mcc, 0):.4f} | {bandwidth} "
              f"| {summary[K.samples_per_s]:.0f} |")


def modes_table(path):
    rows = runs(path)
    if not rows:
        return
    base = rows[0][1][K.samples_per_s]
    print("| mode | ranks | batch (per rank) | test acc | test MCC | samples/s | vs one process |")
    print("|---|---|---|---|---|---|---|")
    for _, s in rows:
        print(f"| {s[K.parallel]} | {s[K.ranks]} | {s[K.batch_size]} "
              f"| {100 * s[K.final_test_acc]:.2f}% | {s.get(K.final_test_mcc, 0):.4f} "
              f"| {s[K.samples_per_s]:.0f} | {s[K.samples_per_s] / base:.2f}x |")


def main():
    if len(sys.argv) == 3:
        codecs, modes = sys.argv[1:3]
    else:
        d = sys.argv[1] if len(sys.argv) > 1 else "out/bench/text"
        codecs, modes = os.path.join(d, "codecs.jsonl"), os.path.join(d, "modes.jsonl")
    codecs_table(codecs)
    print()
    modes_table(modes)


if __name__ == "__main__":
    main()
