#!/usr/bin/env python3
"""PyTorch side of `bash bench/ddp.sh syncbn`. torch.nn.SyncBatchNorm runs on GPUs only
(still in 2.11: it refuses CPU input, and torch.batch_norm_stats has no CPU kernel), so
this runs its algorithm (torch/nn/modules/_functions.py, whose gloo path is the same in
1.13 and 2.11) with PyTorch CPU ops and the gloo backend: local mean and invstd, an
all_gather of (mean, invstd, count) from every rank, combined statistics; backward: one
all_reduce of (sum dy, sum dy*(x-mean)). Also the local nn.BatchNorm1d. Median
forward+backward time, max over ranks, like `dtrain bench syncbn`. Launch:
  dtrain launch -n 2 -- .venv/bin/python bench/pytorch_syncbn.py"""
import argparse, json, statistics, time
import torch
import torch.distributed as dist


class TorchStyleSyncBN(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, eps):
        c = x.shape[1]
        var, mean = torch.var_mean(x, dim=0, unbiased=False)
        invstd = torch.rsqrt(var + eps)
        count = torch.full((1,), x.shape[0], dtype=x.dtype)
        combined = torch.cat([mean, invstd, count])
        gathered = [torch.empty_like(combined) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, combined)
        g = torch.stack(gathered)
        means, invstds, counts = g[:, :c], g[:, c:2 * c], g[:, 2 * c:]
        total = counts.sum()
        mean_all = (means * counts).sum(0) / total
        var_all = ((1.0 / invstds ** 2 - eps + (means - mean_all) ** 2) * counts).sum(0) / total
        invstd_all = torch.rsqrt(var_all + eps)
        ctx.save_for_backward(x, weight, mean_all, invstd_all, total)
        return (x - mean_all) * invstd_all * weight + bias

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd, total = ctx.saved_tensors
        xmu = x - mean
        sum_dy = dy.sum(0)
        sum_dy_xmu = (dy * xmu).sum(0)
        grad_weight = sum_dy_xmu * invstd
        grad_bias = sum_dy
        both = torch.cat([sum_dy, sum_dy_xmu])
        dist.all_reduce(both)
        c = x.shape[1]
        mean_dy = both[:c] / total
        mean_dy_xmu = both[c:] / total
        dx = (dy - mean_dy - xmu * invstd * invstd * mean_dy_xmu) * invstd * weight
        return dx, grad_weight, grad_bias, None


def median_time(step, iters, warmup):
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    t = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", default="32,64")
    p.add_argument("--hidden", default="128,256,512,1024")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--warmup", type=int, default=50)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    torch.manual_seed(dist.get_rank())
    for b in [int(v) for v in a.batch_size.split(",")]:
        for h in [int(v) for v in a.hidden.split(",")]:
            x = torch.randn(b, h, requires_grad=True)
            dy = torch.randn(b, h)
            w = torch.ones(h, requires_grad=True)
            bias = torch.zeros(h, requires_grad=True)
            bn = torch.nn.BatchNorm1d(h)

            def sync_step():
                TorchStyleSyncBN.apply(x, w, bias, 1e-5).backward(dy)

            def local_step():
                bn(x).backward(dy)

            for impl, step in (("pytorch-syncbn-algorithm", sync_step), ("pytorch-bn-local", local_step)):
                s = median_time(step, a.iters, a.warmup)
                if dist.get_rank() == 0:
                    print(json.dumps({"impl": impl, "batch_size": b, "hidden": h,
                                      "ranks": dist.get_world_size(), "median_s": s,
                                      "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
