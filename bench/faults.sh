#!/usr/bin/env bash
# The fault-injection suite: what happens to a training job when ranks die or
# hang. For each trial it records whether the job finished, hung, or lost data.
#   kill     SIGKILL of one rank of each role at a random moment, TRIALS times each:
#            a 3-rank U-shape pipeline (rank 0 the client/driver, ranks 1 and 2 servers)
#            and 2-rank DDP (rank 0 also hosts the rendezvous store), with
#            --checkpoint-every 5 --resume --max-restarts 1. Good: the launcher restarts
#            every rank, the job finishes, and its final state equals an uninterrupted
#            run's (the manifests' state_crc32c on every rank). Lost: it differs.
#   stop     SIGSTOP of one pipeline rank (a hung peer), without restarts, --timeout 5.
#            Good: the job ends non-zero within timeout + grace, saying a rank stopped
#            responding. Hang: it is still running 60 s later.
# A trial that runs past its limit is a hang (and is killed). Results: JSON lines in
# $OUT/trials.jsonl (docs/data/faults-trials.jsonl: the recorded run) and a table.
# Other faults have their own tests in `make test` (tests/e2e/faults_test.cpp,
# integrity_test.cpp, checkpoint_test.cpp): a taken port, a full disk while checkpointing,
# a corrupt shard, corrupted bytes on a connection.
set -euo pipefail
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-build/dtrain}
OUT=${OUT:-out/bench/faults}
TRIALS=${TRIALS:-3}
RANDOM=${SEED:-1}
mkdir -p "$OUT"
rm -f "$OUT/trials.jsonl"
work=$(mktemp -d /tmp/dtrain-faults-XXXXXX)
trap 'pkill -KILL -f "$work" 2>/dev/null || true; rm -rf "$work"' EXIT

common=(train --model mlp --depth 3 --limit-train 3200 --limit-test 256 --epochs 3
        --batch-size 64 --no-progress --checkpoint-every 5 --resume)
pipeline=(--parallel pipeline -n 3 --placement ushape --client-blocks 1,1)
ddp=(--parallel ddp -n 2)

state_of() { python3 -c "import json,sys; print(' '.join(s['state_crc32c'] for s in json.load(open(sys.argv[1]+'/manifest.json'))['shards']))" "$1"; }

# The pid of rank $2 among the descendants of $1 (timeout -> launcher -> ranks), by the
# RANK variable the launcher gave it.
rank_pid() {
  local child found
  for child in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
    if tr '\0' '\n' < "/proc/$child/environ" 2>/dev/null | grep -qx "RANK=$2"; then
      echo "$child"; return
    fi
    found=$(rank_pid "$child" "$2")
    if [ -n "$found" ]; then echo "$found"; return; fi
  done
}

record() { echo "$1" >> "$OUT/trials.jsonl"; echo "$1" >&2; }

for mode in pipeline ddp; do
  declare -n args=$mode
  ref="$work/$mode-reference"
  start=$(date +%s.%N)
  "$DTRAIN" "${common[@]}" "${args[@]}" --checkpoint-dir "$ref" > /dev/null 2>&1
  duration=$(python3 -c "import time; print(time.time() - $start)")
  want=$(state_of "$ref")
  ranks=$([ "$mode" = pipeline ] && echo 3 || echo 2)
  for ((rank = 0; rank < ranks; ++rank)); do
    for ((trial = 1; trial <= TRIALS; ++trial)); do
      dir="$work/$mode-r$rank-t$trial"
      # A moment inside the run: 15 % .. 85 % of the uninterrupted run's duration.
      at=$(python3 -c "print(round($duration * (0.15 + 0.7 * $RANDOM / 32767), 2))")
      log="$dir.log"
      timeout -s KILL 300 "$DTRAIN" "${common[@]}" "${args[@]}" --checkpoint-dir "$dir" \
        --max-restarts 1 > "$log" 2>&1 &
      launcher=$!
      sleep "$at"
      victim=$(rank_pid "$launcher" "$rank")
      [ -n "$victim" ] && kill -KILL "$victim" 2>/dev/null || victim=""
      code=0
      wait "$launcher" || code=$?
      hang=$([ "$code" = 137 ] && echo true || echo false)
      restarted=$(grep -q "restarting every rank" "$log" && echo true || echo false)
      equal=false
      [ -f "$dir/manifest.json" ] && [ "$(state_of "$dir")" = "$want" ] && equal=true
      record "{\"fault\": \"kill\", \"mode\": \"$mode\", \"rank\": $rank, \"trial\": $trial, \"at_s\": $at, \"killed\": $([ -n "$victim" ] && echo true || echo false), \"exit\": $code, \"restarted\": $restarted, \"hang\": $hang, \"state_equal\": $equal}"
    done
  done
done

for ((trial = 1; trial <= TRIALS; ++trial)); do
  rank=$((1 + RANDOM % 2))
  log="$work/stop-$trial.log"
  timeout -s KILL 120 "$DTRAIN" train --model mlp --depth 3 --epochs 50 --no-progress \
    "${pipeline[@]}" --timeout 5 > "$log" 2>&1 &
  launcher=$!
  sleep 5
  victim=$(rank_pid "$launcher" "$rank")
  stopped_at=$(date +%s.%N)
  [ -n "$victim" ] && kill -STOP "$victim"
  code=0
  wait "$launcher" || code=$?
  took=$(python3 -c "import time; print(round(time.time() - $stopped_at, 1))")
  hang=$([ "$code" = 137 ] && echo true || echo false)
  named=$(grep -q "stopped responding" "$log" && echo true || echo false)
  record "{\"fault\": \"stop\", \"mode\": \"pipeline\", \"rank\": $rank, \"trial\": $trial, \"exit\": $code, \"exit_after_s\": $took, \"hang\": $hang, \"named\": $named}"
done

python3 - "$OUT/trials.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\nfault  mode      rank  trials  killed  restarted  finished  hangs  state equal (lost)")
for key in sorted({(r["fault"], r["mode"], r["rank"]) for r in rows if r["fault"] == "kill"}):
    t = [r for r in rows if (r["fault"], r["mode"], r["rank"]) == key]
    killed = [r for r in t if r["killed"]]
    print(f"kill   {key[1]:9} {key[2]:4}  {len(t):6}  {len(killed):6}  "
          f"{sum(r['restarted'] for r in killed):9}  {sum(r['exit'] == 0 for r in t):8}  "
          f"{sum(r['hang'] for r in t):5}  {sum(r['state_equal'] for r in t)} "
          f"({sum(not r['state_equal'] for r in t)})")
stops = [r for r in rows if r["fault"] == "stop"]
if stops:
    print(f"stop   pipeline  1-2   {len(stops):6}  exited non-zero {sum(r['exit'] != 0 and not r['hang'] for r in stops)}, "
          f"hangs {sum(r['hang'] for r in stops)}, named {sum(r['named'] for r in stops)}, "
          f"slowest exit {max(r['exit_after_s'] for r in stops)} s after SIGSTOP")
PY
