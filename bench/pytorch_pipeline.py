#!/usr/bin/env python3
"""PyTorch side of `bash bench/pipeline.sh vspytorch`: torch.distributed.pipelining (gloo,
CPU) on the model, split, batch and micro-batches of dtrain's bubble benchmark: mlp of 8
blocks of 512 (input 1x16x32) and a head, 2 ranks, the first 4 blocks on rank 0.

Schedules: gpipe, 1f1b (one stage per rank, as dtrain), and those dtrain lacks, with two
stages per rank of 2 blocks each (the head with the last): interleaved-1f1b and
interleaved-zb (looped placement: rank r holds stages r and r+2), zbv (V placement: rank 0
holds stages 0 and 3, rank 1 stages 1 and 2).

Measured as dtrain measures its own pipeline: step time = wall time of one optimizer step
(schedule.step + optimizer); a rank's busy time = time inside its stages' forward and
backward (input and weight) computations, timed around PipelineStage's
forward_one_chunk / backward_one_chunk / backward_weight_one_chunk; bubble = (step - busy) /
step per rank, averaged over ranks. Launch:
  dtrain launch -n 2 -- .venv/bin/python bench/pytorch_pipeline.py --schedule 1f1b --chunks 8
Prints one JSON line (rank 0)."""
import argparse, json, resource, time
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed import pipelining as pp

import pytorch_models

SCHEDULES = {
    "gpipe": (pp.ScheduleGPipe, "single"),
    "1f1b": (pp.Schedule1F1B, "single"),
    "interleaved-1f1b": (pp.ScheduleInterleaved1F1B, "loop"),
    "interleaved-zb": (pp.ScheduleInterleavedZeroBubble, "loop"),
    "zbv": (pp.ScheduleZBVZeroBubble, "v"),
}


def stage_blocks(blocks, placement, ranks):
    """{stage index: module} for this placement; stages hold consecutive blocks."""
    if placement == "single":  # dtrain's --balance 4,5 on 8 blocks + head
        cuts = [blocks[:4], blocks[4:]]
    else:  # 4 stages of 2 blocks, the head with the last
        cuts = [blocks[0:2], blocks[2:4], blocks[4:6], blocks[6:]]
    return {i: nn.Sequential(*c) for i, c in enumerate(cuts)}


def stages_of(rank, placement, ranks):
    if placement == "single":
        return [rank]
    if placement == "loop":
        return [rank, rank + ranks]
    return [rank, 2 * ranks - 1 - rank]  # v


class BusyClock:
    """Adds the wall time spent in a stage's compute methods."""
    def __init__(self):
        self.busy = 0.0

    def wrap(self, stage):
        for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
            original = getattr(stage, name)

            def timed(*args, _original=original, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.busy += time.perf_counter() - t0

            setattr(stage, name, timed)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--schedule", default="1f1b", choices=sorted(SCHEDULES))
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=32, help="timed steps (dtrain: 8192 / 256 = 32)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    schedule_cls, placement = SCHEDULES[a.schedule]
    all_stages = stage_blocks(pytorch_models.mlp_blocks(512, a.depth), placement, ranks)
    num_stages = len(all_stages)
    if placement == "single" and num_stages != ranks:
        raise SystemExit("gpipe/1f1b here need exactly 2 ranks")
    mine = stages_of(rank, placement, ranks)
    clock = BusyClock()
    stages = []
    micro = a.batch_size // a.chunks
    for i in mine:
        # Static shapes: no run-time shape inference (which, with two stages of a V on one
        # rank, would post a Gloo send from a rank to itself).
        example_in = torch.empty(micro, 1, 16, 32) if i == 0 else torch.empty(micro, 512)
        example_out = torch.empty(micro, 10 if i == num_stages - 1 else 512)
        stage = pp.PipelineStage(all_stages[i], i, num_stages, torch.device("cpu"),
                                 input_args=(example_in,), output_args=(example_out,))
        clock.wrap(stage)
        stages.append(stage)
    params = [q for i in mine for q in all_stages[i].parameters()]
    opt = torch.optim.SGD(params, lr=0.01, momentum=0.9)
    loss_fn = lambda out, target: F.cross_entropy(out, target)
    sched = schedule_cls(stages[0] if placement == "single" else stages, a.chunks, loss_fn=loss_fn)
    x, y, _, _ = pytorch_models.synthetic((1, 16, 32), 10, a.batch_size * (a.steps + a.warmup))
    has_first, has_last = 0 in mine, num_stages - 1 in mine
    step_total = busy_total = 0.0
    for s in range(a.warmup + a.steps):
        xb = x[s * a.batch_size : (s + 1) * a.batch_size]
        yb = y[s * a.batch_size : (s + 1) * a.batch_size]
        busy0, t0 = clock.busy, time.perf_counter()
        args = (xb,) if has_first else ()
        sched.step(*args, target=yb if has_last else None)
        opt.step()
        opt.zero_grad()
        if s >= a.warmup:
            step_total += time.perf_counter() - t0
            busy_total += clock.busy - busy0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    mine_stats = torch.tensor([step_total, busy_total, rss], dtype=torch.float64)
    gathered = [torch.empty_like(mine_stats) for _ in range(ranks)]
    dist.all_gather(gathered, mine_stats)
    if rank == 0:
        step_s = max(g[0].item() for g in gathered) / a.steps
        bubbles = [(g[0].item() - g[1].item()) / g[0].item() for g in gathered]
        S, M = ranks, a.chunks
        v = 1 if placement == "single" else 2
        ideal = (S - 1) / (v * M + S - 1) if "zb" not in a.schedule else None
        print(json.dumps({"impl": "torch.distributed.pipelining", "schedule": a.schedule,
                          "chunks": M, "ranks": S, "stages_per_rank": v, "batch_size": a.batch_size,
                          "samples_per_s": a.batch_size / step_s, "step_s": step_s,
                          "bubble_measured": sum(bubbles) / len(bubbles), "bubble_ideal": ideal,
                          "bubble_per_rank": bubbles,
                          "peak_rss_bytes_per_rank": [int(g[2].item()) for g in gathered],
                          "threads": a.threads, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
