#!/usr/bin/env bash
# Reproduces the collective and p2p numbers in docs/results.md (writes docs/data/*.jsonl).
#   bash bench/collectives.sh [sweep|small|p2p|large]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
mkdir -p docs/data
sections=${*:-sweep small p2p large}
for section in $sections; do
  case $section in
  sweep)
    # Side by side: every algorithm takes turns, 3 rounds of 10 iterations per size.
    "$bin" bench collective -n 2,4 --sizes 4K:64M --factor 4 --rounds 3 --iters 10 --warmup 3 \
      --format jsonl --out docs/data/allreduce-2-4.jsonl
    "$bin" bench collective -n 4 --sizes 64,256,1K,4K --rounds 5 --iters 40 --warmup 10 \
      --format jsonl --out docs/data/allreduce-small-4.jsonl
    ;;
  small)
    # The small-message targets: auto next to Gloo's own all-reduce at 2 and 4 ranks
    # (5 rounds taking turns), and the one-way p2p latency of the same sizes right after.
    "$bin" bench collective -n 2,4 --algo auto,native --sizes 256,1K,4K --rounds 5 --iters 200 \
      --warmup 20 --format jsonl --out docs/data/allreduce-small.jsonl
    "$bin" bench p2p -n 2 --sizes 256,1K,4K --iters 200 --format jsonl \
      --out docs/data/p2p-small.jsonl
    ;;
  p2p)
    "$bin" bench p2p -n 2 --sizes 1:1G --factor 4 --format jsonl --out docs/data/p2p-2.jsonl
    ;;
  large)
    # The classic table: gloo (native) all_reduce, 2/4/6 processes, 1 MB .. 1 GB, next to ring.
    "$bin" bench collective -n 2,4,6 --algo native,ring --sizes 1M,10M,100M,1G --iters 5 \
      --warmup 1 --format jsonl --out docs/data/allreduce-1M-1G.jsonl
    ;;
  *)
    echo "unknown section $section (sweep, small, p2p, large)" >&2
    exit 2
    ;;
  esac
done
