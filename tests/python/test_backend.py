"""dtrain as a torch.distributed backend (dtrain.backend, src/dtrain/torch_backend): every
operation on real processes against exact expected values (integer-valued inputs, so every
order of addition gives the same float), the errors it owes, and PyTorch DDP trained over
"dtrain" against the same run over "gloo"."""

import datetime
import time

import pytest
import torch
import torch.distributed as dist

import dtrain
from ranks import run_ranks

pytestmark = pytest.mark.skipif(not dtrain.backend.available(),
                                reason="this build of the package has no backend")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
          torch.int64, torch.int8, torch.uint8]


def values(rank, n, dtype):
    """Small integers, different on each rank (exact in every dtype above)."""
    return ((torch.arange(n) * 7 + rank * 3) % 5 + 1).to(dtype)


def expected(op, world, n, dtype):
    xs = [values(r, n, dtype).to(torch.int64) for r in range(world)]
    out = xs[0].clone()
    for x in xs[1:]:
        out = {dist.ReduceOp.SUM: lambda a, b: a + b, dist.ReduceOp.PRODUCT: lambda a, b: a * b,
               dist.ReduceOp.MIN: torch.minimum, dist.ReduceOp.MAX: torch.maximum,
               dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
               dist.ReduceOp.BXOR: torch.bitwise_xor}[op](out, x)
    return out.to(dtype)


def reductions(rank, world):
    assert dist.get_backend() == "dtrain"
    for dtype in DTYPES:
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                   dist.ReduceOp.MAX):
            for n in (0, 1, 5, 1000):
                t = values(rank, n, dtype)
                dist.all_reduce(t, op=op)
                assert torch.equal(t, expected(op, world, n, dtype)), (dtype, op, n)
        if not dtype.is_floating_point:
            for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
                t = values(rank, 33, dtype)
                dist.all_reduce(t, op=op)
                assert torch.equal(t, expected(op, world, 33, dtype)), (dtype, op)
    t = values(rank, 10, torch.float32)
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.allclose(t, expected(dist.ReduceOp.SUM, world, 10, torch.float32) / world)
    t = values(rank, 10, torch.float32)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(2.0))
    assert torch.equal(t, 2 * expected(dist.ReduceOp.SUM, world, 10, torch.float32))
    # Complex tensors reach the backend as real pairs (torch.distributed's own conversion).
    c = torch.complex(values(rank, 4, torch.float32), values(rank + 1, 4, torch.float32))
    dist.all_reduce(c)
    assert torch.equal(torch.view_as_real(c)[:, 0], expected(dist.ReduceOp.SUM, world, 4,
                                                              torch.float32))
    # Strided and coalesced tensors.
    m = values(rank, 12, torch.float32).view(3, 4).t()
    dist.all_reduce(m)
    assert torch.equal(m, expected(dist.ReduceOp.SUM, world, 12, torch.float32).view(3, 4).t())
    ts = [values(rank, 3, torch.float32), values(rank, 5, torch.float32)]
    dist.all_reduce_coalesced(ts)
    assert torch.equal(ts[1], expected(dist.ReduceOp.SUM, world, 5, torch.float32))
    # reduce: the root's result only; the others keep their input.
    t = values(rank, 6, torch.int64)
    dist.reduce(t, dst=1, op=dist.ReduceOp.MAX)
    want = expected(dist.ReduceOp.MAX, world, 6, torch.int64) if rank == 1 else values(rank, 6,
                                                                                      torch.int64)
    assert torch.equal(t, want)
    # An asynchronous call's future holds its output.
    t = values(rank, 8, torch.float32)
    work = dist.all_reduce(t, async_op=True)
    out = work.get_future().wait()
    assert torch.equal(out[0], expected(dist.ReduceOp.SUM, world, 8, torch.float32))
    assert work.is_completed() and work.is_success()


