"""dtrain.send / dtrain.recv as autograd operations: a U-shaped split (rank 0 keeps the first
and last layers) and a two-part split, against the same model in one process."""

import pytest
import torch
import torch.nn.functional as F

import dtrain
from ranks import run_ranks

BATCH = 16


def parts():
    torch.manual_seed(7)
    head = torch.nn.Linear(12, 24)
    middle = torch.nn.Sequential(torch.nn.Linear(24, 24), torch.nn.Tanh())
    tail = torch.nn.Linear(24, 3)
    return head, middle, tail


def data():
    generator = torch.Generator().manual_seed(11)
    return torch.randn(BATCH, 12, generator=generator), torch.randint(0, 3, (BATCH,), generator=generator)


def reference_grads():
    """Every part's gradients from one process, no communication."""
    head, middle, tail = parts()
    x, y = data()
    F.cross_entropy(tail(middle(head(x))), y).backward()
    return [[p.grad for p in m.parameters()] for m in (head, middle, tail)]


def grads(module):
    return [p.grad for p in module.parameters()]


def _ushape(rank, world, codec):
    head, middle, tail = parts()
    x, y = data()
    activations = torch.empty(BATCH, 24)
    dtrain.reset_link_stats()
    if rank == 0:  # client: head and tail; data and labels stay here
        token = dtrain.send(head(x), dst=1, codec=codec)
        back = dtrain.recv(src=1, like=activations, after=token)
        F.cross_entropy(tail(back), y).backward()
        mine = [grads(head), grads(tail)]
        expected = [reference_grads()[0], reference_grads()[2]]
    else:  # server: the middle
        h = dtrain.recv(src=0, like=activations)
        dtrain.send(middle(h), dst=0, codec=codec).backward()
        mine, expected = [grads(middle)], [reference_grads()[1]]
    for got, want in zip(mine, expected):
        for g, w in zip(got, want):
            if codec == "none":
                assert torch.equal(g, w), "codec none: the gradients of one process, exactly"
            else:
                cosine = F.cosine_similarity(g.reshape(-1), w.reshape(-1), dim=0)
                assert cosine > 0.99, float(cosine)
    stats = {(r["peer"], r["direction"]): r for r in dtrain.link_stats()}
    peer = 1 - rank
    packet = dtrain.packet_size(codec, [BATCH, 24])
    # Each rank sends two packets of [BATCH, 24]: activations forward, a gradient backward.
    assert stats[(peer, "send")]["bytes"] == 2 * packet and stats[(peer, "send")]["messages"] == 2
    assert stats[(peer, "recv")]["bytes"] == 2 * packet
    assert stats[(peer, "send")]["fp32_bytes"] == 2 * 4 * BATCH * 24
    assert "Mbit/s" in dtrain.format_link_stats()


@pytest.mark.parametrize("codec", ["none", "sortquant:8"])
def test_ushape_gradients_equal_one_process(codec):
    run_ranks(_ushape, 2, codec)


def _two_parts(rank, world):
    head, middle, tail = parts()
    x, y = data()
    if rank == 0:  # sends activations, gets their gradient back through token.backward()
        dtrain.send(head(x), dst=1, codec="none").backward()
        # The reference: one process, the boundary gradient rounded to fp16 as on the wire.
        r_head, r_middle, r_tail = parts()
        boundary = r_head(x)
        loss = F.cross_entropy(r_tail(r_middle(boundary)), y)
        (g_boundary,) = torch.autograd.grad(loss, boundary, retain_graph=True)
        boundary.backward(g_boundary.half().float())
        for g, w in zip(grads(head), grads(r_head)):
            assert torch.equal(g, w)
    else:  # the rest of the model and the loss
        h = dtrain.recv(src=0, like=torch.empty(BATCH, 24), codec="fp16")
        F.cross_entropy(tail(middle(h)), y).backward()
        for g, w in zip(grads(middle) + grads(tail), reference_grads()[1] + reference_grads()[2]):
            assert torch.equal(g, w)
        sent = {r["direction"]: r for r in dtrain.link_stats()}["send"]
        assert sent["bytes"] == dtrain.packet_size("fp16", [BATCH, 24])  # gradient as fp16


def test_two_part_split_with_an_explicit_gradient_codec():
    run_ranks(_two_parts)


def _bad_calls(rank, world):
    with pytest.raises(ValueError, match="this rank"):
        dtrain.send(torch.ones(3), dst=rank)
    with pytest.raises(ValueError, match="outside"):
        dtrain.recv(src=5, like=torch.ones(3))
    with pytest.raises(ValueError, match="uniform:99"):
        dtrain.send(torch.ones(3), dst=1 - rank, codec="uniform:99")
    if rank == 0:
        dtrain.send(torch.ones(2, 5), dst=1)
    else:
        with pytest.raises(ValueError, match=r"shape \[2, 5\], expected \[5, 2\]"):
            dtrain.recv(src=0, like=torch.ones(5, 2))


def test_bad_peers_codecs_and_shapes_are_clear_errors():
    run_ranks(_bad_calls)


def test_without_a_process_group_it_says_so():
    with pytest.raises(RuntimeError, match="not initialized"):
        dtrain.send(torch.ones(3), dst=1)
