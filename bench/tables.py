#!/usr/bin/env python3
"""Markdown tables for docs/results.md from the JSON lines in docs/data (stdlib only)."""
import json
import statistics
import sys
from pathlib import Path
from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


def rows(name):
    path = DATA / name
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def size(b):
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale and b % scale == 0:
            return f"{b // scale} {unit}"
    return f"{b} B"


def allreduce(name, world):
    rs = [r for r in rows(name) if r[K.world] == world]
    algos = list(dict.fromkeys(r[K.algo] for r in rs))
    print("| size | " + " | ".join(f"{a} time (us) / busbw (GB/s)" for a in algos) + " | ring / native busbw | #wrong |")
    print("|---:|" + "---:|" * (len(algos) + 2))
    for s in sorted({r[K.bytes] for r in rs}):
        d = {r[K.algo]: r for r in rs if r[K.bytes] == s}
        cells = [f"{d[a][K.time_us]:.0f} / {d[a][K.busbw_gbps]:.3f}" for a in algos]
        ratio = d["ring"][K.busbw_gbps] / d["native"][K.busbw_gbps] if "ring" in d and "native" in d else float("nan")
        wrong = sum(d[a][K.wrong] for a in algos)
        print(f"| {size(s)} | " + " | ".join(cells) + f" | {ratio:.2f} | {wrong} |")


def small(name):
    rs = rows(name)
    print("| size | ring (us) | butterfly (us) | direct (us) | native (us) | butterfly / native |")
    print("|---:|---:|---:|---:|---:|---:|")
    for s in sorted({r[K.bytes] for r in rs}):
        d = {r[K.algo]: r[K.time_us] for r in rs if r[K.bytes] == s}
        print(f"| {size(s)} | {d['ring']:.0f} | {d['butterfly']:.0f} | {d['direct']:.0f} | {d['native']:.0f} | {d['butterfly'] / d['native']:.2f} |")


def p2p(name):
    print("| size | one-way latency (us) | bandwidth (GB/s) | window |")
    print("|---:|---:|---:|---:|")
    for r in rows(name):
        print(f"| {size(r[K.bytes])} | {r[K.latency_us]:.1f} | {r[K.bandwidth_gbps]:.3f} | {r[K.window]} |")


def large(name):
    print("| backend/algo | processes | size | avg time (ms) | algbw (GB/s) | busbw (GB/s) | seed's effective bw (2*bytes/time, GiB/s) | #wrong | peak RSS/rank (MiB) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows(name):
        eff = 2 * r[K.bytes] / (r[K.time_us] * 1e-6) / 2**30
        print(f"| {r[K.algo]} | {r[K.world]} | {size(r[K.bytes])} | {r[K.time_us] / 1000:.2f} | {r[K.algbw_gbps]:.3f} | "
              f"{r[K.busbw_gbps]:.3f} | {eff:.2f} | {r[K.wrong]} | {r[K.peak_rss_bytes] // 2**20} |")


def codec(name):
    print("| codec | dist | ratio | MSE/var | Lloyd-Max | max abs err | encode GB/s | decode GB/s | encode ms | decode ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows(name):
        lm = "" if r[K.lloyd_max_bound] is None else f"{r[K.lloyd_max_bound]:.6f}"
        print(f"| {r[K.codec]} | {r[K.dist]} | {r[K.ratio]:.4f} | {r[K.mse_over_var]:.6f} | {lm} | {r[K.max_abs_err]:.4g} | "
              f"{r[K.encode_gbps]:.3f} | {r[K.decode_gbps]:.3f} | {r[K.encode_ms]:.1f} | {r[K.decode_ms]:.1f} |")


def codec_ratios(name):
    rs = rows(name)
    print("| dist | sortquant:8 encode speed-up vs sortquant-ref:8 | decode speed-up | kmeans:4:20 speed-up vs kmeans-ref:4:20 | kmeans MSE / ref MSE |")
    print("|---|---:|---:|---:|---:|")
    for dist in dict.fromkeys(r[K.dist] for r in rs):
        d = {r[K.codec]: r for r in rs if r[K.dist] == dist}
        sq, sr, km, kr = d["sortquant:8"], d["sortquant-ref:8"], d["kmeans:4:20"], d["kmeans-ref:4:20"]
        print(f"| {dist} | {sr[K.encode_ms] / sq[K.encode_ms]:.1f}x | {sr[K.decode_ms] / sq[K.decode_ms]:.1f}x | "
              f"{kr[K.encode_ms] / km[K.encode_ms]:.0f}x | {km[K.mse_over_var] / kr[K.mse_over_var]:.4f} |")


def codec_threads(name="codec-threads.jsonl"):
    """Encode and decode times at 1 and 2 threads (medians over the alternated rounds), and
    their ratio (the target: >= 1.7x)."""
    runs = {}
    for r in rows(name):
        runs.setdefault((r[K.codec], r[K.numel], r[K.dist]), {}).setdefault(r[K.threads], []).append(r)
    print("| codec | values | dist | encode ms, 1 / 2 threads | encode speed-up | decode ms, 1 / 2 threads | decode speed-up |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for (codec_name, numel, dist), by in runs.items():
        enc = [statistics.median(x[K.encode_ms] for x in by[t]) for t in (1, 2)]
        dec = [statistics.median(x[K.decode_ms] for x in by[t]) for t in (1, 2)]
        print(f"| {codec_name} | {numel // 2**20}M | {dist} | {enc[0]:.1f} / {enc[1]:.1f} | {enc[0] / enc[1]:.2f}x | "
              f"{dec[0]:.1f} / {dec[1]:.1f} | {dec[0] / dec[1]:.2f}x |")


def small_targets(name, p2p_name):
    """auto vs Gloo's own all-reduce at small sizes, and vs two one-way p2p
    latencies of the same size (the p2p file written right after)."""
    latency = {r[K.bytes]: r[K.latency_us] for r in rows(p2p_name)}
    times = {}
    for r in rows(name):
        times[(r[K.world], r[K.bytes], r[K.algo])] = r[K.time_us]
    print("| ranks | size | auto (us) | native (us) | auto / native | 2 x one-way p2p (us) | auto / (2 x p2p) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for (world, size_bytes, algo), t in sorted(times.items()):
        if algo != "auto":
            continue
        native = times[(world, size_bytes, "native")]
        two = 2 * latency[size_bytes] if world == 2 and size_bytes in latency else None
        print(f"| {world} | {size(size_bytes)} | {t:.0f} | {native:.0f} | {t / native:.2f} | "
              f"{'' if two is None else f'{two:.0f}'} | {'' if two is None else f'{t / two:.2f}'} |")


if __name__ == "__main__":
    what = sys.argv[1]
    globals()[what](*[int(a) if a.isdigit() else a for a in sys.argv[2:]])
