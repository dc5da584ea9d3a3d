"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel) on the backend BACKEND names, the way
PyTorch's test_distributed_spawn.py runs it on gloo: every test of its _DistTestBase in
WORLD_SIZE spawned processes, through a file store in TEMP_DIR. bench/torch_suite.py runs
it for gloo and for dtrain and compares; run it alone as

    BACKEND=dtrain WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python -m pytest bench/torch_suite_spawn.py -k test_all_reduce_sum
    BACKEND=dtrain GATES=gloo ...   # the tests the suite keeps for gloo by name, on dtrain
"""
import torch  # noqa: F401  (loads LibTorch first)

import dtrain  # noqa: F401  registers the backend "dtrain"
from torch.testing._internal.common_distributed import DistTestCases

# What dtrain does on CPU where gloo does: DDP, subgroups; "plugin" lets the suite's
# availability check accept a registered backend. Set before the suite's decorators read it.
for feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("dtrain")

# GATES=gloo: the suite's decorators (which test runs where, read once at import) decide as
# for gloo, and the tests then run on BACKEND: the tests the suite keeps for gloo by name
# ("requires backend to be one of {'gloo'}", "get_future is only supported on ... gloo"),
# run on dtrain. Their bodies still see BACKEND (the module's global and the environment).
import os  # noqa: E402

backend = os.environ["BACKEND"]
if os.environ.get("GATES"):
    os.environ["BACKEND"] = os.environ["GATES"]
from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed import distributed_test  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

os.environ["BACKEND"] = backend
distributed_test.BACKEND = backend


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
