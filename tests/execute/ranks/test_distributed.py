"""Real collectives through the persistent rank pool (gloo on CPU; NCCL tests need GPUs)."""

from __future__ import annotations

import os
import time
from dataclasses import replace

import pytest
import torch

from fsdp_verify.model.case import Case
from fsdp_verify.checks import CheckContext
from fsdp_verify.execute.ranks.collectives import check_collectives
from fsdp_verify.execute.ranks.pool import RankFailure, RankPool, jobs_for
from fsdp_verify.graph.builder import localize
from fsdp_verify.targets.mutants import get_mutant
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from helpers.cases import two_block_case
from helpers import ROOT


@pytest.fixture(scope="module")
def pool2():
    with RankPool(2, backend="gloo", deadline=8) as pool:
        yield pool


def _ctx(target, case):
    return CheckContext(run_target(target, case), target)


def test_correct_bucketed_case_passes_bitwise(pool2):
    case = two_block_case()
    findings = check_collectives(_ctx(get_target("reference"), case), pool2, drift=True)
    assert [f for f in findings if f.severity == "error"] == []


def test_pool_is_reused_across_cases(pool2):
    pids = [p.pid for p in pool2.processes]
    for seed in range(3):
        case = replace(two_block_case(), seed=seed)
        assert check_collectives(_ctx(get_target("reference"), case), pool2) == []
    assert [p.pid for p in pool2.processes] == pids


def test_swapped_offsets_are_caught_with_the_output_named(pool2):
    findings = check_collectives(_ctx(get_mutant("swapped_copy_out"), two_block_case()), pool2)
    assert findings and "rewritten vs original (real)" in findings[0].message
    assert findings[0].nodes and findings[0].nodes[0] in findings[0].message


def test_rank_divergent_graph_is_a_desync_within_the_deadline_and_leaves_no_children(pool2):
    case = two_block_case()
    a, b = mutations.sibling_pairs(case.graph)[0]
    extra = mutations.collective_between(case, a, b)  # rank 0 issues an all_reduce rank 1 never issues
    run = run_target(get_target("reference"), case)
    jobs = jobs_for(case, run.rewritten)
    jobs[0] = replace(jobs[0], original=localize(extra.graph, 0).to_json())
    old = [p for p in pool2.processes]
    start = time.monotonic()
    with pytest.raises(RankFailure) as info:
        pool2.run(jobs)
    assert time.monotonic() - start < pool2.deadline + 15
    assert set(info.value.last_collective) == {0, 1}
    assert "all_reduce" in info.value.last_collective[0] or info.value.errors
    for process in old:
        assert not process.is_alive()
        with pytest.raises(ProcessLookupError):
            os.kill(process.pid, 0)
    assert pool2.restarts >= 1 and all(p.is_alive() for p in pool2.processes)
    assert check_collectives(_ctx(get_target("reference"), case), pool2) == []  # the restarted pool works


def test_four_ranks_two_groups():
    blocks = ((ParamDraw((1, 4)), ParamDraw((2,), expert=True), ParamDraw((1, 3), expert=True)),)
    case = Case(render(Blueprint(blocks=blocks, degree=4, expert_degree=2)))
    with RankPool(4, backend="gloo", deadline=30) as pool:
        assert check_collectives(_ctx(get_target("reference"), case), pool) == []
        assert check_collectives(_ctx(get_mutant("avg_twice"), case), pool)


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="NCCL needs 2 GPUs")
def test_nccl_pool():
    with RankPool(2, backend="nccl", deadline=60) as pool:
        assert check_collectives(_ctx(get_target("reference"), two_block_case()), pool) == []


def test_torchrun_replay_entry_point(tmp_path):
    import shutil
    import subprocess
    import sys
    from pathlib import Path
    rules = sorted(ROOT.joinpath("corpus", "rules").glob("*.json"))
    two_rank = []
    for rule in rules:
        from fsdp_verify.corpus import files as corpus
        if len(corpus.load(rule).case.graph.world()) == 2 and len(two_rank) < 2:
            two_rank.append(rule)
            shutil.copy(rule, tmp_path / rule.name)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "--log-dir", str(tmp_path.parent / f"{tmp_path.name}-logs"),
                          "-m", "fsdp_verify.execute.ranks.torchrun", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("ok ") == len(two_rank) == 2
