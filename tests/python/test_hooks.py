"""dtrain.hooks.compressed_allreduce_hook on PyTorch DDP, 2 real processes over gloo."""

import copy

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import dtrain
from ranks import run_ranks

STEPS = 40
# sortquant:8 with error feedback ends within this of the uncompressed loss after STEPS
# (absolute, on a loss that falls from ~1.4 to ~0.3).
LOSS_TOLERANCE = 0.05


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 4))


def batches(rank, steps, size=32):
    """A fixed teacher's labels on gaussian inputs; each rank its own samples."""
    generator = torch.Generator().manual_seed(1234)
    teacher = torch.randn(20, 4, generator=generator)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(steps):
        x = torch.randn(size, 20, generator=data)
        yield x, (x @ teacher).argmax(dim=1)


def wrap(model, state=None, hook=None):
    # Small buckets, so a step exchanges several and the worker orders them.
    ddp = DDP(model, bucket_cap_mb=0.004)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    return ddp


def train(ddp, rank, steps, check=None):
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    loss = None
    for x, y in batches(rank, steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        if check is not None:
            check(ddp)
        optimizer.step()
    return float(loss.detach())


def same_on_every_rank(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, flat)
    return all(torch.equal(c, copies[0]) for c in copies)


def _codec_none_equals_allreduce(rank, world):
    model = make_model()
    reference = wrap(copy.deepcopy(model))
    state = dtrain.hooks.CompressionState(codec="none")
    hooked = wrap(model, state, dtrain.hooks.compressed_allreduce_hook)
    ref_grads = []
    train(reference, rank, 5, lambda m: ref_grads.append([p.grad.clone() for p in m.parameters()]))
    step = iter(ref_grads)

    def compare(m):
        for ours, theirs in zip((p.grad for p in m.parameters()), next(step)):
            assert torch.equal(ours, theirs), "codec none must give PyTorch's all-reduce exactly"

    train(hooked, rank, 5, compare)
    stats = state.stats()
    assert stats["iterations"] == 5 and stats["buckets"] > 5, stats  # one bucket in the first step, then more
    assert stats["ratio"] > 1.0  # headers on top of the float32 values


def test_codec_none_gives_the_gradients_of_pytorchs_allreduce():
    run_ranks(_codec_none_equals_allreduce)


def _lossy_codec_trains(rank, world, codec):
    reference = train(wrap(make_model()), rank, STEPS)
    state = dtrain.hooks.CompressionState(codec=codec)
    hooked = wrap(make_model(), state, dtrain.hooks.compressed_allreduce_hook)
    loss = train(hooked, rank, STEPS)
    assert same_on_every_rank(hooked.module), "ranks must end with identical parameters"
    assert abs(loss - reference) < LOSS_TOLERANCE, (loss, reference)
    stats = state.stats()
    assert 0.2 < stats["ratio"] < 0.4, stats  # 8 bits of 32, plus headers and tables


def test_sortquant8_with_error_feedback_trains_like_uncompressed():
    run_ranks(_lossy_codec_trains, 2, "sortquant:8")


def _nan_gradient_is_an_error(rank, world):
    hooked = wrap(make_model(), dtrain.hooks.CompressionState(codec="sortquant:8"),
                  dtrain.hooks.compressed_allreduce_hook)
    out = hooked(torch.randn(4, 20)).sum() * float("nan")
    with pytest.raises(Exception, match="NaN or Inf"):
        out.backward()


def test_nan_gradient_raises_in_backward_on_every_rank():
    run_ranks(_nan_gradient_is_an_error)


def test_bad_codec_is_refused_when_the_state_is_made():
    with pytest.raises(ValueError, match="kmeans:9"):
        dtrain.hooks.CompressionState(codec="kmeans:9")


def test_a_failed_bucket_fails_the_queued_ones_without_running_them():
    state = dtrain.hooks.CompressionState(codec="sortquant:8")
    ran = []

    def failing():
        raise ValueError("NaN or Inf in bucket 0")

    first = state._submit(failing)
    second = state._submit(lambda: ran.append("bucket 1"))
    with pytest.raises(ValueError, match="bucket 0"):
        first.wait()
    with pytest.raises(RuntimeError, match="earlier bucket failed: NaN or Inf in bucket 0"):
        second.wait()
    worker = state._worker
    state.close()
    assert ran == [] and not worker.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        state._submit(lambda: None)


def test_a_state_closed_before_its_first_bucket_takes_none():
    state = dtrain.hooks.CompressionState(codec="none")
    state.close()
    with pytest.raises(RuntimeError, match="closed"):
        state._submit(lambda: None)
    assert state._worker is None
