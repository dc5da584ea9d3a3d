#!/usr/bin/env bash
# Gathers what a GPU machine lacks to build dtrain (it has torch, cmake and ninja but no
# Debian packages and no package index): the header-only dependencies, GoogleTest's
# sources, zlib, into .gpu-deps/ (git-ignored). Run here, where scripts/install-deps.sh
# installed them; then carry .gpu-deps to the GPU machine and run scripts/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out=.gpu-deps
rm -rf "$out"
mkdir -p "$out/include" "$out/share/cmake" "$out/lib"
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/gloo "$out/include/"
cp /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp -r /usr/share/cmake/nlohmann_json "$out/share/cmake/"
cp -r /usr/src/googletest "$out/googletest"
cp -L /usr/lib/x86_64-linux-gnu/libz.so.1 "$out/lib/libz.so.1"
ln -s libz.so.1 "$out/lib/libz.so"
du -sh "$out"
