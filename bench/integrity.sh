#!/usr/bin/env bash
# What the wire check (a CRC32C over every message, comm/group.h) costs, off and on side by
# side in one invocation each:
#   p2p        bench p2p --wire-check both on loopback, and (as root) on a network lab link
#              shaped to 1 GB/s (8 Gbit/s), the issue's reference rate
#   pipeline   samples/s of a 2-rank U-shape pipeline (cnn, 30,000 Fashion-MNIST images,
#              4 chunks), DTRAIN_WIRE_CHECK=0 and 1 alternating, three times each, on
#              loopback and (as root) on the 1 GB/s lab link
# Results: JSON lines in out/bench/integrity/ (docs/data/integrity-*.jsonl: the recorded run).
set -euo pipefail
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-build/dtrain}
OUT=${OUT:-out/bench/integrity}
mkdir -p "$OUT"
sections=${*:-p2p pipeline}
for s in $sections; do
  case $s in
    p2p)
      "$DTRAIN" bench p2p -n 2 --wire-check both --sizes 64K:64M --factor 4 --format jsonl \
        > "$OUT/p2p-loopback.jsonl"
      if [ "$(id -u)" = 0 ]; then
        lab=wirecheck$$
        trap '"$DTRAIN" netlab down "$lab" >/dev/null 2>&1 || true' EXIT
        "$DTRAIN" netlab up "$lab" --hosts 2 --rate 8gbit >/dev/null
        "$DTRAIN" bench p2p -n 2 --netlab "$lab" --wire-check both --sizes 1M:64M --factor 4 \
          --format jsonl > "$OUT/p2p-1GBps.jsonl"
        "$DTRAIN" netlab down "$lab" >/dev/null
      fi ;;
    pipeline)
      links=(loopback)
      if [ "$(id -u)" = 0 ]; then
        lab=wirecheck$$
        trap '"$DTRAIN" netlab down "$lab" >/dev/null 2>&1 || true' EXIT
        "$DTRAIN" netlab up "$lab" --hosts 2 --rate 8gbit >/dev/null
        links+=(1GBps)
      fi
      for link in "${links[@]}"; do
        rm -f "$OUT/pipeline-$link.jsonl"
        where=()
        [ "$link" = loopback ] || where=(--netlab "$lab")
        for round in 1 2 3; do
          for check in 0 1; do
            DTRAIN_WIRE_CHECK=$check "$DTRAIN" train -n 2 "${where[@]}" --parallel pipeline \
              --placement ushape --client-blocks 1,1 --model cnn --epochs 1 --chunks 4 \
              --limit-train 30000 --no-progress --metrics "$OUT/run.jsonl" > /dev/null
            python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1])][-1]; \
r['wire_check']='on' if sys.argv[2]=='1' else 'off'; print(json.dumps(r))" \
              "$OUT/run.jsonl" "$check" >> "$OUT/pipeline-$link.jsonl"
          done
        done
      done
      [ "${#links[@]}" = 1 ] || "$DTRAIN" netlab down "$lab" >/dev/null ;;
    *) echo "unknown section $s (p2p, pipeline)" >&2; exit 2 ;;
  esac
done
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("p2p-loopback", "p2p-1GBps"):
    path = os.path.join(out, name + ".jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path)]
    print(f"\n{name}: bytes, bandwidth GB/s off / on (cost), latency us off / on")
    for size in sorted({r["bytes"] for r in rows}):
        off = next(r for r in rows if r["bytes"] == size and r["wire_check"] == "off")
        on = next(r for r in rows if r["bytes"] == size and r["wire_check"] == "on")
        cost = 1 - on["bandwidth_gbps"] / off["bandwidth_gbps"]
        print(f"{size:>10} {off['bandwidth_gbps']:7.3f} / {on['bandwidth_gbps']:7.3f} ({100*cost:+5.1f} %)"
              f"  {off['latency_us']:8.1f} / {on['latency_us']:8.1f}")
for link in ("loopback", "1GBps"):
    path = os.path.join(out, f"pipeline-{link}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path)]
    for name, pick in (("best", max), ("median", lambda v: sorted(v)[len(v) // 2])):
        got = {c: pick([r["samples_per_s"] for r in rows if r["wire_check"] == c])
               for c in ("off", "on")}
        print(f"pipeline on {link}, samples/s ({name} of 3): off {got['off']:.0f}, "
              f"on {got['on']:.0f} ({100 * (1 - got['on'] / got['off']):+.1f} % cost)")
PY
