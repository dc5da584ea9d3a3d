#!/usr/bin/env python3
"""Markdown tables for docs/results.md from the pipeline and DDP benchmark data
(docs/data/pipeline-*.jsonl, ddp-*.jsonl, syncbn.jsonl, scale-*.jsonl).
Usage: python3 bench/tables_parallel.py SECTION
  (bubble|schedules|ablation|ddp|resnet|hooks|compress|syncbn|scale|vsddp|vspytorch|pyhooks|pycodec|two_way)
  or a table function with its arguments: ddp_vs_pytorch FILE.jsonl"""
import json, statistics, sys
from pathlib import Path
from metrics_keys import K

DATA = Path(__file__).resolve().parent.parent / "docs" / "data"


def rows(name):
    path = DATA / name
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()] if path.exists() else []


def table(header, body):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in body]
    return "\n".join(out)


def epochs(name):
    return [r for r in rows(name) if not r.get(K.summary)]


def bubble():
    body = []
    for r in epochs("pipeline-bubble.jsonl"):
        st = r[K.stages]
        body.append([r["run"], f'{r[K.samples_per_s]:.0f}', f'{r[K.bubble_ideal]:.3f}',
                     f'{r[K.bubble_measured]:.3f}', f'{r[K.bubble_measured] - r[K.bubble_ideal]:+.3f}',
                     " / ".join(f'{s[K.forward_s] + s[K.backward_s]:.2f}' for s in st),
                     " / ".join(f'{s[K.recv_wait_s]:.2f}' for s in st),
                     " / ".join(f'{s[K.idle_s]:.2f}' for s in st)])
    print(table(["schedule-M", "samples/s", "ideal bubble", "measured", "gap", "compute s (rank 0 / 1)",
                 "recv wait s", "idle s"], body))


def schedules():
    body = []
    for r in epochs("pipeline-schedules.jsonl"):
        st = r[K.stages]
        body.append([r["run"], f'{r[K.samples_per_s]:.0f}', f'{r[K.bubble_measured]:.3f}',
                     " / ".join(f'{s[K.peak_rss_bytes] / 2**20:.0f}' for s in st)])
    print(table(["schedule-S", "samples/s", "bubble", "peak RSS MiB per rank"], body))


def ablation():
    by = {}
    for r in rows("pipeline-ablation.jsonl"):
        by.setdefault(r["run"], []).append(r)
    base = None
    body = []
    for run, rs in by.items():
        if rs[0].get("diverged"):
            body.append([run, "diverged", "", "", "", "", ""])
            continue
        ep = [r for r in rs if not r.get(K.summary)]
        last = ep[-1]
        fwd = [l for l in last[K.links] if l[K.direction] == "forward"]
        bw = statistics.mean(l[K.bandwidth_gbps] for l in fwd) if fwd else 0
        step = {s[K.rank]: s[K.step_s] for s in last[K.stages]}
        eff = statistics.mean(l[K.bytes] / step[l[K.dst]] / 1e9 for l in fwd) if fwd else 0
        acc = 100 * last[K.test_acc]
        if run == "none":
            base = acc
        body.append([run, f'{acc:.2f}', f'{acc - base:+.2f}' if base is not None else "",
                     f'{last[K.compression_ratio]:.4f}',
                     f'{statistics.mean(e[K.samples_per_s] for e in ep):.0f}', f'{bw:.3f}', f'{eff:.3f}'])
    print(table(["codec", "test acc %", "vs none", "wire/fp32", "samples/s",
                 "fwd link GB/s (bytes/recv time)", "fwd link GB/s (bytes/step time)"], body))


