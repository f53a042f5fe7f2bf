import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# Tests capture afresh: a capture kept on disk by an earlier run would hide what this build captures.
os.environ.setdefault("FSDP_VERIFY_CAPTURE_STORE", "off")


import pytest


def _import_every_local_module() -> None:
    """Hypothesis mixes literals of the project's loaded modules into what it draws (its "local
    constants"), so a seeded stream depended on which modules earlier tests had imported: the reach
    test and the self-test hunts moved with the test order. Every worker imports them all first,
    then the constants are frozen (test modules, collected or not, add none)."""
    import importlib
    import pkgutil

    import fsdp_verify
    import fsdp_verify.strategies
    import helpers
    for package in (fsdp_verify, fsdp_verify.strategies, helpers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if not info.name.endswith("__main__"):
                try:
                    importlib.import_module(info.name)
                except ImportError:  # an optional extra not installed: the tests that need it say so
                    pass
    try:  # Hypothesis's own (private) collector: without it, the stream still depends on test order
        from hypothesis.internal.conjecture import providers
        frozen = providers._get_local_constants()
        providers._get_local_constants = lambda: frozen
    except (ImportError, AttributeError):
        pass


_import_every_local_module()

@pytest.fixture(autouse=True)
def _fresh_isolation_children():
    """A persistent child runs its target as it was when it forked: no test sees another's child."""
    yield
    from fsdp_verify.engine.run_case import close_children
    close_children()
