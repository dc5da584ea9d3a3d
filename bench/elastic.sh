#!/usr/bin/env bash
# Elastic DiLoCo's costs (docs/results.md, "Elastic DiLoCo"), on a lab of 3 hosts at 20 Mbit/s
# with 5 ms one way: the cnn on Fashion-MNIST, AdamW 1e-3, H = 20, rot:tile:2 outer
# gradients, SAMPLES (default 19,200) samples, seed 0. As root.
#  - overhead: 3 replicas with and without --elastic and no failure, and --elastic under
#    --compress-outer auto, ROUNDS rounds (default 2) in turn: samples/s, auto's codec;
#  - recovery: fault plans killing replica 1 in round 2 during its inner steps and during
#    the exchange, its replacement entering before round 4: the survivors' redo (kill to
#    the first view without it, kill to the failed exchange, deciding the replacing view,
#    connecting the survivors), the joiner's enter_s (start to training) and transfer_s,
#    and the round times around the join; and a kill with no rejoin, whose replacement
#    enters mid-round (docs/elastic.md);
#  - fragments: Streaming DiLoCo's fragments (FRAGMENTS, default 4: rounds of 5 steps), plain
#    and --elastic without a sync delay, --elastic with --sync-delay DELAY (default 4: each
#    exchange beside its round's last 4 steps), beside --elastic's whole exchanges, ROUNDS
#    rounds;
#  - ranks: 2 replicas of 2 ranks (--ranks-per-replica 2) with and without --elastic, ROUNDS
#    rounds in turn, on loopback (the lab's links would carry each replica's inner DDP too).
# Writes docs/data/elastic.jsonl (every row, tagged with the run and round), or OUT; PARTS
# (default "overhead recovery") picks the parts to run.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
lab=el$$
out=${OUT:-docs/data/elastic.jsonl}
parts=" ${PARTS:-overhead recovery} "
mkdir -p "$(dirname "$out")"
tmp=$(mktemp) steps=$(mktemp)
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp" "$steps"' EXIT
: >"$out"
"$bin" netlab up "$lab" --hosts 3 --rate 20mbit --delay 5ms >/dev/null
run() {  # run TAG ROUND ARGS... (CODEC: the outer codec, default rot:tile:2)
  local tag=$1 round=$2
  shift 2
  echo "elastic.sh: round $round $tag" >&2
  "$bin" train --no-progress --seed 0 --metrics "$tmp" --step-log "$steps" "${where[@]}" \
    --model cnn --optimizer adamw --lr 1e-3 --lr-schedule constant \
    --epochs 1 --limit-train "${SAMPLES:-19200}" --limit-test 2000 --parallel diloco \
    --sync-every 20 --compress-outer "${CODEC:-rot:tile:2}" "$@" >/dev/null 2>&1
  sed "s|^{|{\"run\":\"$tag\",\"bench_round\":$round,|" "$tmp" >>"$out"
  sed "s|^{|{\"run\":\"$tag\",\"bench_round\":$round,\"step_log\":true,|" "$steps" >>"$out"
}
where=(-n 3 --netlab "$lab")
if [[ $parts == *" overhead "* ]]; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    run plain "$round"
    run elastic "$round" --elastic
    CODEC=auto run elastic-auto "$round" --elastic
  done
fi
if [[ $parts == *" fragments "* ]]; then
  for round in $(seq 1 "${ROUNDS:-2}"); do
    run plain-fragments "$round" --fragments "${FRAGMENTS:-4}"
    run elastic "$round" --elastic
    run elastic-fragments "$round" --elastic --fragments "${FRAGMENTS:-4}"
    run elastic-fragments-delay "$round" --elastic --fragments "${FRAGMENTS:-4}" \
      --sync-delay "${DELAY:-4}"
  done
fi
if [[ $parts == *" recovery "* ]]; then
  elastic=(--elastic --max-restarts 1 --restart-delay 0 --heartbeat-timeout 1)
  run kill-inner 1 "${elastic[@]}" --fault-plan kill:1@2:inner,rejoin:1@4
  run kill-exchange 1 "${elastic[@]}" --fault-plan kill:1@2:exchange,rejoin:1@4
  # No rejoin: the replacement, started 1 s after the kill (past the survivors' redo), enters
  # mid-round.
  run kill-mid 1 --elastic --max-restarts 1 --restart-delay 1 --heartbeat-timeout 1 \
    --mid-round-entry --fault-plan kill:1@2:inner
fi
if [[ $parts == *" ranks "* ]]; then
  where=(-n 4 --ranks-per-replica 2)
  for round in $(seq 1 "${ROUNDS:-2}"); do
    run plain "$round"
    run elastic "$round" --elastic
  done
fi
python3 bench/tables_elastic.py "$out"
