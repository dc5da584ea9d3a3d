#!/usr/bin/env python3
"""Elastic DiLoCo against torchft's DiLoCo under torchft's failure schedule (docs/results.md,
"Elastic DiLoCo"), side by side in one invocation. As root (the lab); stdlib only here.

   python3 bench/torchft_failures.py [--epochs 10] [--kill-every 60] [--restart-after 10]

3 replicas on a lab of 3 hosts at 20 Mbit/s with 5 ms one way, the cnn on Fashion-MNIST,
batch 64 a replica, AdamW 1e-3 inner, H = 50, the same samples (--epochs x 60,000 committed
samples). Every --kill-every seconds a SIGKILL takes out one replica (slots in turn), started
again --restart-after seconds later:
  dtrain: `dtrain train -n 3 --parallel diloco --elastic --restart-delay R` (its launcher
    starts the replica again; it joins the running job mid-round, or with
    --no-mid-round-entry at the next boundary), exact outer exchange and rot:tile:2;
  torchft 0.2.0: a lighthouse on host 0 (min_replicas 2, join timeout 10 s) and
    bench/torchft_replica.py on each host (min_replica_size 2; a restarted replica heals
    from a peer at its first outer step), the driver starting a killed replica again.

Measured: committed samples/s (committed samples over the training's span), final test
accuracy (10,000 images), and per kill the time from the SIGKILL to that replica training
in the run again (dtrain: its "entered" event; torchft: the first outer step its new process
took part in completed). Writes docs/data/torchft-failures.jsonl (REPLACES it), prints a
table."""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from elastic_chaos import children  # {slot: pid} of a launcher's replicas

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "torchft-failures.jsonl"
HOSTS = ["10.200.0.1", "10.200.0.2", "10.200.0.3"]  # a lab's hosts (dtrain netlab up)
LIGHTHOUSE_PORT = 29510
EPOCH = 60000


def recovery(kills, backs):
    """Per kill, the seconds to the first `backs` time after it from the same slot."""
    out = []
    for slot, at in kills:
        later = [t for s, t in backs if s == slot and t > at]
        out.append(round(min(later) - at, 2) if later else None)
    return out


def schedule(args, alive, kill, restart, start):
    """Runs the failure schedule until `alive()` is false: a kill of slot i % 3 every
    --kill-every seconds; `restart(slot)` --restart-after seconds later (None: the launcher
    does it). Returns [(slot, kill time)]."""
    kills, pending, i = [], [], 0
    next_kill = start + args.kill_every
    while alive():
        now = time.time()
        for slot, due in list(pending):
            if now >= due and restart:
                restart(slot)
                pending.remove((slot, due))
        if now >= next_kill:
            slot = i % 3
            if kill(slot):
                kills.append((slot, time.time()))
                pending.append((slot, time.time() + args.restart_after))
            i += 1
            next_kill += args.kill_every
        time.sleep(0.2)
    return kills


