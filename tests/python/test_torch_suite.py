"""A part of PyTorch's own distributed test suite (distributed_test.py) on the "dtrain"
backend, through bench/torch_suite.py: the collectives and point-to-point messages most
trainers use, and DDP. The whole suite, beside gloo, is the script's (docs/results.md,
"PyTorch's test suite")."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dtrain

ROOT = Path(__file__).resolve().parents[2]
PART = ("(" + " or ".join([
    "test_all_reduce_sum", "test_all_reduce_max", "test_all_reduce_coalesced_sum",
    "test_broadcast", "test_all_gather", "test_reduce_sum", "test_scatter", "test_gather",
    "test_all_to_all_single_equal_split", "test_barrier", "test_send_recv_with_tag",
    "test_isend", "test_DistributedDataParallel_SyncBatchNorm_Single_Input_Per_Process",
]) + ") and not cuda and not profiler and not timeout and not object and not group"
        " and not complex and not twice and not checks and not async and not empty")


@pytest.mark.skipif(not dtrain.backend.available(), reason="this build has no backend")
def test_a_part_of_pytorchs_distributed_suite_passes_on_dtrain():
    result = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "torch_suite.py"), "--backends", "dtrain",
         "-k", PART, "--out", ""],
        cwd=ROOT, env=dict(os.environ), capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed," in result.stdout and not result.stdout.startswith("dtrain: 0 passed")
