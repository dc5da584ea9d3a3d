#!/usr/bin/env python3
"""Python side of bench/torchft.sh: DiLoCo from a plain PyTorch loop, with torchft's
implementation (its pip package: Manager, lighthouse, ProcessGroupGloo, local_sgd.DiLoCo)
or with dtrain's (dtrain.DiLoCo), on the same model twin, data, per-replica batch, inner
optimizer (AdamW) and outer step (SGD, Nesterov 0.7 / 0.9) as
`dtrain train --parallel diloco` in bench/diloco.sh. One replica per rank; launch with the
dtrain launcher, on loopback or on a network lab:
  dtrain launch -n 2 [--netlab LAB] -- .venv/bin/python bench/pytorch_diloco.py --impl torchft
`--backend dtrain` runs the default process group (dtrain.DiLoCo's exchanges) over dtrain's
torch.distributed backend instead of gloo (bench/torch_backend.sh).
Prints one JSON line (rank 0): samples/s (every replica's samples over the slowest
replica's loop time), test accuracy of the shared parameters, outer syncs.

torchft needs, beside its package: its lighthouse (rank 0 runs one in-process and hands its
address to the others through the launcher's store), each replica's own store and manager
advertised on the host's lab address (DTRAIN_GLOO_HOST; GLOO_SOCKET_IFNAME=eth0), and
init_sync=False (by default the first quorum heals one replica from the other, discarding
its first H steps)."""
import argparse
import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import pytorch_models
import torch_dist


def torchft_diloco(model, inner, a, rank, world, host):
    from torchft import Manager, ProcessGroupGloo
    from torchft._torchft import LighthouseServer
    from torchft.local_sgd import DiLoCo

    store = dist.distributed_c10d._get_default_store()
    lighthouse = None
    if rank == 0:
        lighthouse = LighthouseServer(bind="0.0.0.0:0", min_replicas=world)
        port = lighthouse.address().rsplit(":", 1)[1]
        store.set("bench/lighthouse", f"http://{host}:{port}")
    address = store.get("bench/lighthouse").decode()
    replica_store = dist.TCPStore(host, 0, 1, True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=120)),
                      load_state_dict=lambda s: model.load_state_dict(s["model"]),
                      state_dict=lambda: {"model": model.state_dict()},
                      min_replica_size=world, replica_id=f"replica_{rank}", rank=0, world_size=1,
                      store_addr=host, store_port=replica_store.port, lighthouse_addr=address,
                      hostname=host, init_sync=False, use_async_quorum=False,
                      timeout=timedelta(seconds=120),
                      quorum_timeout=timedelta(seconds=120),
                      connect_timeout=timedelta(seconds=120))
    outer = torch.optim.SGD(model.parameters(), lr=a.outer_lr, momentum=0.9, nesterov=True)
    wrapper = DiLoCo(manager, [model], inner, outer, sync_every=a.sync_every,
                     backup_device=torch.device("cpu"), pin_memory=False)
    # The closure keeps the replica's store alive: its server goes when the object does.
    return wrapper, lambda: (manager.shutdown(wait=False), replica_store,
                             lighthouse and lighthouse.shutdown())


def dtrain_diloco(model, inner, a):
    import dtrain

    return dtrain.DiLoCo(model, inner, sync_every=a.sync_every, outer_lr=a.outer_lr,
                         codec=a.codec, fragments=a.fragments, sync_delay=a.sync_delay), None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", required=True, choices=["torchft", "dtrain"])
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit-train", type=int, default=38400, help="every replica's together")
    p.add_argument("--limit-test", type=int, default=10000)
    p.add_argument("--batch-size", type=int, default=64, help="per replica")
    p.add_argument("--lr", type=float, default=1e-3, help="AdamW, the inner optimizer")
    p.add_argument("--sync-every", type=int, default=50)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--codec", default="none", help="dtrain: the outer exchange's codec")
    p.add_argument("--fragments", type=int, default=1, help="dtrain: streaming fragments")
    p.add_argument("--sync-delay", type=int, default=0, help="dtrain: streaming delay")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backend", default="gloo", choices=["gloo", "dtrain"],
                   help="the default process group's (dtrain: `import dtrain` registers it)")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    host = os.environ.get("DTRAIN_GLOO_HOST") or "127.0.0.1"
    if a.backend == "dtrain" and a.impl == "torchft":
        sys.exit("pytorch_diloco.py: torchft runs on its own process groups (--backend gloo)")
    torch_dist.init(a.backend, "pytorch_diloco.py")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    x, y, tx, ty = pytorch_models.fashion_mnist(a.data_dir, a.limit_train, a.limit_test)
    model = pytorch_models.cnn()
    inner = torch.optim.AdamW(model.parameters(), lr=a.lr)
    if a.impl == "torchft":
        wrapper, close = torchft_diloco(model, inner, a, rank, world, host)
    else:
        wrapper, close = dtrain_diloco(model, inner, a)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))[rank::world]
    dist.barrier()
    start = time.perf_counter()
    with wrapper:
        loss_sum, seen, steps = pytorch_models.train_pass(model, inner, x, y, perm, a.batch_size,
                                                          drop_last=True)
    elapsed = time.perf_counter() - start
    stats = wrapper.stats() if a.impl == "dtrain" else {}
    test_acc = pytorch_models.test_accuracy(model, tx, ty)
    times = torch.tensor([elapsed], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    totals = torch.tensor([seen, loss_sum], dtype=torch.float64)
    dist.all_reduce(totals)
    if rank == 0:
        print(json.dumps({"impl": a.impl, "backend": a.backend,
                          "tcp_congestion": torch_dist.tcp_congestion(a.backend), "sync_every": a.sync_every, "codec": a.codec,
                          "fragments": a.fragments, "sync_delay": a.sync_delay,
                          "replicas": world, "steps": steps, "elapsed_s": times.item(),
                          "samples_per_s": totals[0].item() / times.item(),
                          "train_loss": (totals[1] / totals[0]).item(),
                          "test_acc": test_acc, "dtrain_stats": stats,
                          "torch": torch.__version__}), flush=True)
    if close is not None:
        close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
