"""PyTorch's own trainers, unchanged, over the "dtrain" backend against the same run over
"gloo" with one seed: FSDP2 (fully_shard), torch.distributed.pipelining's GPipe and 1F1B
schedules, dtrain.DiLoCo (exact and coded), and bench/pytorch_fsdp.py (FSDP2 on the RoBERTa
twin of dtrain's roberta, whose blocks are checked against `dtrain models`). Each run saves
its losses and final parameters on rank 0; the two backends' must be equal (the sums of two
values are one rounding whichever transport carries them) or, where a backend may order a
reduction differently, within fp32 rounding."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dtrain
from ranks import run_ranks

pytestmark = pytest.mark.skipif(not dtrain.backend.available(),
                                reason="this build of the package has no backend")


def batches(rank, steps, n=8, width=16, classes=4):
    g = torch.Generator().manual_seed(100 + rank)
    return [(torch.randn(n, width, generator=g), torch.randint(0, classes, (n,), generator=g))
            for _ in range(steps)]


def mlp(width=16, hidden=32, classes=4):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, classes))


def save(rank, path, backend, losses, params):
    if rank == 0:
        torch.save({"losses": losses, "params": [p.detach().clone() for p in params]},
                   f"{path}.{backend}")


def train(model, opt, data):
    """Steps of cross-entropy training on `data`; the losses."""
    losses = []
    for x, y in data:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def fsdp2(rank, world, backend, path):
    from torch.distributed.fsdp import fully_shard
    model = mlp()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    losses = train(model, torch.optim.AdamW(model.parameters(), lr=1e-2), batches(rank, 5))
    full = [p.full_tensor() for p in model.parameters()]  # an all-gather of every shard
    save(rank, path, backend, losses, full)


def pipeline(rank, world, backend, path, schedule):
    from torch.distributed import pipelining
    model = mlp()
    stage_layers = model[:2] if rank == 0 else model[2:]
    stage = pipelining.PipelineStage(stage_layers, rank, world, torch.device("cpu"))
    loss_fn = torch.nn.CrossEntropyLoss()
    run = getattr(pipelining, schedule)(stage, n_microbatches=4, loss_fn=loss_fn)
    opt = torch.optim.SGD(stage_layers.parameters(), lr=0.1)
    losses = []
    for x, y in batches(0, 4, n=16):  # one data stream: rank 0 feeds, the last rank scores
        opt.zero_grad()
        if rank == 0:
            run.step(x)
        else:
            out = []
            run.step(target=y, losses=out)
            losses.append(sum(l.item() for l in out) / len(out))
        opt.step()
    # The last stage's losses and every stage's parameters, gathered on rank 0.
    loss_box = [losses]
    dist.broadcast_object_list(loss_box, src=world - 1)
    params = [p.detach() for p in stage_layers.parameters()]
    everyone = [None] * world
    dist.all_gather_object(everyone, params)
    save(rank, path, backend, loss_box[0], [p for ps in everyone for p in ps])


def diloco(rank, world, backend, path, codec):
    model = mlp()
    inner = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with dtrain.DiLoCo(model, inner, sync_every=3, codec=codec):
        losses = train(model, inner, batches(rank, 9))
    save(rank, path, backend, losses, list(model.parameters()))


def both(tmp_path, fn, *args, exact=True):
    path = str(tmp_path / fn.__name__)
    for backend in ("gloo", "dtrain"):
        run_ranks(fn, 2, backend, path, *args, backend=backend)
    gloo, ours = torch.load(f"{path}.gloo"), torch.load(f"{path}.dtrain")
    assert len(ours["losses"]) == len(gloo["losses"]) > 0
    assert len(ours["params"]) == len(gloo["params"]) > 0
    if exact:
        assert ours["losses"] == gloo["losses"]
        for a, b in zip(ours["params"], gloo["params"]):
            assert torch.equal(a, b)
    else:
        assert ours["losses"] == pytest.approx(gloo["losses"], rel=1e-5)
        for a, b in zip(ours["params"], gloo["params"]):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fsdp2_fully_shard_trains_over_dtrain_as_over_gloo(tmp_path):
    both(tmp_path, fsdp2)


@pytest.mark.parametrize("schedule", ["ScheduleGPipe", "Schedule1F1B"])
def test_pipelining_schedules_train_over_dtrain_as_over_gloo(tmp_path, schedule):
    both(tmp_path, pipeline, schedule)


@pytest.mark.parametrize("codec", ["none", "rot:tile:2"])
def test_dtrain_diloco_trains_over_the_dtrain_backend_as_over_gloo(tmp_path, codec):
    both(tmp_path, diloco, codec)


BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_benchmarks_roberta_twin_has_dtrains_blocks_and_parameters(dtrain_binary):
    sys.path.insert(0, str(BENCH))
    import pytorch_models

    listed = subprocess.run([dtrain_binary, "models", "--model", "roberta", "--num-classes", "2",
                             "--layers", "2", "--hidden", "64", "--heads", "4", "--format",
                             "jsonl"], capture_output=True, text=True, check=True, timeout=60)
    ours = [json.loads(line)["parameters"] for line in listed.stdout.splitlines()]
    twin = pytorch_models.roberta(layers=2, hidden=64, heads=4, classes=2)
    blocks = [sum(p.numel() for p in block.parameters()) for block in twin]
    assert blocks + [sum(blocks)] == ours


def test_the_fsdp2_benchmark_trains_over_dtrain_as_over_gloo(dtrain_binary):
    """bench/pytorch_fsdp.py as bench/torch_backend.sh runs it, on a small RoBERTa."""
    rows = {}
    for backend in ("gloo", "dtrain"):
        run = subprocess.run([dtrain_binary, "launch", "-n", "2", "--", sys.executable,
                              str(BENCH / "pytorch_fsdp.py"), "--backend", backend, "--layers",
                              "2", "--hidden", "64", "--heads", "4", "--vocab", "1000",
                              "--steps", "2"], capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        rows[backend] = [json.loads(line.split(" ", 2)[2]) for line in run.stdout.splitlines()
                         if line.startswith("[rank 0] {")][0]
    assert len(rows["dtrain"]["losses"]) == 3  # the untimed step and the two timed
    assert rows["dtrain"]["losses"] == rows["gloo"]["losses"]  # sums of two: one rounding
