"""What real ranks find: every rank process plans with its own hash seed, digests cross the real
process group, and real collectives are compared with the simulated world (gloo on CPU here)."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
import torch

from fsdp_verify.execute.ranks.judge import NAME
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets import get_target
from fsdp_verify.targets.mutants import MUTANTS
from helpers.cases import two_block_case

HASH_BUG = "mutant:members_follow_hash_seed"


def test_reference_passes_on_real_ranks(real):
    findings, why = real.check(two_block_case(), "reference")
    assert findings == [] and why is None
    assert real.executed >= 1


def test_hash_seed_planner_is_invisible_in_process_and_killed_as_rank_dependent_on_real_ranks(real):
    case = two_block_case()
    simulated, _ = check_all(get_target(HASH_BUG), case)
    assert not any(f.checker in (NAME, "target") for f in simulated)  # one process: one hash order, no mismatch
    findings, _ = real.check(case, HASH_BUG, frozenset(f.checker for f in simulated))
    assert len(findings) == 1 and findings[0].checker == NAME
    finding = findings[0]
    assert finding.details["kind"] == "rank_dependent_planning"
    assert "rank-dependent planning" in finding.message and "PYTHONHASHSEED" in finding.message
    assert len(set(finding.details["digests"].values())) == 2
    assert set(finding.details["last_collective"]) == {"0", "1"}  # each rank's flight record
    assert all("digest exchange" in text for text in finding.details["last_collective"].values())


def test_a_target_raising_on_some_ranks_only_is_rank_dependent(real):
    findings, _ = real.check(two_block_case(), "helpers.rank_targets:OddRankRaises")
    assert [f.details["kind"] for f in findings] == ["rank_dependent_outcome"]
    assert "ranks [1]" in findings[0].message
    assert real.check(two_block_case(), "reference") == ([], None)  # no rank was left waiting


def test_a_target_raising_on_every_rank_is_left_to_the_simulated_checks(real):
    findings, why = real.check(two_block_case(), "helpers.targets:Crashing")
    assert findings == [] and "raised on every rank" in why


def test_real_vs_simulated_and_rewritten_vs_original_are_compared(real):
    findings, _ = real.check(two_block_case(), "mutant:swapped_copy_out")
    assert findings and all(f.details["kind"] == "rewritten_vs_original" for f in findings)
    # Already reported by the simulated checks: a real-mode verdict keeps theirs.
    assert real.check(two_block_case(), "mutant:swapped_copy_out", frozenset({"numerics"}))[0] == []


def test_a_rank_dependent_rewrite_with_agreeing_digests_is_found_on_real_ranks(real):
    findings, _ = real.check(two_block_case(), "mutant:rank_dependent_packing")
    assert findings  # odd ranks pack in another order: every rank gathers wrong columns
    assert findings[0].details["kind"] == "rewritten_vs_original"


def test_ranks_running_different_numbers_of_exchange_rounds_are_rank_dependent_planning(real):
    findings, why = real.check(two_block_case(), "helpers.rank_targets:EvenRankExtraRound")
    assert [f.details["kind"] for f in findings] == ["rank_dependent_planning"], (findings, why)
    assert "different numbers of digest-exchange rounds" in findings[0].message
    assert findings[0].details["stopped"] == [0] and set(findings[0].details["last_collective"]) == {"0", "1"}
    assert real.check(two_block_case(), "reference") == ([], None)


def test_ranks_returning_different_numbers_of_plans_are_rank_dependent_planning(real):
    findings, _ = real.check(two_block_case(), "helpers.rank_targets:OddRankExtraPlan")
    assert [f.details["kind"] for f in findings] == ["rank_dependent_planning"]
    assert "different numbers of plans" in findings[0].message


@pytest.mark.parametrize("bug, kind", [("packing_follows_rank_env", "rewritten_vs_original"),
                                       ("bucket_padded_by_rank_env", "rank_rewrites_disagree")])
def test_real_only_rewrite_bugs_are_invisible_in_process_and_killed_by_their_real_rule(real, bug, kind):
    assert MUTANTS[bug].needs == "real" and MUTANTS[bug].kills == (NAME,)
    simulated, _ = check_all(get_target(f"mutant:{bug}"), two_block_case())
    assert not [f for f in simulated if f.severity == "error"]  # the harness's process has no RANK
    findings, _ = real.check(two_block_case(), f"mutant:{bug}", frozenset(f.checker for f in simulated))
    assert findings and {f.checker for f in findings} == {NAME} and findings[0].details["kind"] == kind


def test_a_case_the_simulated_checks_found_invalid_is_planned_but_never_compared(real):
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.checks.findings import INVALID, Finding
    from fsdp_verify.execute.ranks.judge import judge
    from fsdp_verify.engine.run_case import run_target
    target = get_target("mutant:swapped_copy_out")
    ctx = CheckContext(run_target(target, two_block_case()), target)
    invalid = [Finding("numerics", "not finite", severity=INVALID, rule="original_non_finite")]
    before = real.executed
    assert judge(real, two_block_case(), "mutant:swapped_copy_out", invalid, ctx) == []
    assert "cannot be judged (invalid)" in ctx.skipped[NAME] and real.executed == before


def test_plans_without_digests_are_said_not_compared(real):
    findings, why = real.check(two_block_case(), "helpers.rank_targets:NoDigests")
    assert findings == [] and "planning not compared across ranks" in why
    assert real.executed and "no to_dict()" in why


def test_real_comparisons_count_outputs_and_types_and_compare_bits():
    from fsdp_verify.execute.ranks.collectives import compare_outputs
    from fsdp_verify.execute.ranks.torchrun import _same
    one, nan = torch.ones(2), torch.tensor([float("nan")])
    assert "1 outputs instead of 2" in compare_outputs([one, one], [one], ["a", "b"], 0, "x")[0].message
    assert "Tensor vs int" in compare_outputs([one], [3], ["a"], 0, "x")[0].message
    assert compare_outputs([one, 3], [one.clone(), 3], ["a", "b"], 0, "x") == []
    assert _same([nan], [nan.clone()]) and not _same([torch.tensor([0.0])], [torch.tensor([-0.0])])
    assert not _same([one], [one, one]) and not _same([one], [1])


def test_non_finite_original_outputs_are_invalid_never_compared_on_real_ranks(real, monkeypatch):
    from fsdp_verify.execute.ranks import judge as real_ranks
    from fsdp_verify.checks.findings import INVALID
    simulate_isolated = real_ranks.simulate_isolated

    def with_nan(*args):
        stage, original, rewritten, problem = simulate_isolated(*args)
        first = next(i for i, v in enumerate(original[0]) if isinstance(v, torch.Tensor) and v.is_floating_point())
        original[0][first] = torch.full_like(original[0][first], float("nan"))
        return stage, original, rewritten, problem
    monkeypatch.setattr(real_ranks, "simulate_isolated", with_nan)
    findings, why = real.check(two_block_case(), "mutant:swapped_copy_out")
    assert [(f.severity, f.details["kind"]) for f in findings] == [(INVALID, "non_finite")]
    assert why == "executed, not compared: non-finite original outputs"


def test_the_session_simulates_its_cases_in_one_persistent_child(real):
    child = real.simulator()
    child.kill()
    forks = child.started
    for seed in (21, 22, 23):
        assert real.check(replace(two_block_case(), seed=seed), "reference") == ([], None)
    assert child.started == forks + 1 and child.alive  # one fork for three cases


def test_the_ranks_rewritten_graphs_are_simulated_in_a_child_under_the_deadline(monkeypatch):
    from fsdp_verify.execute.ranks import judge as real_ranks
    from fsdp_verify.graph.builder import localize
    case = two_block_case()
    specs = {rank: localize(case.graph, rank) for rank in case.graph.world()}
    stage, original, rewritten, _ = real_ranks.simulate_isolated(case, specs, (), 20)
    assert stage == "ok" and set(original) == set(rewritten) == {0, 1}
    assert all(torch.equal(a, b) for r in original for a, b in zip(original[r], rewritten[r]))
    simulate = real_ranks.simulate
    calls = iter([lambda: None, lambda: time.sleep(60)])

    def hanging_second(case, modules, **kw):
        next(calls)()
        return simulate(case, modules, **kw)
    monkeypatch.setattr(real_ranks, "simulate", hanging_second)
    start = time.monotonic()
    stage, *_, problem = real_ranks.simulate_isolated(case, specs, (), 1.0)
    assert stage == "rewritten" and "did not finish within 1s" in problem and time.monotonic() - start < 10
    monkeypatch.setattr(real_ranks, "simulate", lambda case, modules, **kw: os._exit(9))
    stage, *_, problem = real_ranks.simulate_isolated(case, specs, (), 20)
    assert stage == "original" and "the simulating process died (exit code 9)" in problem


def test_a_float8_gather_is_not_run_on_gloo_and_says_why(real):
    """gloo refuses float8 ("Invalid scalar type"): a real run would fail on every rank and read as
    the target's fault. The case is left to the simulated checks, with the reason."""
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    blocks = ((ParamDraw((2, 4), wire="float8_e4m3fn"), ParamDraw((3,), wire="bfloat16")),)
    case = Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))
    findings, why = real.check(case, "reference")
    assert findings == [] and "gloo cannot move float8_e4m3fn" in why
    int8 = Case(render(Blueprint(blocks=((ParamDraw((2, 4), wire="int8"), ParamDraw((3,))),),
                                 reshard_after_forward=False)))
    assert real.check(int8, "reference") == ([], None)  # gloo moves int8: run and compared
