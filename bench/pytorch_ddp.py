#!/usr/bin/env python3
"""PyTorch side of bench/ddp.sh: torch.nn.parallel.DistributedDataParallel (gloo) on the
same model, data, per-rank batch, optimizer, ranks and threads as
`dtrain train --parallel ddp` (--backend dtrain: over dtrain's torch.distributed backend), optionally with one of PyTorch's communication hooks
(fp16 compression, PowerSGD) or dtrain's (the Python package: dtrain:CODEC). Launch with
the dtrain launcher, on loopback or on a network lab:
  dtrain launch -n 2 [--netlab LAB] -- .venv/bin/python bench/pytorch_ddp.py [--model resnet18 --dataset synthetic]
Prints one JSON line (rank 0): epoch and step time (max over ranks), samples/s, max peak RSS
over ranks, loss, test accuracy, and the bytes the hook handed to all_reduce relative to
the fp32 gradient bytes (1 without a hook), comparable with dtrain's grad_wire_bytes /
grad_bytes (both relative to an exact all-reduce of fp32 gradients); dtrain's hook reports
its own (coded bytes sent over the fp32 bytes of the same exchange). --count-iface IFACE adds
the bytes the rank's interface transmitted per training step (on a lab host: everything the
rank sent, TCP/IP headers included)."""
import argparse, json, resource, time
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import pytorch_models
import torch_dist

reduced_bytes = 0  # bytes handed to dist.all_reduce by a Python comm hook


def count_all_reduce():
    """Wraps dist.all_reduce (the hooks call it through the module) to count payload bytes."""
    original = dist.all_reduce

    def counting(tensor, *args, **kwargs):
        global reduced_bytes
        reduced_bytes += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting


def register_hook(model, spec):
    """The hook's state for dtrain's hook (its byte counters), else None."""
    if spec == "none":
        return None
    if spec.startswith("dtrain:"):
        import dtrain

        state = dtrain.hooks.CompressionState(codec=spec.split(":", 1)[1])
        model.register_comm_hook(state, dtrain.hooks.compressed_allreduce_hook)
        return state
    count_all_reduce()
    if spec == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif spec.startswith("powersgd"):
        rank = int(spec.split(":")[1]) if ":" in spec else 1
        # start_powerSGD_iter=2: compress from the second step on (PyTorch's minimum with
        # error feedback); the default 1000 would leave a short run uncompressed.
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=rank,
                                            start_powerSGD_iter=2, use_error_feedback=True,
                                            warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise SystemExit(f"unknown --comm-hook {spec} (none, fp16, powersgd[:RANK], dtrain:CODEC)")
    return None


def tx_bytes(iface):
    """Bytes `iface` transmitted, from /proc/self/net/dev: the process's own network namespace
    (/sys/class/net shows the namespace /sys was mounted in, the host's)."""
    if not iface:
        return 0
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == iface:
                return int(counters.split()[8])
    raise SystemExit(f"no interface {iface} in this network namespace")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="cnn", choices=["cnn", "resnet18"])
    p.add_argument("--dataset", default="fashion-mnist", choices=["fashion-mnist", "synthetic"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--input-shape", default="3,32,32", help="synthetic data: C,H,W")
    p.add_argument("--synthetic-size", type=int, default=2048)
    p.add_argument("--limit-train", type=int, default=10000)
    p.add_argument("--limit-test", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--comm-hook", default="none", help="none, fp16, powersgd[:RANK], dtrain:CODEC")
    p.add_argument("--count-iface", default="", help="count this interface's transmitted bytes")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--backend", default="gloo", choices=["gloo", "dtrain"],
                   help="torch.distributed's backend (dtrain: `import dtrain` registers it)")
    p.add_argument("--channels-last", action="store_true",
                   help="model and inputs in torch.channels_last (as dtrain's --memory-format)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch_dist.init(a.backend, "pytorch_ddp.py")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    if a.dataset == "fashion-mnist":
        x, y, tx, ty = pytorch_models.fashion_mnist(a.data_dir, a.limit_train, a.limit_test)
    else:
        shape = tuple(int(v) for v in a.input_shape.split(","))
        x, y, tx, ty = pytorch_models.synthetic(shape, 10, a.synthetic_size)
        tx, ty = tx[: a.limit_test], ty[: a.limit_test]
    net = pytorch_models.cnn() if a.model == "cnn" else pytorch_models.resnet18(x.shape[1])
    if a.channels_last:
        net = net.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    model = DDP(net, bucket_cap_mb=a.bucket_mb)
    hook_state = register_hook(model, a.comm_hook)
    grad_bytes_per_step = sum(q.numel() * q.element_size() for q in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    total, steps, loss_sum, seen = 0.0, 0, 0.0, 0
    tx_start = tx_bytes(a.count_iface)
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(epoch)
        perm = torch.randperm(len(y), generator=g)[rank::world]
        start = time.perf_counter()
        loss_sum, seen, epoch_steps = pytorch_models.train_pass(model, opt, x, y, perm, a.batch_size)
        steps += epoch_steps
        total += time.perf_counter() - start
    tx_per_step = (tx_bytes(a.count_iface) - tx_start) / steps
    test_acc = pytorch_models.test_accuracy(model, tx, ty)
    stats = torch.tensor([total, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0,
                          tx_per_step], dtype=torch.float64)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    sums = torch.tensor([loss_sum, seen], dtype=torch.float64)
    dist.all_reduce(sums)
    if hook_state is not None:
        wire_ratio = hook_state.stats()["ratio"]
    else:
        wire_ratio = 1.0 if a.comm_hook == "none" else reduced_bytes / (grad_bytes_per_step * steps)
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "backend": a.backend, "model": a.model,
                          "comm_hook": a.comm_hook,
                          "tcp_congestion": torch_dist.tcp_congestion(a.backend),
                          "memory_format": "channels-last" if a.channels_last else "contiguous",
                          "ranks": world, "batch_per_rank": a.batch_size, "steps": steps,
                          "epoch_s": stats[0].item() / a.epochs, "step_s": stats[0].item() / steps,
                          "samples_per_s": sums[1].item() / stats[0].item(),
                          "peak_rss_max_bytes": int(stats[1].item()),
                          "train_loss": (sums[0] / sums[1]).item(), "test_acc": test_acc,
                          "wire_ratio": wire_ratio, "threads": a.threads,
                          "tx_bytes_per_step_max": stats[2].item() if a.count_iface else None,
                          "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
