"""Merging the workers' results: one root cause is one failure, and no class hides another."""

from __future__ import annotations

from fsdp_verify.report.tally import Result


def _failure(cls: str) -> dict:
    return {"signature": ["target", "raised", "ValueError"], "class": cls, "checkers": ["target"]}


def test_a_worker_s_excused_sighting_does_not_hide_another_worker_s_bug_of_the_same_cause():
    merged = Result()
    merged.add_failure(_failure("contract mismatch"))
    merged.add_failure(_failure("defect"))  # the same root cause, on input the target accepts
    merged.add_failure(_failure("defect"))
    merged.add_failure(_failure("invalid input"))
    assert [f["class"] for f in merged.failures] == ["contract mismatch", "defect"]
    assert merged.repeats == 2


def test_a_campaign_that_kept_failures_unshrunk_says_so_in_the_summary_and_junit():
    from fsdp_verify.report.summary import junit_xml, summary_text
    result = Result(shrunk=False)
    assert "unshrunk: --no-shrink" in summary_text(result, "reference")
    assert '<property name="shrunk" value="False"' in junit_xml(result, "reference")
    assert "shrink steps" in summary_text(Result(), "reference")
