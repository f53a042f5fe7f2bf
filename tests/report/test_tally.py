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
    from fsdp_verify.report.tally import MIN_FUSABLE
    idle = Result(effect=Counter({"rewritten": 25, "fusable": MIN_FUSABLE, "before:all_gather": 20,
                                  "after:all_gather": 20}), has_planner=False, examples=25)
    text = summary_text(idle, "p")
    assert idle.vacuous and f"WARNING: the target fused no launch in any of the {MIN_FUSABLE} cases" in text
    assert "it left every graph as it was" in text and "all-gather 20 -> 20" in text
    assert f"fused launches in 0 of the 25 cases it rewrote ({MIN_FUSABLE} held two or more" in text
    assert "none: the target makes no plans in the reference's format" in text
    assert '<skipped message="WARNING' in junit_xml(idle, "p") and 'failures="0"' in junit_xml(idle, "p")
    required = junit_xml(idle, "p", require_fusion=True)
    assert '<failure message="FAIL: the target fused no launch' in required and 'failures="1"' in required
    assert "FAIL: the target fused no launch" in campaign_html(idle, "p", require_fusion=True)
    moved = Result(effect=Counter({"rewritten": 25, "fusable": MIN_FUSABLE, "changed": 3}))
    assert "it changed the graphs of 3 cases without fusing (a scheduling pass?)" in summary_text(moved, "p")
    # a run stopped early is no failure of --require-fusion; a few fusable-looking pairs are no evidence
    stopped = Result(effect=idle.effect.copy(), interrupted=True)
    assert stopped.vacuous and not stopped.fails_fusion(True) and "FAIL" not in "".join(
        line for line in summary_text(stopped, "p", True).splitlines() if "fused no launch" in line)
    assert not Result(effect=Counter({"rewritten": 5, "fusable": MIN_FUSABLE - 1})).vacuous
    # one worker that fused is enough
    idle.merge(Result(effect=Counter({"rewritten": 2, "fusable": 1, "fused": 1})))
    assert not idle.vacuous and idle.effect["rewritten"] == 27 and idle.has_planner is False
    assert "reason coverage" in summary_text(Result(), "reference") and "unreached" in summary_text(Result(), "r")
    assert "none judged (no case ran)" in summary_text(Result(), "r")
