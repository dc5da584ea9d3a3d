#!/usr/bin/env bash
# PyTorch DDP (bench/pytorch_ddp.py, unmodified but for its backend's name) over gloo and
# over dtrain's torch.distributed backend (docs/results.md, "dtrain as a torch.distributed
# backend"): 2 ranks, on loopback and on lab links (LINKS, RATE:DELAY one way, default
# "1gbit:25ms 1gbit:100ms"). ResNet-18 on synthetic 3x32x32 data, 32 a rank (45 MB of
# gradients a step), RESNET_SAMPLES (default 640: 10 steps); the cnn on Fashion-MNIST, 64 a
# rank, CNN_SAMPLES (default 6,400: 50 steps). ROUNDS rounds (default 2), gloo and dtrain
# in turn. "Exposed" communication: a run's time minus the same backend's loopback time.
# As root (the lab). Writes docs/data/torch-backend.jsonl, then the tables.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
# The build's package (it carries the backend; an installed one may predate it).
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
lab=tb$$
out=docs/data/torch-backend.jsonl
mkdir -p docs/data
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true' EXIT
: >"$out"
run() {  # run LINK ROUND BACKEND MODEL ARGS...
  local link=$1 round=$2 backend=$3 model=$4
  shift 4
  echo "torch_backend.sh: $link round $round $backend $model" >&2
  local where=()
  [ "$link" = loopback ] || where=(--netlab "$lab")
  "$bin" launch -n 2 "${where[@]}" -- "$py" bench/pytorch_ddp.py --backend "$backend" \
    --model "$model" "$@" | sed -n "s/^\[rank 0\] {/{\"link\":\"$link\",\"round\":$round,/p" >>"$out"
}
for link in loopback ${LINKS:-1gbit:25ms 1gbit:100ms}; do
  if [ "$link" != loopback ]; then
    "$bin" netlab down "$lab" >/dev/null 2>&1 || true
    "$bin" netlab up "$lab" --hosts 2 --rate "${link%%:*}" --delay "${link##*:}" >/dev/null
  fi
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for backend in gloo dtrain; do
      run "$link" "$round" "$backend" resnet18 --dataset synthetic --input-shape 3,32,32 \
        --synthetic-size "${RESNET_SAMPLES:-640}" --limit-train "${RESNET_SAMPLES:-640}" \
        --limit-test 64 --batch-size 32
      run "$link" "$round" "$backend" cnn --limit-train "${CNN_SAMPLES:-6400}" --limit-test 1000
    done
  done
done
"$py" bench/tables_torch_backend.py
