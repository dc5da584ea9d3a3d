#!/usr/bin/env bash
# What --trace costs: the same training with and without it, alternating 3 rounds so drift
# hits both, in each parallel mode; writes docs/data/trace-overhead.jsonl and prints the
# samples/s ratio (traced / untraced) per mode. Target: >= 0.97.
#   bash bench/trace.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
out=docs/data/trace-overhead.jsonl
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
data=(--dataset fashion-mnist --limit-train 8192 --limit-test 500 --epochs 1 --quiet)
declare -A modes=(
  [single]="--model cnn --threads 2"
  [ddp]="--model cnn --parallel ddp -n 2"
  [ushape]="--model cnn --parallel pipeline -n 2 --placement ushape --chunks 4 --compress sortquant:8"
  [pipeline-1f1b]="--model mlp --parallel pipeline -n 2 --schedule 1f1b --chunks 8"
)
: >"$out"
for round in 1 2 3; do
  for mode in single ddp ushape pipeline-1f1b; do
    for trace in off on; do
      flags=()
      [ "$trace" = on ] && flags=(--trace "$tmp/t.json")
      # shellcheck disable=SC2086
      "$bin" train ${modes[$mode]} "${data[@]}" --metrics "$tmp/m.jsonl" "${flags[@]}" 2>/dev/null
      head -1 "$tmp/m.jsonl" | sed "s|^{|{\"run\":\"$mode trace $trace\",\"mode\":\"$mode\",\"trace\":\"$trace\",\"round\":$round,|" >>"$out"
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| mode | samples/s untraced (median of 3) | traced | traced / untraced |")
print("|---|---:|---:|---:|")
for mode in dict.fromkeys(r["mode"] for r in rows):
    s = {t: statistics.median(r["samples_per_s"] for r in rows if r["mode"] == mode and r["trace"] == t)
         for t in ("off", "on")}
    print(f"| {mode} | {s['off']:.0f} | {s['on']:.0f} | {s['on'] / s['off']:.3f} |")
PY
