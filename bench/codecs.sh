#!/usr/bin/env bash
# Reproduces the codec numbers in docs/results.md (writes docs/data/codec-*.jsonl).
#   bash bench/codecs.sh [targets|lloydmax|activations|threads]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
mkdir -p docs/data
for section in ${*:-targets lloydmax activations threads}; do
  case $section in
  targets)  # 16M float32 values, 1 thread, baselines side by side in the same run
    "$bin" bench codec --numel 16M --threads 1 --reps 3 --dist gaussian,relu,laplace,student-t3 \
      --codec uniform:8,sortquant:8,sortquant-ref:8,sortquant:4,uniform:4,kmeans:4:20,kmeans-ref:4:20,fp16 \
      --format jsonl --out docs/data/codec-16M.jsonl
    ;;
  lloydmax)  # k-means with default iterations against the Gaussian optimum, 2/3/4 bits
    "$bin" bench codec --numel 16M --threads 1 --reps 1 --dist gaussian \
      --codec kmeans:2,kmeans:3,kmeans:4,uniform:2,uniform:3,uniform:4,sortquant:2:1,sortquant:3:1,sortquant:4 \
      --format jsonl --out docs/data/codec-lloydmax.jsonl
    ;;
  activations)  # real activations at mobilenetv2's first/last boundaries, Fashion-MNIST batch
    "$bin" bench codec --dist activations --model mobilenetv2 --batch 64 --threads 1 --reps 3 \
      --codec none,fp16,uniform:8,sortquant:8,sortquant:16,sortquant:12,sortquant:4,uniform:4,kmeans:4 \
      --format jsonl --out docs/data/codec-activations.jsonl
    ;;
  threads)  # --threads 1 vs 2, alternated ROUNDS times: same inputs, codecs and order
    : >docs/data/codec-threads.jsonl
    for round in $(seq "${ROUNDS:-3}"); do
      for threads in 1 2; do
        "$bin" bench codec --numel 4M,16M --threads "$threads" --reps 5 \
          --dist gaussian,relu,laplace,student-t3 \
          --codec sortquant:8,sortquant:4,uniform:8,kmeans:4:20 --format jsonl 2>/dev/null |
          sed "s/^{/{\"threads\":$threads,\"round\":$round,/" >>docs/data/codec-threads.jsonl
      done
    done
    ;;
  *)
    echo "unknown section $section (targets, lloydmax, activations, threads)" >&2
    exit 2
    ;;
  esac
done
