"""Runs a function on N real processes joined in a gloo group (torch.multiprocessing spawn,
a file rendezvous in a temporary folder). An exception on any rank fails the caller with
that rank's traceback; a collective that waits too long is an error, not a hang."""

import datetime
import os
import tempfile

import torch.distributed as dist
import torch.multiprocessing as mp


def _entry(rank, world, store_path, fn, args):
    dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=60))
    try:
        fn(rank, world, *args)
    finally:
        dist.destroy_process_group()


def run_ranks(fn, world=2, *args):
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        mp.spawn(_entry, args=(world, store, fn, args), nprocs=world, join=True)