def ddp_vs_pytorch(name):
    """Per round: dtrain DDP (and a base build, if measured) and PyTorch DDP side by side,
    each in the memory formats measured; then the mean ratios."""
    body, runs = [], {}
    for r in rows(name):
        mine = r.get(K.impl) == "dtrain-ddp"
        impl = ("dtrain" if r.get("build", "current") == "current" else "dtrain (base)") if mine \
            else "PyTorch"
        fmt = r.get("memory_format")
        key = f"{impl} {fmt}" if fmt else impl
        step = r[K.epoch_s] / r[K.steps] if mine else r[K.step_s]
        sps = r[K.samples_per_s]
        runs.setdefault(key, []).append((step, sps, r[K.peak_rss_max_bytes]))
        shown = key if mine else key.replace("PyTorch", f'PyTorch {r["torch"]}')
        body.append([r["round"], shown, f'{r[K.epoch_s]:.2f}', f'{1000 * step:.1f}', f'{sps:.1f}',
                     f'{r[K.peak_rss_max_bytes] / 2**20:.0f}', f'{r[K.train_loss]:.4f}',
                     f'{r[K.test_acc]:.4f}'])
    print(table(["round", "impl", "epoch s", "step ms", "samples/s", "peak RSS MiB (max over ranks)",
                 "train loss", "test acc"], body))
    mean = lambda xs, i: statistics.mean(x[i] for x in xs)
    pairs = [("dtrain", "PyTorch"), ("dtrain (base)", "PyTorch"), ("dtrain", "dtrain (base)"),
             # dtrain's default (channels-last for this model) against PyTorch's default
             ("dtrain channels-last", "PyTorch contiguous"),
             ("dtrain contiguous", "PyTorch contiguous"),
             ("dtrain channels-last", "PyTorch channels-last")]
    for ours, theirs in pairs:
        if ours in runs and theirs in runs:
            a, b = runs[ours], runs[theirs]
            print(f"\nmean step time ratio {ours}/{theirs}: {mean(a, 0) / mean(b, 0):.3f}; "
                  f"samples/s ratio: {mean(a, 1) / mean(b, 1):.3f}; "
                  f"peak RSS ratio: {mean(a, 2) / mean(b, 2):.3f}")


def ddp():
    ddp_vs_pytorch("ddp-vs-pytorch.jsonl")


def resnet():
    ddp_vs_pytorch("ddp-resnet18-vs-pytorch.jsonl")


def hooks():
    body = []
    for r in rows("ddp-hooks.jsonl"):
        if r.get(K.impl) == "dtrain-ddp":
            body.append(["dtrain", f'--compress-grad {r["compress_grad"]}', f'{100 * r[K.test_acc]:.2f}',
                         f'{r[K.train_loss]:.4f}', f'{r[K.grad_wire_bytes] / r[K.grad_bytes]:.4f}',
                         f'{r[K.samples_per_s]:.0f}'])
        else:
            body.append([f'PyTorch {r["torch"]}', f'comm hook {r["comm_hook"]}', f'{100 * r[K.test_acc]:.2f}',
                         f'{r[K.train_loss]:.4f}', f'{r["wire_ratio"]:.4f}', f'{r[K.samples_per_s]:.0f}'])
    print(table(["impl", "gradients", "test acc %", "train loss", "bytes / fp32 all-reduce", "samples/s"], body))


