#!/usr/bin/env bash
# Collectives on loopback where every rank has cores of its own (this project's VM has 2
# cores, so 4 ranks there measure the scheduler): the wire check's cost on the ring and
# auto against every algorithm, 2 and 4 ranks. Run by scripts/gpu-check.sh
# (COLLECTIVES_ONLY=1) on the GPU machine's 16 cores, or by hand:
#   bash bench/cores.sh [DTRAIN_BINARY] [OUT_DIR]
# WIRE_SIZES (default 4M:256M) and RUNS (default 3) the wire check's part, AUTO_SIZES
# (default 4K:64M) auto's (sizes as bench collective takes them, x4 apart), SETTLE
# (default on) bench collective's --settle for auto's part: `on` starts every turn from a
# barrier and an untimed call.
# Writes OUT_DIR/cores-wirecheck.jsonl and OUT_DIR/cores-auto.jsonl, then prints both as
# tables: checked / unchecked ring time per size and run, and the fastest algorithm's time
# over auto's per size and world size (the targets: >= 0.95, docs/results.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/dtrain}
out=${2:-docs/data}
py=${PYTHON:-python3}
mkdir -p "$out"
echo "cores.sh: $(nproc) cores" >&2
: >"$out/cores-wirecheck.jsonl"
for run in $(seq 1 "${RUNS:-3}"); do
  "$bin" bench collective -n 2 --sizes "${WIRE_SIZES:-4M:256M}" --factor 4 --algo ring --wire-check both \
    --rounds 8 --iters 4 --format jsonl 2>/dev/null | sed "s/^{/{\"run\":$run,/" \
    >>"$out/cores-wirecheck.jsonl"
done
: >"$out/cores-auto.jsonl"
# auto's calibrations (every candidate's median, each kind) go to a cache file per world size.
rm -rf "$out/cores-auto-cache"
mkdir -p "$out/cores-auto-cache"
for n in 2 4; do
  echo "cores.sh: auto, $n ranks" >&2
  DTRAIN_AUTO_CACHE="$out/cores-auto-cache" "$bin" bench collective -n $n --sizes "${AUTO_SIZES:-4K:64M}" --factor 4 \
    --algo ring,butterfly,direct,exchange,native,auto --rounds 4 --iters 3 --warmup 1 \
    --settle "${SETTLE:-on}" \
    --format jsonl 2>/dev/null >>"$out/cores-auto.jsonl"
done
"$py" - "$out" <<'PY'
import collections, json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = collections.defaultdict(dict)
for line in (out / "cores-wirecheck.jsonl").read_text().splitlines():  # empty with RUNS=0
    r = json.loads(line)
    runs[(r["bytes"], r["run"])][r["wire_check"]] = r["time_us"]
print("| bytes | run | unchecked us | checked us | unchecked / checked |")
for (size, run), t in sorted(runs.items()):
    print(f"| {size} | {run} | {t['off']:.0f} | {t['on']:.0f} | {t['off'] / t['on']:.2f} |")
cells = collections.defaultdict(dict)
for line in (out / "cores-auto.jsonl").read_text().splitlines():
    r = json.loads(line)
    cells[(r["world"], r["bytes"])][r["algo"]] = r
print("| ranks | bytes | fastest | its us | auto's choice | auto us | fastest / auto |")
for (world, size), algos in sorted(cells.items()):
    best = min((r["time_us"], name) for name, r in algos.items() if name != "auto")
    auto = algos["auto"]
    print(f"| {world} | {size} | {best[1]} | {best[0]:.0f} | {auto.get('chosen', '?')} | "
          f"{auto['time_us']:.0f} | {best[0] / auto['time_us']:.2f} |")
print("| cache file | bytes (2^) | chosen | calibration medians, us |")
for path in sorted((out / "cores-auto-cache").iterdir()):
    for kind in json.loads(path.read_text())["kinds"]:
        medians = ", ".join(f"{a} {s * 1e6:.0f}" for a, s in
                            sorted(kind["candidates"].items(), key=lambda kv: kv[1]))
        print(f"| {path.name[:24]} | {kind['log2_bytes']} | {kind['algorithm']} | {medians} |")
PY
