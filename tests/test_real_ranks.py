"""Real mode: every rank process plans with its own hash seed, digests cross the real process group,
real collectives are compared with the simulated world, and the pool heals (gloo on CPU here)."""

from __future__ import annotations

import os
import signal
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fsdp_verify.engine import campaign
from fsdp_verify.corpus import files as corpus
from fsdp_verify.execute.ranks.judge import HASH_STRIDE, NAME, RealRanks, chosen, parse_mode
from fsdp_verify.execute.ranks.pool import PoolStartFailure, place
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.engine.replay import replay
from fsdp_verify.report.summary import junit_xml, summary_text
from fsdp_verify.report.tally import Result
from fsdp_verify.engine.selftest import format_table, hunt
from fsdp_verify.targets import get_target
from fsdp_verify.targets.mutants import MUTANTS
from fsdp_verify.execute.ranks.rank_side import RealJob
from support import two_block_case

ROOT = Path(__file__).resolve().parents[1]
HASH_BUG = "mutant:members_follow_hash_seed"


@pytest.fixture(scope="module")
def real():
    with RealRanks(backend="gloo", seed=0, deadline=20) as session:
        yield session


def test_ranks_run_with_their_own_hash_seed_and_environment(real):
    pool = real.pool(2)
    seen = pool.run({rank: RealJob("env") for rank in range(2)})
    assert [seen[r]["hashseed"] for r in range(2)] == ["0", str(HASH_STRIDE)]
    assert seen[0]["hash"] != seen[1]["hash"]  # string hashing differs between the rank processes
    assert seen[0]["pid"] != seen[1]["pid"] != os.getpid()


def test_reference_passes_on_real_ranks(real):
    findings, why = real.check(two_block_case(), "reference")
    assert findings == [] and why is None
    assert real.executed >= 1


def test_the_session_simulates_its_cases_in_one_persistent_child(real):
    child = real.simulator()
    child.kill()
    forks = child.started
    for seed in (21, 22, 23):
        assert real.check(replace(two_block_case(), seed=seed), "reference") == ([], None)
    assert child.started == forks + 1 and child.alive  # one fork for three cases


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
    findings, _ = real.check(two_block_case(), "real_targets:OddRankRaises")
    assert [f.details["kind"] for f in findings] == ["rank_dependent_outcome"]
    assert "ranks [1]" in findings[0].message
    assert real.check(two_block_case(), "reference") == ([], None)  # no rank was left waiting


def test_a_target_raising_on_every_rank_is_left_to_the_simulated_checks(real):
    findings, why = real.check(two_block_case(), "plugin_targets:Crashing")
    assert findings == [] and "raised on every rank" in why


def test_a_rank_whose_target_kills_its_process_is_one_finding_confirmed_by_a_rerun_and_the_pool_heals(real):
    restarts = real.pools[2].restarts if 2 in real.pools else 0
    reproduced = real.deaths["reproduced"]
    findings, _ = real.check(two_block_case(), "real_targets:OddRankExits")
    assert [f.details["kind"] for f in findings] == ["rank_died"]
    assert findings[0].details["ranks"] == [1] and "rank 1 died (exit code 3)" in findings[0].message
    assert findings[0].details["rerun"] == "reproduced" and "the same on 2 reruns" in findings[0].message
    assert real.deaths["reproduced"] == reproduced + 1
    assert real.pools[2].restarts == restarts + 3  # after the death, and after each of its two reruns
    assert real.check(two_block_case(), "reference") == ([], None)


