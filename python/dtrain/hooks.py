"""A DDP communication hook that exchanges coded gradients, as dtrain's own DDP does.

    state = dtrain.hooks.CompressionState(codec="sortquant:8")
    model.register_comm_hook(state, dtrain.hooks.compressed_allreduce_hook)

Among more than 2 ranks each bucket is averaged in two coded steps (comm/coded_allreduce in
the C++ core): a reduce-scatter, where rank j owns piece j of the bucket and every rank
sends its piece j, coded, to j (one all_to_all), which decodes and averages them; then an
all-gather of every owner's average, coded once. Between 2 ranks, in one step of the same
bytes: each codes its whole bucket once, the packets are all-gathered, and both average the
decoded buckets in rank order. Error feedback (EF-SGD) keeps, per bucket, phase and peer,
what the codec dropped and adds it to the next step's values, so the error does not
accumulate in the model; each rank keeps the decoded value of what it sent, so every rank
ends with identical gradients. With codec "none" the result equals PyTorch's all-reduce.

The exchange runs on one worker thread per state, bucket after bucket in the order DDP
hands them over (the same on every rank), so backward keeps computing while buckets are
coded and sent; the coding releases the GIL. The hook returns a torch.futures.Future that
the worker completes. Use a process group of its own for the hook (process_group=) if the
training loop issues collectives of its own while backward runs.

DDP rebuilds its buckets after the first iteration, so the error-feedback residuals are
dropped once, at the end of that iteration (they would belong to other parameters).

A bucket that fails (a NaN gradient, a dead peer) fails every bucket queued after it with
the same error, without coding or sending them: the ranks' exchanges are out of step from
there on, so the state cannot be used again. The worker is stopped and joined by close(),
when the state is collected, or at interpreter exit, whichever comes first, so it never
runs coding work while Python shuts down.
"""

import queue
import threading
import weakref
from typing import Dict, List, Tuple

import torch
import torch.distributed as dist

from . import _C
from .codecs import _require_codec_name


class CompressionState:
    """What compressed_allreduce_hook needs between calls: the group, the codec, the
    error-feedback residuals, the worker thread, and counters (stats())."""

    def __init__(self, process_group=None, codec: str = "sortquant:8", error_feedback: bool = True):
        _require_codec_name(codec)
        self.process_group = process_group
        self.codec = _C.canonical_codec(codec)
        self.error_feedback = bool(error_feedback)
        self._encoders: Dict[Tuple[int, str, int], _C.FeedbackEncoder] = {}
        self._iterations = 0
        self._bytes = 0
        self._fp32_bytes = 0
        self._buckets = 0
        self._jobs: "queue.Queue" = queue.Queue()
        self._worker = None
        self._stop_worker = None
        self._closed = False
        self._lock = threading.Lock()

    def stats(self) -> Dict[str, object]:
        """Bytes this rank sent (coded) and would have sent as float32 with the same
        exchange, buckets coded, backward passes seen."""
        with self._lock:
            return {
                "codec": self.codec,
                "bytes": self._bytes,
                "fp32_bytes": self._fp32_bytes,
                "ratio": self._bytes / self._fp32_bytes if self._fp32_bytes else 0.0,
                "buckets": self._buckets,
                "iterations": self._iterations,
            }

    def __getstate__(self):
        # DDP may pickle a hook's state (checkpoints): keep the settings, not the group,
        # thread or residuals.
        return {"codec": self.codec, "error_feedback": self.error_feedback}

    def __setstate__(self, saved):
        self.__init__(None, saved["codec"], saved["error_feedback"])

    def _encode(self, bucket_index: int, phase: str, peer: int, values: torch.Tensor):
        """(packet, decoded): through the residual of (bucket, phase, peer) when feeding
        errors back, else plainly."""
        if not self.error_feedback:
            packet = _C.encode(values, self.codec)
            return packet, _C.decode(packet, None).view(-1)
        key = (bucket_index, phase, peer)
        encoder = self._encoders.get(key)
        if encoder is None:
            encoder = self._encoders[key] = _C.FeedbackEncoder(self.codec)
        packet, decoded = encoder.encode(values)
        return packet, decoded.view(-1)

    def close(self) -> None:
        """Runs or fails the buckets already queued, then stops the worker thread. The
        state takes no more buckets after this."""
        self._closed = True
        if self._stop_worker is not None:
            self._stop_worker()

    def _submit(self, job) -> torch.futures.Future:
        if self._closed:
            raise RuntimeError("dtrain.hooks: this CompressionState was closed")
        if self._worker is None:
            # The thread gets the queue, not self, so the state can be collected; the
            # finalizer also runs at exit, before Python stops daemon threads mid-call.
            self._worker = threading.Thread(target=_serve, args=(self._jobs,), name="dtrain-hook",
                                            daemon=True)
            self._worker.start()
            self._stop_worker = weakref.finalize(self, _stop, self._jobs, self._worker)
        future = torch.futures.Future()
        self._jobs.put((job, future))
        return future

    def _end_of_backward(self) -> None:
        with self._lock:
            self._iterations += 1
            if self._iterations == 1:
                self._encoders.clear()  # DDP's buckets are rebuilt now: see the module doc


