"""Modes and placement: which backend and device each world size gets, which cases run on real
ranks and why the others do not, and what a simulated run says about it."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
import torch

from fsdp_verify.execute.ranks.judge import RealRanks, chosen, parse_mode
from fsdp_verify.execute.ranks.pool import place
from fsdp_verify.report.summary import junit_xml, summary_text
from fsdp_verify.report.tally import Result
from fsdp_verify.engine.selftest import format_table, hunt
from fsdp_verify.targets.mutants import MUTANTS
from helpers.cases import two_block_case

HASH_BUG = "mutant:members_follow_hash_seed"


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


def test_the_command_line_offers_the_modes_real_ranks_knows():
    from fsdp_verify.commands import options
    from fsdp_verify.execute.ranks.judge import MODES
    assert options.RANK_MODES == MODES


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
