#!/usr/bin/env bash
# On a GPU machine (torch 2.11 with CUDA, cmake, ninja; no package index): builds dtrain
# against that machine's torch with the dependencies carried in .gpu-deps (made here by
# scripts/gpu-bundle.sh), runs the GPU tests, then a short benchmark of CPU against GPU.
# Results go to stdout and, when OUT is set, to $OUT/gpu-check.log and $OUT/*.jsonl.
# TESTS_ONLY=1 builds and runs the GPU tests alone. COLLECTIVES_ONLY=1 builds the CLI alone
# and runs bench/cores.sh: collectives on loopback with cores to spare for every rank.
set -euo pipefail
cd "$(dirname "$0")/.."
deps="$PWD/.gpu-deps"
[ -d "$deps" ] || { echo "gpu-check: $deps missing: run scripts/gpu-bundle.sh first" >&2; exit 2; }
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
py="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'devices', torch.cuda.device_count())"

# A markdown table of the rows of $out/NAME.jsonl for each NAME that exists: HEADER, then
# each row through the Python format string ROW ({name} and the row's keys).
table() {  # table HEADER ROW NAME...
  "$py" - "$out" "$@" <<'PY'
import json, sys, pathlib
out, header, row, *names = sys.argv[1:]
print(header)
for name in names:
    path = pathlib.Path(out) / f"{name}.jsonl"
    if path.exists():
        for line in path.read_text().splitlines():
            print(row.format(name=name, **json.loads(line)))
PY
}

export LD_LIBRARY_PATH="$deps/lib:${LD_LIBRARY_PATH:-}"
cmake -S . -B build-gpu -G Ninja -DDTRAIN_PYTHON="$(command -v "$py")" \
  -DCMAKE_PREFIX_PATH="$deps" -DCLI11_INCLUDE_DIR="$deps/include" \
  -DZLIB_INCLUDE_DIR="$deps/include" -DZLIB_LIBRARY="$deps/lib/libz.so" \
  -DDTRAIN_GTEST_SOURCE="$deps/googletest" -DCMAKE_CXX_FLAGS="-isystem $deps/include" \
  > "$out/configure.log" 2>&1 || { tail -40 "$out/configure.log"; exit 1; }
