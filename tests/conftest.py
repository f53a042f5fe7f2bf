import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
# Tests capture afresh: a capture kept on disk by an earlier run would hide what this build captures.
os.environ.setdefault("FSDP_VERIFY_CAPTURE_STORE", "off")
# End-to-end verdicts compare compiles bit for bit; MKL reads this at its first use, before any test
# (execute/compiled/blas.py says why alignment must not move a product's bits).
os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")
# Inductor compiles in a pool of subprocesses as wide as the machine; the suite already runs a worker
# per core, so each pool only adds its start (the two-rank end-to-end test: 70.8 -> 66.1 CPU-s).
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")


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


# The longest tests first (seconds on the 2-core machine, 2026-12-06): xdist hands tests out in
# collection order, so a long one collected late ran on one worker while the other sat idle at the
# end. Only the order changes: seeded streams do not depend on it (the constants above are frozen).
_LONGEST_FIRST = (
    "tests/strategies/test_strategies.py::test_2000_examples_reach_every_reason_and_sub_condition",  # 41
    "tests/execute/compiled/test_endtoend.py::test_on_two_real_ranks",  # 41
    "tests/commands/test_hypofuzz.py",  # 32
    "tests/engine/test_campaign.py::test_two_distinct_bugs_give_two_saved_minimal_cases",  # 26
    "tests/test_readme.py",  # 23
    "tests/execute/compiled/test_endtoend.py",  # 20
    "tests/strategies/test_strategies.py::test_planted_failure_shrinks_to_a_small_graph",  # 19
    "tests/engine/test_campaign.py::test_a_worker_killed_mid_campaign",  # 19
    "tests/commands/test_cli.py::test_gate_passes_for_reference_and_fails_for_a_broken_candidate",  # 18
    "tests/execute/ranks/test_torchrun.py",  # 15, 13
    "tests/graph/test_fx_sources.py::test_a_campaign_keeps_the_loader_bounded",  # 14
    "tests/engine/test_mutate.py::test_the_reach_map_aims_by_line",  # 13
    "tests/strategies/test_property.py",  # 13
    "tests/commands/test_cli.py::test_found_failure_is_saved_replayed_and_drawn",  # 12
    "tests/test_findings_repros.py",  # 10 (F13's scheduler script; the real compiles are nightly)
)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        return next((i for i, prefix in enumerate(_LONGEST_FIRST) if item.nodeid.startswith(prefix)),
                    len(_LONGEST_FIRST))
    items.sort(key=rank)  # stable: the rest keep their order
