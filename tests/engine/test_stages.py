"""The campaign's CPU by stage: every stage measured where it runs, in the child and in-process,
adding up to the campaign process's own CPU, and said in the JSON summary, text and JUnit."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

import pytest

from fsdp_verify.checks.registry import default_checkers
from fsdp_verify.engine import campaign, stages
from fsdp_verify.engine.stages import Stage
from fsdp_verify.report.summary import junit_xml, summary_text


def _run(tmp_path, in_process: bool) -> tuple[campaign.Result, float]:
    # 24 examples: a fixed cost outside the stages (a collection, an import) stays well under 8% of them
    config = campaign.Config(target="reference", budget=campaign.Budget(examples=24), corpus_dir=str(tmp_path),
                             size="tiny", modules=False, profile="ci", seed=2,
                             deadline=None if in_process else 600)
    began = time.process_time()
    result = campaign.run(config)
    return result, time.process_time() - began


@pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "isolated"])
def test_every_stage_and_checker_is_measured(tmp_path, in_process):
    result, spent = _run(tmp_path, in_process)
    figures = result.cpu_by_stage
    for stage in (Stage.GENERATION, Stage.BUILD, Stage.TARGET, Stage.REPORTING, Stage.OTHER):
        assert figures.get(str(stage), 0) > 0, (stage, figures)
    assert all(figures.get(stages.checker(name), 0) > 0 for name in default_checkers()), figures
    assert all(seconds >= 0 for seconds in figures.values())
    if in_process:  # every stage ran in this process: they add up to what it spent, nothing twice
        assert sum(figures.values()) == pytest.approx(spent, rel=0.08)  # xdist neighbours: ~5% noise seen
        assert str(Stage.ISOLATION) not in figures
    else:  # the child's stages ran elsewhere: this process spent its share only
        assert figures[str(Stage.ISOLATION)] > 0
        assert sum(figures.values()) > spent
    shown = summary_text(result, "reference")
    assert "cpu by stage" in shown and "generation" in shown
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(result, "reference")).iter("property")}
    assert float(props["cpu_seconds:target"]) == pytest.approx(figures["target"], abs=1e-3)
    assert result.to_json()["cpu_by_stage"]["build"] == round(figures["build"], 3)
    # what the CPU grows with: at least one node on one rank per example, in either mode
    assert result.to_json()["node_ranks"] == result.node_ranks >= result.examples > 0


def test_the_round_watch_is_taken_out_of_the_target_s_figure():
    from fsdp_verify.engine.run_case import run_target
    from fsdp_verify.targets import get_target
    from helpers.cases import two_block_case
    run = run_target(get_target("reference"), two_block_case())
    assert run.cpu[str(Stage.TARGET)] >= 0 and str(Stage.ROUND_WATCH) in run.cpu
    assert run.cpu[str(Stage.BUILD)] > 0
