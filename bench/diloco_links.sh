#!/usr/bin/env bash
# DiLoCo on long lab links (docs/results.md, "DiLoCo on long links"): 2 replicas of the cnn
# on Fashion-MNIST, batch 64 each, AdamW 1e-3 constant, SAMPLES training samples (default
# 25,600: 200 steps a replica), 2,000 test samples, H = 20, seed 0. Per link of LINKS
# (RATE:DELAY one way, default "20mbit:5ms 50mbit:25ms 20mbit:25ms 50mbit:100ms"): blocking
# DiLoCo with each of --compress-outer auto's candidates fixed and with auto, and Streaming
# DiLoCo (F = 5, tau = 4) with none, rot:tile:2 and auto. ROUNDS rounds (default 2), every
# run once a round in the same order, so a noisy machine's drift falls on every run alike.
# As root. Writes docs/data/diloco-links.jsonl (epoch rows, tagged with the run, the link,
# the round and the invocation; auto's runs also with what the probe read);
# bench/tables_diloco_links.py makes the tables from each run's latest invocation. CODECS
# and STREAMING narrow the blocking and streaming runs (APPEND=1 adds to the file: rerun
# auto alone with APPEND=1 CODECS=auto STREAMING=auto). OUT writes another file (the tables:
# python3 bench/tables_diloco_links.py FILE). DELAYS lists the streaming runs' tau (default 4;
# beyond H/F = 4 several exchanges are in flight at once: DELAYS="4 8").
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
lab=dk$$
out=${OUT:-docs/data/diloco-links.jsonl}
mkdir -p "$(dirname "$out")"
tmp=$(mktemp) log=$(mktemp)
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp" "$log"' EXIT
[ -n "${APPEND:-}" ] || : >"$out"
stamp=$(date +%s)
read -ra codecs <<<"${CODECS:-none fp16 sortquant:9:3 sortquant:6:2 rot:tile:4 rot:tile:2 auto}"
read -ra streaming <<<"${STREAMING:-none rot:tile:2 auto}"
run() {  # run TAG LINK ROUND ARGS...
  local tag=$1 link=$2 round=$3
  shift 3
  echo "diloco_links.sh: round $round $link $tag" >&2
  "$bin" train --no-progress --seed 0 --metrics "$tmp" -n 2 --netlab "$lab" --model cnn \
    --batch-size 64 --optimizer adamw --lr 1e-3 --lr-schedule constant --epochs 1 \
    --limit-train "${SAMPLES:-25600}" --limit-test 2000 --parallel diloco --sync-every 20 \
    "$@" >/dev/null 2>"$log"
  # auto's line: "... auto chose CODEC (R Mbit/s, L ms one way, ..."
  local probe
  probe=$(sed -n 's/.*auto chose [^ ]* (\([0-9.]*\) Mbit\/s, \([0-9.]*\) ms one way.*/"probe_mbps":\1,"probe_one_way_ms":\2,/p' "$log" | head -1)
  head -1 "$tmp" |
    sed "s|^{|{\"run\":\"$tag\",\"link\":\"$link\",\"round\":$round,\"stamp\":$stamp,$probe|" >>"$out"
}
for link in ${LINKS:-20mbit:5ms 50mbit:25ms 20mbit:25ms 50mbit:100ms}; do
  "$bin" netlab down "$lab" >/dev/null 2>&1 || true
  "$bin" netlab up "$lab" --hosts 2 --rate "${link%%:*}" --delay "${link##*:}" >/dev/null
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for codec in "${codecs[@]}"; do
      run "blocking/$codec" "$link" "$round" --compress-outer "$codec"
    done
    for delay in ${DELAYS:-4}; do
      for codec in "${streaming[@]}"; do
        run "streaming/F5/d$delay/$codec" "$link" "$round" --compress-outer "$codec" \
          --fragments 5 --sync-delay "$delay"
      done
    done
  done
done
python3 bench/tables_diloco_links.py "$out"
