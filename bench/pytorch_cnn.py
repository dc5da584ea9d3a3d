#!/usr/bin/env python3
"""PyTorch side of `bench/train.sh`: the same cnn, data, batch, optimizer and threads as
`dtrain train --model cnn`, timed the same way (epoch wall time, samples/s).
Run with the project's torch: .venv/bin/python bench/pytorch_cnn.py"""
import argparse, json, time
import torch
import torch.nn.functional as F

from pytorch_models import cnn, fashion_mnist


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
    x, y, _, _ = fashion_mnist(a.data_dir, a.limit_train, 1)
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
