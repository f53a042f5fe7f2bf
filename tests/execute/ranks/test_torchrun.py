"""torchrun replay: a saved case planned and judged on each rank that torchrun starts."""

from __future__ import annotations

from pathlib import Path

import torch

from fsdp_verify.corpus import files as corpus
from helpers.cases import shipped_paths, two_block_case
from helpers import TESTS

HASH_BUG = "mutant:members_follow_hash_seed"


def _torchrun(folder: Path, *extra: str):
    import subprocess
    import sys
    logs = folder.parent / f"{folder.name}-torchrun-logs"  # torchrun's own default is a new /tmp folder per run
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "--log-dir", str(logs), "-m", "fsdp_verify.execute.ranks.torchrun", str(folder), *extra],
                          capture_output=True, text=True, timeout=300, cwd=str(TESTS))


def test_torchrun_replay_plans_on_each_rank_and_names_rank_dependent_planning(tmp_path):
    # The single-node example of the README, with the hash-seed planner: each process plans its own
    # rank under its own PYTHONHASHSEED and the digests cross the real process group.
    entry = corpus.Entry(two_block_case(), HASH_BUG, corpus.Verdict(corpus.PASS), {})
    corpus.save(entry, str(tmp_path))
    out = _torchrun(tmp_path, "--target", HASH_BUG, "--hash-seed", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ranks: real, gloo on cpu, 2 ranks" in out.stdout
    assert "FAIL" in out.stdout and "rank-dependent planning" in out.stdout and "'7919'" in out.stdout


def test_torchrun_replay_names_ranks_that_ran_different_rounds_and_exits_2_when_nothing_was_judged(tmp_path):
    rounds, other = tmp_path / "rounds", tmp_path / "other"
    corpus.save(corpus.Entry(two_block_case(), "reference", corpus.Verdict(corpus.PASS), {}), str(rounds))
    out = _torchrun(rounds, "--target", "helpers.rank_targets:EvenRankExtraRound", "--case-deadline", "120")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAIL" in out.stdout and "different numbers of digest-exchange rounds" in out.stdout
    four = next(e.case for e in map(corpus.load, shipped_paths(limit_four=1)) if len(e.case.graph.world()) == 4)
    corpus.save(corpus.Entry(four, "reference", corpus.Verdict(corpus.PASS), {}), str(other))
    out = _torchrun(other)
    # Each process exits 2; torchrun itself reports any failed process as its exit 1, naming the code.
    assert out.returncode != 0 and "no case was judged (exit 2)" in out.stdout, out.stdout + out.stderr
    assert "exitcode: 2" in out.stderr


def test_a_process_group_that_does_not_form_is_said_and_exits_2(tmp_path, monkeypatch, capsys):
    """Under load a peer may die while gloo's mesh forms ("Connection closed by peer"): the rank says
    so and exits 2 (nothing was judged), not with a traceback and torchrun's exit 1."""
    from fsdp_verify.execute.ranks import torchrun

    def refused(*args, **kwargs):
        raise RuntimeError("Gloo connectFullMesh failed with ... Connection closed by peer")

    monkeypatch.setattr(torchrun.dist, "init_process_group", refused)
    monkeypatch.setenv("RANK", "1")
    assert torchrun.main([str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert "rank 1: the process group did not form (Gloo connectFullMesh" in out
    assert "no case was judged (exit 2)" in out