def test_sigkill_of_a_rank_between_cases_heals_before_the_next_case(real):
    pool = real.pool(2)
    victim = pool.processes[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    restarts = pool.restarts
    assert real.check(replace(two_block_case(), seed=3), "reference") == ([], None)
    assert pool.restarts == restarts + 1
    assert "rank 1 died between cases (killed by signal SIGKILL" in pool.events[-1]


def test_an_outside_sigkill_of_a_rank_during_a_case_is_no_finding_the_rerun_judges_it_and_the_report_says(real):
    # The OOM killer's way: one rank dies once. The case is run again and judged; the death is counted.
    pool = real.pool(2)
    victim = pool.processes[1].pid
    timer = threading.Timer(1.0, lambda: os.kill(victim, signal.SIGKILL))
    timer.start()
    start, cases = time.monotonic(), real.cases
    try:
        findings, why = real.check(two_block_case(), "real_targets:Slow")
    finally:
        timer.cancel()
    assert time.monotonic() - start < 60
    assert findings == [] and why is None
    assert real.cases == cases + 1  # one case, planned twice
    report = real.report()
    assert report["rank_deaths"]["not_reproduced"] >= 1
    assert "rank 1" in report["deaths_not_reproduced"][-1] and "SIGKILL" in report["deaths_not_reproduced"][-1]
    assert "last collective entered" in report["deaths_not_reproduced"][-1]
    assert real.check(two_block_case(), "reference") == ([], None)


def test_a_rank_killed_between_planning_and_running_reruns_the_case_never_a_finding(real, monkeypatch):
    # The restarted ranks would lack the case's plans: every rank would raise, a false "error".
    pool = real.pool(2)
    run, calls = pool.run, []

    def kill_after_planning(jobs):
        calls.append(next(iter(jobs.values())).phase)
        out = run(jobs)
        if calls == ["plan"]:
            victim = pool.processes[1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(5)
        return out

    monkeypatch.setattr(pool, "run", kill_after_planning)
    before = real.deaths["not_reproduced"]
    assert real.check(replace(two_block_case(), seed=11), "reference") == ([], None)
    assert calls == ["plan", "execute", "plan", "execute"]
    assert real.deaths["not_reproduced"] == before + 1
    assert "between planning and running" in real.unreproduced[-1]


def test_a_pool_start_killed_from_outside_is_tried_again_and_the_case_runs(real, monkeypatch):
    started, failed = real.pool, []

    def killed_once(world):
        if not failed:
            failed.append(world)
            raise PoolStartFailure("died", "the pool did not start: rank 1 died (killed by signal SIGKILL)", {}, {})
        return started(world)

    monkeypatch.setattr(real, "pool", killed_once)
    assert real.check(replace(two_block_case(), seed=5), "reference") == ([], None)
    assert failed == [2] and 2 not in real.broken
    assert "start attempt 1 of 3 failed" in real.report()["events"][-1]


def test_a_pool_that_fails_every_start_is_given_up_after_three_tries_as_the_harness_failure():
    session = RealRanks(backend="gloo", seed=0, deadline=20)
    tries = []

    def never(world):
        tries.append(world)
        raise PoolStartFailure("died", "the pool did not start: rank 0 died (killed by signal SIGKILL)", {}, {})

    session.pool = never
    findings, why = session.check(two_block_case(), "reference")
    assert findings == [] and "no pool of 2 real ranks could start" in why
    assert tries == [2, 2, 2]
    assert session.check(two_block_case(), "reference") == ([], why) and tries == [2, 2, 2]  # not retried per case


def test_a_flaky_rank_death_is_not_dropped_from_the_summary_or_junit():
    result = Result(ranks={"mode": "real", "rank_deaths": {"reproduced": 1, "not_reproduced": 2},
                           "deaths_not_reproduced": ["case 7: real ranks failed (died)"]})
    text = summary_text(result, "reference")
    assert "1 the same on every rerun" in text and "2 not" in text and "case 7: real ranks failed" in text
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(result, "reference")).iter("property")}
    assert props["real_rank_deaths_reproduced"] == "1" and props["real_rank_deaths_not_reproduced"] == "2"


def test_real_vs_simulated_and_rewritten_vs_original_are_compared(real):
    findings, _ = real.check(two_block_case(), "mutant:swapped_copy_out")
    assert findings and all(f.details["kind"] == "rewritten_vs_original" for f in findings)
    # Already reported by the simulated checks: a real-mode verdict keeps theirs.
    assert real.check(two_block_case(), "mutant:swapped_copy_out", frozenset({"numerics"}))[0] == []


