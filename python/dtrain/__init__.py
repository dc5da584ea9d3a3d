"""dtrain from Python: the codecs of dtrain's C++ core, a DDP communication hook that
exchanges coded gradients, and autograd-aware compressed send/receive for pipelines and
split learning written by hand.

    import dtrain
    packet = dtrain.encode(tensor, "sortquant:8")   # uint8 tensor: the CLI's wire bytes
    tensor = dtrain.decode(packet)
    model.register_comm_hook(dtrain.hooks.CompressionState(codec="sortquant:8"),
                             dtrain.hooks.compressed_allreduce_hook)
    token = dtrain.send(activations, dst=1, codec="sortquant:8")   # autograd-aware
    x = dtrain.recv(src=0, like=template)
    with dtrain.DiLoCo(model, inner_optimizer, sync_every=50, codec="rot:tile:2"):
        ...                                              # the loop; outer steps every 50
    torch.distributed.init_process_group("dtrain")   # dtrain's transport under torch

See docs/python.md for the contracts and README.md for examples.
"""

import torch  # loads LibTorch before the extension that links it

from . import _C

__version__ = _C.__version__


def _check_torch_version() -> None:
    built = _C.torch_version
    running = torch.__version__.split("+")[0]
    if running != built:
        raise ImportError(
            f"dtrain's extension was built against torch {built} but torch {running} is "
            "imported; rebuild it against this torch (pip install --no-build-isolation .)"
        )


_check_torch_version()

from .codecs import canonical_codec, codec_help, decode, encode, inspect, packet_size  # noqa: E402
from .p2p import format_link_stats, link_stats, recv, reset_link_stats, send  # noqa: E402
from . import hooks  # noqa: E402
from .diloco import DiLoCo  # noqa: E402
from . import backend  # noqa: E402

backend.register()

__all__ = [
    "encode",
    "decode",
    "inspect",
    "packet_size",
    "canonical_codec",
    "codec_help",
    "send",
    "recv",
    "link_stats",
    "reset_link_stats",
    "format_link_stats",
    "hooks",
    "DiLoCo",
    "backend",
]
