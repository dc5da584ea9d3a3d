import os
import shutil

import pytest


@pytest.fixture(scope="session")
def dtrain_binary():
    """The CLI built beside the package (ctest passes its path); tests needing it skip
    with the reason when it is not there."""
    path = os.environ.get("DTRAIN_BINARY") or shutil.which("dtrain")
    if not path or not os.path.exists(path):
        pytest.skip("the dtrain CLI is not built (set DTRAIN_BINARY)")
    return path
