#!/usr/bin/env python3
"""Elastic DiLoCo with its membership in an etcd cluster, in the lab (docs/results.md,
"Elastic DiLoCo"), stdlib only. As root.

   python3 bench/elastic_etcd.py [--epochs 2] [--events 6,14,22] [--keep DIR]

A lab of 3 hosts (20 Mbit/s, 5 ms one way); on each host an etcd member and a replica
(`dtrain train --parallel diloco --elastic --join etcd://...`: cnn, AdamW 1e-3, H = 20,
rot:tile:2), and a coordinator on hosts 0 and 1 (`dtrain coordinator --store etcd://...`:
one leads, one stands by). Three events, each once the step log shows the given round:
the etcd member that leads is SIGKILLed; the coordinator that leads is SIGKILLed; the
replica on host 2 is SIGKILLed and started again 1 s later (it joins through etcd).

Measured per event: the time the two rounds from the event took beyond what their samples
take at the run's median rate, in seconds and in median rounds (the target: losing one of three etcd members costs at most one outer round), and
whether any member was declared lost that was not killed. Writes one JSON line to
docs/data/elastic-etcd.jsonl (REPLACES it) and prints a table.
"""
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

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "data" / "elastic-etcd.jsonl"
HOSTS = ["10.200.0.1", "10.200.0.2", "10.200.0.3"]


def rows(path):
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line being written
    return out


def last_round(steps):
    return max((r["round"] for r in rows(steps)), default=-1)


def etcd_leader(lab):
    """The host whose etcd member leads (None where none says so)."""
    for h, addr in enumerate(HOSTS):
        try:
            out = subprocess.run(["ip", "netns", "exec", f"dtrain-{lab}-h{h}", "etcdctl",
                                  "--endpoints", f"http://{addr}:2379", "endpoint", "status",
                                  "-w", "json"], capture_output=True, text=True, timeout=5)
            status = json.loads(out.stdout)[0]["Status"]
            if status["leader"] == status["header"]["member_id"]:
                return h
        except (subprocess.SubprocessError, ValueError, KeyError, IndexError):
            continue
    return None


