#!/usr/bin/env bash
# Installs LibTorch as the `torch` wheel of the Python package index into a project-local
# virtual environment: the same build serves the C++ library (CMake finds it through
# torch.utils.cmake_prefix_path), the PyTorch comparisons in bench/ and the Python package.
#
# Lean on purpose. The wheel for Linux is built for CUDA 13.0 and asks for ~3 GB of CUDA
# runtime wheels; this machine's CUDA 13 toolkit already has cudart, cuBLAS, cuFFT, cuRAND,
# cuSOLVER, cuSPARSE, CUPTI, NVRTC, nvJitLink, cuDNN 9 and NCCL, found through ld.so.conf. So
# torch is installed without its dependencies, then only what it lacks here: the pure-Python
# packages `import torch` needs, and the three libraries libtorch_cuda.so links that the
# toolkit does not ship (cuSPARSELt, NVSHMEM, cuFile), each at the version torch's own
# metadata pins. Where no CUDA toolkit is installed, DTRAIN_TORCH_FULL=1 installs every
# dependency instead.
#
# VENV (default: .venv in the repository) and the version (scripts/torch-version) are the
# only inputs. A stamp file records a finished install, so a second run costs nothing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version="$(tr -d '[:space:]' <"$root/scripts/torch-version")"
venv="${VENV:-$root/.venv}"
stamp="$venv/.dtrain-torch-$version"
[ -f "$stamp" ] && exit 0

python="${DTRAIN_PYTHON:-/usr/bin/python3}"
echo "install-torch: torch $version into $venv (python: $python)" >&2
start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install --upgrade pip >/dev/null

if [ "${DTRAIN_TORCH_FULL:-0}" = 1 ]; then
  "${pip[@]}" install "torch==$version" numpy
else
  "${pip[@]}" install --no-deps "torch==$version"
  # torch's Requires-Dist, split into what we install and what the toolkit provides.
  mapfile -t wanted < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md
import re

keep_native = ("nvidia-cusparselt", "nvidia-nvshmem")  # not in the CUDA toolkit
skip = ("cuda-toolkit", "cuda-bindings", "nvidia-", "triton")  # toolkit has them / GPU-only
for req in md.requires("torch") or []:
    spec, _, marker = req.partition(";")
    if "extra ==" in marker:
        continue
    name = re.split(r"[<>=!~\[ ]", spec.strip(), maxsplit=1)[0].lower()
    if name.startswith(keep_native) or not name.startswith(skip):
        print(spec.strip().replace(" ", ""))
    elif name == "cuda-toolkit":
        # libtorch_cuda.so links libcufile.so.0, which the toolkit install here lacks.
        version = re.search(r"==([0-9.]+)", spec).group(1)
        print(f"cuda-toolkit[cufile]=={version}")
PY
  )
  # pip reports torch's left-out requirements as conflicts: they are left out on purpose.
  log="$(mktemp)"
  trap 'rm -f "$log"' EXIT
  "${pip[@]}" install "${wanted[@]}" numpy 2>"$log" || { cat "$log" >&2; exit 1; }
  grep -v -e "dependency resolver" -e "which is not installed" "$log" >&2 || true
  echo "install-torch: left out (the CUDA toolkit here has them, or GPU compilers only):" \
    "cuda-toolkit's runtime libraries, cuda-bindings, nvidia-cudnn, nvidia-nccl, triton" >&2
fi
touch "$stamp"
echo "install-torch: done in $(($(date +%s) - start)) s; $(du -sh "$venv" | cut -f1) in $venv" >&2
