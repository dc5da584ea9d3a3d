#!/usr/bin/env python3
"""PyTorch side of bench/ddp.sh: torch.nn.parallel.DistributedDataParallel (gloo) on the
same cnn, Fashion-MNIST samples, per-rank batch, optimizer, ranks and threads as
`dtrain train --parallel ddp --model cnn`. Launch with the dtrain launcher:
  dtrain launch -n 2 -- /usr/bin/python3 bench/pytorch_ddp.py
Prints one JSON line (rank 0): epoch time, step time, max peak RSS over ranks, loss, acc."""
import argparse, json, resource, time
import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from pytorch_cnn import cnn, read_idx


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit-train", type=int, default=10000)
    p.add_argument("--limit-test", type=int, default=1000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    d = a.data_dir
    x = torch.from_numpy(read_idx(f"{d}/train-images-idx3-ubyte.gz")[: a.limit_train].copy()).float().div_(255).unsqueeze(1)
    y = torch.from_numpy(read_idx(f"{d}/train-labels-idx1-ubyte.gz")[: a.limit_train].astype(np.int64))
    tx = torch.from_numpy(read_idx(f"{d}/t10k-images-idx3-ubyte.gz")[: a.limit_test].copy()).float().div_(255).unsqueeze(1)
    ty = torch.from_numpy(read_idx(f"{d}/t10k-labels-idx1-ubyte.gz")[: a.limit_test].astype(np.int64))
    mean, std = x.mean(), x.std()
    x, tx = (x - mean) / std, (tx - mean) / std
    model = DDP(cnn())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    total, steps, loss_sum, seen = 0.0, 0, 0.0, 0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(epoch)
        perm = torch.randperm(len(y), generator=g)[rank::world]
        start = time.perf_counter()
        loss_sum, seen = 0.0, 0
        for i in range(0, len(perm), a.batch_size):
            idx = perm[i : i + a.batch_size]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            seen += len(idx)
            steps += 1
        total += time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        correct = (model(tx).argmax(1) == ty).sum().item()
    stats = torch.tensor([total, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0], dtype=torch.float64)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    sums = torch.tensor([loss_sum, seen], dtype=torch.float64)
    dist.all_reduce(sums)
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp", "ranks": world, "epoch_s": stats[0].item() / a.epochs,
                          "step_s": stats[0].item() / steps, "peak_rss_max_bytes": int(stats[1].item()),
                          "train_loss": (sums[0] / sums[1]).item(), "test_acc": correct / len(ty),
                          "threads": a.threads, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