def test_the_campaign_kills_the_hash_seed_planner_in_real_mode_and_reports_how_ranks_ran(real, tmp_path, monkeypatch):
    # Two-rank cases only, so the module's pool serves them (generated graphs reach 8 ranks; the
    # command `fsdp-verify selftest --mutant members_follow_hash_seed --ranks real` hunts on those).
    from hypothesis import strategies as st
    drawn = st.sampled_from([replace(two_block_case(), seed=seed) for seed in range(4)])
    monkeypatch.setattr(campaign, "_strategy", lambda config, target=None: drawn)
    config = campaign.Config(target=HASH_BUG, budget=campaign.Budget(examples=10), seed=0, profile="ci",
                             corpus_dir=str(tmp_path), modules=False, max_failures=2, shrink=False,
                             stop_on=(NAME,), ranks="real:gloo")
    result = campaign.run(config, session=real)
    killed = [f for f in result.failures if NAME in f["checkers"]]
    assert killed
    saved = corpus.load(Path(killed[0]["file"]))  # the planner oracle may fire too: this process has one order
    assert saved.target == HASH_BUG
    assert any(c == NAME and m.startswith("rank-dependent planning") for c, m in saved.verdict.findings)
    assert result.ranks["mode"] == "real" and result.ranks["backend"] == "gloo" and result.ranks["device"] == "cpu"
    text = summary_text(result, HASH_BUG)
    assert "ranks           real" in text and "gloo on cpu, 2 ranks" in text
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(result, HASH_BUG)).iter("property")}
    assert props["ranks_mode"] == "real" and props["real_backend"] == "gloo" and props["real_device"] == "cpu"
    assert props["real_rank_counts"] == "2" and float(props["real_fraction"]) == 1.0


def test_the_gate_runs_the_candidate_on_real_ranks(real):
    from fsdp_verify.engine.gate import gate_report
    entry = corpus.Entry(two_block_case(), "reference", corpus.Verdict(corpus.PASS), {})
    real.max_ranks = 2  # generated cases may need 8 ranks: those are skipped here, and said so
    before = real.report()["findings"].get("rank_dependent_planning", 0)
    try:
        text, violations = gate_report(get_target("reference"), get_target(HASH_BUG), [entry], 1, 0, real=real,
                                       candidate_spec=HASH_BUG)
    finally:
        real.max_ranks = 8
    assert violations >= 1  # the report shows each case's first finding (here the planner oracle's, maybe)
    assert real.report()["findings"]["rank_dependent_planning"] == before + 1
    assert "ranks: real (gloo on cpu, 2 ranks" in text


def test_a_rank_dependent_rewrite_with_agreeing_digests_is_found_on_real_ranks(real):
    findings, _ = real.check(two_block_case(), "mutant:rank_dependent_packing")
    assert findings  # odd ranks pack in another order: every rank gathers wrong columns
    assert findings[0].details["kind"] == "rewritten_vs_original"


def test_a_simulated_run_says_it_did_not_use_real_ranks(tmp_path):
    from fsdp_verify.report.tally import Result
    result = Result(ranks={"mode": "simulated", "note": "x"})
    assert "ranks           simulated" in summary_text(result, "reference")
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(result, "reference")).iter("property")}
    assert props["ranks_mode"] == "simulated"


def test_the_simulated_selftest_lists_a_real_only_bug_as_not_hunted(tmp_path):
    assert MUTANTS["members_follow_hash_seed"].needs == "real"
    kill = hunt("members_follow_hash_seed", 5, 0, str(tmp_path))
    assert kill.outcome == "not hunted" and not kill.killed
    table = format_table([kill])
    assert "needs real ranks" in table
    assert "not hunted: 1 (need --ranks real): members_follow_hash_seed" in table.splitlines()[-1]


def test_real_fraction_choice_is_stable_and_proportional():
    cases = [replace(two_block_case(), seed=s) for s in range(200)]
    picked = [chosen(case, 0.25) for case in cases]
    assert picked == [chosen(case, 0.25) for case in cases]
    assert 20 < sum(picked) < 80
    assert all(chosen(case, 1.0) for case in cases[:3])


