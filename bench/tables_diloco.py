#!/usr/bin/env python3
"""Markdown tables of bench/diloco.sh's results (docs/data/diloco.jsonl), stdlib only.
   python3 bench/tables_diloco.py [RATE...]   (default: every rate in the file)
One table per rate: every run's epoch row, against DDP none and the fastest compressed DDP
of the same rate; the last run of a tag wins (APPEND=1 reruns replace earlier ones)."""
import json
import sys
from pathlib import Path

from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "diloco.jsonl"


def runs():
    """{rate: {tag: epoch row}} in file order."""
    out = {}
    for line in DATA.read_text().splitlines():
        r = json.loads(line) if line.strip() else {}
        if K.epoch in r:
            out.setdefault(r["rate"], {})[r["run"]] = r
    return out


# Tag prefixes of runs that get a table of their own (another world size, another model).
GROUPS = {"4ranks/": "4 ranks", "mobilenetv2/": "MobileNetV2"}


def name(tag):
    parts = tag.split("/")
    if parts[0] + "/" in GROUPS:
        parts = parts[1:]
        if parts[0] == "diloco" and "x" in parts[1]:  # diloco/RxK/H/codec: R replicas of K
            replicas, ranks = parts[1].split("x")
            return f"DiLoCo {replicas} replicas of {ranks} {parts[2]} {parts[3]}"
    if parts[0] == "ddp":
        return f"DDP {parts[1]}"
    if parts[0] == "diloco":
        return f"DiLoCo {parts[1]} {parts[2]}"
    # streaming/H50/F5/d5[/a0.5]/codec
    knobs = " ".join(p.replace("d", "τ=", 1) if p.startswith("d") else
                     p.replace("a", "α=", 1) if p.startswith("a") else p for p in parts[1:-1])
    return f"Streaming {knobs} {parts[-1]}"


def is_ddp(tag):
    return tag.split("/")[-2] == "ddp"


def bytes_a_sample(tag, r):
    """What one rank sent over every replica's samples (DDP: its gradients' wire bytes; a
    replica's inner DDP is not counted: it runs on the replica's own links)."""
    if not is_ddp(tag):
        return r[K.wire_bytes_per_sample]
    words = r["command"].split()
    return r[K.grad_wire_bytes] / float(words[words.index("--limit-train") + 1])


def table(rate, by_tag, prefix=""):
    by_tag = {t: r for t, r in by_tag.items() if t.startswith(prefix) and
              (prefix or not any(t.startswith(g) for g in GROUPS))}
    if not by_tag:
        return
    none = prefix + "ddp/none"
    base = by_tag.get(none)
    ddp = [r for t, r in by_tag.items() if is_ddp(t) and t != none]
    best = max(ddp, key=lambda r: r[K.samples_per_s]) if ddp else None
    print(f"{rate}{', ' + GROUPS[prefix] if prefix else ''}:\n")
    print("| method | test acc % | vs DDP none (pt) | samples/s | vs DDP none | vs best compressed "
          "DDP | bytes a sample | vs DDP none | outer steps | waited (s) | exchange (s) | hidden "
          "| compute utilization |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tag, r in by_tag.items():
        sps, acc = r[K.samples_per_s], 100 * r[K.test_acc]
        diloco = not is_ddp(tag)
        sent = bytes_a_sample(tag, r)
        fewer = f"1/{bytes_a_sample(none, base) / sent:.0f}" if base else ""
        cells = [name(tag), f"{acc:.2f}",
                 f"{acc - 100 * base[K.test_acc]:+.2f}" if base else "",
                 f"{sps:.0f}", f"{sps / base[K.samples_per_s]:.2f}x" if base else "",
                 f"{sps / best[K.samples_per_s]:.2f}x" if best else ""]
        cells += [f"{sent:,.0f}", fewer]
        if diloco:
            cells += [str(r[K.outer_steps]), f"{r[K.outer_sync_s]:.2f}",
                      f"{r.get(K.outer_exchange_s, 0):.2f}" if K.outer_exchange_s in r else "",
                      (f"{r[K.outer_hidden_s] / r[K.outer_exchange_s]:.0%}"
                       if r.get(K.outer_exchange_s) else ""),
                      f"{r[K.compute_utilization]:.3f}"]
        else:
            cells += ["", f"{r[K.time_comm_s]:.2f}", "", "", ""]
        print("| " + " | ".join(cells) + " |")
    print()


def main():
    data = runs()
    for rate in sys.argv[1:] or list(data):
        table(rate, data.get(rate, {}))
        for prefix in GROUPS:
            table(rate, data.get(rate, {}), prefix=prefix)


if __name__ == "__main__":
    main()
