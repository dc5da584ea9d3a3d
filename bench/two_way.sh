#!/usr/bin/env bash
# Two-way exchanges (docs/results.md, "Slow links and auto"): a build against a base build,
# taking turns, on a 20 Mbit/s + 5 ms lab link (needs root) and on loopback: the hand-written
# all-reduces (bench collective) and DDP on the cnn (none, sortquant:8, auto on the lab).
#   BASE=/path/to/old/dtrain bash bench/two_way.sh [lab|loopback]...   (default: both)
# Writes docs/data/receive-first-{lab,loopback}-{collective,ddp}.jsonl, every row tagged
# with "build" (BASE or NEW) and "round".
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${DTRAIN:-build/dtrain}
BASE=${BASE:?set BASE to the dtrain binary to compare against}
ROUNDS=${ROUNDS:-2}
lab=tw$$
tmp=$(mktemp)
trap '"$NEW" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
mkdir -p docs/data

tagged() {  # tagged BUILD ROUND [CODEC]: prefixes every JSON line of stdin
  local extra=""
  [ $# -gt 2 ] && extra="\"codec\":\"$3\","
  sed "s/^{/{\"build\":\"$1\",\"round\":$2,$extra/"
}

ddp() {  # ddp BIN CODEC TRAIN TEST [FLAGS...]: the epoch row of a 2-rank DDP cnn run
  local bin=$1 codec=$2 train=$3 test=$4
  shift 4
  "$bin" train -n 2 "$@" --parallel ddp --model cnn --batch-size 64 --epochs 1 \
    --limit-train "$train" --limit-test "$test" --seed 0 --compress-grad "$codec" \
    --no-progress --metrics "$tmp" >/dev/null 2>&1
  head -1 "$tmp"
}

for section in ${*:-lab loopback}; do
  case $section in
  lab)
    "$NEW" netlab up "$lab" --hosts 2 --rate 20mbit --delay 5ms >/dev/null
    : >docs/data/receive-first-lab-collective.jsonl
    : >docs/data/receive-first-lab-ddp.jsonl
    for round in $(seq "$ROUNDS"); do
      for build in BASE NEW; do
        "${!build}" bench collective -n 2 --netlab "$lab" --sizes 64K,1M,4M \
          --algo ring,direct,butterfly,native --warmup 1 --iters 2 --format jsonl 2>/dev/null |
          tagged "$build" "$round" >>docs/data/receive-first-lab-collective.jsonl
      done
      for codec in none sortquant:8 auto; do
        for build in BASE NEW; do
          ddp "${!build}" "$codec" 1280 1000 --netlab "$lab" | tagged "$build" "$round" "$codec" \
            >>docs/data/receive-first-lab-ddp.jsonl
        done
      done
    done
    "$NEW" netlab down "$lab" >/dev/null
    ;;
  loopback)
    : >docs/data/receive-first-loopback-collective.jsonl
    : >docs/data/receive-first-loopback-ddp.jsonl
    for round in $(seq $((ROUNDS * 4))); do
      for build in BASE NEW; do
        "${!build}" bench collective -n 2 --sizes 4K,64K,1M,16M --algo ring,butterfly,direct,auto \
          --warmup 10 --iters 50 --format jsonl 2>/dev/null |
          tagged "$build" "$round" >>docs/data/receive-first-loopback-collective.jsonl
      done
    done
    for round in $(seq $((ROUNDS + 1))); do
      for codec in none sortquant:8; do
        for build in BASE NEW; do
          ddp "${!build}" "$codec" 6400 500 | tagged "$build" "$round" "$codec" \
            >>docs/data/receive-first-loopback-ddp.jsonl
        done
      done
    done
    ;;
  *) echo "two_way.sh: unknown section '$section' (lab, loopback)" >&2 && exit 2 ;;
  esac
done