def start_etcd(lab, workdir):
    cluster = ",".join(f"m{h}=http://{a}:2380" for h, a in enumerate(HOSTS))
    procs = []
    for h, a in enumerate(HOSTS):
        data = f"/dev/shm/dtrain-etcd-{lab}-h{h}"
        subprocess.run(["rm", "-rf", data])
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", f"dtrain-{lab}-h{h}", "etcd", "--name", f"m{h}",
             "--data-dir", data, "--listen-peer-urls", f"http://{a}:2380",
             "--initial-advertise-peer-urls", f"http://{a}:2380",
             "--listen-client-urls", f"http://{a}:2379", "--advertise-client-urls",
             f"http://{a}:2379", "--initial-cluster", cluster, "--initial-cluster-state", "new",
             "--initial-cluster-token", lab, "--logger", "zap", "--log-level", "error",
             "--auto-compaction-mode", "revision", "--auto-compaction-retention", "10000"],
            stdout=subprocess.DEVNULL, stderr=open(workdir / f"etcd-{h}.err", "w")))
    for _ in range(100):
        if etcd_leader(lab) is not None:
            return procs
        time.sleep(0.2)
    sys.exit("elastic_etcd.py: the etcd members elected no leader")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default=str(ROOT / "build" / "dtrain"))
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--events", default="6,14,22",
                   help="rounds after which to kill: the etcd leader, the leading "
                   "coordinator, the replica on host 2")
    p.add_argument("--keep", help="a folder to keep the logs in")
    args = p.parse_args()
    at = [int(x) for x in args.events.split(",")]
    lab = f"et{os.getpid() % 10000}"
    subprocess.run([args.dtrain, "netlab", "up", lab, "--hosts", "3", "--rate", "20mbit",
                    "--delay", "5ms"], check=True, stdout=subprocess.DEVNULL)
    ns = lambda h: ["ip", "netns", "exec", f"dtrain-{lab}-h{h}"]
    store = "etcd://" + ",".join(f"{a}:2379" for a in HOSTS) + "/bench"
    procs = []
    try:
        with tempfile.TemporaryDirectory() as d:
            workdir = Path(args.keep or d)
            workdir.mkdir(parents=True, exist_ok=True)
            procs += start_etcd(lab, workdir)
            etcd = list(procs)
            coordinators = {}
            for h in (0, 1):
                coordinators[h] = subprocess.Popen(
                    ns(h) + [args.dtrain, "coordinator", "--store", store, "--expect", "3",
                             "--heartbeat-timeout", "2", "--timeout", "120"],
                    stdout=subprocess.DEVNULL, stderr=open(workdir / f"coordinator-{h}.err", "w"))
                procs.append(coordinators[h])
                time.sleep(1)
            steps, metrics = workdir / "steps.jsonl", workdir / "metrics.jsonl"

            def replica(h):
                r = subprocess.Popen(
                    ns(h) + [args.dtrain, "train", "--parallel", "diloco", "--elastic", "--join",
                             store, "--gloo-host", HOSTS[h], "--model", "cnn", "--optimizer",
                             "adamw", "--lr", "1e-3", "--lr-schedule", "constant", "--sync-every",
                             "20", "--compress-outer", "rot:tile:2", "--epochs", str(args.epochs),
                             "--heartbeat-timeout", "2", "--seed", "0", "--metrics",
                             str(metrics), "--step-log", str(steps), "--no-progress",
                             "--timeout", "120"],
                    stdout=subprocess.DEVNULL, stderr=open(workdir / f"replica-{h}.err", "a"))
                procs.append(r)
                return r

            replicas = {h: replica(h) for h in range(3)}
            start = time.time()
            events = []
            for i, due in enumerate(at):
                while last_round(steps) < due and replicas[0].poll() is None:
                    time.sleep(0.1)
                if replicas[0].poll() is not None:
                    break
                round_at = last_round(steps)
                if i == 0:
                    h = etcd_leader(lab)
                    etcd[h].send_signal(signal.SIGKILL)
                    what = f"etcd member on host {h} (the leader)"
                elif i == 1:
                    text = {h: (workdir / f"coordinator-{h}.err").read_text() for h in (0, 1)}
                    h = max(text, key=lambda k: text[k].rfind("leading the run"))
                    coordinators[h].send_signal(signal.SIGKILL)
                    what = f"coordinator on host {h} (the leader)"
                else:
                    replicas[2].send_signal(signal.SIGKILL)
                    replicas[2].wait()
                    time.sleep(1)
                    replicas[2] = replica(2)
                    what = "replica on host 2, started again 1 s later"
                events.append({"killed": what, "after_round": round_at, "t": time.time()})
                print(f"elastic_etcd: killed the {what} after round {round_at}", file=sys.stderr)
            codes = [r.wait(timeout=1800) for r in (replicas[0], replicas[1], replicas[2])]
            duration = time.time() - start
            step_rows = rows(steps)
            epochs = [r for r in rows(metrics) if "epoch_s" in r and "event" not in r]
            median = statistics.median(r["round_s"] for r in step_rows)
            # A round's expected time from its samples (an epoch's last round is short).
            rate = statistics.median(r["samples"] / r["round_s"] for r in step_rows)
            by_round = {}
            for r in step_rows:
                by_round.setdefault(r["round"], r)
            for e in events:
                two = [by_round[k] for k in (e["after_round"] + 1, e["after_round"] + 2)
                       if k in by_round]
                e["rounds_s"] = [round(r["round_s"], 2) for r in two]
                extra = sum(r["round_s"] - r["samples"] / rate for r in two)
                e["extra_s"] = round(extra, 2)
                e["extra_rounds"] = round(extra / median, 2)
                del e["t"]
            lost = sorted({x for r in step_rows for x in r["lost"]})
    finally:
        for pr in procs:
            if pr.poll() is None:
                pr.kill()
                pr.wait()
        subprocess.run([args.dtrain, "netlab", "down", lab], stdout=subprocess.DEVNULL)
        for h in range(3):
            subprocess.run(["rm", "-rf", f"/dev/shm/dtrain-etcd-{lab}-h{h}"])
    result = {"codes": codes, "rounds": len(by_round), "median_round_s": round(median, 2),
              "lost": lost, "events": events, "epochs": len(epochs),
              "test_acc": epochs[-1]["test_acc"] if epochs else None,
              "committed_samples": sum(r["committed_samples"] for r in epochs),
              "duration_s": round(duration, 1),
              "command": " ".join(["python3", "bench/elastic_etcd.py"] + sys.argv[1:])}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result) + "\n")
    print(f"median round {median:.2f} s over {len(by_round)} rounds; members lost: {lost}")
    print("| killed | after round | the next two rounds (s) | cost (s) | cost (rounds) |")
    print("| --- | ---: | --- | ---: | ---: |")
    for e in events:
        print(f"| {e['killed']} | {e['after_round']} | {e['rounds_s']} | {e['extra_s']} | "
              f"{e['extra_rounds']} |")
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
