"""The campaign, the gate and replay with real ranks: a rank-dependent planner is killed, the
gate runs the candidate on ranks, and the shipped corpus replays to its simulated verdicts."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

from fsdp_verify.engine import campaign
from fsdp_verify.corpus import files as corpus
from fsdp_verify.execute.ranks.judge import NAME, chosen
from fsdp_verify.engine.replay import replay
from fsdp_verify.report.summary import junit_xml, summary_text
from fsdp_verify.targets import get_target
from helpers.cases import shipped_paths, two_block_case

HASH_BUG = "mutant:members_follow_hash_seed"


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


def test_real_mode_replay_of_the_shipped_corpus_agrees_with_the_simulated_verdicts(real):
    # `fsdp-verify replay corpus --ranks real` replays all of it (README); here the two-rank cases and
    # a few four-rank ones keep the test short.
    target = get_target("reference")
    paths = shipped_paths(limit_four=1)
    assert len(paths) >= 5
    before = real.cases
    for path in paths:
        entry = corpus.load(path)
        simulated = replay(target, path, entry)
        on_ranks = replay(target, path, entry, real=real, target_spec="reference")
        assert on_ranks.got == simulated.got and on_ranks.agrees == simulated.agrees, path
        assert on_ranks.agrees, on_ranks.line(target)
    assert real.cases - before == len(paths)


def test_a_shrink_step_runs_on_real_ranks_whatever_the_fraction_chooses(real):
    case = replace(two_block_case(), seed=11)
    real.fraction = 1e-9
    try:
        assert real.check(case, "reference")[1].startswith("not chosen")
        assert real.check(case, "reference", force=True) == ([], None)
    finally:
        real.fraction = 1.0
