"""The property the whole harness exists for: the reference target passes every checker."""

from __future__ import annotations

from hypothesis import given, settings

from fsdp_verify.checks import ERROR
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import cases


@settings(suppress_health_check=SLOW_OK, deadline=None)
@given(cases("default", modules=True))
def test_reference_target_passes_all_checkers(case):
    findings, _ = check_all(get_target("reference"), case)
    errors = [f.message for f in findings if f.severity == ERROR]
    assert not errors, f"{case.label}: {errors}"
