#!/usr/bin/env python3
"""Encode/decode throughput of the Python package next to the C++ bench, in one run:
for each codec, `dtrain bench codec` (C++, median of --reps) and dtrain.encode /
dtrain.decode from Python on a tensor of the same size and distribution (median of the same
reps), then one JSON line per codec with both and their ratio. The binding adds no copy of
the tensor data, so the ratio should be ~1 on large tensors.
  .venv/bin/python bench/python_codec.py [--codecs fp16,sortquant:8] [--numel 16M] [--reps 9]"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

import torch

import dtrain
from metrics_keys import K


def numel_of(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * scale[text[-1]] if text[-1] in scale else int(text)


def python_side(codec, n, reps, seed):
    x = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    enc, dec = [], []
    dtrain.decode(dtrain.encode(x, codec))  # warm-up: the allocator's first pages
    for _ in range(reps):
        start = time.perf_counter()
        packet = dtrain.encode(x, codec)
        mid = time.perf_counter()
        dtrain.decode(packet)
        dec.append(time.perf_counter() - mid)
        enc.append(mid - start)
    return 4 * n / statistics.median(enc) / 1e9, 4 * n / statistics.median(dec) / 1e9


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--codecs", default="fp16,uniform:8,sortquant:8,kmeans:4")
    p.add_argument("--numel", default="16M")
    p.add_argument("--reps", type=int, default=9)
    p.add_argument("--binary", default=os.environ.get("DTRAIN", "build/dtrain"))
    a = p.parse_args()
    torch.set_num_threads(1)
    n = numel_of(a.numel)
    for codec in a.codecs.split(","):
        with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
            subprocess.run([a.binary, "bench", "codec", "--codec", codec, "--dist", "gaussian",
                            "--numel", a.numel, "--reps", str(a.reps), "--threads", "1",
                            "--format", "jsonl", "--out", out.name], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cpp = json.loads(open(out.name).readline())
        enc, dec = python_side(codec, n, a.reps, 0)
        print(json.dumps({"bench": "python_codec", "codec": codec, "dist": "gaussian", "numel": n,
                          "cpp_encode_gbps": cpp[K.encode_gbps], "cpp_decode_gbps": cpp[K.decode_gbps],
                          "py_encode_gbps": enc, "py_decode_gbps": dec,
                          "encode_py_over_cpp": enc / cpp[K.encode_gbps],
                          "decode_py_over_cpp": dec / cpp[K.decode_gbps]}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
