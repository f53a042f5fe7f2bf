"""The fuzz properties as plain Hypothesis tests, one per target (``--fsdp-target a,b``), so that
pytest runs them and HypoFuzz fuzzes them: ``hypothesis fuzz -- fsdp_verify/commands/fuzz_properties.py``.

``fsdp-verify fuzz`` runs the same check with a budget, workers, bug signatures and a corpus;
HypoFuzz runs these forever with coverage guidance and its dashboard, saving to Hypothesis's
database. Not collected by the normal suite (``tests/commands/test_fuzz_properties.py`` runs them briefly).
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from hypothesis.internal.reflection import function_digest

from fsdp_verify.model.case import Case
from fsdp_verify.checks import ERROR, INVALID
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.strategies import cases, hazard_graphs
from fsdp_verify.targets import get_target


def _hypofuzz_compatible() -> None:
    """HypoFuzz 25.11.1 carries the explain phase's comments over to the shrunk example as
    ``slice_comments``; Hypothesis 6.170 renamed them ``span_comments``, so HypoFuzz crashed on the
    first failure it shrank. The old name is made to read and write the new one, on Hypothesis's
    own classes and only where it is missing, so that HypoFuzz shrinks and saves what it finds."""
    from hypothesis.internal.conjecture.data import ConjectureData, ConjectureResult
    for cls in (ConjectureResult, ConjectureData):
        if not hasattr(cls, "slice_comments"):
            cls.slice_comments = property(lambda self: self.span_comments,
                                          lambda self, value: setattr(self, "span_comments", value))


_hypofuzz_compatible()

# HypoFuzz keeps each shrunk failure under the test's key plus this suffix, where Hypothesis's own
# replay (the reuse phase) does not look.
HYPOFUZZ_SHRUNK = b".hypofuzz.failures.shrunk"


def adopt_hypofuzz_failures(item) -> int:
    """Copy the failures HypoFuzz shrank for this pytest item into the key Hypothesis replays first,
    so that plain pytest fails at once on what a fuzzing run found (the pytest plugin calls this
    before each property runs); returns how many it copied."""
    inner = getattr(getattr(item.obj, "hypothesis", None), "inner_test", None)
    database = settings.default.database
    if inner is None or database is None:
        return 0
    inner._hypothesis_internal_add_digest = item.nodeid.encode()  # as Hypothesis's pytest plugin keys it
    key = function_digest(inner)
    found = list(database.fetch(key + HYPOFUZZ_SHRUNK))
    for value in found:
        database.save(key, value)
    return len(found)


# Slow, large and often-rejected cases are expected; nested_given must stay checked, or HypoFuzz
# refuses the test.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
           HealthCheck.large_base_example]


def pytest_generate_tests(metafunc) -> None:
    """One property per target named by the plugin's ``--fsdp-target`` (comma separated)."""
    if "target_name" in metafunc.fixturenames:
        names = [name.strip() for name in metafunc.config.getoption("fsdp_target").split(",") if name.strip()]
        metafunc.parametrize("target_name", names)


def _passes_every_check(target_name: str, case: Case) -> None:
    findings, _ = check_all(get_target(target_name), case)
    errors = [f"[{f.checker}] {f.message[:300]}" for f in findings if f.severity == ERROR]
    assume(errors or not any(f.severity == INVALID for f in findings))  # a case that cannot be judged
    assert not errors, f"{case.label}: " + "; ".join(errors)


@settings(deadline=None, suppress_health_check=SLOW_OK)
@given(case=cases("default", modules=True))
def test_target_passes_every_check(target_name: str, case: Case) -> None:
    """Valid, mutated, hazard and traced graphs: the mix ``fsdp-verify fuzz`` draws by default."""
    _passes_every_check(target_name, case)


@settings(deadline=None, suppress_health_check=SLOW_OK)
@given(case=hazard_graphs("tiny", max_hazards=6))
def test_target_passes_every_check_on_hazards(target_name: str, case: Case) -> None:
    """Tiny graphs with several planted hazards each: the fastest way to planner bugs."""
    _passes_every_check(target_name, case)
