#!/usr/bin/env bash
# Runs one libFuzzer target of tests/fuzz for a bounded time, starting from the corpus kept
# in the repository (tests/fuzz/corpus/TARGET), which is replayed first: every input that
# ever mattered is checked again on each run.
#
#   scripts/fuzz.sh FUZZ_BUILD_DIR TARGET SECONDS [--merge]
#
# New inputs go to FUZZ_BUILD_DIR/runs/TARGET/new, a crash's input to .../artifacts/ (the
# failure message says how to replay it). --merge adds the inputs that found new coverage
# to the repository's corpus (libFuzzer's -merge=1 keeps only those).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 FUZZ_BUILD_DIR TARGET SECONDS [--merge]" >&2
  exit 2
fi
build="$1" target="$2" seconds="$3" merge="${4:-}"
root="$(cd "$(dirname "$0")/.." && pwd)"
binary="$build/fuzz_$target"
corpus="$root/tests/fuzz/corpus/$target"
[ -x "$binary" ] || { echo "fuzz.sh: no $binary (build the project first)" >&2; exit 2; }
[ -d "$corpus" ] || { echo "fuzz.sh: no corpus $corpus" >&2; exit 2; }
work="$build/runs/$target"
rm -rf "$work"
mkdir -p "$work/new" "$work/artifacts"
# LibTorch is not instrumented: its process-lifetime allocations are not leaks of ours.
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export OMP_NUM_THREADS=1
# A single allocation over 512 MiB is a finding: no decoder may trust a size it was told.
status=0
"$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=512 \
  -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/new" "$corpus" \
  > "$work/log" 2>&1 || status=$?
grep -E "^stat::(number_of_executed_units|new_units_added|peak_rss_mb)" "$work/log" | tr '\n' ' '
echo
if [ "$status" -ne 0 ]; then
  tail -n 60 "$work/log" >&2
  for found in "$work"/artifacts/*; do
    [ -e "$found" ] && echo "fuzz.sh: $target failed on $found; replay: $binary $found" >&2
  done
  exit "$status"
fi
if [ "$merge" = "--merge" ]; then
  "$binary" -merge=1 "$corpus" "$work/new" > "$work/merge.log" 2>&1
  echo "fuzz.sh: $target corpus now $(find "$corpus" -type f | wc -l) files"
fi
