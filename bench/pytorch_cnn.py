#!/usr/bin/env python3
"""PyTorch side of `bench/train.sh`: the same cnn, data, batch, optimizer and threads as
`dtrain train --model cnn`, timed the same way (epoch wall time, samples/s).
Run with Debian's python3 (/usr/bin/python3), which has python3-torch."""
import argparse, gzip, json, struct, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(128, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit-train", type=int, default=10000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x = torch.from_numpy(read_idx(f"{a.data_dir}/train-images-idx3-ubyte.gz")[: a.limit_train].copy())
    y = torch.from_numpy(read_idx(f"{a.data_dir}/train-labels-idx1-ubyte.gz")[: a.limit_train].astype(np.int64))
    x = x.float().div_(255).unsqueeze(1)
    x = (x - x.mean()) / x.std()
    model = cnn()
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4)
    for epoch in range(a.epochs):
        perm = torch.randperm(len(y))
        start = time.perf_counter()
        seen, loss_sum = 0, 0.0
        for i in range(0, len(y), a.batch_size):
            idx = perm[i : i + a.batch_size]
            out = model(x[idx])
            loss = F.cross_entropy(out, y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += len(idx)
            loss_sum += loss.item() * len(idx)
        dt = time.perf_counter() - start
        print(json.dumps({"impl": "pytorch", "epoch": epoch + 1, "samples_per_s": seen / dt,
                          "epoch_s": dt, "train_loss": loss_sum / seen, "threads": a.threads,
                          "torch": torch.__version__}))


if __name__ == "__main__":
    main()