def vspytorch():
    """Means over rounds per (impl, schedule, M)."""
    by = {}
    for r in rows("pipeline-vs-pytorch.jsonl"):
        if r.get(K.summary):
            continue
        if "run" in r:  # dtrain-SCHEDULE-MM-rR
            _, sched, m, _ = r["run"].split("-")
            key = ("dtrain", sched, int(m[1:]))
            rss = [s[K.peak_rss_bytes] for s in r[K.stages]]
            ideal = r[K.bubble_ideal]
        else:
            key = (f'PyTorch {r["torch"]}', r["schedule"], r["chunks"])
            rss = r["peak_rss_bytes_per_rank"]
            ideal = r[K.bubble_ideal]
        by.setdefault(key, []).append((r[K.samples_per_s], r[K.bubble_measured], ideal, rss))
    body = []
    for (impl, sched, m), rs in sorted(by.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        ideal = rs[0][2]
        body.append([m, sched, impl, f'{statistics.mean(x[0] for x in rs):.0f}',
                     f'{statistics.mean(x[1] for x in rs):.3f}', "-" if ideal is None else f"{ideal:.3f}",
                     " / ".join(f"{statistics.mean(x[3][i] for x in rs) / 2**20:.0f}" for i in range(len(rs[0][3])))])
    print(table(["M", "schedule", "impl", "samples/s", "bubble measured", "bubble ideal",
                 "peak RSS MiB (rank 0 / 1)"], body))


def compress():
    body = []
    last = {}
    for r in rows("ddp-compress.jsonl"):
        if not r.get(K.summary):
            last[r["run"]] = r
    for r in last.values():
        body.append([r["run"], f'{100 * r[K.test_acc]:.2f}', f'{r[K.grad_wire_bytes] / r[K.grad_bytes]:.4f}',
                     f'{r[K.samples_per_s]:.0f}', f'{r[K.comm_total_s]:.2f}', f'{r[K.comm_hidden_fraction]:.2f}'])
    print(table(["grad codec", "test acc %", "sent / fp32 grad bytes", "samples/s", "comm total s", "hidden"], body))


def syncbn():
    by = {}
    for r in rows("syncbn.jsonl"):
        by.setdefault((r[K.batch_size], r[K.hidden]), {})[r[K.impl]] = r
    body = []
    for (b, h), d in sorted(by.items()):
        ours = d.get("dtrain-syncbn", {})
        torch_alg = d.get("pytorch-syncbn-algorithm", {})
        body.append([b, h, f'{1000 * ours.get(K.median_s, 0):.3f}', f'{1000 * torch_alg.get(K.median_s, 0):.3f}',
                     f'{ours.get(K.median_s, 0) / torch_alg.get(K.median_s, 1):.2f}',
                     f'{1000 * d.get("torch-bn-local", {}).get(K.median_s, 0):.3f}',
                     f'{1000 * d.get("pytorch-bn-local", {}).get(K.median_s, 0):.3f}',
                     ours.get(K.peak_alloc_bytes, ""), d.get("torch-bn-local", {}).get(K.peak_alloc_bytes, "")])
    print(table(["batch", "hidden", "dtrain SyncBN ms", "PyTorch SyncBN algorithm ms", "ratio",
                 "LibTorch BN (local) ms", "PyTorch BN (local) ms", "dtrain SyncBN peak alloc B",
                 "LibTorch BN peak alloc B"], body))


def scale():
    body = []
    for r in rows("scale-resnet18.jsonl"):
        f = lambda k, d=3: (f"{r[k]:.{d}f}" if k in r else "-")
        body.append([r[K.ranks], r[K.batch_per_rank], r[K.global_batch], f("epoch_s", 1), f("speedup_epoch"),
                     f("speedup_weak"), f("speedup_strong"), f("compute_s", 1), f("comm_exposed_s", 1),
                     f("comm_total_s", 1), f("comm_inferred_s", 1), f("bandwidth_gbps"), r[K.status]])
    print(table(["N", "batch/rank", "global", "epoch s", "T1/TN", "N*T1/TN (weak)", "strong", "compute s",
                 "comm waited s", "comm total s", "TN-T1/N s", "bw util GB/s", "status"], body))


def vsddp():
    body = []
    for r in rows("pipeline-vs-ddp.jsonl"):
        if r.get(K.summary):
            continue
        body.append([r["run"], f'{r[K.samples_per_s]:.0f}', f'{r[K.epoch_s]:.1f}', f'{100 * r[K.test_acc]:.2f}'])
    print(table(["mode", "samples/s", "epoch s", "test acc %"], body))


def pyhooks():
    """PyTorch DDP with PyTorch's hooks and dtrain's (bench/python.sh hooks): per model, one
    row per hook, loopback and 100 Mbit/s side by side."""
    runs = rows("python-hooks.jsonl")
    for model in ("cnn", "resnet18"):
        by = {(r["net"], r["comm_hook"]): r for r in runs if r[K.model] == model}
        hooks = list(dict.fromkeys(h for _, h in by))
        body = []
        for hook in hooks:
            loop, lab = by.get(("loopback", hook)), by.get(("100mbit", hook))
            base = by.get(("100mbit", "none"))
            tx = lab.get("tx_bytes_per_step_max") if lab else None
            body.append([hook, f'{loop["wire_ratio"]:.3f}' if loop else "-",
                         f"{tx / 1e6:.2f}" if tx else "-",
                         f'{1e3 * loop[K.step_s]:.0f}' if loop else "-",
                         f'{1e3 * lab[K.step_s]:.0f}' if lab else "-",
                         f'{base[K.step_s] / lab[K.step_s]:.2f}x' if lab and base else "-",
                         f'{100 * loop[K.test_acc]:.2f}' if loop and model == "cnn" else "-",
                         f'{loop[K.train_loss]:.4f}' if loop else "-"])
        if body:
            print(f"\n{model}:\n")
            print(table(["hook", "bytes / fp32", "MB sent / step (lab)", "step ms loopback",
                         "step ms 100 Mbit/s", "speed-up at 100 Mbit/s", "test acc %", "train loss"], body))


def pycodec():
    body = [[r.get("malloc", "default"), r[K.codec], f'{r["cpp_encode_gbps"]:.3f}', f'{r["py_encode_gbps"]:.3f}', f'{r["encode_py_over_cpp"]:.2f}',
             f'{r["cpp_decode_gbps"]:.3f}', f'{r["py_decode_gbps"]:.3f}', f'{r["decode_py_over_cpp"]:.2f}']
            for r in rows("python-codec.jsonl")]
    print(table(["Python's malloc", "codec", "C++ enc GB/s", "Python enc GB/s", "ratio", "C++ dec GB/s", "Python dec GB/s", "ratio"], body))


def two_way():
    """bench/two_way.sh: a build against its base, collectives and DDP, lab and loopback."""
    for where in ("lab", "loopback"):
        times = {}
        for r in rows(f"receive-first-{where}-collective.jsonl"):
            times.setdefault((r[K.bytes], r[K.algo]), {}).setdefault(r["build"], []).append(r[K.time_us])
        body = []
        for (size, algo), by in sorted(times.items()):
            base, new = sorted(by["BASE"]), sorted(by["NEW"])
            med_b, med_n = statistics.median(base), statistics.median(new)
            body.append([size, algo, f"{base[0]:.0f} / {med_b:.0f}", f"{new[0]:.0f} / {med_n:.0f}",
                         f"{med_n / med_b:.2f}"])
        print(f"{where}: all_reduce, 2 ranks, time us (min / median over {len(base)} rounds)\n")
        print(table(["bytes", "algo", "base", "new", "new / base (medians)"], body))
        runs = {}
        for r in rows(f"receive-first-{where}-ddp.jsonl"):
            runs.setdefault(r[K.codec], {}).setdefault(r["build"], []).append(r)
        body = []
        for codec, by in runs.items():
            sps = {b: [x[K.samples_per_s] for x in v] for b, v in by.items()}
            same = {(x[K.train_loss], x[K.test_acc]) for v in by.values() for x in v}
            body.append([codec, ", ".join(f"{x:.0f}" for x in sps["BASE"]),
                         ", ".join(f"{x:.0f}" for x in sps["NEW"]),
                         f"{statistics.mean(sps['NEW']) / statistics.mean(sps['BASE']):.2f}",
                         "yes" if len(same) == 1 else "no"])
        print(f"\n{where}: DDP cnn, samples/s per round\n")
        print(table(["gradients", "base", "new", "new / base (means)", "same loss and accuracy"], body))
        print()


globals()[sys.argv[1]](*sys.argv[2:])
