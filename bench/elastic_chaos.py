#!/usr/bin/env python3
"""Chaos for elastic DiLoCo in the lab (docs/results.md, "Elastic DiLoCo"), stdlib only. As root.

   python3 bench/elastic_chaos.py [--events 100] [--interval 4] [--epochs 8] ...

3 replicas on a lab of 3 hosts (20 Mbit/s, 5 ms one way, 1 % loss on every uplink), the
cnn on Fashion-MNIST, AdamW 1e-3, H = 20, rot:tile:2 outer gradients, the launcher starting
a failed replica again 1 s later. First a fault-free run of the same command (the
reference), then the same run under chaos: every --interval seconds one event, until
--events were made or the run ended: a SIGKILL of a random live replica (any phase: inner
steps, the exchange, the records, a transfer, a join), or host 1's or host 2's cable taken
out for --cut seconds (host 0 holds the coordinator: cutting it ends every replica by
design, docs/elastic.md). At least one replica that has run --settle seconds (a member, not
a process still entering) is always left alive.

Counted: hangs (the run not done --hang seconds after its last event), survivor failures
(a replica that ended without being killed or cut: the launcher's "[launch] rank R ..."
lines), the final test accuracy against the reference's, committed samples/s, and the
replicas' event rows (redo, joined, entered). Joiners enter mid-round (dtrain's default);
--no-mid-round-entry: at the next boundary. Writes one JSON line to
docs/data/elastic-chaos.jsonl (docs/data/elastic-chaos-boundary.jsonl with
--no-mid-round-entry, -fragmentsF and -delayD added with --fragments F and --sync-delay D:
Streaming DiLoCo's; REPLACES it)
and prints a summary.
"""
import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "data"


def sh(*args):
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def age_s(pid):
    """Seconds since process `pid` started (0 where it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            started = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            return float(f.read().split()[0]) - started / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


VIEW = re.compile(r"coordinator: view (\d+): .*?; members \[([^\]]*)\]")
ENTERED = re.compile(r"coordinator: replica (\d+) entered")


def holders_in_view(log_path):
    """How many members of the coordinator's latest view, in the run's log so far, hold the
    run's state: the founders (view 1's) and the joiners it said entered."""
    with open(log_path, errors="replace") as f:
        text = f.read()
    views = VIEW.findall(text)
    if not views:
        return 0
    ids = lambda listed: {int(m) for m in listed.split(",") if m.strip()}
    holders = {int(r) for r in ENTERED.findall(text)}
    holders |= ids(views[0][1]) if views[0][0] == "1" else set()
    return len(ids(views[-1][1]) & holders)


def children(pid):
    """{slot: pid} of the launcher's replica processes (not the coordinator)."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != pid:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"coordinator" in f.read():
                    continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(e.split(b"=", 1) for e in f.read().split(b"\0") if b"=" in e)
            out[int(env[b"RANK"])] = int(entry)
        except (OSError, KeyError, ValueError, IndexError):
            continue  # gone meanwhile
    return out


