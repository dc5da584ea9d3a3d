"""The dtrain backend's all-reduce by the link it runs on: between 2 ranks on a long link (a
network lab's, 5 ms each way: a 10 ms round trip) its default is the exchange, on loopback
the ring, and DTRAIN_ALGO overrides either; every sum stays exact, messages within an
opening and beyond it (striped). Real processes under `dtrain launch`; the lab needs root
and `ip netns` (skipped without)."""

import os
import subprocess
import sys

import pytest

import dtrain

pytestmark = pytest.mark.skipif(not dtrain.backend.available(),
                                reason="this build of dtrain carries no backend")

SCRIPT = r"""
import torch, torch.distributed as dist, dtrain
dist.init_process_group("dtrain")
rank, world = dist.get_rank(), dist.get_world_size()
for dtype in (torch.float32, torch.float64, torch.int64, torch.bfloat16):
    # 2,000,000 float64 values: 16 MB, beyond an opening (4 MiB), striped on a long link.
    for n in (0, 1, 1000, 300000, 2000000):
        t = (torch.arange(n) % 7 + rank * 3).to(dtype)
        dist.all_reduce(t)
        want = sum(torch.arange(n) % 7 + r * 3 for r in range(world)).to(dtype)
        assert torch.equal(t, want), (dtype, n)
print("ALGO", dtrain.backend.all_reduce_algorithm(), flush=True)
dist.destroy_process_group()
"""


def launch(dtrain_binary, lab=None, algo=None):
    env = dict(os.environ)
    env.pop("DTRAIN_ALGO", None)
    if algo is not None:
        env["DTRAIN_ALGO"] = algo
    where = ["--netlab", lab] if lab else []
    run = subprocess.run([dtrain_binary, "launch", "-n", "2", *where, "--", sys.executable, "-c",
                          SCRIPT], env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    return {line.split()[-1] for line in run.stdout.splitlines() if " ALGO " in line}


@pytest.fixture
def lab(dtrain_binary):
    if os.geteuid() != 0:
        pytest.skip("a network lab needs root")
    name = f"pb{os.getpid()}"
    up = subprocess.run([dtrain_binary, "netlab", "up", name, "--hosts", "2", "--delay", "5ms"],
                        capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        pytest.skip("no network lab here: " + up.stderr.strip())
    try:
        yield name
    finally:
        subprocess.run([dtrain_binary, "netlab", "down", name], capture_output=True, timeout=120)


def test_two_ranks_on_a_long_link_exchange_and_sum_exactly(dtrain_binary, lab):
    assert launch(dtrain_binary, lab) == {"exchange"}
    assert launch(dtrain_binary, lab, algo="ring") == {"ring"}


def test_two_ranks_on_loopback_run_the_ring_unless_told(dtrain_binary):
    assert launch(dtrain_binary) == {"ring"}
    assert launch(dtrain_binary, algo="exchange") == {"exchange"}


CONGESTION_SCRIPT = r"""
import os, socket, torch, torch.distributed as dist, dtrain
dist.init_process_group("dtrain")
t = torch.arange(1000, dtype=torch.float64) + dist.get_rank()
dist.all_reduce(t)
assert torch.equal(t, 2 * torch.arange(1000, dtype=torch.float64) + 1)
counts = {}
for fd in os.listdir("/proc/self/fd"):
    try:
        s = socket.socket(fileno=os.dup(int(fd)))
    except OSError:
        continue
    with s:
        try:
            if s.type != socket.SOCK_STREAM or s.proto not in (0, socket.IPPROTO_TCP):
                continue
            s.getpeername()
            name = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)
        except OSError:
            continue
    name = name.rstrip(b"\0").decode()
    counts[name] = counts.get(name, 0) + 1
print("CONNECTIONS", ",".join(f"{k}={v}" for k, v in sorted(counts.items())), flush=True)
dist.destroy_process_group()
"""


def another_allowed_congestion():
    read = lambda name: open(f"/proc/sys/net/ipv4/{name}").read().split()
    fallback = read("tcp_congestion_control")[0]
    return next((a for a in read("tcp_allowed_congestion_control") if a != fallback), None)


def test_tcp_congestion_is_set_on_the_connections_and_a_refused_one_is_named(dtrain_binary):
    algorithm = another_allowed_congestion()
    if algorithm is None:
        pytest.skip("this host allows its default congestion control only")
    env = dict(os.environ, DTRAIN_TCP_CONGESTION=algorithm)
    run = subprocess.run([dtrain_binary, "launch", "-n", "2", "--", sys.executable, "-c",
                          CONGESTION_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [l for l in run.stdout.splitlines() if " CONNECTIONS " in l]
    assert len(lines) == 2, run.stdout
    for line in lines:
        # The Gloo connections (one per peer and stream) run it; torch's own store client,
        # opened before the backend connected, keeps the host's.
        assert f"{algorithm}=" in line, line
    env["DTRAIN_TCP_CONGESTION"] = "no-such-algorithm"
    run = subprocess.run([dtrain_binary, "launch", "-n", "2", "--", sys.executable, "-c",
                          CONGESTION_SCRIPT], env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode != 0
    assert "TCP congestion control 'no-such-algorithm' is refused here" in run.stderr, run.stderr