def test_a_case_not_chosen_or_too_large_says_why(real):
    small = RealRanks(backend="gloo", fraction=1e-9, max_ranks=1)
    _, why = small.check(two_block_case(), "reference")
    assert "this machine runs at most 1" in why and "torchrun" in why
    small.max_ranks = 8
    _, why = small.check(two_block_case(), "reference")
    assert why.startswith("not chosen (--real-fraction")
    assert small.pools == {}  # nothing started for cases it does not run


def test_modes_and_placement_are_explicit():
    assert parse_mode("simulated") is None and parse_mode("real") == "auto"
    assert parse_mode("real:nccl") == "nccl" and parse_mode("real:gloo") == "gloo"
    with pytest.raises(ValueError):
        parse_mode("real:mpi")
    assert place("auto", 2, gpus=0).describe() == "gloo on cpu, 2 ranks (no CUDA device: gloo on CPU)"
    assert (place("nccl", 2, gpus=2).backend, place("nccl", 2, gpus=2).device) == ("nccl", "cuda")
    mixed = place("nccl", 4, gpus=2)
    assert (mixed.backend, mixed.device) == ("gloo", "cuda") and "NCCL needs one GPU per rank" in mixed.note
    assert place("gloo", 2, gpus=8).backend == "gloo"
    with pytest.raises(ValueError, match="no CUDA device"):
        place("nccl", 2, gpus=0)


def test_cli_refuses_nccl_without_a_gpu_and_unknown_modes(capsys):
    from fsdp_verify.commands.cli import main
    if not torch.cuda.is_available():
        assert main(["fuzz", "--ranks", "real:nccl", "--budget", "1"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["fuzz", "--ranks", "real:mpi"])
    with pytest.raises(SystemExit):
        main(["fuzz", "--real-fraction", "0"])


def _shipped(limit_four: int) -> list[Path]:
    """Every two-rank case of the shipped corpus and the first ``limit_four`` four-rank ones."""
    paths, fours = [], 0
    for path in corpus.discover([str(ROOT / "corpus")]):
        world = len(corpus.load(path).case.graph.world())
        if world == 2 or (world == 4 and fours < limit_four):
            fours += world == 4
            paths.append(path)
    return paths


def test_real_mode_replay_of_the_shipped_corpus_agrees_with_the_simulated_verdicts(real):
    # `fsdp-verify replay corpus --ranks real` replays all of it (README); here the two-rank cases and
    # a few four-rank ones keep the test short.
    target = get_target("reference")
    paths = _shipped(limit_four=1)
    assert len(paths) >= 5
    before = real.cases
    for path in paths:
        entry = corpus.load(path)
        simulated = replay(target, path, entry)
        on_ranks = replay(target, path, entry, real=real, target_spec="reference")
        assert on_ranks.got == simulated.got and on_ranks.agrees == simulated.agrees, path
        assert on_ranks.agrees, on_ranks.line(target)
    assert real.cases - before == len(paths)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                    reason="NCCL with CUDA tensors needs 2 GPUs (this machine has "
                           f"{torch.cuda.device_count() if torch.cuda.is_available() else 0})")
def test_nccl_real_mode_on_gpus():
    with RealRanks(backend="nccl", deadline=60) as session:
        assert session.check(two_block_case(), "reference") == ([], None)
        assert session.report()["backend"] == "nccl" and session.report()["device"] == "cuda"
        findings, _ = session.check(two_block_case(), HASH_BUG)
        assert findings and findings[0].details["kind"] == "rank_dependent_planning"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA compute with gloo collectives needs a GPU")
def test_cuda_compute_with_gloo_collectives_when_gpus_are_fewer_than_ranks():
    gpus = torch.cuda.device_count()
    with RealRanks(backend="auto", deadline=60) as session:
        from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
        from fsdp_verify.model.case import Case
        case = Case(render(Blueprint(blocks=((ParamDraw((2, 4)), ParamDraw((3,))),), degree=gpus + 1)))
        assert session.check(case, "reference") == ([], None)
        assert "NCCL needs one GPU per rank" in session.report()["placements"][str(gpus + 1)]


