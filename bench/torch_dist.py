"""torch.distributed's start for the PyTorch side of the benchmarks (bench/pytorch_*.py):
on a lab host (`dtrain launch --netlab`) Gloo binds the host's eth0; "dtrain" is registered
by `import dtrain`, from a package built with the backend (the project's `make`)."""
import os
import sys

import torch.distributed as dist


def init(backend: str, script: str) -> None:
    """init_process_group(backend) from the launcher's environment; exits naming `script`
    where the dtrain package on the path carries no backend."""
    if os.environ.get("DTRAIN_GLOO_HOST"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    if backend == "dtrain":
        import dtrain  # registers the backend

        if not getattr(getattr(dtrain, "backend", None), "available", lambda: False)():
            sys.exit(f"{script}: the dtrain package at {dtrain.__file__} has no "
                     "torch.distributed backend: build the project's (make) and put "
                     "build/python first on PYTHONPATH")
    dist.init_process_group(backend)


def tcp_congestion(backend: str) -> str:
    """The TCP congestion control the backend's connections run: DTRAIN_TCP_CONGESTION's
    for "dtrain" (docs/wire-format.md, "Congestion control"), else the host's."""
    return (os.environ.get("DTRAIN_TCP_CONGESTION") if backend == "dtrain" else None) or "host"
