#!/usr/bin/env python3
"""Markdown table of bench/torch_backend.sh's results (docs/data/torch-backend.jsonl),
stdlib only: per model and link, PyTorch DDP's samples/s over gloo and over dtrain (mean
over rounds), dtrain / gloo, the communication each exposes (the run's epoch time minus the
same backend's loopback epoch time) and dtrain's exposed / gloo's, and the losses."""
import json
import statistics
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "docs" / "data" / "torch-backend.jsonl"


def main():
    rows = [json.loads(l) for l in DATA.read_text().splitlines() if l.strip()]
    runs = {}
    for r in rows:
        runs.setdefault((r["model"], r["link"], r["backend"]), []).append(r)
    mean = lambda rs, k: statistics.mean(r[k] for r in rs)
    print("| model | link | gloo samples/s | dtrain samples/s | dtrain / gloo | gloo exposed (s) "
          "| dtrain exposed (s) | exposed dtrain / gloo | loss gloo / dtrain |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for (model, link, backend) in runs:
        if backend != "gloo" or (model, link, "dtrain") not in runs:
            continue
        g, d = runs[(model, link, "gloo")], runs[(model, link, "dtrain")]
        cells = [model, link, f"{mean(g, 'samples_per_s'):.1f}", f"{mean(d, 'samples_per_s'):.1f}",
                 f"{mean(d, 'samples_per_s') / mean(g, 'samples_per_s'):.2f}x"]
        if link != "loopback" and (model, "loopback", "gloo") in runs:
            eg = mean(g, "epoch_s") - mean(runs[(model, "loopback", "gloo")], "epoch_s")
            ed = mean(d, "epoch_s") - mean(runs[(model, "loopback", "dtrain")], "epoch_s")
            cells += [f"{eg:.2f}", f"{ed:.2f}", f"{ed / eg:.2f}" if eg > 0 else ""]
        else:
            cells += ["", "", ""]
        cells.append(f"{g[0]['train_loss']:.4f} / {d[0]['train_loss']:.4f}")
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
