#!/usr/bin/env bash
# Reproduces the training numbers in docs/results.md (writes docs/data/train-*.jsonl).
#   bash bench/train.sh [vspytorch|default|models]...   (default: all)
# The PyTorch side runs on the project's pinned torch (PYTHON, default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
mkdir -p docs/data
for section in ${*:-vspytorch default models}; do
  case $section in
  vspytorch)
    # Side by side, same model, data, batch, optimizer and threads (one epoch of 10000
    # samples), alternating twice so drift hits both.
    for round in 1 2; do
      "$bin" train --model cnn --dataset fashion-mnist --limit-train 10000 --limit-test 1000 \
        --epochs 1 --lr-schedule constant --threads 2 --no-progress --format jsonl |
        sed 's/^{/{"impl":"dtrain",/'
      "$py" bench/pytorch_cnn.py --limit-train 10000 --threads 2
    done >docs/data/train-vs-pytorch.jsonl
    ;;
  default)
    # The default cnn run on Fashion-MNIST (target: >= 91 % test accuracy).
    "$bin" train --model cnn --dataset fashion-mnist --metrics docs/data/train-cnn-fashion.jsonl \
      --no-progress
    ;;
  models)
    # Throughput of the bigger models on Fashion-MNIST (2000 samples).
    for m in mobilenetv2 resnet18; do
      "$bin" train --model $m --dataset fashion-mnist --limit-train 2000 --limit-test 500 \
        --epochs 1 --batch-size 64 --metrics docs/data/train-$m-fashion.jsonl --no-progress
    done
    ;;
  *)
    echo "unknown section $section (vspytorch, default, models)" >&2
    exit 2
    ;;
  esac
done
