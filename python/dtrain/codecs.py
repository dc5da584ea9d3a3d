"""Tensor <-> packet, with the codecs of dtrain's C++ core (one implementation for the CLI
and for Python). A packet is a 1-D uint8 tensor holding exactly the bytes dtrain's wire
carries (docs/wire-format.md): header, table, payload; it names its codec, dtype and shape,
so decode() needs nothing else.

Codec names are the CLI's: none | fp16 | bf16 | uniform:B | sortquant:B | sortquant:Q:S |
kmeans:B[:ITERS]. Errors raise ValueError with the reason: a bad name, a tensor that is not
floating point, NaN or Inf where the codec cannot take them, a corrupt or truncated packet.
The tensor's data is read in place (no copy for contiguous float32 CPU tensors); the
packet tensor owns the encoder's buffer (no copy either). `threads`: tensors of 1M values
and more are coded on up to that many threads (the packet is the same for any count).
"""

from typing import Dict, Optional, Sequence, Union

import torch

from . import _C


def _require_tensor(value, what: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(value).__name__}")


def _require_codec_name(codec) -> None:
    if not isinstance(codec, str):
        raise TypeError(f"codec must be a str such as 'sortquant:8', got {type(codec).__name__}")


def _require_threads(threads) -> None:
    if not isinstance(threads, int) or isinstance(threads, bool) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, got {threads!r}")


def encode(tensor: torch.Tensor, codec: str, threads: int = 1) -> torch.Tensor:
    """Codes a floating tensor (any shape, device, float32/64/16 or bfloat16) as a packet."""
    _require_tensor(tensor, "tensor")
    _require_codec_name(codec)
    _require_threads(threads)
    return _C.encode(tensor.detach(), codec, threads)


def decode(
    packet: torch.Tensor, device: Optional[Union[str, torch.device]] = None, threads: int = 1
) -> torch.Tensor:
    """The tensor a packet holds, in its original dtype and shape (on `device`, else CPU)."""
    _require_tensor(packet, "packet")
    _require_threads(threads)
    return _C.decode(packet, None if device is None else torch.device(device), threads)


def inspect(packet: torch.Tensor) -> Dict[str, object]:
    """The packet's header (codec, dtype, shape, numel, byte counts), validated."""
    _require_tensor(packet, "packet")
    return _C.inspect(packet)


def packet_size(codec: str, shape: Sequence[int]) -> int:
    """Exact packet bytes for a tensor of `shape` coded with `codec`."""
    _require_codec_name(codec)
    return _C.packet_size(codec, [int(d) for d in shape])


def canonical_codec(codec: str) -> str:
    """The canonical name of a codec ('sortquant:8' -> 'sortquant:6:2'); ValueError if bad."""
    _require_codec_name(codec)
    return _C.canonical_codec(codec)


def codec_help() -> str:
    return _C.codec_help()
