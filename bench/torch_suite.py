#!/usr/bin/env python3
"""PyTorch's distributed test suite as the judge of dtrain's torch.distributed backend
(docs/python.md, "A torch.distributed backend"; docs/results.md, "PyTorch's test suite").

    .venv/bin/python bench/torch_suite.py [--world 2] [-k EXPR] [--backends gloo,dtrain]

Runs bench/torch_suite_spawn.py (distributed_test.py's _DistTestBase, spawned) once per
backend under pytest, then once more on dtrain for the tests gloo passes that dtrain did
not, with the suite reading the name "gloo" (GATES=gloo: its decorators and bodies test
the name; the group is dtrain's), reads each test's outcome from pytest's JUnit XML, and
reports: how many tests each backend passes, how many of those gloo passes dtrain passes
too (the target: 95 %), and every test gloo passes that dtrain does not, with the first
line of its failure. Writes docs/data/torch-suite.jsonl (a row per test: its outcome per backend and
dtrain's reason), or --out. -k selects tests as pytest's -k does (make test runs a part).
Exit status 1 where a selected test that gloo passes fails on dtrain (with one backend:
where a selected test fails).
"""
import argparse
import json
import re
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "bench" / "torch_suite_spawn.py"


def run(backend, world, select, timeout, gates=""):
    """{test name: (outcome, message)} of one backend's run (gates: the backend whose name
    the suite reads, bench/torch_suite_spawn.py's GATES)."""
    with tempfile.TemporaryDirectory() as temp:
        xml = Path(temp) / "junit.xml"
        env = dict(os.environ, BACKEND=backend, WORLD_SIZE=str(world), TEMP_DIR=temp)
        env.pop("TORCH_SUITE_BACKEND", None)  # the spawned suite's own (torch_suite_spawn.py)
        # The build's package first: an installed one may predate the backend.
        built = ROOT / "build" / "python"
        if built.is_dir():
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(built), env.get("PYTHONPATH")]))
        if gates:
            env["GATES"] = gates
        cmd = [sys.executable, "-m", "pytest", str(SUITE), "-q", "-p", "no:cacheprovider",
               f"--junitxml={xml}", "-o", "junit_family=xunit1"]
        if select:
            cmd += ["-k", select]
        start = time.time()
        subprocess.run(cmd, env=env, cwd=ROOT, timeout=timeout, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        print(f"torch_suite: {backend}: {time.time() - start:.0f} s", file=sys.stderr)
        out = {}
        if not xml.exists():
            return out
        for case in ET.parse(xml).getroot().iter("testcase"):
            outcome, message = "passed", ""
            for kind in ("failure", "error", "skipped"):
                node = case.find(kind)
                if node is not None:
                    outcome = "skipped" if kind == "skipped" else "failed"
                    message = reason(node)
                    break
            out[case.get("name")] = (outcome, message)
        return out


def reason(node):
    """The first line that names an exception raised in a rank (the suite's own wrapper
    says only which process exited), else the report's first line."""
    text = ((node.get("message") or "") + "\n" + (node.text or "")).strip()
    for line in text.splitlines():
        line = line.strip().lstrip("E").strip()
        if re.match(r"^\w+(Error|Exception): ", line) and "exited with error code" not in line:
            return line[:300]
    return text.splitlines()[0][:300] if text else ""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("-k", dest="select", default="")
    p.add_argument("--backends", default="gloo,dtrain")
    p.add_argument("--out", default=str(ROOT / "docs" / "data" / "torch-suite.jsonl"))
    p.add_argument("--timeout", type=float, default=4 * 3600)
    p.add_argument("--from", dest="recorded", default="",
                   help="a torch-suite.jsonl whose outcomes stand in for the two runs (the "
                        "gated tests are run again)")
    a = p.parse_args()
    backends = a.backends.split(",")
    if a.recorded:
        rows = [json.loads(l) for l in Path(a.recorded).read_text().splitlines() if l.strip()]
        results = {b: {r["test"]: (r[b], r.get(f"{b}_reason", r.get("dtrain_reason", "")))
                       for r in rows} for b in backends}
    else:
        results = {b: {k: v for k, v in run(b, a.world, a.select, a.timeout).items()}
                   for b in backends}
    # The tests gloo passes that dtrain does not pass, run again on dtrain with the suite
    # reading the name "gloo" (bench/torch_suite_spawn.py, GATES): its decorators keep some
    # for gloo by name ("requires backend to be one of {'gloo'}", "get_future is only
    # supported on ... gloo"), and some bodies build their models only for backends they name.
    gated = []
    if {"gloo", "dtrain"} <= set(backends):
        gated = sorted(n for n, (o, _) in results["dtrain"].items()
                       if o != "passed" and results["gloo"].get(n, ("",))[0] == "passed")
        if gated:
            rerun = run("dtrain", a.world, " or ".join(gated), a.timeout, gates="gloo")
            for n in gated:
                if rerun.get(n, ("missing", ""))[0] == "passed" or \
                        results["dtrain"][n][0] == "skipped":
                    results["dtrain"][n] = rerun.get(n, ("missing", ""))
    names = sorted(set().union(*[set(r) for r in results.values()]))
    rows = [{"test": n, **{b: results[b].get(n, ("missing", ""))[0] for b in backends},
             "dtrain_reason": results.get("dtrain", {}).get(n, ("", ""))[1],
             "named_gloo": n in gated} for n in names]
    if a.out:
        Path(a.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    for b in backends:
        passed = sum(r[b] == "passed" for r in rows)
        print(f"{b}: {passed} passed, {sum(r[b] == 'failed' for r in rows)} failed, "
              f"{sum(r[b] == 'skipped' for r in rows)} skipped of {len(rows)}")
    if {"gloo", "dtrain"} <= set(backends):
        base = [r for r in rows if r["gloo"] == "passed"]
        both = [r for r in base if r["dtrain"] == "passed"]
        share = len(both) / len(base) if base else 1.0
        print(f"dtrain passes {len(both)} of the {len(base)} tests gloo passes ({share:.1%}; "
              f"{len(gated)} run again with the suite reading the name gloo)")
        for r in base:
            if r["dtrain"] != "passed":
                print(f"  {r['test']}: {r['dtrain']}: {r['dtrain_reason']}")
        return 0 if len(both) == len(base) else 1
    # One backend alone (make test's part): every selected test must pass or skip there.
    return 1 if any(r[b] in ("failed", "missing") for r in rows for b in backends) else 0


if __name__ == "__main__":
    sys.exit(main())