def movements(rank, world):
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        t = values(rank, 7, torch.int64).to(dtype) if dtype != torch.bool else \
            torch.tensor([rank % 2 == 0, True])
        b = t.clone()
        dist.broadcast(b, src=world - 1)
        root = values(world - 1, 7, torch.int64).to(dtype) if dtype != torch.bool else \
            torch.tensor([(world - 1) % 2 == 0, True])
        assert torch.equal(b, root), dtype
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        for r in range(world):
            want = values(r, 7, torch.int64).to(dtype) if dtype != torch.bool else \
                torch.tensor([r % 2 == 0, True])
            assert torch.equal(parts[r], want), (dtype, r)
    x = values(rank, 4, torch.float32)
    whole = torch.empty(4 * world)
    dist.all_gather_into_tensor(whole, x)
    assert torch.equal(whole, torch.cat([values(r, 4, torch.float32) for r in range(world)]))
    gathered = [torch.empty(4) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gathered, dst=0)
    if rank == 0:
        assert torch.equal(torch.cat(gathered), whole)
    mine = torch.empty(4)
    dist.scatter(mine, [values(r, 4, torch.float32) for r in range(world)] if rank == 0 else None,
                 src=0)
    assert torch.equal(mine, values(rank, 4, torch.float32))
    # reduce_scatter: block r of the sum of every rank's vector.
    full = [values(rank + 10 * r, 3, torch.float32) for r in range(world)]
    out = torch.empty(3)
    dist.reduce_scatter(out, full)
    assert torch.equal(out, sum(values(q + 10 * rank, 3, torch.float32) for q in range(world)))
    out2 = torch.empty(3)
    dist.reduce_scatter_tensor(out2, torch.cat(full))
    assert torch.equal(out2, out)
    # all_to_all_single with uneven splits: rank r sends r + 1 rows to each rank.
    send = torch.full((world * (rank + 1), 2), float(rank))
    recv = torch.empty(sum(r + 1 for r in range(world)), 2)
    dist.all_to_all_single(recv, send, output_split_sizes=[r + 1 for r in range(world)],
                           input_split_sizes=[rank + 1] * world)
    assert torch.equal(recv[:, 0], torch.cat([torch.full((r + 1,), float(r))
                                              for r in range(world)]))
    outs = [torch.empty(2) for _ in range(world)]
    dist.all_to_all(outs, [torch.full((2,), float(10 * rank + r)) for r in range(world)])
    for r in range(world):
        assert torch.equal(outs[r], torch.full((2,), float(10 * r + rank)))
    dist.barrier()


def point_to_point(rank, world):
    peer = 1 - rank
    # Both ranks send first, then receive: sends are posted, never blocking each other.
    out = values(rank, 1000, torch.float32)
    sends = [dist.isend(out, peer, tag=t) for t in (3, 5)]
    got = {t: torch.empty(1000) for t in (5, 3)}
    receives = [dist.irecv(got[t], peer, tag=t) for t in (5, 3)]
    for w in sends + receives:
        w.wait()
    for t in (3, 5):
        assert torch.equal(got[t], values(peer, 1000, torch.float32))
    empty = torch.empty(0)
    if rank == 0:
        dist.send(empty, 1)
    else:
        dist.recv(empty, 0)
    # A receive's Work completes while the user waits on a later send (no shared waiter).
    if rank == 0:
        r = dist.irecv(torch.empty(1), 1, tag=7)
        s = dist.isend(torch.ones(1), 1, tag=8)
        s.wait()
        dist.send(torch.ones(1), 1, tag=9)
        r.wait()
    else:
        dist.recv(torch.empty(1), 0, tag=8)
        dist.recv(torch.empty(1), 0, tag=9)
        dist.send(torch.ones(1), 0, tag=7)


def any_source(rank, world):
    """Ranks 1 and 2 send to rank 0, which receives without naming the source: each message
    whole, with its sender, small (one framed message) and large (pieces, then the check)."""
    if rank == 0:
        senders = []
        for _ in range(2 * (world - 1)):
            got = torch.full((10,), -1.0)
            sender = dist.recv(got, tag=4)
            assert torch.equal(got, torch.full((10,), float(sender))), (sender, got)
            senders.append(sender)
        assert sorted(senders) == [1, 1, 2, 2]
        large = torch.full((3 << 18,), -1.0)
        work = dist.irecv(large, tag=6)
        work.wait()
        assert work._source_rank() == 2
        assert torch.equal(large, torch.arange(3 << 18, dtype=torch.float32))
    else:
        for _ in range(2):
            dist.send(torch.full((10,), float(rank)), 0, tag=4)
        if rank == 2:
            dist.send(torch.arange(3 << 18, dtype=torch.float32), 0, tag=6)


