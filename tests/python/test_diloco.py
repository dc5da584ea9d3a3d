"""dtrain.DiLoCo around a plain PyTorch loop, 2 real processes over gloo, against a
single-process reference that runs both replicas and writes the outer step out by hand."""

import pytest
import torch
import torch.distributed as dist
from torch.nn.utils import parameters_to_vector, vector_to_parameters

import dtrain
from ranks import run_ranks

REPLICAS, STEPS, SYNC_EVERY = 2, 11, 4
INNER_LR, OUTER_LR, MOMENTUM = 0.05, 0.7, 0.9


def make_model(width=16):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(10, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, 3))


def batch(replica, step):
    g = torch.Generator().manual_seed(100 * replica + step)
    return torch.randn(16, 10, generator=g), torch.randint(0, 3, (16,), generator=g)


def inner_step(model, optimizer, replica, step):
    x, y = batch(replica, step)
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()


def reference(fragments, delay, alpha, width=16, steps=STEPS, one_epoch=False):
    """Fragment f of F equal ranges starts an exchange at the steps t with
    t % SYNC_EVERY == f * SYNC_EVERY // F (t > 0): g = mean(anchor - own), m = mu m + g,
    anchor -= lr (g + mu m), own = anchor at once, or `delay` steps later
    own = alpha own + (1 - alpha) anchor. At the end the exchange in flight lands whole and
    every fragment trained since its last exchange has one more. `one_epoch`: the steps are
    an epoch's, and an exchange due fewer than SYNC_EVERY / 2 steps before its end waits for
    it."""
    models = [make_model(width) for _ in range(REPLICAS)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=INNER_LR) for m in models]
    with torch.no_grad():
        anchor = parameters_to_vector(models[0].parameters()).clone()
    momentum = torch.zeros_like(anchor)
    n = anchor.numel()
    ranges = [(n * f // fragments, n * (f + 1) // fragments) for f in range(fragments)]

    def mean_g(f):
        lo, hi = ranges[f]
        g = torch.zeros(hi - lo, dtype=torch.float64)
        for m in models:
            g += (anchor[lo:hi] - parameters_to_vector(m.parameters())[lo:hi]).double()
        return (g / REPLICAS).float()

    def land(f, g, own):
        lo, hi = ranges[f]
        momentum[lo:hi] = MOMENTUM * momentum[lo:hi] + g
        anchor[lo:hi] -= OUTER_LR * (g + MOMENTUM * momentum[lo:hi])
        for m in models:
            v = parameters_to_vector(m.parameters()).detach().clone()
            v[lo:hi] = own * v[lo:hi] + (1 - own) * anchor[lo:hi]
            vector_to_parameters(v, m.parameters())

    pending, since = None, [0] * fragments
    for k in range(steps):
        for r in range(REPLICAS):
            inner_step(models[r], optimizers[r], r, k)
        t = k + 1
        since = [s + 1 for s in since]
        with torch.no_grad():
            if pending is not None and pending[1] == t:
                land(pending[0], pending[2], alpha)
                pending = None
            for f in range(fragments):
                if t % SYNC_EVERY != SYNC_EVERY * f // fragments:
                    continue
                if one_epoch and 2 * (steps - t) < SYNC_EVERY:
                    continue
                since[f] = 0
                if delay == 0:
                    land(f, mean_g(f), 0.0)
                else:
                    pending = (f, t + delay, mean_g(f))
    with torch.no_grad():
        if pending is not None:
            land(pending[0], pending[2], 0.0)
        for f in range(fragments):
            if since[f] > 0:
                land(f, mean_g(f), 0.0)
    return anchor


def _matches_reference(rank, world, fragments, delay, alpha, steps=STEPS, one_epoch=False):
    expected = reference(fragments, delay, alpha, steps=steps, one_epoch=one_epoch)
    model = make_model()
    if rank == 1:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)  # DiLoCo starts every replica from rank 0's parameters
    inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with dtrain.DiLoCo(model, inner, sync_every=SYNC_EVERY, outer_lr=OUTER_LR,
                       outer_momentum=MOMENTUM, fragments=fragments, sync_delay=delay,
                       merge_alpha=alpha) as diloco:
        for k in range(steps):
            if one_epoch:
                diloco.set_epoch_position(k, steps)
            inner_step(model, inner, rank, k)
    got = parameters_to_vector(model.parameters()).detach()
    config = f"fragments {fragments}, delay {delay}, alpha {alpha}, {steps} steps, {one_epoch}"
    assert (got - expected).abs().max() < 1e-5, (config, (got - expected).abs().max())
    s = diloco.stats()
    assert s["inner_steps"] == steps and s["outer_steps"] >= steps // SYNC_EVERY * fragments - (
        fragments if one_epoch else 0), (config, s)
    assert 0 <= s["hidden_s"] <= s["exchange_s"], (config, s)
    assert s["wire_bytes"] == s["fp32_bytes"] > 0, (config, s)


