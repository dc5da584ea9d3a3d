#!/usr/bin/env python3
"""Markdown table of bench/torch_backend.sh's results (docs/data/torch-backend.jsonl),
stdlib only: per model and link, PyTorch DDP's samples/s over gloo and over dtrain (mean
over rounds), dtrain / gloo, the communication each exposes (the run's epoch time minus the
same backend's loopback epoch time) and dtrain's exposed / gloo's, and the losses; then
dtrain.DiLoCo's (docs/data/torch-backend-diloco.jsonl) per link and codec: samples/s over
gloo and over dtrain, their ratio, the train losses and test accuracies."""
import json
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "torch-backend.jsonl"
DILOCO = DATA.with_name("torch-backend-diloco.jsonl")


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


def ddp_table():
    print("| model | link | gloo samples/s | dtrain samples/s | dtrain / gloo | gloo exposed (s) "
          "| dtrain exposed (s) | exposed dtrain / gloo | loss gloo / dtrain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (model, link), g, d, runs in pairs(DATA, "model", "link"):
        cells = [model, link, f"{mean(g, 'samples_per_s'):.1f}", f"{mean(d, 'samples_per_s'):.1f}",
                 f"{mean(d, 'samples_per_s') / mean(g, 'samples_per_s'):.2f}x"]
        base = ((model, "loopback"), "gloo")
        if link != "loopback" and base in runs:
            eg = mean(g, "epoch_s") - mean(runs[base], "epoch_s")
            ed = mean(d, "epoch_s") - mean(runs[((model, "loopback"), "dtrain")], "epoch_s")
            cells += [f"{eg:.2f}", f"{ed:.2f}", f"{ed / eg:.2f}" if eg > 0 else ""]
        else:
            cells += ["", "", ""]
        cells.append(f"{g[0]['train_loss']:.4f} / {d[0]['train_loss']:.4f}")
        print("| " + " | ".join(cells) + " |")


def main():
    if DATA.exists():
        ddp_table()
    if DILOCO.exists():
        print()
        diloco_table()


if __name__ == "__main__":
    main()
