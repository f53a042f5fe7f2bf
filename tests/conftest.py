import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))


import pytest

# Tests that take tens of seconds (a HypoFuzz run, a campaign, a compile on ranks) start first:
# with xdist's load scheduling a long test collected last is the suite's tail on two cores.
HEAVY = ("test_hypofuzz_finds_shrinks", "test_inductor_buckets_for_real", "test_on_two_real_ranks",
         "test_a_campaign_classes_a_candidate", "test_a_worker_killed_mid_campaign", "test_planted_failure_shrinks",
         "test_a_large_graph_is_cut", "test_2000_examples_reach", "test_a_campaign_whose_redis_is_gone",
         "test_a_planted_pass_bug_fails_standalone", "test_an_inductor_crash_reproduces")


def pytest_collection_modifyitems(items: list) -> None:
    """Heavy tests first, the rest in collection order (a stable sort)."""
    items.sort(key=lambda item: not item.name.startswith(HEAVY))


@pytest.fixture(autouse=True)
def _fresh_isolation_children():
    """A persistent child runs its target as it was when it forked: no test sees another's child."""
    yield
    from fsdp_verify.engine.run_case import close_children
    close_children()