# fragments, delay, alpha[, steps, one epoch: 9 steps, the exchange due at 8 waits for 9]
SCHEDULES = [(1, 0, 0.5), (2, 0, 0.5), (2, 2, 0.5), (1, 4, 0.25), (1, 0, 0.5, 9, True)]


def _matches_reference_every_schedule(rank, world):
    for schedule in SCHEDULES:
        _matches_reference(rank, world, *schedule)


def test_outer_steps_equal_the_single_process_reference():
    # Every schedule in one pair of processes: a pair costs seconds of imports to start.
    run_ranks(_matches_reference_every_schedule, REPLICAS)


def test_the_schedules_differ():
    blocking, delayed = reference(2, 0, 0.5), reference(2, 2, 0.5)
    assert (blocking - delayed).abs().max() > 1e-4
    every_four = reference(1, 0, 0.5, steps=9)
    one_epoch = reference(1, 0, 0.5, steps=9, one_epoch=True)
    assert (every_four - one_epoch).abs().max() > 1e-4


def _coded(rank, world):
    model = make_model(256)  # large enough that the codes' headers and tables do not dominate
    inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with dtrain.DiLoCo(model, inner, sync_every=SYNC_EVERY, codec="rot:tile:4", fragments=2,
                       sync_delay=1) as diloco:
        for k in range(STEPS):
            inner_step(model, inner, rank, k)
    flat = parameters_to_vector(model.parameters()).detach()
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    assert torch.equal(copies[0], copies[1]), "every replica ends on the shared parameters"
    expected = reference(2, 1, 0.5, 256)
    worst = (flat - expected).abs().max()
    assert 0 < worst < 0.05 * expected.abs().max(), worst  # 4-bit codes: lossy, but close
    s = diloco.stats()
    assert 0 < s["wire_bytes"] < s["fp32_bytes"] / 5, s


def test_coded_outer_steps_keep_replicas_identical_and_send_less():
    run_ranks(_coded, REPLICAS)


def _refuses(rank, world):
    model = make_model()
    inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    for kwargs, message in [(dict(sync_every=0), "sync_every"),
                            (dict(outer_momentum=1.0), "outer_momentum"),
                            (dict(sync_every=4, fragments=5), "fragments"),
                            (dict(sync_every=4, fragments=2, sync_delay=3), "sync_delay"),
                            (dict(merge_alpha=2.0), "merge_alpha"),
                            (dict(codec="nonsense:3"), "nonsense")]:
        with pytest.raises(ValueError, match=message):
            dtrain.DiLoCo(model, inner, **kwargs)


def test_settings_that_cannot_work_are_refused():
    run_ranks(_refuses, REPLICAS)


def _error_in_the_loop(rank, world):
    model = make_model()
    inner = torch.optim.SGD(model.parameters(), lr=INNER_LR)
    with pytest.raises(KeyError):
        with dtrain.DiLoCo(model, inner, sync_every=2, sync_delay=1):
            for k in range(2):  # an exchange starts at step 2 and is in flight
                inner_step(model, inner, rank, k)
            raise KeyError("the user's loop failed")
    dist.barrier()  # the exchange in flight completed on both ranks: the group still works


def test_an_error_in_the_loop_leaves_the_group_usable():
    run_ranks(_error_in_the_loop, REPLICAS)
