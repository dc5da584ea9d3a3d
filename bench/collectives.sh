#!/usr/bin/env bash
# Reproduces the collective and p2p numbers in docs/results.md (writes docs/data/*.jsonl).
#   bash bench/collectives.sh [sweep|p2p|large]...   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
mkdir -p docs/data
sections=${*:-sweep p2p large}
for section in $sections; do
  case $section in
  sweep)
    # Every algorithm and auto side by side (3 rounds of 10 calls, taking turns), 2 ranks.
    "$bin" bench collective -n 2 --sizes 4K:256M --factor 4 \
      --algo auto,ring,butterfly,direct,exchange,native --rounds 3 --iters 10 \
      --format jsonl --out docs/data/allreduce-loopback.jsonl
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
    echo "unknown section $section (sweep, p2p, large)" >&2
    exit 2
    ;;
  esac
done