def run(args, lab, workdir, tag, chaos):
    """One run; returns its summary dict."""
    metrics, steps = workdir / f"{tag}.metrics", workdir / f"{tag}.steps"
    cmd = [args.dtrain, "train", "-n", "3", "--netlab", lab, "--parallel", "diloco", "--elastic",
           "--max-restarts", "1000", "--restart-delay", "1", "--heartbeat-timeout",
           str(args.heartbeat_timeout),
           "--model", "cnn", "--optimizer", "adamw", "--lr", "1e-3", "--lr-schedule", "constant",
           "--sync-every", "20", "--compress-outer", "rot:tile:2", "--limit-train",
           str(args.samples), "--limit-test", "2000", "--epochs", str(args.epochs), "--seed", "0",
           "--metrics", str(metrics), "--step-log", str(steps), "--no-progress", "--timeout",
           "120"]
    if not args.mid_round_entry:
        cmd.append("--no-mid-round-entry")
    if args.fragments > 1:
        cmd += ["--fragments", str(args.fragments)]
    if args.sync_delay:
        cmd += ["--sync-delay", str(args.sync_delay)]
    err = open(workdir / f"{tag}.err", "w+")
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    events, caused = [], []  # caused: (slot, time) a replica was made to end
    rng = random.Random(args.seed)
    last_event = start
    while chaos and len(events) < args.events and proc.poll() is None:
        time.sleep(args.interval)
        live = children(proc.pid)
        # The chaos must leave a member that holds the run's state, or the run ends by
        # design (the coordinator's "every replica that held the run's state was lost"): an
        # event (which takes out at most one member) only while two or more members of the
        # coordinator's latest view hold it (a joiner only once it entered), and a restarted
        # process counts only once it has run --settle seconds.
        settled = [s for s, p in live.items() if age_s(p) > args.settle]
        if len(live) < 2 or not settled or holders_in_view(err.name) < 2:
            continue
        if rng.random() < args.cut_share and any(s in live for s in (1, 2)):
            host = rng.choice([s for s in (1, 2) if s in live])
            sh(args.dtrain, "netlab", "link", lab, str(host), "down")
            caused.append((host, time.time()))
            time.sleep(args.cut)
            sh(args.dtrain, "netlab", "link", lab, str(host), "up")
            events.append({"kind": "cut", "host": host, "at_s": time.time() - start})
        else:
            slot = rng.choice(sorted(live))
            if settled == [slot]:
                continue  # the last member
            try:
                os.kill(live[slot], signal.SIGKILL)
            except ProcessLookupError:
                continue
            caused.append((slot, time.time()))
            events.append({"kind": "kill", "slot": slot, "at_s": time.time() - start})
        last_event = time.time()
    hang = False
    try:
        proc.wait(timeout=max(1.0, last_event + args.hang - time.time()) if chaos else args.hang)
    except subprocess.TimeoutExpired:
        hang = True
        proc.kill()
        proc.wait()
    duration = time.time() - start
    err.seek(0)
    log = err.read()
    if args.log:  # the whole log, for a run that ended badly
        Path(f"{args.log}.{tag}").write_text(log)
    # "[launch] rank R exited with status S" / "was killed by signal ...": expected only
    # for replicas that were killed or cut (a cut replica ends once the store is silent).
    ended = [int(m.group(1)) for m in re.finditer(r"\[launch\] rank (\d+) (?:exited|was killed)",
                                                  log)]
    owed = {}  # slot: how many ends the chaos caused there and not yet seen
    for slot, _ in caused:
        owed[slot] = owed.get(slot, 0) + 1
    survivor_failures = 0
    for slot in ended:
        if owed.get(slot, 0) > 0:
            owed[slot] -= 1
        else:
            survivor_failures += 1
    rows = [json.loads(l) for l in metrics.read_text().splitlines() if l.strip()] \
        if metrics.exists() else []
    epochs = [r for r in rows if "epoch" in r and "event" not in r]
    summary = next((r for r in rows if r.get("summary")), {})
    evs = [r for r in rows if "event" in r]

    def stat(kind, key):
        xs = [r[key] for r in evs if r.get("event") == kind and key in r]
        return {"n": len(xs), "median": statistics.median(xs), "max": max(xs)} if xs else {"n": 0}

    return {
        "run": tag, "code": proc.returncode, "hang": hang, "duration_s": round(duration, 1),
        "events": len(events), "kills": sum(e["kind"] == "kill" for e in events),
        "cuts": sum(e["kind"] == "cut" for e in events), "replicas_ended": len(ended),
        "survivor_failures": survivor_failures,
        "final_test_acc": summary.get("final_test_acc",
                                      epochs[-1].get("test_acc") if epochs else None),
        "committed_samples_per_s": statistics.mean(e["committed_samples_per_s"] for e in epochs)
        if epochs and all("committed_samples_per_s" in e for e in epochs) else None,
        "lost_samples": sum(e.get("lost_samples", 0) for e in epochs),
        "redone_steps": sum(e.get("elastic_redone", 0) for e in epochs),
        "redo": {k: stat("redo", k) for k in ("failed_after_s", "decide_s", "rebuild_s")},
        "joined_transfer_s": stat("joined", "transfer_s"),
        "entered_enter_s": stat("entered", "enter_s"),
        # Where a joiner's time to enter went: its view's wait, its group's connect, the state.
        "entered_parts_median_s": {k: stat("entered", k).get("median")
                                   for k in ("view_s", "connect_s", "transfer_s")},
        "entered_mid_round": sum(bool(r.get("mid_round")) for r in evs
                                 if r.get("event") == "entered"),
        "event_log": events,
        # Why a run ended badly: the launcher's and the replicas' error lines, the last ones.
        "error_lines": [l for l in log.splitlines()
                        if re.search(r"error|failed|\[launch\]|was lost", l, re.IGNORECASE)][-25:],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtrain", default=str(ROOT / "build" / "dtrain"))
    p.add_argument("--events", type=int, default=100)
    p.add_argument("--interval", type=float, default=4.0, help="seconds between events")
    p.add_argument("--cut", type=float, default=3.0, help="seconds a cable stays out")
    p.add_argument("--cut-share", type=float, default=0.25, help="share of events that are cuts")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--samples", type=int, default=60000, help="training samples an epoch")
    p.add_argument("--hang", type=float, default=600, help="seconds after the last event")
    p.add_argument("--seed", type=int, default=0, help="the chaos schedule's")
    p.add_argument("--heartbeat-timeout", type=float, default=1.0)
    p.add_argument("--skip-reference", action="store_true")
    p.add_argument("--fragments", type=int, default=1,
                   help="Streaming DiLoCo's (a divisor of H = 20): a round of 20 / F steps "
                        "exchanges one fragment")
    p.add_argument("--sync-delay", type=int, default=0,
                   help="with --fragments: each exchange beside its round's last steps "
                        "(joiners then enter at boundaries)")
    p.add_argument("--log", help="keep each run's whole log as LOG.reference / LOG.chaos")
    p.add_argument("--mid-round-entry", action=argparse.BooleanOptionalAction, default=True,
                   help="joiners enter mid-round (docs/elastic.md; the default)")
    p.add_argument("--settle", type=float, default=10.0,
                   help="seconds a restarted replica takes to count as a member")
    args = p.parse_args()
    lab = f"ch{os.getpid() % 10000}"
    sh(args.dtrain, "netlab", "up", lab, "--hosts", "3", "--rate", "20mbit", "--delay", "5ms",
       "--loss", "1%")
    results = []
    try:
        with tempfile.TemporaryDirectory() as d:
            workdir = Path(d)
            if not args.skip_reference:
                results.append(run(args, lab, workdir, "reference", chaos=False))
                print(json.dumps(results[-1]), file=sys.stderr)
            results.append(run(args, lab, workdir, "chaos", chaos=True))
    finally:
        subprocess.run([args.dtrain, "netlab", "down", lab], stdout=subprocess.DEVNULL)
    chaos = results[-1]
    if len(results) == 2 and chaos["final_test_acc"] and results[0]["final_test_acc"]:
        chaos["acc_vs_reference_points"] = round(
            100 * (chaos["final_test_acc"] - results[0]["final_test_acc"]), 2)
        chaos["reference"] = {k: results[0][k] for k in
                              ("final_test_acc", "committed_samples_per_s", "duration_s", "code")}
    chaos["command"] = " ".join(["python3", "bench/elastic_chaos.py"] + sys.argv[1:])
    name = "elastic-chaos" + ("" if args.mid_round_entry else "-boundary")
    name += f"-fragments{args.fragments}" if args.fragments > 1 else ""
    name += f"-delay{args.sync_delay}" if args.sync_delay else ""
    out = DATA / (name + ".jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(chaos) + "\n")
    print(json.dumps({k: v for k, v in chaos.items() if k != "event_log"}, indent=1))
    return 0 if chaos["code"] == 0 and not chaos["hang"] and not chaos["survivor_failures"] else 1


if __name__ == "__main__":
    sys.exit(main())
