"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel) on the backend BACKEND names, the way
PyTorch's test_distributed_spawn.py runs it on gloo: every test of its _DistTestBase in
WORLD_SIZE spawned processes, through a file store in TEMP_DIR. bench/torch_suite.py runs
it for gloo and for dtrain and compares; run it alone as

    BACKEND=dtrain WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python -m pytest bench/torch_suite_spawn.py -k test_all_reduce_sum
    BACKEND=dtrain GATES=gloo ...   # the suite reads the name gloo; its groups are dtrain's
"""
import torch  # noqa: F401  (loads LibTorch first)

import dtrain  # noqa: F401  registers the backend "dtrain"
from torch.testing._internal.common_distributed import DistTestCases

# What dtrain does on CPU where gloo does: DDP, subgroups; "plugin" lets the suite's
# availability check accept a registered backend. Set before the suite's decorators read it.
for feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("dtrain")

# GATES=gloo: the suite reads the name "gloo" (its decorators, which decide at import which
# test runs where, its test bodies and the BACKEND variable), while every process group it
# makes for the backend under test is BACKEND's: init_process_group is given BACKEND where
# the suite asks for "gloo", and checked to have made it. This runs on dtrain the tests the
# suite keeps for gloo by name ("requires backend to be one of {'gloo'}", "get_future is only
# supported on ... gloo") or whose bodies set up their models only for backends they name.
# Groups a test asks for by name with new_group(backend="gloo") stay gloo's.
import os  # noqa: E402

# The backend under test, kept where the suite's processes (spawned with this environment,
# BACKEND then reading "gloo") find it.
backend = os.environ.setdefault("TORCH_SUITE_BACKEND", os.environ["BACKEND"])
gates = os.environ.get("GATES", "")
if gates:
    os.environ["BACKEND"] = gates
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

if gates:
    _init_process_group = dist.init_process_group

    def _init_as_named(*args, **kwargs):
        if kwargs.get("backend") == gates:
            kwargs["backend"] = backend
        elif args and args[0] == gates:
            args = (backend,) + args[1:]
        _init_process_group(*args, **kwargs)
        made = dist.get_backend()
        if made != backend:
            raise RuntimeError(f"torch_suite_spawn: the suite's group is {made}, not {backend}")

    dist.init_process_group = _init_as_named


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
