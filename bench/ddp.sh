#!/usr/bin/env bash
# Reproduces the DDP, SyncBatchNorm and scaling numbers in docs/results.md
# (docs/data/ddp-*.jsonl, syncbn.jsonl, scale-*.jsonl).
#   bash bench/ddp.sh [ddp|syncbn|compress|scale]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=/usr/bin/python3   # Debian's python3, which has python3-torch
mkdir -p docs/data
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
for section in ${*:-ddp syncbn compress scale}; do
  case $section in
  ddp)
    # Seed 004's table: ours vs torch DDP, same cnn, 10000 Fashion-MNIST samples, 64 per
    # rank, SGD 0.05 constant, 2 ranks x 1 thread; alternated 3 times so drift hits both.
    out=docs/data/ddp-vs-pytorch.jsonl
    : >"$out"
    for round in 1 2 3; do
      "$bin" train --parallel ddp -n 2 --model cnn --limit-train 10000 --limit-test 1000 \
        --epochs 1 --batch-size 64 --lr-schedule constant --quiet --metrics "$tmp"
      head -1 "$tmp" | sed "s/^{/{\"impl\":\"dtrain-ddp\",\"round\":$round,/" >>"$out"
      "$bin" launch -n 2 -- "$py" bench/pytorch_ddp.py --limit-train 10000 --limit-test 1000 \
        | sed -n 's/^\[rank 0\] //p' | sed "s/^{/{\"round\":$round,/" >>"$out"
    done
    ;;
  syncbn)
    out=docs/data/syncbn.jsonl
    "$bin" bench syncbn -n 2 --format jsonl >"$out"
    "$bin" launch -n 2 -- "$py" bench/pytorch_syncbn.py | sed -n 's/^\[rank 0\] //p' >>"$out"
    ;;
  compress)
    # Compressed gradients with error feedback: accuracy and bytes, cnn, 2 ranks, 2 epochs.
    out=docs/data/ddp-compress.jsonl
    : >"$out"
    for codec in none fp16 sortquant:8; do
      "$bin" train --parallel ddp -n 2 --model cnn --epochs 2 --batch-size 64 --algo ring \
        --compress-grad "$codec" --quiet --metrics "$tmp"
      sed "s/^{/{\"run\":\"$codec\",/" "$tmp" >>"$out"
    done
    ;;
  scale)
    # Seed 002's study with resnet18 (1024 Fashion-MNIST samples: a full epoch takes ~30 min
    # per configuration here); 4 ranks oversubscribe the 2 cores.
    "$bin" scale --model resnet18 -n 1,2,4 --batch-size 32,128,512 --epochs 2 \
      --limit-train 1024 --limit-test 500 --format jsonl --output docs/data/scale-resnet18.jsonl
    ;;
  *)
    echo "unknown section $section (ddp, syncbn, compress, scale)" >&2
    exit 2
    ;;
  esac
done
