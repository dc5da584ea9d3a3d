"""dtrain as a torch.distributed backend (docs/python.md, "A torch.distributed backend").

`import dtrain` registers the backend "dtrain" where the package was built with it (the
project's build: `make`); then

    dist.init_process_group("dtrain")   # under torchrun, Slurm, dtrain launch, or any init_method

runs the script's collectives and point-to-point messages over dtrain's transport. Settings
come from DTRAIN_* variables (DTRAIN_ALGO, DTRAIN_STREAMS, DTRAIN_OPENINGS, DTRAIN_WIRE_CHECK,
DTRAIN_GLOO_HOST), alike on every rank.
"""

import torch
import torch.distributed as dist

NAME = "dtrain"

try:
    from . import _backend
except ImportError:  # a pip build: the codecs only
    _backend = None


def available() -> bool:
    """Whether this build of the package carries the backend."""
    return _backend is not None


def register() -> None:
    """Registers "dtrain" with torch.distributed (idempotent; `import dtrain` calls it)."""
    if _backend is None or not dist.is_available():
        return
    if NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    dist.Backend.register_backend(NAME, _backend.create_backend, devices=["cpu", "cuda"])


def all_reduce_algorithm(group=None) -> str:
    """The all-reduce algorithm dtrain runs for `group` (default: the default group): the one
    DTRAIN_ALGO names, or its default, "exchange" between 2 ranks on a long link (a round
    trip of 5 ms or more, measured at connect), else "ring". Raises where the group's CPU
    backend is not dtrain's."""
    if _backend is None:
        raise RuntimeError("this build of dtrain carries no torch.distributed backend")
    group = group if group is not None else dist.group.WORLD
    return _backend.all_reduce_algorithm(group._get_backend(torch.device("cpu")))
