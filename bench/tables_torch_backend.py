#!/usr/bin/env python3
"""Markdown tables of bench/torch_backend.sh's results, stdlib only: per model and link,
PyTorch DDP's (docs/data/torch-backend.jsonl) and FSDP2's on the RoBERTa twin
(docs/data/torch-backend-fsdp.jsonl) samples/s over gloo and over dtrain (mean over rounds),
dtrain / gloo, the communication each exposes (the run's time, DDP's epoch or FSDP2's timed
steps, less the same backend's on loopback in the same round: the median over rounds) and
dtrain's exposed / gloo's (the median of the rounds' ratios, and their range), and the losses;
then dtrain.DiLoCo's (docs/data/torch-backend-diloco.jsonl) per link and codec: samples/s
over gloo and over dtrain, their ratio, the train losses and test accuracies. An argument
names another DDP file to read (bench/torch_backend.sh's OUT)."""
import json
import statistics
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "torch-backend.jsonl"
DILOCO = DATA.with_name("torch-backend-diloco.jsonl")
FSDP = DATA.with_name("torch-backend-fsdp.jsonl")


def mean(rs, k):
    return statistics.mean(r[k] for r in rs)


def pairs(path, *keys):
    """(key values, gloo's runs, dtrain's runs) for every case run on both backends."""
    runs = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            runs.setdefault((tuple(r[k] for k in keys), r["backend"]), []).append(r)
    return [(case, runs[(case, "gloo")], runs[(case, "dtrain")], runs)
            for (case, backend) in runs if backend == "gloo" and (case, "dtrain") in runs]


def diloco_table():
    print("| link | codec | gloo samples/s | dtrain samples/s | dtrain / gloo | rounds "
          "| train loss gloo / dtrain | test acc gloo / dtrain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | --- | --- |")
    for (link, codec), g, d, _ in pairs(DILOCO, "link", "codec"):
        ratios = [b["samples_per_s"] / a["samples_per_s"] for a, b in zip(g, d)]
        print(f"| {link} | {codec} | {mean(g, 'samples_per_s'):.0f} | "
              f"{mean(d, 'samples_per_s'):.0f} | "
              f"{min(ratios):.2f}-{max(ratios):.2f}x | {len(ratios)} | "
              f"{g[0]['train_loss']:.4f} / {d[0]['train_loss']:.4f} | "
              f"{g[0]['test_acc']:.4f} / {d[0]['test_acc']:.4f} |")


def exposed(link_runs, loopback_runs, key):
    """Each round's exposed communication: its time less the loopback run of the same round."""
    loopback = {r["round"]: r[key] for r in loopback_runs}
    return [r[key] - loopback[r["round"]] for r in link_runs if r["round"] in loopback]


def exposed_table(sources):
    """One row per model and link of each (path, time key, what to call its model): samples/s,
    the communication exposed (the time less the same backend's on loopback), and the losses
    (FSDP's: every step's, compared whole)."""
    print("| model | link | gloo samples/s | dtrain samples/s | dtrain / gloo | gloo exposed (s) "
          "| dtrain exposed (s) | exposed dtrain / gloo (rounds) | loss gloo / dtrain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for path, time_key, name in sources:
        for (model, link), g, d, runs in pairs(path, "model", "link"):
            cells = [name.format(model), link, f"{mean(g, 'samples_per_s'):.1f}",
                     f"{mean(d, 'samples_per_s'):.1f}",
                     f"{mean(d, 'samples_per_s') / mean(g, 'samples_per_s'):.2f}x"]
            base = ((model, "loopback"), "gloo")
            if link != "loopback" and base in runs:
                eg = exposed(g, runs[base], time_key)
                ed = exposed(d, runs[((model, "loopback"), "dtrain")], time_key)
                ratios = sorted(b / a for a, b in zip(eg, ed) if a > 0)
                cells += [f"{statistics.median(eg):.2f}", f"{statistics.median(ed):.2f}",
                          f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})"
                          if ratios else ""]
            else:
                cells += ["", "", ""]
            loss = f"{g[0]['train_loss']:.4f} / {d[0]['train_loss']:.4f}"
            if "losses" in g[0]:
                same = all(a["losses"] == b["losses"] for a, b in zip(g, d))
                loss += ", every step " + ("identical" if same else "DIFFERENT")
            cells.append(loss)
            print("| " + " | ".join(cells) + " |")


def main():
    ddp = Path(sys.argv[1]) if len(sys.argv) > 1 else DATA
    sources = [(ddp, "epoch_s", "{}"), (FSDP, "timed_s", "{} (FSDP2)")]
    if any(path.exists() for path, _, _ in sources):
        exposed_table([source for source in sources if source[0].exists()])
    if DILOCO.exists():
        print()
        diloco_table()


if __name__ == "__main__":
    main()