def sparse(rank, world):
    """The sparse all-reduce sums as the dense one would, coalesced, on every rank."""
    def of_rank(r, dense_dims):
        g = torch.Generator().manual_seed(r)
        idx = torch.randint(0, 6, (2, 5 + r), generator=g)
        vals = torch.randint(-9, 9, (5 + r,) + (3,) * dense_dims, generator=g).float()
        return torch.sparse_coo_tensor(idx, vals, (6, 6) + (3,) * dense_dims,
                                       check_invariants=True)
    for dense_dims in (0, 1):
        t = of_rank(rank, dense_dims)
        dist.all_reduce(t)
        assert t.is_coalesced()
        want = sum(of_rank(r, dense_dims).to_dense() for r in range(world))
        assert torch.equal(t.to_dense(), want)
    empty = torch.sparse_coo_tensor(torch.zeros((1, 0), dtype=torch.long), torch.zeros(0), (4,),
                                    check_invariants=True)
    dist.all_reduce(empty)
    assert torch.equal(empty.to_dense(), torch.zeros(4))
    with pytest.raises((RuntimeError, ValueError), match="sizes"):
        dist.all_reduce(torch.ones(3 + rank).to_sparse())
    dist.barrier()  # the group still works


def errors(rank, world):
    with pytest.raises((RuntimeError, ValueError), match="band cannot reduce Float"):
        dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
    with pytest.raises((RuntimeError, ValueError), match="sparse allreduce sums"):
        dist.all_reduce(torch.ones(3).to_sparse(), op=dist.ReduceOp.MAX)
    with pytest.raises((RuntimeError, ValueError), match="tags are 0"):
        dist.isend(torch.ones(1), 1 - rank, tag=1 << 25)
    dist.barrier()  # the group still works
    # A peer that never comes: the group's own timeout ends the wait, naming it.
    short = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=2))
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="rank 1"):
            dist.all_reduce(torch.ones(4), group=short)
        assert time.monotonic() - start < 20
    dist.barrier()


def subgroups(rank, world):
    g = dist.new_group([0, 2])
    if rank in (0, 2):
        t = torch.tensor([float(rank + 1)])
        dist.all_reduce(t, group=g)
        assert t.item() == 4.0
    dist.barrier()


# Unset, DTRAIN_ALGO is the exchange between 2 ranks on a long link (tests/python/
# test_backend_trainers.py runs one in the lab), else the ring.
@pytest.mark.parametrize("world,algo", [(3, None), (2, "exchange"), (3, "exchange")])
def test_reductions_are_exact_in_every_dtype(world, algo, monkeypatch):
    if algo is None:
        monkeypatch.delenv("DTRAIN_ALGO", raising=False)
    else:
        monkeypatch.setenv("DTRAIN_ALGO", algo)
    run_ranks(reductions, world, backend="dtrain")


def test_broadcast_gathers_scatters_and_all_to_all_move_every_value():
    run_ranks(movements, 3, backend="dtrain")


def test_sends_and_receives_match_by_tag_and_never_wait_on_each_other():
    run_ranks(point_to_point, 2, backend="dtrain")


def test_a_receive_from_any_source_takes_whole_messages_and_names_their_sender():
    run_ranks(any_source, 3, backend="dtrain")


def test_a_sparse_all_reduce_sums_as_the_dense_one_would():
    run_ranks(sparse, 3, backend="dtrain")


def test_what_it_does_not_support_is_an_error_naming_it():
    run_ranks(errors, 2, backend="dtrain")


def test_new_group_connects_its_members_only():
    run_ranks(subgroups, 3, backend="dtrain")


def ddp_losses(rank, world, backend, path):
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)),
        bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(5):
        x, y = torch.randn(8, 20, generator=g), torch.randint(0, 4, (8,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    if rank == 0:
        torch.save({"losses": losses, "weights": [p.detach() for p in model.parameters()]},
                   f"{path}.{backend}")


def test_pytorch_ddp_over_dtrain_trains_as_over_gloo(tmp_path):
    path = str(tmp_path / "ddp")
    for backend in ("gloo", "dtrain"):
        run_ranks(ddp_losses, 2, backend, path, backend=backend)
    gloo, ours = torch.load(f"{path}.gloo"), torch.load(f"{path}.dtrain")
    assert ours["losses"] == gloo["losses"]  # a sum of two values is one rounding
    for a, b in zip(ours["weights"], gloo["weights"]):
        assert torch.equal(a, b)
