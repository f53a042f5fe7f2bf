import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# Tests capture afresh: a capture kept on disk by an earlier run would hide what this build captures.
os.environ.setdefault("FSDP_VERIFY_CAPTURE_STORE", "off")


import pytest

@pytest.fixture(autouse=True)
def _fresh_isolation_children():
    """A persistent child runs its target as it was when it forked: no test sees another's child."""
    yield
    from fsdp_verify.engine.run_case import close_children
    close_children()
