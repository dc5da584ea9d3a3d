"""The time of one all_reduce through a torch.distributed backend, by size, as a training
loop meets it: calls spaced by --gap seconds of "compute" (a sleep), rank 0's median of
--calls after 3 untimed, and the loop's period less the gap (the call's time where the ranks
keep step). Run under a launcher, on a lab for long links:

    dtrain launch -n 2 --netlab LAB -- .venv/bin/python bench/backend_latency.py \\
        --backend dtrain --sizes 16384,131072,1048576

DTRAIN_TCP_CONGESTION sets the dtrain backend's congestion control (docs/wire-format.md).
Prints one JSON line per size on rank 0."""
import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist

import torch_dist


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="dtrain", choices=["dtrain", "gloo"])
    p.add_argument("--sizes", default="16384,131072,1048576", help="bytes, comma-separated")
    p.add_argument("--gap", type=float, default=0.04, help="seconds between calls")
    p.add_argument("--calls", type=int, default=8)
    a = p.parse_args()
    torch_dist.init(a.backend, "backend_latency.py")
    for nbytes in [int(s) for s in a.sizes.split(",")]:
        t = torch.ones(max(1, nbytes // 4))
        for _ in range(3):
            dist.all_reduce(t)
        times = []
        start = time.perf_counter()
        for _ in range(a.calls):
            time.sleep(a.gap)
            t0 = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - t0)
        period = (time.perf_counter() - start) / a.calls - a.gap
        assert torch.equal(t, torch.full_like(t, float(dist.get_world_size()) ** (a.calls + 3)))
        if dist.get_rank() == 0:
            print(json.dumps({"backend": a.backend,
                              "tcp_congestion": torch_dist.tcp_congestion(a.backend),
                              "bytes": nbytes, "median_ms": statistics.median(times) * 1e3,
                              "period_less_gap_ms": period * 1e3, "calls": a.calls}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
