#!/usr/bin/env bash
# Reproduces the pipeline numbers in docs/results.md (writes docs/data/pipeline-*.jsonl).
#   bash bench/pipeline.sh [bubble|schedules|vsddp|ablation|lowbit|vspytorch]...   (default: all)
# The PyTorch side runs on the project's pinned torch (PYTHON, default .venv/bin/python).
# Each run's --metrics lines are tagged with the configuration ("run") and appended.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
mkdir -p docs/data
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.err"' EXIT
run() {  # run OUT TAG ARGS...; fails as the run does (set -e does not apply under `if`)
  local out=$1 tag=$2
  shift 2
  "$bin" train --no-progress --metrics "$tmp" "$@" >/dev/null || return 1
  sed "s/^{/{\"run\":\"$tag\",/" "$tmp" >>"$out"
}
sections=${*:-bubble schedules vsddp ablation lowbit vspytorch}
for section in $sections; do
  case $section in
  bubble)
    # A balanced synthetic model: 8 blocks of 512x512 (input 1x16x32 = 512) and a small head,
    # 2 stages of 4 (+ head), 2 ranks on 2 cores (4 ranks would share cores and measure the
    # scheduler, not the pipeline). Measured bubble vs (S-1)/(M+S-1).
    out=docs/data/pipeline-bubble.jsonl
    : >"$out"
    for m in 2 4 8 16; do
      for s in gpipe 1f1b; do
        run "$out" "$s-M$m" --parallel pipeline -n 2 --model mlp --depth 8 --dataset synthetic \
          --input-shape 1,16,32 --synthetic-size 8192 --batch-size 256 --epochs 1 --chunks $m \
          --schedule $s --balance 4,5
      done
    done
    ;;
  schedules)
    # GPipe vs 1F1B: peak RSS and throughput, mlp of hidden 2048 with large micro-batch
    # activations (128 x 2048 floats per boundary), S = 2 and 4 (4 oversubscribes the 2
    # cores: throughput there is indicative only).
    out=docs/data/pipeline-schedules.jsonl
    : >"$out"
    for n in 2 4; do
      for s in gpipe 1f1b; do
        run "$out" "$s-S$n" --parallel pipeline -n $n --model mlp --depth 7 --width 4 \
          --dataset synthetic --input-shape 1,32,32 --synthetic-size 4096 --batch-size 2048 \
          --epochs 1 --chunks 16 --schedule $s --limit-test 512
      done
    done
    ;;
  vsddp)
    # Pipeline against data parallel: pipeline vs data parallel at 2 ranks, cnn, one Fashion-MNIST
    # epoch, global batch 64 in both (DDP: 32 per rank), no compression; single process too.
    out=docs/data/pipeline-vs-ddp.jsonl
    : >"$out"
    run "$out" "single process (2 threads)" --model cnn --epochs 1 --batch-size 64 --threads 2
    run "$out" "pipeline ushape f1l1, gpipe M=4" --parallel pipeline -n 2 --placement ushape \
      --model cnn --epochs 1 --batch-size 64 --chunks 4
    run "$out" "pipeline linear, 1f1b M=4" --parallel pipeline -n 2 --model cnn --epochs 1 \
      --batch-size 64 --chunks 4 --schedule 1f1b
    run "$out" "ddp (32 per rank)" --parallel ddp -n 2 --model cnn --epochs 1 --batch-size 32
    ;;
  ablation)
    # The codec ablation with the cnn (both U-shape boundaries large: 32x14x14 and 64x7x7
    # per sample), U-shape f1l1, 2 ranks, GPipe 4 chunks, 2 epochs, same seed.
    out=docs/data/pipeline-ablation.jsonl
    : >"$out"
    # A codec that makes training diverge stops its run (NaN/Inf cannot be coded): its row
    # says so and the others go on; any other failure stops the section.
    for codec in none sortquant:16 sortquant:12 sortquant:8 sortquant:4 uniform:8 uniform:4 kmeans:4; do
      if ! run "$out" "$codec" --parallel pipeline -n 2 --placement ushape --client-blocks 1,1 \
        --model cnn --dataset fashion-mnist --epochs 2 --chunks 4 --schedule gpipe \
        --compress "$codec" 2>"$tmp.err"; then
        grep -q "NaN or Inf" "$tmp.err" || { cat "$tmp.err" >&2; exit 1; }
        echo "{\"run\":\"$codec\",\"diverged\":true}" >>"$out"
      fi
    done
    ;;
  lowbit)
    # The ablation at 2, 3 and 4 bits (docs/results.md, "Pipeline and U-shape"): the same runs
    # as `ablation` for plain uniform and sortquant, their rotated forms, and rot:tile.
    # delta:CODEC is --delta --compress CODEC (the first epoch warms up with sortquant:8).
    # CODECS overrides the list (each is one run; none first as the reference); APPEND=1
    # adds to the file instead of starting it anew.
    out=docs/data/pipeline-lowbit.jsonl
    [ -n "${APPEND:-}" ] || : >"$out"
    codecs=${CODECS:-"none uniform:4 uniform:3 uniform:2 sortquant:3:1 sortquant:2:1 sortquant:1:1
      rot:uniform:4 rot:uniform:3 rot:uniform:2 rot:sortquant:3:1 rot:sortquant:2:1
      rot:sortquant:1:1 rot:tile:4 rot:tile:3 rot:tile:2 delta:rot:tile:4 delta:rot:tile:3
      delta:rot:tile:2"}
    for codec in $codecs; do
      echo "pipeline.sh: lowbit $codec" >&2
      delta=()
      [[ $codec == delta:* ]] && delta=(--delta)
      if ! run "$out" "$codec" --parallel pipeline -n 2 --placement ushape --client-blocks 1,1 \
        --model cnn --dataset fashion-mnist --epochs 2 --chunks 4 --schedule gpipe \
        "${delta[@]}" --compress "${codec#delta:}" 2>"$tmp.err"; then
        grep -q "NaN or Inf" "$tmp.err" || { cat "$tmp.err" >&2; exit 1; }
        echo "{\"run\":\"$codec\",\"diverged\":true}" >>"$out"
      fi
    done
    ;;
  vspytorch)
    # dtrain's pipeline next to torch.distributed.pipelining on the bubble benchmark's model
    # and split (mlp 8 x 512 + head, 2 ranks, 4 blocks on rank 0, batch 256), 16384 samples
    # (64 steps), M = 4 and 8; PyTorch also with the schedules dtrain lacks (2 stages per
    # rank: Interleaved 1F1B, Interleaved Zero Bubble; ZBV fails on 2 gloo ranks, see
    # docs/results.md). Alternated twice.
    out=docs/data/pipeline-vs-pytorch.jsonl
    : >"$out"
    for round in 1 2; do
      for m in 4 8; do
        for s in gpipe 1f1b; do
          run "$out" "dtrain-$s-M$m-r$round" --parallel pipeline -n 2 --model mlp --depth 8 \
            --dataset synthetic --input-shape 1,16,32 --synthetic-size 16384 --batch-size 256 \
            --epochs 1 --chunks $m --schedule $s --balance 4,5 --limit-test 256
        done
        for s in gpipe 1f1b interleaved-1f1b interleaved-zb; do
          "$bin" launch -n 2 -- "$py" bench/pytorch_pipeline.py --schedule $s --chunks $m \
            --steps 64 | sed -n 's/^\[rank 0\] //p' | sed "s/^{/{\"round\":$round,/" >>"$out"
        done
      done
    done
    ;;
  *)
    echo "unknown section $section (bubble, schedules, vsddp, ablation, vspytorch)" >&2
    exit 2
    ;;
  esac
done
