"""--trace end to end: runs dtrain in each mode with --trace and checks the Chrome trace file
by parsing it: every event has ph/ts/pid/tid, spans on one thread nest, one process per rank,
and each rank's forward/backward count equals what its schedule runs.

usage: check_trace.py DTRAIN_BINARY   (exit 0: all checks passed)
"""
import json
import math
import os
import subprocess
import sys
import tempfile

BINARY = sys.argv[1]
SAMPLES, BATCH, CHUNKS = 512, 64, 4
STEPS = math.ceil(SAMPLES / BATCH)
COMMON = ["--dataset", "synthetic", "--input-shape", "1,28,28", "--synthetic-size", str(SAMPLES),
          "--epochs", "1", "--batch-size", str(BATCH), "--limit-test", "64", "--quiet"]


def run(args, path):
    subprocess.run([BINARY] + args + ["--trace", path], check=True, timeout=240,
                   stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def check_structure(trace, ranks, name):
    events = trace["traceEvents"]
    assert events, f"{name}: no events"
    for e in events:
        for k in ("ph", "ts", "pid", "tid"):
            assert k in e, f"{name}: event without {k}: {e}"
        if e["ph"] == "X":
            assert e["dur"] >= 0 and isinstance(e["name"], str), f"{name}: bad span {e}"
    pids = {e["pid"] for e in events}
    assert pids == set(range(ranks)), f"{name}: processes {pids}, want ranks 0..{ranks - 1}"
    named = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert named == {(r, f"rank {r}") for r in range(ranks)}, f"{name}: process names {named}"
    # Spans on one thread nest: each starts after the enclosing one starts and ends before it
    # ends (1 us of slack for the microsecond rounding of ts and dur).
    tracks = {}
    for e in events:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    for key, spans in tracks.items():
        spans.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in spans:
            while open_ends and open_ends[-1] <= e["ts"] + 1e-3:
                open_ends.pop()
            end = e["ts"] + e["dur"]
            assert not open_ends or end <= open_ends[-1] + 1.0, (
                f"{name}: span {e['name']} at {e['ts']} on {key} overlaps its parent")
            open_ends.append(end)


def counts(trace, pid, span):
    return sum(1 for e in trace["traceEvents"]
               if e["ph"] == "X" and e["pid"] == pid and e["name"] == span)


def expect(trace, pid, span, want, name):
    got = counts(trace, pid, span)
    assert got == want, f"{name}: rank {pid} has {got} '{span}' spans, its schedule runs {want}"


def main():
    with tempfile.TemporaryDirectory() as tmp:
        def path(n):
            return os.path.join(tmp, n + ".json")

        t = run(["train", "--model", "mlp"] + COMMON, path("single"))
        check_structure(t, 1, "single")
        for span in ("forward", "backward", "optimizer step"):
            expect(t, 0, span, STEPS, "single")

        t = run(["train", "--model", "mlp", "--parallel", "ddp", "-n", "2"] + COMMON, path("ddp"))
        check_structure(t, 2, "ddp")
        per_rank = math.ceil(SAMPLES / 2 / BATCH)
        for r in range(2):
            for span in ("forward", "backward", "wait for gradients", "optimizer step"):
                expect(t, r, span, per_rank, "ddp")
            assert counts(t, r, "bucket all-reduce") >= per_rank, "ddp: no all-reduce spans"
        threads = {e["args"]["name"] for e in t["traceEvents"] if e["name"] == "thread_name"}
        assert "ddp communication" in threads, f"ddp: threads {threads}"

        for schedule in ("gpipe", "1f1b"):
            name = "pipeline-" + schedule
            t = run(["train", "--model", "mlp", "--parallel", "pipeline", "-n", "2", "--schedule",
                     schedule, "--chunks", str(CHUNKS)] + COMMON, path(name))
            check_structure(t, 2, name)
            for r in range(2):
                for span in ("forward", "backward"):
                    expect(t, r, span, STEPS * CHUNKS, name)
                assert counts(t, r, "encode") >= STEPS * CHUNKS, f"{name}: encode spans"

        # U-shape: rank 0 runs the first and the last stage of every micro-batch.
        t = run(["train", "--model", "cnn", "--parallel", "pipeline", "-n", "2", "--placement",
                 "ushape", "--chunks", str(CHUNKS), "--compress", "sortquant:8"] + COMMON,
                path("ushape"))
        check_structure(t, 2, "ushape")
        expect(t, 0, "forward", 2 * STEPS * CHUNKS, "ushape")
        expect(t, 1, "forward", STEPS * CHUNKS, "ushape")
        expect(t, 0, "backward", 2 * STEPS * CHUNKS, "ushape")

        iters = 3
        t = run(["bench", "collective", "-n", "2", "--sizes", "4K,64K", "--algo", "ring,native",
                 "--iters", str(iters), "--format", "jsonl"], path("collective"))
        check_structure(t, 2, "collective")
        for r in range(2):
            expect(t, r, "all_reduce ring", 2 * iters, "collective")
            expect(t, r, "all_reduce native", 2 * iters, "collective")
        offsets = t["otherData"]["clock_sync"]
        assert [o["rank"] for o in offsets] == [0, 1], offsets
    print("trace checks passed")


if __name__ == "__main__":
    main()
