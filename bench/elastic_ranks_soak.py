#!/usr/bin/env python3
"""A soak of elastic DiLoCo with replicas of several ranks (docs/elastic.md), on loopback,
stdlib only: 3 replicas of 2 ranks (-n 6 --ranks-per-replica 2) of the cnn, a SIGKILL of a
random rank (a leader or a follower) every --interval seconds while the run goes on, the
launcher starting the killed replica's ranks again. Checks: the run ends with 0 before
--deadline, every position of every epoch trained exactly once (the sample log), and it
reports the kills, the replicas lost and the final accuracy. Prints one JSON line; --out
appends it to a file."""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def children_ranks(launcher):
    """{pid: RANK} of the launcher's children that are ranks (not the coordinator)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent = int(stat[stat.rindex(")") + 2:].split()[1])
            if parent != launcher:
                continue
            env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        for var in env:
            if var.startswith(b"RANK="):
                out[int(entry)] = int(var[5:])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtrain", default=str(ROOT / "build" / "dtrain"))
    ap.add_argument("--events", type=int, default=30)
    ap.add_argument("--interval", type=float, default=3.0, help="seconds between kills")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--samples", type=int, default=7680, help="training samples an epoch")
    ap.add_argument("--deadline", type=float, default=900, help="seconds the run may take")
    ap.add_argument("--seed", type=int, default=0, help="the kills' schedule")
    ap.add_argument("--out", help="append the result line to this file")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="dtrain-ranks-soak-"))
    metrics, steps, samples = tmp / "metrics", tmp / "steps", tmp / "samples"
    command = [a.dtrain, "train", "-n", "6", "--ranks-per-replica", "2", "--parallel", "diloco",
               "--elastic", "--model", "cnn", "--optimizer", "adamw", "--lr", "1e-3",
               "--epochs", str(a.epochs), "--limit-train", str(a.samples), "--limit-test", "2000",
               "--sync-every", "5", "--max-restarts", str(a.events + 5), "--restart-delay", "1",
               "--heartbeat-timeout", "1", "--timeout", "60", "--no-progress", "--seed", "0",
               "--metrics", str(metrics), "--step-log", str(steps), "--sample-log", str(samples)]
    rng = random.Random(a.seed)
    start = time.time()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    kills = Counter()
    next_at = start + a.interval
    while proc.poll() is None and time.time() - start < a.deadline:
        time.sleep(0.05)
        if kills.total() >= a.events or time.time() < next_at:
            continue
        next_at += a.interval
        ranks = children_ranks(proc.pid)
        if not ranks:
            continue
        pid = rng.choice(sorted(ranks))
        try:
            os.kill(pid, signal.SIGKILL)
            kills["leader" if ranks[pid] % 2 == 0 else "follower"] += 1
        except ProcessLookupError:
            pass
    hung = proc.poll() is None
    if hung:
        proc.send_signal(signal.SIGTERM)
    err = proc.communicate(timeout=60)[1]
    rows = [json.loads(l) for l in metrics.read_text().splitlines()] if metrics.exists() else []
    epochs = [r for r in rows if "epoch" in r and "event" not in r]
    counted = {}
    for line in samples.read_text().splitlines() if samples.exists() else []:
        r = json.loads(line)
        counted.setdefault(r["epoch"], Counter()).update(r["positions"])
    once = (len(counted) == a.epochs and
            all(sorted(c) == list(range(a.samples)) and set(c.values()) == {1}
                for c in counted.values()))
    lost = sum(len(json.loads(l)["lost"]) for l in steps.read_text().splitlines()) \
        if steps.exists() else 0
    result = {"bench": "elastic_ranks_soak", "code": proc.returncode, "hung": hung,
              "seconds": round(time.time() - start, 1), "kills": dict(kills),
              "replicas_lost": lost, "epochs": len(epochs), "every_sample_once": once,
              "test_acc": epochs[-1]["test_acc"] if epochs else None,
              "command": " ".join(["python3", "bench/elastic_ranks_soak.py"] + sys.argv[1:])}
    print(json.dumps(result))
    if a.out:
        with open(a.out, "a") as f:
            f.write(json.dumps(result) + "\n")
    if hung or proc.returncode != 0 or not once:
        sys.stderr.write(err[-4000:])
        sys.exit(1)


if __name__ == "__main__":
    main()