start=$(date +%s)
# Only what this script runs: the CLI and the GPU tests (the unit and e2e binaries are
# make test's, on a CPU machine).
targets=(dtrain gpu_tests)
[ "${COLLECTIVES_ONLY:-0}" = 1 ] && targets=(dtrain)
cmake --build build-gpu -j"$(nproc)" --target "${targets[@]}" > "$out/build.log" 2>&1 || { grep -B2 -A8 "error" "$out/build.log" | head -80; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
build-gpu/dtrain --version
if [ "${COLLECTIVES_ONLY:-0}" = 1 ]; then
  PYTHON="$py" bash bench/cores.sh build-gpu/dtrain "$out"
  exit 0
fi

echo "== GPU tests"
(cd build-gpu && ctest -L gpu --output-on-failure --timeout 150) > "$out/gpu-tests.log" 2>&1 ||
  echo "GPU TESTS FAILED (see gpu-tests.log):"
grep -E "Passed|Failed|Skipped|Failure|Expected|Which is|error|  Actual|tests passed" "$out/gpu-tests.log" | head -40
# TESTS_ONLY=1: a re-run after fixing a test stops here (the GPU machine's time is short).
[ "${TESTS_ONLY:-0}" = 1 ] && exit 0

echo "== codec encode/decode, 16M values, CPU vs GPU (coded on the GPU, packets to host memory)"
for dev in cpu cuda; do
  build-gpu/dtrain bench codec --device "$dev" --codec fp16,uniform:8,sortquant:8,sortquant-ref:8,tile:4,rot:tile:2 \
    --dist gaussian,relu --numel 16M --reps 5 --format jsonl --out "$out/codec-$dev.jsonl" 2> "$out/codec-$dev.err" || tail -5 "$out/codec-$dev.err"
done
"$py" - "$out" <<'PY'
import json, sys, pathlib
rows = [json.loads(l) for d in ("cpu", "cuda") for l in (pathlib.Path(sys.argv[1]) / f"codec-{d}.jsonl").read_text().splitlines()]
print("| device | codec | dist | enc GB/s | dec GB/s | mse/var |")
for r in rows:
    print(f"| {r['device']} | {r['codec']} | {r['dist']} | {r['encode_gbps']:.3f} | {r['decode_gbps']:.3f} | {r['mse_over_var']:.2e} |")
PY

echo "== training, 1 epoch of Fashion-MNIST-sized synthetic data: CPU vs GPU, and a CPU client with a GPU server"
common="--dataset synthetic --input-shape 1,28,28 --num-classes 10 --synthetic-size 60000 --epochs 1 --batch-size 64 --no-progress --format jsonl --seed 1"
for dev in cpu cuda; do
  build-gpu/dtrain train --model cnn --device "$dev" $common --metrics "$out/train-$dev.jsonl" > /dev/null
done
for dev in cpu cuda; do
  build-gpu/dtrain train --model cnn -n 2 --parallel pipeline --placement ushape --chunks 4 \
    --device "$dev" --client-device cpu $common --metrics "$out/ushape-$dev.jsonl" > /dev/null
done
for dev in cpu cuda; do  # both DDP ranks share the one GPU a check machine has
  build-gpu/dtrain train --model cnn -n 2 --parallel ddp --device "$dev" $common \
    --metrics "$out/ddp-$dev.jsonl" > /dev/null
done
"$py" - "$out" <<'PY'
import json, sys, pathlib
print("| run | samples/s | epoch s | fwd s | bwd s | test acc | CUDA max alloc MiB |")
for name in ("train-cpu", "train-cuda", "ushape-cpu", "ushape-cuda", "ddp-cpu", "ddp-cuda"):
    r = [json.loads(l) for l in (pathlib.Path(sys.argv[1]) / f"{name}.jsonl").read_text().splitlines()][0]
    print(f"| {name} | {r['samples_per_s']:.0f} | {r['epoch_s']:.2f} | {r['time_forward_s']:.2f} | {r['time_backward_s']:.2f} | {r['test_acc']:.4f} | {r.get('cuda_max_allocated_bytes', 0) / 2**20:.0f} |")
PY

echo "== all_reduce on CUDA buffers (1 MB to 1 GB): Gloo through host memory, and NCCL"
gpus=$("$py" -c "import torch; print(torch.cuda.device_count())")
sizes="1M,10M,100M,1G"
build-gpu/dtrain bench collective -n 2 --device cuda --backend gloo --sizes "$sizes" --iters 5 \
  --warmup 1 --format jsonl --out "$out/coll-gloo-cuda.jsonl" 2> "$out/coll-gloo-cuda.err" || tail -5 "$out/coll-gloo-cuda.err"
build-gpu/dtrain bench collective -n 2 --sizes "$sizes" --iters 5 --warmup 1 --algo native,ring \
  --format jsonl --out "$out/coll-cpu.jsonl" 2> "$out/coll-cpu.err" || tail -5 "$out/coll-cpu.err"
if [ "$gpus" -ge 2 ]; then
  build-gpu/dtrain bench collective -n 2 --device cuda --backend nccl --sizes "$sizes" --iters 5 \
    --warmup 1 --format jsonl --out "$out/coll-nccl.jsonl" 2> "$out/coll-nccl.err" || tail -5 "$out/coll-nccl.err"
else
  echo "(one GPU: NCCL needs a GPU per rank, so its 2-rank column is not run; NCCL alone:)"
  build-gpu/dtrain bench collective --device cuda --backend nccl --sizes "$sizes" --iters 5 \
    --warmup 1 --format jsonl --out "$out/coll-nccl.jsonl" 2> "$out/coll-nccl.err" || tail -5 "$out/coll-nccl.err"
fi
table "| run | algo | ranks | bytes | time us | busbw GB/s | #wrong |" \
  "| {name} | {algo} | {world} | {bytes} | {time_us:.0f} | {busbw_gbps:.3f} | {wrong} |" \
  coll-cpu coll-gloo-cuda coll-nccl

echo "== point-to-point on CUDA buffers: CPU, Gloo through host memory, and NCCL (2 GPUs)"
p2p_sizes="4K,1M,64M,256M"
build-gpu/dtrain bench p2p -n 2 --sizes "$p2p_sizes" --iters 5 --format jsonl \
  --out "$out/p2p-cpu.jsonl" 2> "$out/p2p-cpu.err" || tail -5 "$out/p2p-cpu.err"
build-gpu/dtrain bench p2p -n 2 --device cuda --backend gloo --sizes "$p2p_sizes" --iters 5 \
  --format jsonl --out "$out/p2p-gloo-cuda.jsonl" 2> "$out/p2p-gloo-cuda.err" || tail -5 "$out/p2p-gloo-cuda.err"
if [ "$gpus" -ge 2 ]; then
  build-gpu/dtrain bench p2p -n 2 --device cuda --backend nccl --sizes "$p2p_sizes" --iters 5 \
    --format jsonl --out "$out/p2p-nccl.jsonl" 2> "$out/p2p-nccl.err" || tail -5 "$out/p2p-nccl.err"
else
  echo "(one GPU: NCCL point-to-point needs a GPU per rank; not run)"
fi
table "| run | path | bytes | latency us | bandwidth GB/s | #wrong |" \
  "| {name} | {path} | {bytes} | {latency_us:.1f} | {bandwidth_gbps:.3f} | {wrong} |" \
  p2p-cpu p2p-gloo-cuda p2p-nccl
