"""Compressed, autograd-aware point-to-point messages over torch.distributed, for pipelines
and split learning written by hand.

    # client (rank 0) keeps the first and last layers, the server (rank 1) the middle
    token = dtrain.send(head(x), dst=1, codec="sortquant:8")        # forward: activations out
    y = dtrain.recv(src=1, like=template, after=token)              # forward: activations in
    loss_fn(tail(y), labels).backward()   # backward: gradient of y to rank 1, then the
                                          # gradient of head(x) back from rank 1
    # server (rank 1)
    h = dtrain.recv(src=0, like=template)
    dtrain.send(middle(h), dst=0, codec="sortquant:8").backward()

send() codes the tensor and sends it; it returns a scalar token whose backward receives the
gradient from dst (coded by the peer) and passes it on into the graph that produced the
tensor. recv() receives a tensor; its backward codes the gradient and sends it back to src
(with `codec`, by default the codec the activations arrived with). Passing a token as
`after` joins the two graphs so one backward() runs both in the right order.

Every message is two: the packet's length (8 bytes) and the packet. Each link keeps
counters (link_stats()): packets, bytes on the wire, fp32 bytes (4 per value, what an
uncoded float32 tensor would take), time on the wire (receiver side: from the length's
arrival to the packet's, so waiting for the peer's compute is not counted; it is in
wait_s), and coding time.
"""

import threading
import time
from dataclasses import asdict, dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from . import _C
from .codecs import _require_codec_name, _require_tensor

_LENGTH = torch.int64


@dataclass
class LinkStats:
    peer: int
    direction: str  # "send" or "recv"
    messages: int = 0
    bytes: int = 0
    fp32_bytes: int = 0
    wire_s: float = 0.0  # recv: length arrived -> packet arrived; send: time in send calls
    wait_s: float = 0.0  # recv only: waiting for the length (the peer still computing)
    code_s: float = 0.0  # encode (send) or decode (recv)

    def ratio(self) -> float:
        return self.bytes / self.fp32_bytes if self.fp32_bytes else 0.0

    def mbit_per_s(self) -> float:
        return self.bytes * 8 / self.wire_s / 1e6 if self.wire_s > 0 else 0.0


_stats: Dict[Tuple[int, str], LinkStats] = {}
_stats_lock = threading.Lock()


def _account(peer: int, direction: str, **add) -> None:
    with _stats_lock:
        entry = _stats.setdefault((peer, direction), LinkStats(peer, direction))
        entry.messages += 1
        for key, value in add.items():
            setattr(entry, key, getattr(entry, key) + value)


def link_stats() -> List[Dict[str, object]]:
    """One dict per (peer, direction): the counters plus ratio and mbit_per_s."""
    with _stats_lock:
        rows = []
        for key in sorted(_stats):
            entry = _stats[key]
            row = asdict(entry)
            row["ratio"] = entry.ratio()
            row["mbit_per_s"] = entry.mbit_per_s()
            rows.append(row)
        return rows


def reset_link_stats() -> None:
    with _stats_lock:
        _stats.clear()


def format_link_stats() -> str:
    """link_stats() as a table for people."""
    lines = [
        f"{'peer':>4} {'dir':>4} {'msgs':>6} {'bytes':>12} {'fp32 bytes':>12} {'ratio':>6} "
        f"{'wire s':>8} {'wait s':>8} {'code s':>8} {'Mbit/s':>8}"
    ]
    for r in link_stats():
        lines.append(
            f"{r['peer']:>4} {r['direction']:>4} {r['messages']:>6} {r['bytes']:>12} "
            f"{r['fp32_bytes']:>12} {r['ratio']:>6.3f} {r['wire_s']:>8.3f} {r['wait_s']:>8.3f} "
            f"{r['code_s']:>8.3f} {r['mbit_per_s']:>8.1f}"
        )
    return "\n".join(lines)


def _check_peer(peer: int, group, what: str) -> None:
    if not dist.is_initialized():
        raise RuntimeError(f"dtrain.{what}: torch.distributed is not initialized "
                           "(call torch.distributed.init_process_group first)")
    if not isinstance(peer, int):
        raise TypeError(f"dtrain.{what}: the peer must be an int rank, got {type(peer).__name__}")
    size = dist.get_world_size(group)
    if not 0 <= peer < size:
        raise ValueError(f"dtrain.{what}: rank {peer} is outside the group of {size}")
    if peer == dist.get_rank(group):
        raise ValueError(f"dtrain.{what}: rank {peer} is this rank")


