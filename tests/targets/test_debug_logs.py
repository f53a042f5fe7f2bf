"""One case in four runs the target with its loggers at DEBUG: code a planner runs only then (a
per-bucket line of spec 2.13) is run by a campaign, and a raise there is a finding that says so."""

from __future__ import annotations

import logging
from dataclasses import replace

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.model.case import Case
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets import get_target
from fsdp_verify.targets.base import Target
from fsdp_verify.targets.debug_logs import DEBUG_EVERY, at_debug

# one parameter: every bucket is a bucket of one
SINGLETONS = Case(render(Blueprint(blocks=((ParamDraw((2, 4)),),))))


def test_a_raise_only_at_debug_is_found_on_the_cases_that_turn_the_loggers_on():
    bug = get_target("mutant:debug_log_reads_second_member")
    assert bug.loggers == ("fsdp_verify.reference",)  # the reference's, inherited by every planted bug
    quiet = replace(SINGLETONS, seed=1)
    assert not at_debug(quiet) and at_debug(replace(SINGLETONS, seed=DEBUG_EVERY))
    assert check_all(bug, quiet)[0] == []  # loggers off: the line never runs, the bug hides
    findings, ctx = check_all(bug, replace(SINGLETONS, seed=DEBUG_EVERY))
    raised = [f for f in findings if f.key == ("target", "raised")]
    assert raised and "IndexError" in raised[0].message and "only with its loggers at DEBUG" in raised[0].message
    assert raised[0].details["loggers_at_debug"] == ["fsdp_verify.reference"]
    assert ctx.metrics["target"]["debug_logs"] == 1


def test_the_reference_is_clean_at_debug_and_its_logger_is_left_as_it_was():
    logger = logging.getLogger("fsdp_verify.reference")
    before = (logger.level, logger.propagate, list(logger.handlers))
    findings, ctx = check_all(get_target("reference"), replace(SINGLETONS, seed=0))
    assert findings == [] and ctx.run.debug_logs == ("fsdp_verify.reference",)
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


class _Untouched(Target):
    name = "untouched"

    def rewrite(self, case, modules):
        return {}


def test_a_target_without_loggers_runs_as_before_and_external_ones_name_theirs():
    findings, ctx = check_all(_Untouched(), replace(SINGLETONS, seed=0))
    assert ctx.run.debug_logs == () and ctx.metrics["target"]["debug_logs"] == 0
    assert get_target("torch-inductor").loggers == ("torch._inductor.fx_passes",)
    assert get_target("fx-pass:helpers.torch_passes:correct").loggers == ("helpers.torch_passes",)


def test_a_raise_with_the_loggers_at_debug_that_also_happens_without_is_a_plain_raise():
    # TwoBugs raises on every graph: a rerun with the loggers as they are raises too, so the
    # finding does not blame the loggers (the count of cases run at DEBUG still has it)
    from helpers.targets import TwoBugs
    target = TwoBugs()
    target.loggers = ("fsdp_verify.reference",)
    findings, ctx = check_all(target, replace(SINGLETONS, seed=0))
    raised = [f for f in findings if f.key == ("target", "raised")]
    assert raised and "DEBUG" not in raised[0].message and "loggers_at_debug" not in raised[0].details
    assert ctx.run.debug_logs and not ctx.run.raises_only_at_debug and ctx.metrics["target"]["debug_logs"] == 1


def test_the_repro_of_a_raise_only_at_debug_holds_the_loggers_at_debug_too(tmp_path):
    from fsdp_verify.engine.repro import Outcome, run_script
    from fsdp_verify.report.repro import write
    case = replace(SINGLETONS, seed=DEBUG_EVERY)
    script = tmp_path / "repro.py"
    script.write_text(write(case, "mutant:debug_log_reads_second_member").text)
    assert "LOGGERS = ['fsdp_verify.reference']" in script.read_text()
    assert run_script(script, timeout=240).outcome is Outcome.REPRODUCED
    quiet = tmp_path / "quiet.py"
    quiet.write_text(write(replace(SINGLETONS, seed=1), "mutant:debug_log_reads_second_member").text)
    assert "LOGGERS" not in quiet.read_text()
    assert run_script(quiet, timeout=240).outcome is Outcome.NOT_REPRODUCED  # the loggers are what tells
