#!/usr/bin/env bash
# Collectives and links on loopback and on long lab links (docs/results.md, "Collectives and links"
# and "auto by measurement"): every all-reduce algorithm and auto, p2p, the wire check's
# cost, and DDP with exact gradients beside PyTorch DDP. As root (the lab).
#   bash bench/links.sh [sweep|wirecheck|lab|ddp|auto]...   (default: all)
# DELAYS (default "0 5 25", ms one way) and RATE (default 1gbit) shape the lab; ROUNDS the
# loopback sweep's turns (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${DTRAIN:-build/dtrain}
py=${PYTHON:-.venv/bin/python}
lab=links$$
mkdir -p docs/data
tmp=$(mktemp)
trap '"$bin" netlab down "$lab" >/dev/null 2>&1 || true; rm -f "$tmp"' EXIT
algos=ring,butterfly,direct,exchange,native,auto
tagged() {  # tagged FIELDS: prefixes every JSON line of stdin with FIELDS
  sed "s/^{/{$1,/"
}
for section in ${*:-sweep wirecheck lab ddp auto}; do
  case $section in
  sweep)
    "$bin" bench collective -n 2,4 --sizes 4K:256M --factor 4 --algo "$algos" --rounds "${ROUNDS:-3}" \
      --format jsonl 2>/dev/null | tagged "\"net\":\"loopback\"" >docs/data/links-sweep-loopback.jsonl
    ;;
  wirecheck)
    "$bin" bench collective -n 2 --sizes 4M:256M --factor 4 --algo ring,native --wire-check both \
      --rounds 8 --iters 4 --format jsonl 2>/dev/null >docs/data/links-wirecheck.jsonl
    ;;
  lab)
    out=docs/data/links-lab.jsonl
    : >"$out"
    for delay in ${DELAYS:-0 5 25}; do
      "$bin" netlab down "$lab" >/dev/null 2>&1 || true
      "$bin" netlab up "$lab" --hosts 4 --rate "${RATE:-1gbit}" --delay "${delay}ms" >/dev/null
      echo "links.sh: ${RATE:-1gbit}, ${delay} ms" >&2
      "$bin" bench p2p -n 2 --netlab "$lab" --sizes 4K:256M --factor 4 --iters 3 --format jsonl \
        2>/dev/null | tagged "\"rate\":\"${RATE:-1gbit}\",\"delay_ms\":$delay" >>"$out"
      for n in 2 4; do
        "$bin" bench collective -n $n --netlab "$lab" --sizes 4K:256M --factor 4 --algo "$algos" \
          --iters 2 --warmup 1 --format jsonl 2>/dev/null |
          tagged "\"rate\":\"${RATE:-1gbit}\",\"delay_ms\":$delay" >>"$out"
      done
    done
    ;;
  ddp)
    # Exact gradients on loopback and on the 25 ms link: dtrain (auto) and PyTorch DDP (gloo),
    # the cnn (10000 Fashion-MNIST samples, 64 per rank) and the CIFAR ResNet-18 (640
    # synthetic samples, 32 per rank); exposed communication = link step - loopback step.
    out=docs/data/links-ddp.jsonl
    : >"$out"
    "$bin" netlab down "$lab" >/dev/null 2>&1 || true
    "$bin" netlab up "$lab" --hosts 2 --rate "${RATE:-1gbit}" --delay 25ms >/dev/null
    for net in loopback 25ms; do
      flags=()
      [ "$net" = 25ms ] && flags=(--netlab "$lab")
      for model in cnn resnet18; do
        args=(--model cnn --limit-train 10000 --limit-test 1000 --batch-size 64)
        torch_args=(--limit-train 10000 --limit-test 1000 --batch-size 64)
        if [ "$model" = resnet18 ]; then
          args=(--model resnet18 --dataset synthetic --input-shape 3,32,32 --num-classes 10
            --synthetic-size 640 --limit-test 256 --batch-size 32 --crop-padding 0 --flip 0)
          torch_args=(--model resnet18 --dataset synthetic --synthetic-size 640 --limit-test 256
            --batch-size 32)
        fi
        echo "links.sh: ddp $net $model" >&2
        "$bin" train --parallel ddp -n 2 "${flags[@]}" "${args[@]}" --epochs 1 \
          --lr-schedule constant --quiet --metrics "$tmp"
        head -1 "$tmp" | tagged "\"impl\":\"dtrain-ddp\",\"net\":\"$net\",\"model\":\"$model\"" >>"$out"
        "$bin" launch -n 2 "${flags[@]}" -- "$py" bench/pytorch_ddp.py "${torch_args[@]}" |
          sed -n 's/^\[rank 0\] //p' | tagged "\"net\":\"$net\"" >>"$out"
      done
    done
    ;;
  auto)
    # auto against every algorithm where it chooses among close ones: AUTO_SIZES (default
    # 4K:4M, x4 apart), 2 and 4 ranks, 12 calls a cell (AUTO_ROUNDS turns of AUTO_ITERS, 4 and
    # 3), on the lab at AUTO_DELAYS (default "25 5") ms one way with reno in the lab's hosts
    # (the VM's bbr paces each message: docs/netlab.md), into AUTO_OUT.
    out=${AUTO_OUT:-docs/data/links-auto-small.jsonl}
    : >"$out"
    for delay in ${AUTO_DELAYS:-25 5}; do
      "$bin" netlab down "$lab" >/dev/null 2>&1 || true
      "$bin" netlab up "$lab" --hosts 4 --rate "${RATE:-1gbit}" --delay "${delay}ms" \
        --sysctl net.ipv4.tcp_congestion_control=reno >/dev/null
      for n in 2 4; do
        echo "links.sh: auto, ${delay} ms, $n ranks" >&2
        "$bin" bench collective -n $n --netlab "$lab" --sizes "${AUTO_SIZES:-4K:4M}" --factor 4 \
          --algo "$algos" --rounds "${AUTO_ROUNDS:-4}" --iters "${AUTO_ITERS:-3}" --warmup 1 \
          --format jsonl 2>/dev/null |
          tagged "\"rate\":\"${RATE:-1gbit}\",\"delay_ms\":$delay,\"cc\":\"reno\"" >>"$out"
      done
    done
    ;;
  *)
    echo "unknown section $section (sweep, wirecheck, lab, ddp, auto)" >&2
    exit 2
    ;;
  esac
done