def run_dtrain(args, lab, workdir, codec):
    metrics = workdir / f"dtrain-{codec}.metrics"
    metrics.unlink(missing_ok=True)  # elastic replicas append to it
    cmd = [args.dtrain, "train", "-n", "3", "--netlab", lab, "--parallel", "diloco", "--elastic",
           "--max-restarts", "1000", "--restart-delay", str(args.restart_after),
           "--heartbeat-timeout", "2", "--model", "cnn", "--batch-size", "64", "--optimizer",
           "adamw", "--lr", "1e-3", "--lr-schedule", "constant", "--sync-every", "50",
           "--compress-outer", codec, "--epochs", str(args.epochs), "--seed", "0",
           "--metrics", str(metrics), "--no-progress", "--timeout", "120"]
    if not args.mid_round_entry:
        cmd.append("--no-mid-round-entry")
    err = open(workdir / f"dtrain-{codec}.err", "w")
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)

    def kill(slot):
        pid = children(proc.pid).get(slot)
        if pid is None:
            return False
        os.kill(pid, signal.SIGKILL)
        return True

    deadline = start + args.hang
    kills = schedule(args, lambda: proc.poll() is None and time.time() < deadline, kill, None,
                     start)
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    rows = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()] \
        if metrics.exists() else []
    epochs = [r for r in rows if "epoch" in r and "event" not in r and "epoch_s" in r]
    entered = [r for r in rows if r.get("event") == "entered" and r.get("replica", 0) >= 1000]
    # A joiner's id does not name its slot: it is back once any joiner that started after
    # the kill entered (one replica is down at a time).
    backs = [(s, r["started_at"] + r["enter_s"]) for r in entered for s in range(3)
             if "started_at" in r]
    # Where a joiner's time to train went (docs/elastic.md, the entered event), means.
    parts = {k: round(statistics.mean(r[k] for r in entered), 2)
             for k in ("process_s", "view_s", "connect_s", "transfer_s")
             if entered and all(k in r for r in entered)}
    committed = sum(r.get("committed_samples", 0) for r in epochs)
    span = sum(r["epoch_s"] for r in epochs)
    return {"impl": f"dtrain --elastic, {codec}", "code": proc.returncode,
            "epochs": len(epochs), "committed_samples": committed, "span_s": round(span, 1),
            "committed_samples_per_s": round(committed / span, 1) if span else None,
            "test_acc": epochs[-1]["test_acc"] if epochs else None,
            "kills": len(kills), "recovery_s": recovery(kills, backs), "joiner_parts_s": parts,
            "duration_s": round(time.time() - start, 1)}


