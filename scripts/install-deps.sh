#!/usr/bin/env bash
# Installs what dtrain builds and runs with (docs/install.md):
#   1. Debian packages: compilers (clang with libFuzzer: tests/fuzz), CLI11, json, zlib, gtest, Gloo's headers, Fashion-MNIST,
#      iproute2, iptables and procps (ip, tc, the impairer's NFQUEUE rule, sysctl: the network lab), Python headers (the Python package), chromium
#      (headless: the test that loads the HTML report in a browser), fortunes (the text demo
#      task's data: scripts/make-text-demo.py), etcd-server and etcd-client (an elastic run's
#      membership in an etcd cluster; the tests start their own members on free ports);
#   2. LibTorch: the `torch` wheel of the Python package index, at the one version pinned in
#      scripts/torch-version, into the project-local virtual environment (VENV, default .venv),
#      by scripts/install-torch.sh;
#   3. the Python tools of scripts/python-tools.txt (scikit-build-core, pytest) into the same
#      environment, by scripts/install-python-tools.sh.
# Idempotent: does nothing when everything is present. Uses sudo when not root.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config
  clang libclang-rt-dev
  python3 python3-venv
  libgloo-dev
  libcli11-dev nlohmann-json3-dev zlib1g-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  dataset-fashion-mnist
  fortunes
  iproute2 iptables procps
  python3-dev
  chromium
  etcd-server etcd-client
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || {
      echo "install-deps: need root or sudo to install ${missing[*]}" >&2
      exit 1
    }
    sudo_cmd=(sudo)
  fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

bash "$here/install-torch.sh"
bash "$here/install-python-tools.sh"
