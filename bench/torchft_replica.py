#!/usr/bin/env python3
"""One torchft DiLoCo replica for bench/torchft_failures.py: the cnn on Fashion-MNIST, batch
64, AdamW 1e-3 inner, SGD 0.7 Nesterov 0.9 outer (as bench/pytorch_diloco.py), torchft
0.2.0's Manager, ProcessGroupGloo and local_sgd.DiLoCo, min_replica_size 2, on a lab host.

Started again after a kill, it asks the lighthouse in at its first outer step and heals
from a peer there (torchft's own recovery). Data: torchft tracks no data position, so a
replica at outer step k trains the stream's window (k x replicas + slot) of an endless
sequence of epoch permutations. The committed samples (participants x H x batch summed
over committed outer steps) travel in the state a healing replica loads; every replica stops
once they reach --samples.

Appends JSON lines to --log: "start" (the process began), "train" (its loop begins), one
per outer step ("step": the manager's step before it, "committed", "participants", "t"),
"back" (the first outer step this process took part in completed: from there it trains in
the run), "done" (with the test accuracy). Times are wall-clock seconds (time.time()),
compared with the driver's."""
import argparse
import json
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F

import pytorch_models


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--slot", type=int, required=True)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--host", required=True, help="this replica's lab address")
    p.add_argument("--lighthouse", required=True, help="http://HOST:PORT")
    p.add_argument("--samples", type=int, required=True, help="committed samples to train")
    p.add_argument("--sync-every", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--log", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    log = open(a.log, "a", buffering=1)

    def note(**row):
        log.write(json.dumps({"slot": a.slot, "t": time.time(), **row}) + "\n")

    note(event="start")
    # torchft's HTTP checkpoint transport advertises socket.gethostname(), which names no
    # lab address: a healing replica's fetch would be refused (torchft #329). The lab's.
    socket.gethostname = lambda: a.host
    from torchft import Manager, ProcessGroupGloo
    from torchft.local_sgd import DiLoCo

    torch.manual_seed(0)
    x, y, tx, ty = pytorch_models.fashion_mnist(a.data_dir, 60000, 10000)
    model = pytorch_models.cnn()
    inner = torch.optim.AdamW(model.parameters(), lr=a.lr)
    progress = {"committed": 0}
    replica_store = dist.TCPStore(a.host, 0, 1, True, wait_for_workers=False)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timedelta(seconds=60)),
        load_state_dict=lambda s: (model.load_state_dict(s["model"]),
                                   progress.update(s["progress"])),
        state_dict=lambda: {"model": model.state_dict(), "progress": dict(progress)},
        min_replica_size=2, replica_id=f"replica_{a.slot}", rank=0, world_size=1,
        store_addr=a.host, store_port=replica_store.port, lighthouse_addr=a.lighthouse,
        hostname=a.host, init_sync=False, use_async_quorum=False,
        timeout=timedelta(seconds=60), quorum_timeout=timedelta(seconds=120),
        connect_timeout=timedelta(seconds=60))
    outer = torch.optim.SGD(model.parameters(), lr=a.outer_lr, momentum=0.9, nesterov=True)
    window = a.sync_every * a.batch_size
    n = len(y)
    back = False
    note(event="train")
    with DiLoCo(manager, [model], inner, outer, sync_every=a.sync_every,
                backup_device=torch.device("cpu"), pin_memory=False):
        while progress["committed"] < a.samples:
            k = manager.current_step()
            start = (k * a.replicas + a.slot) * window
            epoch = start // n
            order = torch.randperm(n, generator=torch.Generator().manual_seed(epoch))
            pos = (torch.arange(start, start + window) % n)
            idx_all = order[pos]
            model.train()
            for i in range(a.sync_every):  # the H-th step's hook runs the outer step
                idx = idx_all[i * a.batch_size:(i + 1) * a.batch_size]
                loss = F.cross_entropy(model(x[idx]), y[idx])
                inner.zero_grad()
                loss.backward()
                inner.step()
            committed = manager.current_step() > k
            participants = manager.num_participants()
            if committed:
                progress["committed"] += participants * window
            note(event="step", step=k, committed=committed, participants=participants,
                 total=progress["committed"])
            if committed and not back:
                back = True
                note(event="back")
    note(event="done", test_acc=pytorch_models.test_accuracy(model, tx, ty),
         committed_samples=progress["committed"])
    manager.shutdown(wait=False)
    os._exit(0)  # torchft's threads would keep the process waiting


if __name__ == "__main__":
    main()
