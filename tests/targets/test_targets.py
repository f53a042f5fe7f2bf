"""Targets: plugin mechanisms, PyTorch's inductor passes, and failing targets (issue 8)."""

from __future__ import annotations

import importlib.metadata
import time

import pytest

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets import TargetNotFound, get_target, registry
from helpers.cases import two_block_case


def test_module_callable_plugin():
    target = get_target("helpers.targets:reference_copy")
    findings, _ = check_all(target, two_block_case())
    assert target.name == "reference-copy" and findings == []


def test_entry_point_plugin(monkeypatch):
    point = importlib.metadata.EntryPoint(name="from-entry-point", value="helpers.targets:reference_copy",
                                          group=registry.ENTRY_POINT_GROUP)
    monkeypatch.setattr(registry, "entry_points", lambda group: [point] if group == point.group else [])
    assert "from-entry-point" in registry.available()
    assert get_target("from-entry-point").name == "reference-copy"


@pytest.mark.parametrize("name", ["nope", "helpers.targets:missing", "no_such_module:thing", "torch-inductor:bogus",
                                  "helpers.targets:time"])
def test_unknown_targets_raise_with_a_reason(name):
    with pytest.raises(TargetNotFound):
        get_target(name)


def test_hyper_parallel_is_reported_unavailable_when_not_installed():
    with pytest.raises(TargetNotFound, match="unavailable"):
        get_target("hyper-parallel")


def test_crashing_target_is_a_finding_with_the_traceback():
    findings, ctx = check_all(get_target("helpers.targets:Crashing"), two_block_case())
    assert [f.checker for f in findings] == ["target"]
    assert "planner exploded on purpose" in findings[0].message
    assert "Traceback" in findings[0].details["traceback"]


def test_an_unlinted_rewrite_of_a_planning_target_crashes_no_checker():
    # consistency would re-plan the rewrite, and the reference planner lints: it skips, saying why
    findings, ctx = check_all(get_target("helpers.targets:UnlintedReference"), two_block_case())
    assert findings[0].key == ("dependencies", "read_before_definition")
    assert {"ordering", "consistency"} <= set(ctx.skipped)
    assert not any(f.rule == "checker_crash" for f in findings)


def test_unlinted_graph_is_a_finding():
    # out of topological order: dependencies names the reads, ordering has no schedule and says so
    findings, ctx = check_all(get_target("helpers.targets:Unlinted"), two_block_case())
    assert findings and findings[0].key == ("dependencies", "read_before_definition")
    assert ctx.run.error is None and "ordering" in ctx.skipped
    assert not any(f.rule == "checker_crash" for f in findings)


def test_hanging_target_is_killed_at_the_deadline_and_reported():
    start = time.monotonic()
    findings, ctx = check_all(get_target("helpers.targets:Hanging"), two_block_case(), deadline=3)
    assert time.monotonic() - start < 30
    assert findings[0].checker == "target" and "did not finish within 3s" in findings[0].message


def test_isolated_run_gives_the_same_verdict_as_in_process():
    findings, ctx = check_all(get_target("reference"), two_block_case(), deadline=60)
    assert findings == [] and ctx.run.plans[0][0].to_dict()["buckets"]


@pytest.mark.parametrize("mode", ["torch-inductor", "torch-inductor:custom_ops", "torch-inductor:coalesced",
                                  "torch-inductor@fsdp"])
def test_torch_inductor_runs_through_every_generic_checker(mode):
    findings, ctx = check_all(get_target(mode), two_block_case(overload="default"))
    assert ctx.run.error is None
    crashed = [f for f in findings if f.details.get("kind") == "checker_crash"]
    assert not crashed
    fused = [n for n in ctx.run.rewritten[0].graph.nodes if "all_gather_into_tensor" in str(n.target)]
    assert len(fused) < 8  # it did bucket
    # Its AG buckets hand out views of the shared buffer, which reshard frees then release:
    assert any(f.checker == "dependencies" and "freed its storage" in f.message for f in findings)


def test_torch_inductor_ignores_packet_targets():
    findings, ctx = check_all(get_target("torch-inductor"), two_block_case())
    assert findings == []
    before = [n.name for n in ctx.run.originals[0].graph.nodes]
    assert [n.name for n in ctx.run.rewritten[0].graph.nodes] == before


def test_deadline_mode_keeps_the_checks_that_need_live_plans():
    # The stale-plan check re-applies the target's own plan: it runs in the child under --deadline.
    findings, ctx = check_all(get_target("mutant:stale_plan_accepted"), two_block_case(), deadline=60)
    assert any(f.checker == "consistency" and "stale plan" in f.message for f in findings)
    assert ctx.skipped == {}


@pytest.mark.parametrize("name,expected", [("helpers.targets:Segfaulting", "killed by signal SIGSEGV"),
                                           ("helpers.targets:Exiting", "raised SystemExit: 3")])
def test_a_target_that_dies_is_a_finding_under_deadline(name, expected):
    findings, _ = check_all(get_target(name), two_block_case(), deadline=30)
    assert findings[0].checker == "target" and expected in findings[0].message


def test_a_run_says_what_its_rewrite_did_to_the_collectives(monkeypatch):
    # Every check passes on a rewrite that changed nothing: the run's effect tells a pass that
    # fuses from one that never matches (the campaign's "rewrites" line and its vacuity warning).
    from fsdp_verify.engine.run_case import run_target
    from fsdp_verify.graph.collectives import Kind, fusable, launch_counts
    from fsdp_verify.graph.examples import mlp_graph
    from fsdp_verify.model.case import Case
    from fsdp_verify.report.tally import effect_of
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    case = Case(mlp_graph())
    fused = run_target(get_target("reference"), case).effect()
    assert fused["fusable"] and fused["after"]["all_gather"] < fused["before"]["all_gather"] == 12
    assert effect_of({"effect": fused})["fused"] == 1
    never = get_target("fx-pass:helpers.torch_passes:never_matches")
    idle = run_target(never, never.normalise(case)).effect()
    assert idle["fusable"] and idle["after"] == idle["before"] and not idle["changed"] and fused["changed"]
    assert effect_of({"effect": idle})["fused"] == 0 and effect_of({}) == {}  # a raise has no effect
    moved = get_target("fx-pass:helpers.torch_passes:sinks_waits")
    scheduled = run_target(moved, moved.normalise(case)).effect()
    assert scheduled["changed"] and scheduled["after"] == scheduled["before"]  # a scheduler: no fusion
    module = run_target(get_target("reference"), case).originals[0]
    assert launch_counts(module.graph) == {Kind.ALL_GATHER: 6, Kind.REDUCE_SCATTER: 4, Kind.ALL_REDUCE: 0}
    assert fusable(module.graph)


def test_a_coalesced_launch_counts_once():
    import torch
    from torch import fx
    from fsdp_verify.graph.collectives import Kind, fusable, launch_counts
    graph = fx.Graph()
    a, b = graph.placeholder("a"), graph.placeholder("b")
    fused = graph.call_function(torch.ops._c10d_functional.all_gather_into_tensor_coalesced.default, ([a, b], 2, "g"))
    graph.call_function(torch.ops._c10d_functional.wait_tensor.default, (fused,))
    graph.output(fused)
    assert launch_counts(graph)[Kind.ALL_GATHER] == 1 and not fusable(graph)
