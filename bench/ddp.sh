#!/usr/bin/env bash
# Reproduces the DDP, SyncBatchNorm and scaling numbers in docs/results.md
# (docs/data/ddp-*.jsonl, syncbn.jsonl, scale-*.jsonl).
#   bash bench/ddp.sh [ddp|resnet|hooks|syncbn|compress|scale]...   (default: all)
# The PyTorch side runs on the project's pinned torch (PYTHON, default .venv/bin/python).
# ddp and resnet: ROUNDS alternated rounds (3 and 2 by default); BASE=<another dtrain
# binary> adds that build to every round ("build":"base") to measure a change side by side;
# SUFFIX names their output files docs/data/ddp-*-vs-pytorch$SUFFIX.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
mkdir -p docs/data
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
pytorch_ddp() {  # pytorch_ddp ARGS...: rank 0's JSON line
  "$bin" launch -n 2 -- "$py" bench/pytorch_ddp.py "$@" | sed -n 's/^\[rank 0\] //p'
}
dtrain_ddp() {  # dtrain_ddp ROUND FIELDS ARGS...: the first epoch's line of BASE (if set), then ours
  local round=$1 fields=$2 build exe
  shift 2
  for build in ${BASE:+base} current; do
    exe=$bin
    [[ $build == base ]] && exe=$BASE
    "$exe" train --parallel ddp -n 2 "$@" --quiet --metrics "$tmp"
    head -1 "$tmp" | sed "s/^{/{\"impl\":\"dtrain-ddp\",\"build\":\"$build\",$fields\"round\":$round,/"
  done
}
for section in ${*:-ddp resnet hooks syncbn compress scale}; do
  case $section in
  ddp)
    # DDP against PyTorch DDP: ours vs torch DDP, same cnn, 10000 Fashion-MNIST samples, 64 per
    # rank, SGD 0.05 constant, 2 ranks x 1 thread; alternated 3 times so drift hits both.
    out=docs/data/ddp-vs-pytorch${SUFFIX:-}.jsonl
    : >"$out"
    # Each side in both memory formats (dtrain's default lays convolutions out
    # channels-last on the CPU; PyTorch's script keeps the contiguous default).
    for round in $(seq "${ROUNDS:-3}"); do
      for format in channels-last contiguous; do
        dtrain_ddp "$round" "\"memory_format\":\"$format\"," --model cnn --limit-train 10000 \
          --limit-test 1000 --epochs 1 --batch-size 64 --lr-schedule constant \
          --memory-format "$format" >>"$out"
      done
      for flag in "" --channels-last; do
        pytorch_ddp --limit-train 10000 --limit-test 1000 $flag |
          sed "s/^{/{\"round\":$round,/" >>"$out"
      done
    done
    ;;
  resnet)
    # The CIFAR ResNet-18 (11.2 M parameters), 2 ranks x 32 samples, synthetic 3x32x32
    # data (1280 samples: 20 steps), SGD 0.05 constant, no augmentation (the PyTorch
    # script has none; dtrain crops and flips 32x32 colour data by default); alternated twice.
    out=docs/data/ddp-resnet18-vs-pytorch${SUFFIX:-}.jsonl
    : >"$out"
    # Each side in both memory formats: dtrain's default (auto) lays ResNet-18 out
    # channels-last on the CPU, PyTorch's script the contiguous default.
    for round in $(seq "${ROUNDS:-2}"); do
      for format in channels-last contiguous; do
        dtrain_ddp "$round" "\"model\":\"resnet18\",\"memory_format\":\"$format\"," \
          --model resnet18 --dataset synthetic --input-shape 3,32,32 --num-classes 10 \
          --synthetic-size 1280 --epochs 1 --batch-size 32 --lr-schedule constant \
          --crop-padding 0 --flip 0 --memory-format "$format" >>"$out"
      done
      for flag in "" --channels-last; do
        pytorch_ddp --model resnet18 --dataset synthetic --synthetic-size 1280 --batch-size 32 \
          --limit-test 256 $flag | sed "s/^{/{\"round\":$round,/" >>"$out"
      done
    done
    ;;
  hooks)
    # Compressed gradients: dtrain's codecs (error feedback) next to PyTorch's fp16 and
    # PowerSGD communication hooks; cnn, 2 ranks x 64, 20000 Fashion-MNIST samples (157
    # steps), the full test set, SGD 0.05 constant. Bytes relative to fp32 gradients.
    out=docs/data/ddp-hooks.jsonl
    : >"$out"
    for codec in none fp16 sortquant:8 rot:tile:4 rot:tile:2; do
      "$bin" train --parallel ddp -n 2 --model cnn --limit-train 20000 --epochs 1 --batch-size 64 \
        --lr-schedule constant --compress-grad "$codec" --quiet --metrics "$tmp"
      head -1 "$tmp" | sed "s/^{/{\"impl\":\"dtrain-ddp\",\"compress_grad\":\"$codec\",/" >>"$out"
    done
    for hook in none fp16; do
      pytorch_ddp --limit-train 20000 --limit-test 10000 --comm-hook "$hook" >>"$out"
    done
    # PowerSGD over gloo aborts (gloo::EnforceNotMet) once the model has two buckets: its
    # chained asynchronous all-reduces reach the ranks in different orders. One bucket.
    for hook in powersgd:1 powersgd:4; do
      pytorch_ddp --limit-train 20000 --limit-test 10000 --comm-hook "$hook" --bucket-mb 1000 >>"$out"
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
    # The scaling study with resnet18 (1024 Fashion-MNIST samples: a full epoch takes ~30 min
    # per configuration here); 4 ranks oversubscribe the 2 cores.
    "$bin" scale --model resnet18 -n 1,2,4 --batch-size 32,128,512 --epochs 2 \
      --limit-train 1024 --limit-test 500 --format jsonl --output docs/data/scale-resnet18.jsonl
    ;;
  *)
    echo "unknown section $section (ddp, resnet, hooks, syncbn, compress, scale)" >&2
    exit 2
    ;;
  esac
done
