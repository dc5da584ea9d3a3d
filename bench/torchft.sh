#!/usr/bin/env bash
# DiLoCo side by side with torchft's (docs/results.md, "DiLoCo"): 2 replicas
# of the cnn on Fashion-MNIST, batch 64 each, AdamW 1e-3 inner, Nesterov 0.7 / 0.9 outer,
# 38,400 training samples (300 steps per replica), the full test set, in one invocation:
#   torchft 0.2.0's local_sgd.DiLoCo (its pip package, gloo) from bench/pytorch_diloco.py;
#   dtrain.DiLoCo from the same script (the Python package: same loop, data and model);
#   the dtrain CLI (`dtrain train --parallel diloco`, its own loader and sampler).
# H = 50 exact for all three, then dtrain's coded and streaming variants. On loopback and on
# the lab's 20 Mbit/s + 5 ms link (RATES, default "loopback 20mbit"). ROUNDS (default 1)
# repeats every run. As root (the lab). Installs torchft into the venv when it is missing
# (pip: run it while nothing else uses the venv). Writes docs/data/torchft.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lab_rate.sh
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
export PYTHONPATH=${PYTHONPATH:-$PWD/build/python}  # the package beside this build
lab=tf$$
out=docs/data/torchft.jsonl
tmp=$(mktemp)
mkdir -p docs/data
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
"$py" -c "import torchft" 2>/dev/null ||
  "$py" -m pip install --disable-pip-version-check -q torchft==0.2.0
: >"$out"
tag() {  # tag RUN RATE ROUND: prefixes the JSON line on stdin
  sed -n 's/^\[rank 0\] {/{/p' | sed "s|^{|{\"run\":\"$1\",\"rate\":\"$2\",\"round\":$3,|"
}
python_run() {  # python_run TAG RATE ROUND ARGS...
  local name=$1 rate=$2 round=$3
  shift 3
  echo "torchft.sh: $rate $name (round $round)" >&2
  "$bin" launch -n 2 "${flags[@]}" -- "$py" bench/pytorch_diloco.py "$@" 2>/dev/null |
    tag "$name" "$rate" "$round" >>"$out"
}
cli_run() {  # cli_run TAG RATE ROUND ARGS...
  local name=$1 rate=$2 round=$3
  shift 3
  echo "torchft.sh: $rate $name (round $round)" >&2
  "$bin" train --no-progress --seed 0 --metrics "$tmp" -n 2 --model cnn --batch-size 64 \
    --optimizer adamw --lr 1e-3 --lr-schedule constant --epochs 1 --limit-train 38400 \
    "${flags[@]}" --parallel diloco --sync-every 50 "$@" >/dev/null
  head -1 "$tmp" | sed "s|^{|{\"run\":\"$name\",\"rate\":\"$rate\",\"round\":$round,|" >>"$out"
}
for rate in ${RATES:-loopback 20mbit}; do
  lab_for_rate "$rate"
  for round in $(seq 1 "${ROUNDS:-1}"); do
    python_run torchft/H50/none "$rate" "$round" --impl torchft
    python_run python/H50/none "$rate" "$round" --impl dtrain
    cli_run cli/H50/none "$rate" "$round"
    python_run python/H50/rot:tile:2 "$rate" "$round" --impl dtrain --codec rot:tile:2
    cli_run cli/H50/rot:tile:2 "$rate" "$round" --compress-outer rot:tile:2
    python_run python/H50/F5/d5/rot:tile:2 "$rate" "$round" --impl dtrain --codec rot:tile:2 \
      --fragments 5 --sync-delay 5
    cli_run cli/H50/F5/d5/rot:tile:2 "$rate" "$round" --compress-outer rot:tile:2 \
      --fragments 5 --sync-delay 5
  done
done
