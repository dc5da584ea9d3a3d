"""PyTorch's own distributed test suite (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel) on the backend BACKEND names, the way
PyTorch's test_distributed_spawn.py runs it on gloo: every test of its _DistTestBase in
WORLD_SIZE spawned processes, through a file store in TEMP_DIR. bench/torch_suite.py runs
it for gloo and for dtrain and compares; run it alone as

    BACKEND=dtrain WORLD_SIZE=2 TEMP_DIR=$(mktemp -d) python -m pytest bench/torch_suite_spawn.py -k test_all_reduce_sum
"""
import torch  # noqa: F401  (loads LibTorch first)

import dtrain  # noqa: F401  registers the backend "dtrain"
from torch.testing._internal.common_distributed import DistTestCases

# What dtrain does on CPU where gloo does: DDP, subgroups; "plugin" lets the suite's
# availability check accept a registered backend. Set before the suite's decorators read it.
for feature in ("ddp", "subgroup", "plugin"):
    DistTestCases.backend_feature[feature].add("dtrain")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
