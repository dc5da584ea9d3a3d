#!/usr/bin/env bash
# The Python package measured (docs/results.md, "DDP and SyncBatchNorm" and "Codecs"):
#   hooks: PyTorch DDP, 2 ranks, with no hook, PyTorch's fp16 and PowerSGD (rank 1, 4) hooks,
#          and dtrain's hook (sortquant:8, sortquant:4, kmeans:4): the cnn on Fashion-MNIST
#          (20000 samples, 64 per rank: 157 steps, full test set) and the CIFAR ResNet-18 on
#          synthetic 3x32x32 data (32 per rank, 10 steps; no accuracy: the labels are random),
#          on loopback and on a network lab's 100 Mbit/s link (bytes per step counted on the
#          lab hosts' interfaces). Writes docs/data/python-hooks.jsonl.
#   codec: dtrain.encode/decode from Python next to `dtrain bench codec`, 16M gaussian values.
#          Writes docs/data/python-codec.jsonl.
#   bash bench/python.sh [hooks|codec]...   (default: both; the lab needs root)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
lab=py$$
mkdir -p docs/data
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true' EXIT

hooks="none fp16 powersgd:1 powersgd:4 dtrain:sortquant:8 dtrain:sortquant:4 dtrain:kmeans:4"
model_args() {  # model_args MODEL
  if [ "$1" = cnn ]; then
    echo "--model cnn --limit-train 20000 --limit-test 10000 --batch-size 64"
  else
    echo "--model resnet18 --dataset synthetic --synthetic-size 640 --batch-size 32 --limit-test 256"
  fi
}

for section in ${*:-hooks codec}; do
  case $section in
  hooks)
    out=docs/data/python-hooks.jsonl
    : >"$out"
    "$bin" netlab up "$lab" --hosts 2 --rate 100mbit >/dev/null
    for net in loopback 100mbit; do
      for model in cnn resnet18; do
        for hook in $hooks; do
          echo "python.sh: $net $model $hook" >&2
          flags=() count=()
          [ "$net" = 100mbit ] && flags=(--netlab "$lab") count=(--count-iface eth0)
          # PowerSGD over gloo aborts with more than one bucket (docs/results.md): one bucket.
          bucket=()
          case $hook in powersgd*) bucket=(--bucket-mb 1000) ;; esac
          # shellcheck disable=SC2046
          "$bin" launch -n 2 "${flags[@]}" -- "$py" bench/pytorch_ddp.py $(model_args "$model") \
            --comm-hook "$hook" "${bucket[@]}" "${count[@]}" | sed -n 's/^\[rank 0\] //p' |
            sed "s/^{/{\"net\":\"$net\",/" >>"$out"
        done
      done
    done
    ;;
  codec)
    # Twice: with glibc's default malloc, which maps every large buffer afresh (a first
    # touch of each page faults, expensive on this VM), and with large buffers kept in the
    # heap as the dtrain binary itself does (main.cpp, mallopt): the difference is the
    # allocator's, not a copy.
    out=docs/data/python-codec.jsonl
    "$py" bench/python_codec.py --binary "$bin" | sed 's/^{/{"malloc":"default",/' >"$out"
    MALLOC_MMAP_THRESHOLD_=1073741824 MALLOC_TRIM_THRESHOLD_=1073741824 \
      "$py" bench/python_codec.py --binary "$bin" | sed 's/^{/{"malloc":"heap",/' >>"$out"
    ;;
  *)
    echo "unknown section $section (hooks, codec)" >&2
    exit 2
    ;;
  esac
done
