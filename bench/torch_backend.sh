#!/usr/bin/env bash
# PyTorch DDP (bench/pytorch_ddp.py, unmodified but for its backend's name) over gloo and
# over dtrain's torch.distributed backend (docs/results.md, "dtrain as a torch.distributed
# backend"): 2 ranks, on loopback and on lab links (LINKS, RATE:DELAY one way, default
# "1gbit:25ms 1gbit:100ms"). ResNet-18 on synthetic 3x32x32 data, 32 a rank (45 MB of
# gradients a step), RESNET_SAMPLES (default 1,280: 20 steps); the cnn on Fashion-MNIST, 64 a
# rank, CNN_SAMPLES (default 6,400: 50 steps). ROUNDS rounds (default 2), gloo and dtrain
# in turn, every link in each. "Exposed" communication: a run's time minus the same
# backend's loopback time in the same round.
# Then dtrain.DiLoCo from bench/pytorch_diloco.py (the cnn, H = 50, 38,400 samples, exact and
# rot:tile:2) over gloo and over dtrain on loopback and DILOCO_LINKS (default "20mbit:5ms").
# FSDP2 (bench/pytorch_fsdp.py: the RoBERTa twin, roberta-base's sizes, 8 x 64 tokens a rank,
# FSDP_STEPS timed steps, default 4, after one untimed) on loopback and FSDP_LINKS (default
# "1gbit:25ms"). PARTS (default "ddp fsdp diloco") picks the parts. As root (the lab). Writes
# docs/data/torch-backend.jsonl, docs/data/torch-backend-fsdp.jsonl and
# docs/data/torch-backend-diloco.jsonl, then the tables. DTRAIN_TCP_CONGESTION (e.g. reno) sets
# the dtrain runs' congestion control (docs/wire-format.md); the rows say tcp_congestion.
# HOST_SYSCTL (e.g. net.ipv4.tcp_slow_start_after_idle=0) sets the lab hosts' kernel settings
# (netlab up --sysctl; the rows say host_sysctl); OUT moves the DDP part's file.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
# The build's package (it carries the backend; an installed one may predate it).
export PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}"
lab=tb$$
out=${OUT:-docs/data/torch-backend.jsonl}
parts=" ${PARTS:-ddp fsdp diloco} "
mkdir -p docs/data
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true' EXIT
rank0_rows() {  # rank0_rows LINK ROUND < launcher output: rank 0's JSON lines, tagged
  local settings=${HOST_SYSCTL:-}
  [ "$1" = loopback ] && settings=  # the lab's hosts only
  sed -n "s/^\[rank 0\] {/{\"link\":\"$1\",\"round\":$2,\"host_sysctl\":\"$settings\",/p"
}
run() {  # run LINK ROUND BACKEND MODEL ARGS...
  local link=$1 round=$2 backend=$3 model=$4
  shift 4
  echo "torch_backend.sh: $link round $round $backend $model" >&2
  local rows
  rows=$(wc -l <"$out")
  # PyTorch 2.11 processes that ran DDP sometimes abort in interpreter teardown, after the
  # row is out (docs/limitations.md): a run counts when its row came. One whose rank 1 died
  # that way before rank 0's row was out runs again, once.
  for attempt in 1 2; do
    "$bin" launch -n 2 "${where[@]}" -- "$py" bench/pytorch_ddp.py --backend "$backend" \
      --model "$model" "$@" | rank0_rows "$link" "$round" >>"$out" || true
    [ "$(wc -l <"$out")" -gt "$rows" ] && return
    echo "torch_backend.sh: no row from that run (attempt $attempt)" >&2
  done
  exit 1
}
lab_for_link() {  # lab_for_link RATE:DELAY|loopback; sets `where`, the launcher's placement
  "$bin" netlab down "$lab" >/dev/null 2>&1 || true
  where=()
  [ "$1" = loopback ] && return
  local settings=()
  for setting in ${HOST_SYSCTL:-}; do settings+=(--sysctl "$setting"); done
  "$bin" netlab up "$lab" --hosts 2 --rate "${1%%:*}" --delay "${1##*:}" "${settings[@]}" >/dev/null
  where=(--netlab "$lab")
}
if [[ $parts == *" ddp "* ]]; then
  : >"$out"
  # Round by round, each link's runs beside the loopback runs they are measured against: the
  # loopback time of a ResNet-18 epoch varied 13-17 s between rounds run minutes apart.
  for round in $(seq 1 "${ROUNDS:-2}"); do
    for link in loopback ${LINKS:-1gbit:25ms 1gbit:100ms}; do
      lab_for_link "$link"
      for backend in gloo dtrain; do
        run "$link" "$round" "$backend" resnet18 --dataset synthetic --input-shape 3,32,32 \
          --synthetic-size "${RESNET_SAMPLES:-1280}" --limit-train "${RESNET_SAMPLES:-1280}" \
          --limit-test 64 --batch-size 32
        run "$link" "$round" "$backend" cnn --limit-train "${CNN_SAMPLES:-6400}" --limit-test 1000
      done
    done
  done
fi
if [[ $parts == *" fsdp "* ]]; then
  out=docs/data/torch-backend-fsdp.jsonl
  : >"$out"
  for link in loopback ${FSDP_LINKS:-1gbit:25ms}; do
    lab_for_link "$link"
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for backend in gloo dtrain; do
        echo "torch_backend.sh: $link round $round fsdp2 $backend" >&2
        "$bin" launch -n 2 "${where[@]}" -- "$py" bench/pytorch_fsdp.py --backend "$backend" \
          --steps "${FSDP_STEPS:-4}" | rank0_rows "$link" "$round" >>"$out"
      done
    done
  done
fi
if [[ $parts == *" diloco "* ]]; then
  out=docs/data/torch-backend-diloco.jsonl
  : >"$out"
  for link in loopback ${DILOCO_LINKS:-20mbit:5ms}; do
    lab_for_link "$link"
    for round in $(seq 1 "${ROUNDS:-2}"); do
      for codec in none rot:tile:2; do
        for backend in gloo dtrain; do
          echo "torch_backend.sh: $link round $round diloco $codec $backend" >&2
          "$bin" launch -n 2 "${where[@]}" -- "$py" bench/pytorch_diloco.py --impl dtrain \
            --backend "$backend" --codec "$codec" | rank0_rows "$link" "$round" >>"$out"
        done
      done
    done
  done
fi
"$py" bench/tables_torch_backend.py "${OUT:-docs/data/torch-backend.jsonl}"