def _torchrun(folder: Path, *extra: str):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "fsdp_verify.execute.ranks.torchrun", str(folder), *extra],
                          capture_output=True, text=True, timeout=300, cwd=str(Path(__file__).parent))


def test_torchrun_replay_plans_on_each_rank_and_names_rank_dependent_planning(tmp_path):
    # The single-node example of the README, with the hash-seed planner: each process plans its own
    # rank under its own PYTHONHASHSEED and the digests cross the real process group.
    entry = corpus.Entry(two_block_case(), HASH_BUG, corpus.Verdict(corpus.PASS), {})
    corpus.save(entry, str(tmp_path))
    out = _torchrun(tmp_path, "--target", HASH_BUG, "--hash-seed", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ranks: real, gloo on cpu, 2 ranks" in out.stdout
    assert "FAIL" in out.stdout and "rank-dependent planning" in out.stdout and "'7919'" in out.stdout


def test_collectives_staged_through_cpu_give_the_same_bits():
    # The path `--ranks real` takes with fewer GPUs than ranks (CUDA compute, gloo collectives on CPU
    # copies), run here on CPU tensors.
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.execute.ranks.collectives import check_collectives
    from fsdp_verify.execute.ranks.pool import RankPool
    from fsdp_verify.engine.run_case import run_target
    from real_targets import staged_handler
    target = get_target("reference")
    with RankPool(2, backend="gloo", deadline=20, handler=staged_handler) as pool:
        assert check_collectives(CheckContext(run_target(target, two_block_case()), target), pool) == []


def test_the_command_line_offers_the_modes_real_ranks_knows():
    from fsdp_verify.commands import options
    from fsdp_verify.execute.ranks.judge import MODES
    assert options.RANK_MODES == MODES


def test_ranks_running_different_numbers_of_exchange_rounds_are_rank_dependent_planning(real):
    findings, why = real.check(two_block_case(), "real_targets:EvenRankExtraRound")
    assert [f.details["kind"] for f in findings] == ["rank_dependent_planning"], (findings, why)
    assert "different numbers of digest-exchange rounds" in findings[0].message
    assert findings[0].details["stopped"] == [0] and set(findings[0].details["last_collective"]) == {"0", "1"}
    assert real.check(two_block_case(), "reference") == ([], None)


def test_ranks_returning_different_numbers_of_plans_are_rank_dependent_planning(real):
    findings, _ = real.check(two_block_case(), "real_targets:OddRankExtraPlan")
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


def test_a_shrink_step_runs_on_real_ranks_whatever_the_fraction_chooses(real):
    case = replace(two_block_case(), seed=11)
    real.fraction = 1e-9
    try:
        assert real.check(case, "reference")[1].startswith("not chosen")
        assert real.check(case, "reference", force=True) == ([], None)
    finally:
        real.fraction = 1.0


def test_plans_without_digests_are_said_not_compared(real):
    findings, why = real.check(two_block_case(), "real_targets:NoDigests")
    assert findings == [] and "planning not compared across ranks" in why
    assert real.executed and "no to_dict()" in why


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_a_pool_that_cannot_be_had_is_the_harness_s_reason_once_never_a_finding_or_a_crash():
    session = RealRanks(backend="nccl")
    first = session.check(two_block_case(), "reference")
    assert first[0] == [] and "no pool of 2 real ranks could start (ValueError" in first[1]
    assert session.check(replace(two_block_case(), seed=5), "reference") == first  # remembered, not retried
    assert session.report()["pools_not_started"] == {"2": first[1]} and session.cases == 0


def test_a_pool_that_does_not_start_in_time_kills_its_ranks_and_says_so():
    from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankPool
    pool = RankPool(2, backend="gloo", start_timeout=0.01)
    with pytest.raises(PoolStartFailure, match="the pool did not start"):
        pool.start()
    assert pool.processes == []  # killed and reaped


def test_coalesced_and_out_collectives_staged_through_cpu_give_the_same_bits():
    from fsdp_verify.execute.ranks.pool import RankPool
    from real_targets import staged_variants_handler
    with RankPool(2, backend="gloo", deadline=20, handler=staged_variants_handler) as pool:
        results = pool.run({rank: "variants" for rank in range(2)})
    for rank in range(2):
        for direct, staged, out in results[rank]:
            direct, staged = (direct, staged) if isinstance(direct, list) else ([direct], [staged])
            assert len(direct) == len(staged) and all(torch.equal(a, b) for a, b in zip(direct, staged))
            if out is not None:
                assert torch.equal(out, direct[0])  # the caller's out= holds the result


def test_real_comparisons_count_outputs_and_types_and_compare_bits():
    from fsdp_verify.execute.ranks.collectives import compare_outputs
    from fsdp_verify.execute.ranks.torchrun import _same
    one, nan = torch.ones(2), torch.tensor([float("nan")])
    assert "1 outputs instead of 2" in compare_outputs([one, one], [one], ["a", "b"], 0, "x")[0].message
    assert "Tensor vs int" in compare_outputs([one], [3], ["a"], 0, "x")[0].message
    assert compare_outputs([one, 3], [one.clone(), 3], ["a", "b"], 0, "x") == []
    assert _same([nan], [nan.clone()]) and not _same([torch.tensor([0.0])], [torch.tensor([-0.0])])
    assert not _same([one], [one, one]) and not _same([one], [1])


def test_torchrun_replay_names_ranks_that_ran_different_rounds_and_exits_2_when_nothing_was_judged(tmp_path):
    rounds, other = tmp_path / "rounds", tmp_path / "other"
    corpus.save(corpus.Entry(two_block_case(), "reference", corpus.Verdict(corpus.PASS), {}), str(rounds))
    out = _torchrun(rounds, "--target", "real_targets:EvenRankExtraRound", "--case-deadline", "120")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL" in out.stdout and "different numbers of digest-exchange rounds" in out.stdout
    four = next(e.case for e in map(corpus.load, _shipped(limit_four=1)) if len(e.case.graph.world()) == 4)
    corpus.save(corpus.Entry(four, "reference", corpus.Verdict(corpus.PASS), {}), str(other))
    out = _torchrun(other)
    # Each process exits 2; torchrun itself reports any failed process as its exit 1, naming the code.
    assert out.returncode != 0 and "no case was judged (exit 2)" in out.stdout, out.stdout + out.stderr
    assert "exitcode: 2" in out.stderr


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


class _PoolThatCannotRestart:
    """A pool whose ranks died and cannot be started again (what heal() raises then)."""

    restarts, events = 0, []

    def run(self, jobs):
        from fsdp_verify.execute.ranks.pool import PoolStartFailure
        raise PoolStartFailure("hang", "the pool did not start: ranks [0, 1] did not finish within 120s", {}, {})

    def close(self):
        pass


def test_a_pool_that_cannot_restart_is_the_harness_s_reason_not_a_finding_against_the_target():
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.execute.ranks.collectives import check_collectives
    from fsdp_verify.checks.findings import INVALID
    from fsdp_verify.engine.run_case import run_target
    session = RealRanks(backend="gloo")
    session.pool = lambda world: session.pools.setdefault(world, _PoolThatCannotRestart())
    findings, why = session.check(two_block_case(), "reference")
    assert findings == [] and why.startswith("no pool of 2 real ranks could start (PoolStartFailure")
    assert 2 in session.broken and 2 not in session.pools
    assert sum("could not restart during a case" in e for e in session.events) == 2  # begun again twice
    assert session.check(two_block_case(), "reference") == ([], why)  # not retried
    target = get_target("reference")
    findings = check_collectives(CheckContext(run_target(target, two_block_case()), target), _PoolThatCannotRestart())
    assert [(f.severity, f.details["kind"]) for f in findings] == [(INVALID, "pool_not_started")]


def test_a_rank_whose_harness_is_already_gone_exits_before_importing_torch():
    import subprocess
    import sys
    code = "from fsdp_verify.execute.ranks.pool import _die_with_parent; _die_with_parent(1); print('alive')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "alive" not in out.stdout


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
