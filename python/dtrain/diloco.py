"""DiLoCo and Streaming DiLoCo around a user's own PyTorch training loop, with the same
schedule, outer step and coded exchange as `dtrain train --parallel diloco`
(src/dtrain/parallel/diloco.h; docs/diloco.md).

    inner = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with dtrain.DiLoCo(model, inner, sync_every=50, codec="rot:tile:2") as diloco:
        for x, y in loader:                       # this replica's own data
            inner.zero_grad()
            loss_fn(model(x), y).backward()
            inner.step()                          # the outer step follows on its schedule
    # leaving the block ran a last outer step: every replica holds the shared parameters

Each rank of the process group is one replica. After every `inner.step()` (a post-step
hook) the schedule advances: fragment f of F equal ranges of the flat parameters (in
model.parameters() order) is exchanged every H steps at offset f*H//F; the replicas'
mean pseudo-gradient (shared minus own parameters) moves the shared parameters by SGD
with Nesterov momentum (m = mu m + g; shared -= lr (g + mu m)); with sync_delay = tau > 0
the exchange runs on a worker thread beside the next tau inner steps and lands after
exactly tau of them, merged as own = alpha own + (1 - alpha) shared. Floating-point
buffers (BatchNorm statistics) are averaged exactly with fragment 0. With a codec the
exchange is the coded all-reduce of dtrain.hooks (dtrain's C++ codecs, error feedback per
fragment, phase and peer); with "none" it is torch.distributed.all_reduce.

Collective: every rank must enter, step and leave alike. While an exchange is in flight
the group is the worker's: give DiLoCo a process group of its own (process_group=) if the
loop issues collectives of its own, or call settle() first.
"""

import time
from typing import Dict, List, Optional

import torch
import torch.distributed as dist

from .hooks import CompressionState, _average_bucket


