#!/usr/bin/env bash
# What the wire check (a CRC32C over every message, comm/group.h) costs, off and on side by
# side in one invocation each:
#   p2p        bench p2p --wire-check both on loopback, and (as root) on a network lab link
#              shaped to 1 GB/s (8 Gbit/s), the reference rate of the wire check's cost
#   pipeline   samples/s of a 2-rank U-shape pipeline (cnn, 30,000 Fashion-MNIST images,
#              4 chunks), DTRAIN_WIRE_CHECK=0 and 1 alternating, ROUNDS times each (default
#              5), on loopback and (as root) on the 1 GB/s lab link; and, from the runs with
#              the check, the time each rank spent in it (wire_check_s) against its step time
#              (LINKS=loopback or LINKS=1GBps: only that one)
#   pipeline-ab  the same pipeline with --measure-wire-check: inside each run, training steps
#              alternate the check off and on (off, on, on, off, ...), so the drift between
#              runs cancels; each run reports the cost in step time with a 95 % interval.
#              ROUNDS runs (default 3) per link, LINKS as above
# Results: JSON lines in out/bench/integrity/ (docs/data/integrity-*.jsonl: the recorded run).
set -euo pipefail
cd "$(dirname "$0")/.."
DTRAIN=${DTRAIN:-build/dtrain}
OUT=${OUT:-out/bench/integrity}
mkdir -p "$OUT"
sections=${*:-p2p pipeline-ab}
# The 1 GB/s link: a two-host network lab, removed at exit whatever happens.
lab=""
lab_up() {
  lab=wirecheck$$
  trap '"$DTRAIN" netlab down "$lab" >/dev/null 2>&1 || true' EXIT
  "$DTRAIN" netlab up "$lab" --hosts 2 --rate 8gbit >/dev/null
}
lab_down() {
  [ -z "$lab" ] || "$DTRAIN" netlab down "$lab" >/dev/null
  lab=""
}
# The pipeline sections' links: loopback and (as root) the lab link; LINKS=loopback or
# LINKS=1GBps measures only that one.
pipeline_links() {
  links=()
  [ "${LINKS:-loopback}" = 1GBps ] || links+=(loopback)
  if [ "$(id -u)" = 0 ] && [ "${LINKS:-1GBps}" = 1GBps ]; then
    lab_up
    links+=(1GBps)
  fi
}
for s in $sections; do
  case $s in
    p2p)
      "$DTRAIN" bench p2p -n 2 --wire-check both --sizes 64K:64M --factor 4 --format jsonl \
        > "$OUT/p2p-loopback.jsonl"
      if [ "$(id -u)" = 0 ]; then
        lab_up
        "$DTRAIN" bench p2p -n 2 --netlab "$lab" --wire-check both --sizes 1M:64M --factor 4 \
          --format jsonl > "$OUT/p2p-1GBps.jsonl"
        lab_down
      fi ;;
    pipeline-ab)
      pipeline_links
      for link in "${links[@]}"; do
        rm -f "$OUT/pipeline-ab-$link.jsonl"
        where=()
        [ "$link" = loopback ] || where=(--netlab "$lab")
        for round in $(seq "${ROUNDS:-3}"); do
          "$DTRAIN" train -n 2 "${where[@]}" --parallel pipeline --placement ushape \
            --client-blocks 1,1 --model cnn --epochs 1 --chunks 4 --limit-train 30000 \
            --measure-wire-check --no-progress --metrics "$OUT/run.jsonl" > /dev/null
          grep '"stages"' "$OUT/run.jsonl" | tail -1 >> "$OUT/pipeline-ab-$link.jsonl"
        done
      done
      lab_down ;;
    pipeline)
      pipeline_links
      for link in "${links[@]}"; do
        rm -f "$OUT/pipeline-$link.jsonl"
        where=()
        [ "$link" = loopback ] || where=(--netlab "$lab")
        for round in $(seq "${ROUNDS:-5}"); do
          for check in 0 1; do
            DTRAIN_WIRE_CHECK=$check "$DTRAIN" train -n 2 "${where[@]}" --parallel pipeline \
              --placement ushape --client-blocks 1,1 --model cnn --epochs 1 --chunks 4 \
              --limit-train 30000 --no-progress --metrics "$OUT/run.jsonl" > /dev/null
            python3 -c "import json,sys; r=[json.loads(l) for l in open(sys.argv[1]) if 'stages' in l][-1]; \
r['wire_check']='on' if sys.argv[2]=='1' else 'off'; print(json.dumps(r))" \
              "$OUT/run.jsonl" "$check" >> "$OUT/pipeline-$link.jsonl"
          done
        done
      done
      lab_down ;;
    *) echo "unknown section $s (p2p, pipeline, pipeline-ab)" >&2; exit 2 ;;
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
def median(values):
    values = sorted(values)
    n = len(values)
    return (values[(n - 1) // 2] + values[n // 2]) / 2
for link in ("loopback", "1GBps"):
    path = os.path.join(out, f"pipeline-{link}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path)]
    off = [r["samples_per_s"] for r in rows if r["wire_check"] == "off"]
    on = [r["samples_per_s"] for r in rows if r["wire_check"] == "on"]
    paired = [1 - b / a for a, b in zip(off, on)]  # each round's runs ran back to back
    print(f"pipeline on {link}, samples/s over {len(off)} rounds: best off {max(off):.0f} / "
          f"on {max(on):.0f} ({100 * (1 - max(on) / max(off)):+.1f} %), median off "
          f"{median(off):.0f} / on {median(on):.0f} ({100 * (1 - median(on) / median(off)):+.1f} %), "
          f"median of the rounds' costs {100 * median(paired):+.1f} %")
    shares = {}
    for r in rows:
        if r["wire_check"] == "on":
            for s in r["stages"]:
                shares.setdefault(s["rank"], []).append(s["wire_check_s"] / s["step_s"])
    for rank, share in sorted(shares.items()):
        print(f"  rank {rank}: the check took {100 * median(share):.2f} % of its step time "
              f"(median over rounds; max {100 * max(share):.2f} %)")
for link in ("loopback", "1GBps"):
    path = os.path.join(out, f"pipeline-ab-{link}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path)]
    print(f"pipeline on {link}, the check off and on alternating inside each run:")
    for r in rows:
        # The check's own time accrues in the on steps only: about half of step_s.
        own = ", ".join(f"rank {s['rank']} {100 * s['wire_check_s'] / (s['step_s'] / 2):.2f} %"
                        for s in r["stages"])
        print(f"  {r['wire_check_pairs']} pairs: step {1e3 * r['step_s_check_off']:.2f} ms off, "
              f"{1e3 * r['step_s_check_on']:.2f} ms on: cost {100 * r['wire_check_cost']:+.2f} % "
              f"+- {100 * r['wire_check_cost_ci95']:.2f} % (95 %); the check's own time, of "
              f"an on step's: {own}")
    costs = [r["wire_check_cost"] for r in rows]
    print(f"  mean of the runs' costs {100 * sum(costs) / len(costs):+.2f} %")
PY