def run_torchft(args, lab, workdir):
    ns = lambda h: f"dtrain-{lab}-h{h}"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "bench"), GLOO_SOCKET_IFNAME="eth0")
    lighthouse = subprocess.Popen(
        ["ip", "netns", "exec", ns(0), args.python, "-c",
         "import time; from torchft._torchft import LighthouseServer; "
         f"s = LighthouseServer(bind='0.0.0.0:{LIGHTHOUSE_PORT}', min_replicas=2, "
         f"join_timeout_ms={args.join_timeout_ms}); "
         "time.sleep(1e9)"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = [workdir / f"torchft-{s}.jsonl" for s in range(3)]
    for log in logs:  # a kept folder's from an earlier invocation would read as done
        log.unlink(missing_ok=True)
    err = open(workdir / "torchft.err", "w")
    procs = {}

    def launch(slot):
        procs[slot] = subprocess.Popen(
            ["ip", "netns", "exec", ns(slot), args.python, str(ROOT / "bench" / "torchft_replica.py"),
             "--slot", str(slot), "--host", HOSTS[slot],
             "--lighthouse", f"http://{HOSTS[0]}:{LIGHTHOUSE_PORT}",
             "--samples", str(args.epochs * EPOCH), "--log", str(logs[slot])],
            env=env, stdout=subprocess.DEVNULL, stderr=err)

    def done():
        return any('"done"' in l.read_text() for l in logs if l.exists())

    def kill(slot):
        if done() or procs[slot].poll() is not None:
            return False
        procs[slot].send_signal(signal.SIGKILL)  # ip netns exec execs: the replica itself
        procs[slot].wait()
        return True

    start = time.time()
    time.sleep(2)  # the lighthouse
    for slot in range(3):
        launch(slot)
    deadline = start + args.hang
    kills = schedule(args, lambda: not done() and time.time() < deadline and
                     any(p.poll() is None for p in procs.values()), kill,
                     lambda slot: None if done() else launch(slot), start)
    until = time.time() + 15  # the others finish the same outer step; a joiner never will
    while time.time() < until and any(p.poll() is None for p in procs.values()):
        time.sleep(0.5)
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    lighthouse.kill()
    lighthouse.wait()
    rows = [json.loads(l) for log in logs if log.exists()
            for l in log.read_text().splitlines() if l.strip()]
    finished = [r for r in rows if r["event"] == "done"]
    steps = [r for r in rows if r["event"] == "step"]
    first = min((r["t"] for r in steps), default=None)
    train_start = min((r["t"] for r in rows if r["event"] == "train"), default=first)
    end = max((r["t"] for r in finished), default=max((r["t"] for r in steps), default=None))
    committed = max((r.get("total", 0) for r in steps), default=0)
    span = end - train_start if end and train_start else 0
    backs = [(r["slot"], r["t"]) for r in rows if r["event"] == "back"]
    return {"impl": "torchft 0.2.0", "code": 0 if finished else 1,
            "committed_samples": committed, "span_s": round(span, 1),
            "committed_samples_per_s": round(committed / span, 1) if span else None,
            "test_acc": finished[0]["test_acc"] if finished else None,
            "outer_steps": len({r["step"] for r in steps if r["committed"]}),
            "failed_outer_steps": sum(1 for r in steps if not r["committed"]),
            "kills": len(kills), "recovery_s": recovery(kills, backs),
            "duration_s": round(time.time() - start, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default=str(ROOT / "build" / "dtrain"))
    p.add_argument("--python", default=str(ROOT / ".venv" / "bin" / "python"))
    p.add_argument("--epochs", type=int, default=10, help="x 60,000 committed samples")
    p.add_argument("--kill-every", type=float, default=60.0)
    p.add_argument("--restart-after", type=float, default=10.0)
    p.add_argument("--join-timeout-ms", type=int, default=10000,
                   help="the lighthouse's wait for heartbeating stragglers (torchft's Slurm "
                   "example's; its Python binding's default forms quorums without them)")
    p.add_argument("--codecs", default="none,rot:tile:2", help="dtrain's outer codecs")
    p.add_argument("--skip", default="", help="comma-separated: dtrain, torchft")
    p.add_argument("--mid-round-entry", action=argparse.BooleanOptionalAction, default=True,
                   help="dtrain's joiners enter mid-round (docs/elastic.md; the default)")
    p.add_argument("--hang", type=float, default=3600, help="seconds a run may take")
    p.add_argument("--keep", help="a folder to keep every run's logs in")
    args = p.parse_args()
    if subprocess.run([args.python, "-c", "import torchft"], capture_output=True).returncode:
        sys.exit("torchft_failures.py: torchft is not installed in the venv "
                 f"({args.python} -m pip install torchft==0.2.0)")
    lab = f"tf{os.getpid() % 10000}"
    subprocess.run([args.dtrain, "netlab", "up", lab, "--hosts", "3", "--rate", "20mbit",
                    "--delay", "5ms"], check=True, stdout=subprocess.DEVNULL)
    results = []
    skip = set(args.skip.split(","))
    try:
        with tempfile.TemporaryDirectory() as d:
            workdir = Path(args.keep or d)
            workdir.mkdir(parents=True, exist_ok=True)
            if "torchft" not in skip:
                results.append(run_torchft(args, lab, workdir))
                print(json.dumps(results[-1]), file=sys.stderr)
            if "dtrain" not in skip:
                for codec in args.codecs.split(","):
                    results.append(run_dtrain(args, lab, workdir, codec))
                    print(json.dumps(results[-1]), file=sys.stderr)
    finally:
        subprocess.run([args.dtrain, "netlab", "down", lab], stdout=subprocess.DEVNULL)
    command = " ".join(["python3", "bench/torchft_failures.py"] + sys.argv[1:])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("w") as f:
        for r in results:
            f.write(json.dumps({**r, "command": command}) + "\n")
    print("| run | committed samples/s | test acc | kills | kill to training again (s), mean |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for r in results:
        rec = [x for x in r["recovery_s"] if x is not None]
        print(f"| {r['impl']} | {r['committed_samples_per_s']} | {r['test_acc']} | {r['kills']} | "
              f"{statistics.mean(rec):.1f} ({len(rec)} of {len(r['recovery_s'])}) |"
              if rec else f"| {r['impl']} | {r['committed_samples_per_s']} | {r['test_acc']} | "
              f"{r['kills']} | none back |")
    return 0 if all(r["code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
