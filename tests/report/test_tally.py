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


def test_a_run_that_fused_nothing_where_it_could_is_said_and_fails_only_when_fusion_is_required():
    from collections import Counter

    from fsdp_verify.report.html import campaign_html
    from fsdp_verify.report.summary import junit_xml, summary_text
    idle = Result(effect=Counter({"rewritten": 5, "fusable": 4, "before:all_gather": 20, "after:all_gather": 20}),
                  has_planner=False)
    assert idle.vacuous and "WARNING: the target fused no launch in any of the 4 cases" in summary_text(idle, "p")
    assert "it left every graph as it was" in summary_text(idle, "p")
    moved = Result(effect=Counter({"rewritten": 5, "fusable": 4, "changed": 3}))
    assert "it changed 3 graphs without fusing (a scheduling pass?)" in summary_text(moved, "p")
    assert "fused launches in 0 of the 5 cases it rewrote (4 held two or more" in summary_text(idle, "p")
    assert "all-gather 20 -> 20" in summary_text(idle, "p")
    assert "none: the target makes no plans in the reference's format" in summary_text(idle, "p")
    assert '<skipped message="WARNING' in junit_xml(idle, "p") and 'failures="0"' in junit_xml(idle, "p")
    required = junit_xml(idle, "p", require_fusion=True)
    assert '<failure message="FAIL: the target fused no launch' in required and 'failures="1"' in required
    assert "FAIL: the target fused no launch" in campaign_html(idle, "p", require_fusion=True)
    # one worker that fused is enough; a run with nothing to fuse is no vacuous run
    other = Result(effect=Counter({"rewritten": 2, "fusable": 1, "fused": 1}))
    idle.merge(other)
    assert not idle.vacuous and idle.effect["rewritten"] == 7 and idle.has_planner is False
    assert not Result(effect=Counter({"rewritten": 3})).vacuous
    assert "reason coverage" in summary_text(Result(), "reference") and "unreached" in summary_text(Result(), "r")
