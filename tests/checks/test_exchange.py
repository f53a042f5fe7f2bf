"""The exchange checker: each planted exchange bug breaks the one rule written for it."""

from __future__ import annotations

import pytest

from fsdp_verify.checks.exchange import EDITS
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case

RULES = {"validator_ignores_missing_rank": {"validator_accepts_missing_rank"},
         "validator_ignores_extra_rank": {"validator_accepts_extra_rank"},
         "validator_ignores_rank_order": {"validator_accepts_rank_order"},
         "validator_ranks_by_zip": {"validator_accepts_other_ranks"},
         "validator_ignores_digest": {"validator_accepts_digest"},
         "exchange_skipped": {"divergent_plans_accepted"},
         "rewrite_then_exchange": {"divergent_round_applied"}}


@pytest.mark.parametrize("mutant", sorted(RULES))
def test_each_exchange_bug_breaks_its_own_rule(mutant):
    findings, _ = check_all(get_target(f"mutant:{mutant}"), two_block_case(), only=("exchange",))
    assert {f.rule for f in findings} == RULES[mutant], [f.message for f in findings]


def test_every_edit_has_a_bug_that_only_it_catches():
    assert {edit.rule for edit in EDITS} <= set().union(*RULES.values())


def test_a_validator_that_raises_the_wrong_error_is_named():
    class Strict(type(get_target("reference"))):
        def validate_reports(self, reports, group):
            if len({str(r["group_digests"].get(group)) for r in reports.values()}) > 1 or \
                    set(reports) != set(next(iter(reports.values()))["group_ranks"][group]):
                raise KeyError(group)  # refuses, but not as spec 2.12 says
            super().validate_reports(reports, group)
    findings, _ = check_all(Strict(), two_block_case(), only=("exchange",))
    assert {f.rule for f in findings} == {"validator_wrong_error"}


def test_a_target_that_exchanges_nothing_is_skipped_with_a_reason():
    _, ctx = check_all(get_target("torch-inductor"), two_block_case(), only=("exchange",))
    assert "exchanges no plans" in ctx.skipped["exchange"]


def test_a_driver_that_validates_its_first_group_only_is_caught_on_a_second_group():
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.model.case import Case
    blocks = ((ParamDraw((2, 4)), ParamDraw((2, 4), expert=True)), (ParamDraw((2, 2)), ParamDraw((3,), expert=True)))
    expert = Case(render(Blueprint(blocks=blocks, expert_degree=2, degree=2)))
    # the seed picks which group the disagreeing world shifts: seed 4 takes the second one
    for seed, caught in ((0, False), (4, True)):
        findings, _ = check_all(get_target("mutant:exchange_first_group_only"), expert.__class__(
            expert.graph, expert.plan_args, seed=seed), only=("exchange",))
        assert ({f.rule for f in findings} == {"divergent_plans_accepted"}) is caught, [f.message for f in findings]


def test_a_disagreeing_world_must_be_refused_with_the_spec_message():
    class Vague(type(get_target("reference"))):
        def rewrite(self, case, modules):
            try:
                return super().rewrite(case, modules)
            except ValueError:
                raise ValueError("no") from None
    findings, _ = check_all(Vague(), two_block_case(), only=("exchange",))
    assert {f.rule for f in findings} == {"divergent_wrong_error"}


def test_a_validator_that_writes_into_the_reports_it_is_given_changes_no_one_elses():
    """The checker hands the validator copies (``_copied``): a write there must not reach the reports
    the planner and consistency checkers read, nor a later edit's reports."""
    class Scribbler(type(get_target("reference"))):
        def validate_reports(self, reports, group):
            super().validate_reports(reports, group)
            for report in reports.values():
                report["group_digests"][group] = "scribbled"
                report.setdefault("buckets", []).append({"scribbled": True})
    case = two_block_case()
    _, clean = check_all(get_target("reference"), case, only=("exchange",))
    findings, ctx = check_all(Scribbler(), case, only=("exchange",))
    assert not [f for f in findings if f.severity == "error"], findings
    assert {rank: ctx.reports(rank) for rank in ctx.original} == {rank: clean.reports(rank) for rank in clean.original}


def test_a_report_holding_what_marshal_refuses_is_still_copied_deeply():
    """``_copied`` rebuilds by hand what marshal refuses (an enum, a dict subclass), and either way
    no write to the copy reaches the original."""
    import collections
    import enum

    from fsdp_verify.checks.exchange import _copied

    class Kind(enum.IntEnum):
        GATHER = 1

    plain = {"buckets": [{"members": [1, 2]}], "ranks": (0, 1)}
    odd = {"buckets": [{"members": [1, 2], "kind": Kind.GATHER}], "order": collections.OrderedDict(a=[1])}
    for report in (plain, odd):
        copied = _copied(report)
        assert copied == report and type(copied["ranks" if "ranks" in report else "order"]) is \
            type(report["ranks" if "ranks" in report else "order"])
        copied["buckets"][0]["members"].append(3)
        assert report["buckets"][0]["members"] == [1, 2]
    assert _copied(odd)["buckets"][0]["kind"] is Kind.GATHER