class DiLoCo:
    def __init__(self, model: torch.nn.Module, inner_optimizer: torch.optim.Optimizer,
                 sync_every: int = 50, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 codec: str = "none", fragments: int = 1, sync_delay: int = 0,
                 merge_alpha: float = 0.5, process_group=None):
        params = [p for p in model.parameters()]
        values = sum(p.numel() for p in params)
        if not params:
            raise ValueError("DiLoCo: the model has no parameters")
        if any(p.dtype != torch.float32 for p in params):
            raise ValueError("DiLoCo: parameters must be float32")
        if int(sync_every) < 1:
            raise ValueError("sync_every must be at least 1")
        if not outer_lr > 0:
            raise ValueError("outer_lr must be positive")
        if not 0 <= outer_momentum < 1:
            raise ValueError("outer_momentum must be in [0, 1)")
        if not 1 <= int(fragments) <= min(int(sync_every), values):
            raise ValueError(f"fragments must be between 1 and sync_every ({sync_every}), each "
                             "fragment's offset a different step")
        gap = int(sync_every) // int(fragments)
        if not 0 <= int(sync_delay) <= gap:
            raise ValueError(f"sync_delay must be between 0 and sync_every // fragments ({gap}): "
                             "one exchange in flight at a time")
        if not 0 <= merge_alpha <= 1:
            raise ValueError("merge_alpha must be in [0, 1]")
        self.model, self.inner_optimizer = model, inner_optimizer
        self.sync_every, self.fragments = int(sync_every), int(fragments)
        self.outer_lr, self.outer_momentum = float(outer_lr), float(outer_momentum)
        self.sync_delay, self.merge_alpha = int(sync_delay), float(merge_alpha)
        self.process_group = process_group
        self._params = params
        self._buffers = [b for b in model.buffers() if b.is_floating_point() and b.numel() > 0]
        # The coded exchange and the worker thread are dtrain.hooks' (codec "none" included:
        # its worker runs the exact all-reduce too).
        self._coder = CompressionState(process_group=process_group, codec=codec)
        self.codec = self._coder.codec
        self._exact = self.codec == "none"
        self._ranges = [(values * f // self.fragments,
                         values * (f + 1) // self.fragments - values * f // self.fragments)
                        for f in range(self.fragments)]
        self._first_countdown = [self.sync_every if f == 0 else self.sync_every * f // self.fragments
                                 for f in range(self.fragments)]
        self._countdown = list(self._first_countdown)
        self._since = [0] * self.fragments
        self._in_flight: Optional[dict] = None
        self._epoch: Optional[tuple] = None  # set_epoch_position's (step, steps)
        self._hook = None
        self._stats = dict(outer_steps=0, inner_steps=0, wait_s=0.0, exchange_s=0.0, hidden_s=0.0,
                           wire_bytes=0, fp32_bytes=0)
        with torch.no_grad():
            for t in self._params + self._buffers:
                dist.broadcast(t.data, src=self._global_rank_of(0), group=process_group)
            self._anchor = self._flat().clone()
        self._momentum = torch.zeros_like(self._anchor)

    # -- the loop's side --------------------------------------------------------------

    def __enter__(self) -> "DiLoCo":
        self._hook = self.inner_optimizer.register_step_post_hook(lambda *_: self.step())
        return self

    def __exit__(self, kind, error, trace) -> None:
        try:
            if kind is None:
                self.sync()
            else:
                self.settle()  # the peers' exchange completes; the error goes on
        finally:
            if self._hook is not None:
                self._hook.remove()
                self._hook = None
            self._coder.close()

    def step(self) -> bool:
        """After an inner optimizer step (the context manager calls it): lands the exchange
        that is due, starts the ones on the schedule. True when it started one."""
        self._stats["inner_steps"] += 1
        for f in range(self.fragments):
            self._since[f] += 1
            self._countdown[f] -= 1
        if self._in_flight is not None:
            self._in_flight["steps_left"] -= 1
            if self._in_flight["steps_left"] == 0:
                self._land(self.merge_alpha)
        # The epoch's last steps: a round due now would leave fewer than H/2 for the next.
        waits = (self._epoch is not None
                 and 2 * (self._epoch[1] - self._epoch[0] - 1) < self.sync_every)
        started = False
        for f in range(self.fragments):
            if self._countdown[f] <= 0 and not waits:
                self._launch(f, background=self.sync_delay > 0)
                started = True
        return started

    def set_epoch_position(self, step: int, steps: int) -> None:
        """Before inner step `step` (0-based) of an epoch of `steps`, for a loop that calls
        sync() at each epoch's end: an outer step that falls due fewer than sync_every / 2
        steps before that end, or at its last step, waits for that sync(), as the CLI's does
        (docs/diloco.md: a round of a step or two would still push the outer momentum). Never
        called, every outer step comes on its schedule."""
        if not 0 <= int(step) < int(steps):
            raise ValueError(f"set_epoch_position: step {step} outside an epoch of {steps}")
        self._epoch = (int(step), int(steps))

    def sync(self) -> bool:
        """Every fragment's outer step now (the exchange in flight lands first, whole):
        afterwards every replica holds the shared parameters. False if nothing was due."""
        did = False
        if self._in_flight is not None:
            self._land(0.0)
            did = True
        for f in range(self.fragments):
            if self._since[f] > 0:
                self._launch(f, background=False)
                did = True
        self._countdown = list(self._first_countdown)
        return did

    def settle(self) -> None:
        """Waits for the exchange in flight (it still lands at its step): the group is free."""
        if self._in_flight is not None and "result" not in self._in_flight:
            began = time.perf_counter()
            self._in_flight["result"] = self._in_flight["future"].wait()
            waited = time.perf_counter() - began
            self._in_flight["waited_s"] += waited
            self._stats["wait_s"] += waited

    def stats(self) -> Dict[str, float]:
        """Counters since construction: outer_steps (fragment exchanges applied),
        inner_steps, wait_s (training blocked on outer steps), exchange_s (the exchanges'
        time), hidden_s (of it, beside inner steps), wire_bytes (this rank sent) and
        fp32_bytes (exact fp32 ring all-reduces would have sent)."""
        return dict(self._stats)

    # -- the schedule's parts ---------------------------------------------------------

    def _global_rank_of(self, group_rank: int) -> int:
        if self.process_group is None:
            return group_rank
        return dist.get_global_rank(self.process_group, group_rank)

    def _flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1) for p in self._params])

    def _write(self, begin: int, values: torch.Tensor, own_weight: float) -> None:
        end, offset = begin + values.numel(), 0
        with torch.no_grad():
            for p in self._params:
                lo, hi = max(begin, offset), min(end, offset + p.numel())
                if lo < hi:
                    # A view where the layout allows (contiguous), else a copy written back.
                    flat = p.data.reshape(-1)
                    part = flat[lo - offset:hi - offset]
                    source = values[lo - begin:hi - begin].to(part.device)
                    if own_weight == 0:
                        part.copy_(source)
                    else:
                        part.mul_(own_weight).add_(source, alpha=1 - own_weight)
                    if not p.data.is_contiguous():
                        p.data.copy_(flat.view(p.shape))
                offset += p.numel()

    def _exchange(self, fragment: int, g: torch.Tensor, buffers: Optional[torch.Tensor]) -> dict:
        began = time.perf_counter()
        world = dist.get_world_size(self.process_group)
        fp32 = 2 * 4 * g.numel() * (world - 1) // world  # an exact ring's, this rank
        sent_before = self._coder.stats()["bytes"]
        if self._exact:
            dist.all_reduce(g, group=self.process_group)
            g /= world
            wire = fp32
        else:
            _average_bucket(self._coder, fragment, g)
            wire = self._coder.stats()["bytes"] - sent_before
        if buffers is not None:
            dist.all_reduce(buffers, group=self.process_group)
            buffers /= world
        return dict(g=g, buffers=buffers, seconds=time.perf_counter() - began, wire=wire, fp32=fp32)

    def _launch(self, fragment: int, background: bool) -> None:
        began = time.perf_counter()
        begin, size = self._ranges[fragment]
        with torch.no_grad():
            g = (self._anchor[begin:begin + size] - self._flat()[begin:begin + size]).cpu()
        if not torch.isfinite(g).all():
            raise RuntimeError("DiLoCo's pseudo-gradient is not finite (training diverged? "
                               "lower the inner or the outer learning rate)")
        buffers = None
        if fragment == 0 and self._buffers:
            buffers = torch.cat([b.detach().reshape(-1).float().cpu() for b in self._buffers])
        self._since[fragment] = 0
        self._countdown[fragment] = self.sync_every
        if not background:
            self._apply(fragment, self._exchange(fragment, g, buffers), 0.0)
        else:
            future = self._coder._submit(lambda: self._exchange(fragment, g, buffers))
            self._in_flight = dict(fragment=fragment, steps_left=self.sync_delay, future=future,
                                   waited_s=0.0)
        self._stats["wait_s"] += time.perf_counter() - began

    def _land(self, own_weight: float) -> None:
        self.settle()
        began = time.perf_counter()
        flight, self._in_flight = self._in_flight, None
        result = flight["result"]
        self._apply(flight["fragment"], result, own_weight)
        self._stats["hidden_s"] += max(0.0, result["seconds"] - flight["waited_s"])
        self._stats["wait_s"] += time.perf_counter() - began

    def _apply(self, fragment: int, result: dict, own_weight: float) -> None:
        begin, size = self._ranges[fragment]
        with torch.no_grad():
            g = result["g"].to(self._anchor.device)
            m, a = self._momentum[begin:begin + size], self._anchor[begin:begin + size]
            m.mul_(self.outer_momentum).add_(g)
            a.sub_(g + self.outer_momentum * m, alpha=self.outer_lr)
            self._write(begin, a, own_weight)
            if result["buffers"] is not None:
                offset = 0
                for b in self._buffers:
                    b.copy_(result["buffers"][offset:offset + b.numel()].view_as(b))
                    offset += b.numel()
        self._stats["outer_steps"] += 1
        self._stats["exchange_s"] += result["seconds"]
        self._stats["wire_bytes"] += result["wire"]
        self._stats["fp32_bytes"] += result["fp32"]
