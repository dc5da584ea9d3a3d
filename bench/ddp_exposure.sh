#!/usr/bin/env bash
# How much of the exchange each DDP hides on a long link (docs/results.md, "PyTorch DDP and
# FSDP2 over dtrain and over gloo"): ResNet-18 on synthetic 3x32x32 data, 2 ranks of 32, 20
# steps, on loopback and on a 1 Gbit/s lab link with 25 ms one way, ROUNDS rounds (default 2),
# each running both nets in turn: dtrain's own DDP (`dtrain train --parallel ddp`), and
# PyTorch DDP (bench/pytorch_ddp.py) over gloo and over dtrain's backend. Exposed: the link
# run's epoch time less the same round's loopback one. As root (the lab). Writes
# docs/data/ddp-exposure.jsonl and prints each round's exposed seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
lab=dx$$
out=docs/data/ddp-exposure.jsonl
tmp=$(mktemp)
mkdir -p docs/data
: >"$out"
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
data=(--dataset synthetic --input-shape 3,32,32 --synthetic-size 1280 --limit-train 1280
  --limit-test 64 --batch-size 32)
for round in $(seq 1 "${ROUNDS:-2}"); do
  for net in loopback 25ms; do
    "$bin" netlab down "$lab" >/dev/null 2>&1 || true
    where=()
    if [ "$net" = 25ms ]; then
      "$bin" netlab up "$lab" --hosts 2 --rate 1gbit --delay 25ms >/dev/null
      where=(--netlab "$lab")
    fi
    echo "ddp_exposure.sh: round $round $net" >&2
    "$bin" train --parallel ddp -n 2 "${where[@]}" --model resnet18 "${data[@]}" --num-classes 10 \
      --crop-padding 0 --flip 0 --epochs 1 --lr-schedule constant --quiet --metrics "$tmp"
    head -1 "$tmp" | sed "s/^{/{\"impl\":\"dtrain-ddp\",\"net\":\"$net\",\"round\":$round,/" >>"$out"
    for backend in gloo dtrain; do
      "$bin" launch -n 2 "${where[@]}" -- "$py" bench/pytorch_ddp.py --backend "$backend" \
        --model resnet18 "${data[@]}" 2>/dev/null |
        sed -n "s/^\[rank 0\] {/{\"net\":\"$net\",\"round\":$round,/p" >>"$out" || true
    done
  done
done
python3 - "$out" <<'PY'
import collections, json, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    r = json.loads(line)
    name = "dtrain's own DDP" if r.get("impl") == "dtrain-ddp" else f"PyTorch DDP over {r['backend']}"
    runs[(name, r["round"])][r["net"]] = r["epoch_s"]
print("| DDP | round | loopback s | 25 ms s | exposed s |")
print("| --- | ---: | ---: | ---: | ---: |")
for (name, rnd), t in sorted(runs.items()):
    if len(t) == 2:
        print(f"| {name} | {rnd} | {t['loopback']:.2f} | {t['25ms']:.2f} | {t['25ms'] - t['loopback']:.2f} |")
PY
