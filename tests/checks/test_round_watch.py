"""The planner oracle's later rounds: the spec's plan of each graph the target planned after its
first round is derived while the target's run holds that graph (``RoundWatch``), and equals what
replaying the target's earlier rounds on a fresh original gives."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_verify.checks import CheckContext
from fsdp_verify.checks import planner_oracle
from fsdp_verify.checks.planner_oracle import Expectations, RoundWatch, check_planner
from fsdp_verify.engine.run_case import check_all, run_target
from fsdp_verify.strategies import fsdp_graphs, mutated_graphs
from fsdp_verify.targets import get_target
from fsdp_verify.targets.reference import ReferenceTarget
from fsdp_verify.targets.watch import watching
from helpers.cases import two_block_case


class _Raising:
    def before(self, rank, module):
        return "seen"

    def after(self, rank, plan, seen):
        raise RuntimeError("boom")

    def close(self):
        pass


def test_watching_restores_the_targets_own_plan():
    target = ReferenceTarget()
    case = two_block_case()
    try:
        with watching(target, _Raising()):
            assert "plan" in vars(target)
            target.rewrite(case, {0: run_target(target, case, watch=False).originals[0]})
    except RuntimeError:
        pass
    assert "plan" not in vars(target)  # the class's method again, even after an exception


def _no_replays(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a later round was replayed although the watch derived it")
    monkeypatch.setattr(planner_oracle, "_rounds", refuse)


def test_later_rounds_are_judged_from_the_watch(monkeypatch):
    run = run_target(get_target("reference"), two_block_case())
    assert isinstance(run.watched, RoundWatch)
    assert {rank for _, rank, _ in run.watched.seen.values()} == set(run.plans)  # round 2 of every rank
    _no_replays(monkeypatch)
    assert check_planner(CheckContext(run, get_target("reference"))) == []


def test_a_round_two_misreport_is_killed_through_the_watch(monkeypatch):
    # Fused launches exist only from round 2 on: this planted bug shows in round 2 alone.
    _no_replays(monkeypatch)
    findings, _ = check_all(get_target("mutant:skip_unsupported_or_already_bucketed_misreported"), two_block_case())
    assert any(f.checker == "planner" and "round 2" in f.message for f in findings), findings
    assert not any("crashed" in f.message for f in findings), findings


def test_an_unwatched_plan_falls_back_to_replay(monkeypatch):
    run = run_target(get_target("reference"), two_block_case())
    run.watched.seen.pop(id(run.plans[1][1]))  # rank 1's round-2 plan was made out of sight
    replayed = []
    rounds = planner_oracle._rounds
    monkeypatch.setattr(planner_oracle, "_rounds", lambda ctx, rank, *rest: replayed.append(rank) or
                        rounds(ctx, rank, *rest))
    assert check_planner(CheckContext(run, get_target("reference"))) == []
    assert replayed == [1]


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(fsdp_graphs("tiny"), mutated_graphs("tiny")))
def test_watched_expectations_equal_replayed_ones(case):
    # Both ways of knowing a later round's graph give the same spec plan on every rank.
    target = get_target("reference")
    run = run_target(target, case)
    if run.error is not None or run.watched is None:
        return
    ctx = CheckContext(run, target)
    for rank, plans in run.plans.items():
        watched = run.watched.reports(rank, plans[1:])
        assert watched is not None and len(watched) == len(plans) - 1
        expectations = Expectations(case.plan_args)
        graphs, why = planner_oracle._rounds(ctx, rank, ctx.reports(rank), plans, expectations, {}, {})
        assert why is None
        assert [expectations.report(g, case.group_ranks(rank)) for g in graphs[1:]] == watched


def test_a_plan_object_returned_twice_is_replayed():
    # Which graph a refilled (or stale) plan object was made for is ambiguous: replay it.
    target, case = ReferenceTarget(), two_block_case()
    module = run_target(target, case, watch=False).originals[0]
    watch = planner_oracle.watch_rounds(case, {0: module})
    with watching(target, watch):
        target.plan(case, module, 0)
        plan = target.plan(case, module, 0)
        assert watch.reports(0, [plan]) is not None
        watch.after(0, plan, watch.before(0, module))  # the same object, returned by a third call
    assert watch.reports(0, [plan]) is None and watch.reports(0, [plan, plan]) is None
    assert watch.closed and watch.before(0, module) is None  # nothing is watched after the run


def test_purity_is_seen_on_the_later_plan_calls_of_the_run():
    # A planner that changes only graphs holding fused launches (round 2 on): the oracle's own
    # plans of a fresh original cannot show it; the watch does.
    from fsdp_verify.targets.mutants import get_mutant
    target = get_mutant("replanning_marks_fused_launches")
    findings, _ = check_all(target, two_block_case(device="cpu"))
    assert any(f.checker == "planner" and "planning mutated the graph (purity)" in f.message
               and "plan 2 in the target's run" in f.message for f in findings), findings


def test_plan_calls_by_keyword_are_watched():
    target = ReferenceTarget()
    case = two_block_case()
    modules = run_target(target, case, watch=False).originals
    watch = planner_oracle.watch_rounds(case, {0: modules[0]})
    with watching(target, watch):
        first = target.plan(case=case, module=modules[0], rank=0)
        second = target.plan(case, modules[0], rank=0)
    assert watch.calls[0] == 2 and watch.reports(0, [second]) is not None and first is not second


def test_an_isolated_run_is_watched_and_its_deadline_leaves_the_watch_out(monkeypatch):
    # The derivations happen inside the target's run in the forked child: the parent's deadline
    # must time the target alone (here they take longer than the whole deadline), and the
    # planner's metrics say how later rounds were judged.
    import time as clock
    report = Expectations.report

    def slow(self, *args, **kwargs):
        clock.sleep(0.8)
        return report(self, *args, **kwargs)
    monkeypatch.setattr(Expectations, "report", slow)
    findings, ctx = check_all(get_target("reference"), two_block_case(), deadline=1.0)
    assert not [f for f in findings if f.checker == "target"], findings
    assert ctx.metrics["planner"]["later_rounds_watched"] == 2 and ctx.metrics["planner"]["later_rounds_replayed"] == 0


class _PlansForever(ReferenceTarget):
    name = "plans-forever"

    def rewrite(self, case, modules):
        while True:  # every call after the first is watched and derived: credit must run out
            self.plan(case, modules[0], 0)


def test_a_target_that_plans_without_end_still_times_out():
    import time as clock
    started = clock.monotonic()
    findings, _ = check_all(_PlansForever(), two_block_case(), deadline=1.0)
    assert [f.details.get("kind") for f in findings if f.checker == "target"] == ["timeout"], findings
    assert clock.monotonic() - started < 20  # the deadline, and at most WATCH_PAUSE_FACTOR more for the watch
