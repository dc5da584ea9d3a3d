#!/usr/bin/env bash
# DiLoCo beside DDP on the same samples (docs/results.md, "DiLoCo"): 2 replicas of the cnn
# on Fashion-MNIST, batch 64 each, AdamW 1e-3 constant (inner optimizer for DiLoCo, the
# optimizer for DDP), SAMPLES training samples (default 38,400: 300 steps per replica),
# the full test set; DDP none / sortquant:8 / rot:tile:2 gradients, DiLoCo H in {10, 50,
# 200} exact and H = 50 with sortquant:4 and rot:tile:2 outer gradients, and Streaming
# DiLoCo (H = 50, 5 fragments, each exchange beside the next 5 or 10 inner steps). On
# loopback and on lab links (RATES, default "loopback 20mbit"; 20mbit with 5 ms one way).
# SETS picks the groups (default "ddp diloco streaming"; "mobilenet-ddp" and "mobilenet":
# the second model, MobileNetV2 (2.2M parameters, BatchNorm), 12,800 samples (100 steps a
# replica), as DDP none and rot:tile:2, and as DiLoCo H = 20 exact, rot:tile:2 and
# streaming; "replicas": 4 ranks as DDP, as 4
# replicas and as 2 replicas of 2 ranks, H = 50 rot:tile:2, on loopback only: the lab shapes
# every link alike, so it has no fast links inside a replica). As root.
# Writes docs/data/diloco.jsonl (every epoch row and summary, tagged; APPEND=1 adds to it).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lab_rate.sh
bin=${DTRAIN:-build/dtrain}
lab=dl$$
samples=${SAMPLES:-38400}
out=docs/data/diloco.jsonl
mkdir -p docs/data
tmp=$(mktemp)
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
[ -n "${APPEND:-}" ] || : >"$out"  # APPEND=1: add to the file
run() {  # run TAG RATE ARGS... (RANKS: -n, default 2)
  local tag=$1 rate=$2
  shift 2
  echo "diloco.sh: $rate $tag" >&2
  "$bin" train --no-progress --seed 0 --metrics "$tmp" -n "${RANKS:-2}" --model "${MODEL:-cnn}" \
    --batch-size 64 --optimizer adamw --lr 1e-3 --lr-schedule constant --epochs 1 \
    --limit-train "${LIMIT:-$samples}" \
    "$@" >/dev/null
  sed "s|^{|{\"run\":\"$tag\",\"rate\":\"$rate\",|" "$tmp" >>"$out"
}
for rate in ${RATES:-loopback 20mbit}; do
  lab_for_rate "$rate"
  sets=" ${SETS:-ddp diloco streaming} "
  if [[ $sets == *" ddp "* ]]; then
    for codec in none sortquant:8 rot:tile:2; do
      run "ddp/$codec" "$rate" "${flags[@]}" --parallel ddp --compress-grad "$codec"
    done
  fi
  if [[ $sets == *" diloco "* ]]; then
    for h in 10 50 200; do
      run "diloco/H$h/none" "$rate" "${flags[@]}" --parallel diloco --sync-every $h
    done
    for codec in sortquant:4 rot:tile:2; do
      run "diloco/H50/$codec" "$rate" "${flags[@]}" --parallel diloco --sync-every 50 \
        --compress-outer "$codec"
    done
  fi
  if [[ $sets == *" replicas "* && $rate == loopback ]]; then
    RANKS=4 run "4ranks/ddp/none" "$rate" --parallel ddp
    RANKS=4 run "4ranks/diloco/4x1/H50/rot:tile:2" "$rate" --parallel diloco --sync-every 50 \
      --compress-outer rot:tile:2
    RANKS=4 run "4ranks/diloco/2x2/H50/rot:tile:2" "$rate" --parallel diloco --sync-every 50 \
      --compress-outer rot:tile:2 --ranks-per-replica 2
  fi
  export MODEL=mobilenetv2 LIMIT=12800
  if [[ $sets == *" mobilenet-ddp "* ]]; then
    for codec in none rot:tile:2; do
      run "mobilenetv2/ddp/$codec" "$rate" "${flags[@]}" --parallel ddp --compress-grad "$codec"
    done
  fi
  if [[ $sets == *" mobilenet "* ]]; then
    for codec in none rot:tile:2; do
      run "mobilenetv2/diloco/H20/$codec" "$rate" "${flags[@]}" --parallel diloco \
        --sync-every 20 --compress-outer "$codec"
    done
    run "mobilenetv2/streaming/H20/F4/d5/rot:tile:2" "$rate" "${flags[@]}" --parallel diloco \
      --sync-every 20 --fragments 4 --sync-delay 5 --compress-outer rot:tile:2
  fi
  unset MODEL LIMIT
  if [[ $sets == *" streaming "* ]]; then
    streaming=("${flags[@]}" --parallel diloco --sync-every 50 --fragments 5)
    run "streaming/H50/F5/d10/none" "$rate" "${streaming[@]}" --sync-delay 10
    for codec in sortquant:4 rot:tile:2; do
      for alpha in 0.5 0; do
        run "streaming/H50/F5/d5/a$alpha/$codec" "$rate" "${streaming[@]}" --sync-delay 5 \
          --merge-alpha $alpha --compress-outer "$codec"
      done
    done
  fi
done