def _send_packet(tensor: torch.Tensor, codec: str, dst: int, group) -> None:
    start = time.perf_counter()
    packet = _C.encode(tensor.detach(), codec)
    coded = time.perf_counter()
    dist.send(torch.tensor([packet.numel()], dtype=_LENGTH), dst, group=group)
    dist.send(packet, dst, group=group)
    _account(dst, "send", bytes=packet.numel(), fp32_bytes=4 * tensor.numel(),
             wire_s=time.perf_counter() - coded, code_s=coded - start)


def _recv_packet(src: int, group, shape: Sequence[int], device: torch.device) -> Tuple[torch.Tensor, str]:
    """The tensor from `src` and the codec it came with."""
    start = time.perf_counter()
    length = torch.empty(1, dtype=_LENGTH)
    dist.recv(length, src, group=group)
    arrived = time.perf_counter()
    size = int(length.item())
    if not 0 < size < 1 << 40:
        raise ValueError(f"dtrain.recv: rank {src} announced a packet of {size} bytes")
    packet = torch.empty(size, dtype=torch.uint8)
    dist.recv(packet, src, group=group)
    received = time.perf_counter()
    codec = _C.inspect(packet)["codec"]
    tensor = _C.decode(packet, None)
    if list(tensor.shape) != list(shape):
        raise ValueError(f"dtrain.recv: rank {src} sent a tensor of shape {list(tensor.shape)}, "
                         f"expected {list(shape)}")
    _account(src, "recv", bytes=size, fp32_bytes=4 * tensor.numel(), wait_s=arrived - start,
             wire_s=received - arrived, code_s=time.perf_counter() - received)
    return tensor.to(device), codec


class _Send(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, dst, codec, group):
        _send_packet(tensor, codec, dst, group)
        ctx.dst, ctx.group = dst, group
        ctx.shape, ctx.dtype, ctx.device = tensor.shape, tensor.dtype, tensor.device
        return tensor.new_zeros(())

    @staticmethod
    def backward(ctx, _token_grad):
        grad, _ = _recv_packet(ctx.dst, ctx.group, ctx.shape, ctx.device)
        return grad.to(ctx.dtype), None, None, None


class _Recv(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, src, shape, dtype, device, codec, group):
        tensor, arrived_with = _recv_packet(src, group, shape, device)
        ctx.src, ctx.group, ctx.anchor_shape = src, group, anchor.shape
        ctx.codec = arrived_with if codec is None else codec
        return tensor.to(dtype)

    @staticmethod
    def backward(ctx, grad):
        _send_packet(grad, ctx.codec, ctx.src, ctx.group)
        return grad.new_zeros(ctx.anchor_shape), None, None, None, None, None, None


def send(tensor: torch.Tensor, dst: int, codec: str = "none", group=None) -> torch.Tensor:
    """Sends `tensor` coded with `codec` to rank `dst`; returns a scalar token.

    If `tensor` requires grad, token.backward() (or a backward through a recv(after=token))
    receives its gradient from `dst` and continues the backward pass into `tensor`'s graph.
    """
    _require_tensor(tensor, "dtrain.send: tensor")
    _require_codec_name(codec)
    _C.canonical_codec(codec)  # a bad name fails here, before anything is sent
    _check_peer(dst, group, "send")
    return _Send.apply(tensor, dst, codec, group)


def recv(src: int, like: torch.Tensor, codec: Optional[str] = None, after: Optional[torch.Tensor] = None,
         group=None) -> torch.Tensor:
    """Receives a tensor of `like`'s shape from rank `src` (dtype and device of `like`).

    The result requires grad; its backward sends the gradient to `src` coded with `codec`
    (default: the codec the tensor arrived with). `after` (a token from send()) makes this
    backward run before that send's, which is what one backward() over both needs.
    """
    _require_tensor(like, "dtrain.recv: like")
    if codec is not None:
        _require_codec_name(codec)
        _C.canonical_codec(codec)
    _check_peer(src, group, "recv")
    if after is None:
        anchor = torch.zeros(0, requires_grad=True)
    else:
        _require_tensor(after, "dtrain.recv: after")
        anchor = after
    return _Recv.apply(anchor, src, tuple(like.shape), like.dtype, like.device, codec, group)