_STOP = object()


def _serve(jobs: "queue.Queue") -> None:
    """The worker: runs (job, future) pairs in order until _STOP; after the first failure
    it hands that error to every later future without running its job."""
    failure = None
    while True:
        item = jobs.get()
        if item is _STOP:
            return
        job, future = item
        if failure is not None:
            future.set_exception(RuntimeError(f"dtrain.hooks: an earlier bucket failed: {failure}"))
            continue
        try:
            future.set_result(job())
        except Exception as error:  # handed to DDP, which raises it in backward
            failure = error
            future.set_exception(error)


def _stop(jobs: "queue.Queue", worker: threading.Thread) -> None:
    jobs.put(_STOP)
    worker.join()


def _bounds(count: int, parts: int) -> List[int]:
    """Piece j of `count` values split in `parts`: [b[j], b[j+1]) (comm/layout.h)."""
    return [j * count // parts for j in range(parts + 1)]


def _average_whole(state: CompressionState, bucket_index: int, flat: torch.Tensor,
                   world: int, me: int) -> torch.Tensor:
    """Two ranks: each codes its whole bucket once and all-gathers the packet; both average
    the decoded buckets in rank order (one message each way, the two steps' bytes)."""
    group = state.process_group
    packet, decoded = state._encode(bucket_index, "gather", me, flat)
    gathered = [torch.empty(packet.numel(), dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(gathered, packet, group=group)
    parts = [decoded.float() if j == me else _C.decode(gathered[j], None).view(-1).float()
             for j in range(world)]
    total = parts[0].clone()
    for part in parts[1:]:
        total += part
    flat.copy_(total / world)
    with state._lock:
        state._buckets += 1
        state._bytes += (world - 1) * packet.numel()
        state._fp32_bytes += (world - 1) * 4 * flat.numel()
    return flat


def _average_bucket(state: CompressionState, bucket_index: int, flat: torch.Tensor) -> torch.Tensor:
    group = state.process_group
    world, me = dist.get_world_size(group), dist.get_rank(group)
    if world == 2:
        return _average_whole(state, bucket_index, flat, world, me)
    bounds = _bounds(flat.numel(), world)
    pieces = [flat[bounds[j]:bounds[j + 1]] for j in range(world)]
    # Every piece's packet size, known to every rank without a message.
    sizes = [_C.packet_size(state.codec, [p.numel()]) for p in pieces]

    # Reduce-scatter: piece j, coded, to rank j; rank `me` receives its piece from every peer.
    empty = torch.empty(0, dtype=torch.uint8)
    outgoing = [empty if j == me else state._encode(bucket_index, "scatter", j, pieces[j])[0]
                for j in range(world)]
    in_sizes = [p.numel() for p in outgoing]
    out_sizes = [0 if j == me else sizes[me] for j in range(world)]
    incoming = torch.empty(sum(out_sizes), dtype=torch.uint8)
    dist.all_to_all_single(incoming, torch.cat(outgoing), out_sizes, in_sizes, group=group)
    total = pieces[me].to(torch.float32, copy=True)
    for part in incoming.split(sizes[me]):
        total += _C.decode(part, None).view(-1).float()
    total /= world

    # All-gather of every owner's coded average, padded to the largest piece's packet.
    packet, decoded = state._encode(bucket_index, "gather", me, total)
    widest = max(sizes)
    padded = torch.zeros(widest, dtype=torch.uint8)
    padded[:packet.numel()] = packet
    gathered = [torch.empty(widest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(gathered, padded, group=group)
    pieces[me].copy_(decoded)
    for j in range(world):
        if j != me:
            pieces[j].copy_(_C.decode(gathered[j][:sizes[j]], None).view(-1))

    with state._lock:
        state._buckets += 1
        state._bytes += sum(in_sizes) + (world - 1) * widest
        widest_piece = max(p.numel() for p in pieces)
        state._fp32_bytes += 4 * (flat.numel() - pieces[me].numel()) + (world - 1) * 4 * widest_piece
    return flat


def compressed_allreduce_hook(state: CompressionState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the bucket's gradients averaged over the group, coded with
    state.codec on the wire (see the module doc). Register with model.register_comm_hook."""
    buffer = bucket.buffer()
    index = bucket.index()
    last = bucket.is_last()
    device = buffer.device

    def job() -> torch.Tensor:
        flat = buffer.detach().to("cpu") if device.type != "cpu" else buffer.detach()
        if dist.get_world_size(state.process_group) > 1:
            flat = _average_bucket(state, index, flat)
        if last:
            state._end_of_backward()
        return flat.to(device) if device.type != "cpu" else flat

    return state._submit(job)
