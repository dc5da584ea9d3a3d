#!/usr/bin/env bash
# Compression on slow real links (docs/results.md, "Slow links and auto"): the U-shape (cnn and
# mobilenetv2, Fashion-MNIST, batch 64, 4 chunks, client keeps the first and last block) and
# DDP with compressed gradients (cnn), 2 ranks on 2 hosts of a network lab, at loopback,
# 1 Gbit/s, 100 Mbit/s and 20 Mbit/s with 5 ms one way, for each
# codec. Writes docs/data/slowlink.jsonl (every epoch row and summary, tagged) and
# docs/data/slowlink-p2p.jsonl (the lab checked with bench p2p at each rate).
#   bash bench/slowlink.sh [ushape|ddp|p2p|lowbit]...   (default: p2p ushape ddp; needs root)
# Short runs on the same seed: every codec trains on the same samples at a given rate;
# fewer samples at slower rates keep each run under a minute here.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
lab=sl$$
mkdir -p docs/data
tmp=$(mktemp)
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT

# rate -> lab flags ("" = loopback, no lab) and training samples.
# RATES="loopback 1gbit" re-runs some rates: their rows are replaced, the others kept.
# ROUNDS=3 runs every codec of a rate 3 times, alternated (round 1 of every codec, then
# round 2, ...); the tables show the median round (single short runs scatter by +-10 %).
read -r -a rates <<<"${RATES:-loopback 1gbit 100mbit 20mbit}"
rounds=${ROUNDS:-1}
declare -A samples=([loopback]=6400 [1gbit]=6400 [100mbit]=3200 [20mbit]=1280)
declare -A mobile_samples=([loopback]=3200 [1gbit]=3200 [100mbit]=1600 [20mbit]=640)

lab_up() {  # lab_up RATE: (re)builds the lab for RATE; prints the flags ranks need
  "$bin" netlab down "$lab" >/dev/null 2>&1 || true
  [ "$1" = loopback ] && return 0
  local delay=0
  [ "$1" = 20mbit ] && delay=5ms  # netem, or dtrain's impairer where the kernel has none
  "$bin" netlab up "$lab" --hosts 2 --rate "$1" --delay "$delay" >/dev/null
  echo "--netlab $lab"
}

reset() {  # reset OUT: drops the rows of the rates about to run
  touch "$1"
  local rate
  for rate in "${rates[@]}"; do
    grep -v "\"rate\":\"$rate\"" "$1" >"$tmp.keep" || true
    mv "$tmp.keep" "$1"
  done
}

run() {  # run OUT TAG RATE ROUND ARGS...
  local out=$1 tag=$2 rate=$3 round=$4
  shift 4
  echo "slowlink: $tag" >&2
  "$bin" train --no-progress --seed 0 --metrics "$tmp" "$@" >/dev/null 2>"$tmp.err" || {
    cat "$tmp.err" >&2
    return 1
  }
  sed "s|^{|{\"run\":\"$tag\",\"rate\":\"$rate\",\"round\":$round,|" "$tmp" >>"$out"
}

# One U-shape run (client keeps the first and last block) and one DDP run of a codec:
# ushape_run OUT MODEL RATE ROUND SAMPLES CODEC, ddp_run OUT RATE ROUND CODEC ($flags: the lab).
ushape_run() {
  # shellcheck disable=SC2086
  run "$1" "ushape/$2/$3/$6" "$3" "$4" --parallel pipeline -n 2 $flags --placement ushape \
    --client-blocks 1,1 --model "$2" --batch-size 64 --chunks 4 --epochs 1 --limit-train "$5" \
    --limit-test 1000 --compress "$6"
}
ddp_run() {
  # shellcheck disable=SC2086
  run "$1" "ddp/cnn/$2/$4" "$2" "$3" --parallel ddp -n 2 $flags --model cnn --batch-size 64 \
    --epochs 1 --limit-train "${samples[$2]}" --limit-test 1000 --compress-grad "$4"
}

sections=${*:-p2p ushape ddp}
for section in $sections; do
  case $section in
  p2p)
    out=docs/data/slowlink-p2p.jsonl
    : >"$out"
    for rate in 1gbit 100mbit 20mbit; do
      flags=$(lab_up $rate)
      # shellcheck disable=SC2086
      "$bin" bench p2p -n 2 $flags --sizes 4K,1M --iters 3 --window 4 --warmup 1 --format jsonl |
        sed "s/^{/{\"rate\":\"$rate\",/" >>"$out"
    done
    ;;
  ushape)
    out=docs/data/slowlink.jsonl
    reset "$out"
    for rate in "${rates[@]}"; do
      flags=$(lab_up $rate)
      for model in cnn mobilenetv2; do
        n=${samples[$rate]}
        [ $model = mobilenetv2 ] && n=${mobile_samples[$rate]}
        for round in $(seq "$rounds"); do
          for codec in none fp16 sortquant:8 sortquant:4 kmeans:4 auto; do
            ushape_run "$out" "$model" "$rate" "$round" "$n" "$codec"
          done
        done
      done
    done
    ;;
  ddp)
    out=docs/data/slowlink-ddp.jsonl
    reset "$out"
    for rate in "${rates[@]}"; do
      flags=$(lab_up $rate)
      for round in $(seq "$rounds"); do
        for codec in none fp16 sortquant:8 sortquant:4 kmeans:4 auto; do
          ddp_run "$out" "$rate" "$round" "$codec"
        done
      done
    done
    ;;
  lowbit)
    # The rotated low-bit codecs (docs/results.md, "Pipeline and U-shape") beside none and
    # sortquant:8 on the U-shape's boundaries and on DDP's gradients (error feedback), cnn;
    # RATES defaults to 20mbit here. Writes docs/data/slowlink-lowbit.jsonl.
    out=docs/data/slowlink-lowbit.jsonl
    [ -n "${RATES:-}" ] || rates=(20mbit)
    reset "$out"
    for rate in "${rates[@]}"; do
      flags=$(lab_up $rate)
      for round in $(seq "$rounds"); do
        for codec in none sortquant:8 rot:tile:4 rot:tile:2; do
          ushape_run "$out" cnn "$rate" "$round" "${samples[$rate]}" "$codec"
          ddp_run "$out" "$rate" "$round" "$codec"
        done
      done
    done
    ;;
  *)
    echo "unknown section $section (p2p, ushape, ddp, lowbit)" >&2
    exit 2
    ;;
  esac
done
