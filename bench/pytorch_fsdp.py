#!/usr/bin/env python3
"""PyTorch FSDP2 (torch.distributed.fsdp.fully_shard) on the RoBERTa twin of dtrain's roberta
(bench/pytorch_models.py; roberta-base's sizes by default, 124.6 M parameters), over gloo or
over dtrain's torch.distributed backend (--backend dtrain): each encoder layer, the
embeddings and the head sharded on their own, then the root, as FSDP2's documentation
wraps a transformer; AdamW. Synthetic sequences (token ids drawn per step and rank from a
fixed seed, all real tokens; the label is the parity of the second token). Launch with the
dtrain launcher, on loopback or on a network lab:
  dtrain launch -n 2 [--netlab LAB] -- .venv/bin/python bench/pytorch_fsdp.py --backend dtrain
Prints one JSON line (rank 0): the time of the timed steps (max over ranks; --warmup steps
first, untimed: FSDP2's lazy initialisation), samples/s, the mean loss of every step over
ranks, the parameters' bytes (what one all-gather of them all moves), peak RSS."""
import argparse, json, resource, sys, time

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pytorch_models
import torch_dist


def batch(step, rank, batch_size, seq_len, vocab):
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    ids = torch.randint(3, vocab, (batch_size, seq_len), generator=g)  # past <s>, <pad>, </s>
    return ids, ids[:, 1] % 2


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="gloo", choices=["gloo", "dtrain"],
                   help="torch.distributed's backend (dtrain: `import dtrain` registers it)")
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50265)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8, help="per rank")
    p.add_argument("--steps", type=int, default=4, help="timed steps")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    if a.steps < 1 or a.warmup < 0 or a.batch_size < 1 or a.seq_len < 2:
        sys.exit("pytorch_fsdp.py: --steps, --batch-size >= 1, --warmup >= 0, --seq-len >= 2")
    torch.set_num_threads(a.threads)
    from torch.distributed.fsdp import fully_shard

    torch_dist.init(a.backend, "pytorch_fsdp.py")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same initial model on every rank and backend
    model = pytorch_models.roberta(a.layers, a.hidden, a.heads, vocab=a.vocab,
                                   max_positions=max(514, a.seq_len + 2))
    param_bytes = sum(q.numel() * q.element_size() for q in model.parameters())
    for block in model:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    torch.manual_seed(1 + rank)  # dropout: per rank, the same under either backend
    losses, timed = [], 0.0
    for step in range(a.warmup + a.steps):
        ids, labels = batch(step, rank, a.batch_size, a.seq_len, a.vocab)
        start = time.perf_counter()
        loss = F.cross_entropy(model(ids), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step >= a.warmup:
            timed += time.perf_counter() - start
    stats = torch.tensor([timed, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0],
                         dtype=torch.float64)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    mean_losses = torch.tensor(losses, dtype=torch.float64)
    dist.all_reduce(mean_losses)
    mean_losses /= world
    if rank == 0:
        print(json.dumps({"impl": "pytorch-fsdp2", "backend": a.backend,
                          "tcp_congestion": torch_dist.tcp_congestion(a.backend), "model": "roberta",
                          "layers": a.layers, "hidden": a.hidden, "param_bytes": param_bytes,
                          "ranks": world, "batch_per_rank": a.batch_size, "seq_len": a.seq_len,
                          "warmup_steps": a.warmup, "steps": a.steps,
                          "timed_s": stats[0].item(), "step_s": stats[0].item() / a.steps,
                          "samples_per_s": world * a.batch_size * a.steps / stats[0].item(),
                          "losses": mean_losses.tolist(),
                          "train_loss": mean_losses[a.warmup:].mean().item(),
                          "peak_rss_max_bytes": int(stats[1].item()), "threads": a.threads,
                          "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
