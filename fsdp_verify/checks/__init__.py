"""Checkers: pure functions of (original, rewritten, plans, context) that return findings.

``check_all`` runs a target on a case and every applicable checker on the result.
"""

from __future__ import annotations

from typing import Callable

from ..case import Case
from ..pipeline import run_target
from ..targets.base import Target
from .consistency import check_consistency
from .dependencies import check_dependencies
from .findings import DRIFT, ERROR, INVALID, CheckContext, Finding
from .layout import check_layout
from .memory import check_memory
from .numerics import check_numerics
from .ordering import check_ordering
from .planner_oracle import check_planner, expected_argument_error

Checker = Callable[..., list[Finding]]

CHECKERS: dict[str, Checker] = {
    "planner": check_planner,
    "dependencies": check_dependencies,
    "ordering": check_ordering,
    "layout": check_layout,
    "numerics": check_numerics,
    "consistency": check_consistency,
    "memory": check_memory,
}


def check_run(ctx: CheckContext, only: tuple[str, ...] | None = None) -> list[Finding]:
    """Every applicable checker on one target run; a crashing checker is itself a finding."""
    run = ctx.run
    if run.error is not None:
        findings = CHECKERS["planner"](run.originals, {}, {}, ctx)
        first = min(ctx.case.graph.world())
        planner_args_invalid = ctx.target is not None and ctx.target.has_planner and \
            expected_argument_error(ctx.case.plan_args, ctx.case.group_ranks(first)) is not None
        if not planner_args_invalid:
            findings.append(Finding("target", f"target {getattr(ctx.target, 'name', '?')} raised "
                                              f"{run.error_type}: {run.error_message}",
                                    details={"traceback": run.error}))
        return findings
    findings: list[Finding] = []
    for name, checker in CHECKERS.items():
        if only is not None and name not in only:
            continue
        try:
            findings.extend(checker(run.originals, run.rewritten, run.plans, ctx))
        except Exception as exc:  # noqa: BLE001 - a checker crash must not hide other verdicts
            findings.append(Finding(name, f"checker {name} crashed: {type(exc).__name__}: {exc}",
                                    details={"kind": "checker_crash"}))
    return findings


def check_all(target: Target, case: Case, only: tuple[str, ...] | None = None,
              deadline: float | None = None) -> tuple[list[Finding], CheckContext]:
    """Run ``target`` on ``case`` (in a killable child when ``deadline`` is set) and every checker."""
    ctx = CheckContext(run_target(target, case, deadline), target)
    return check_run(ctx, only), ctx


__all__ = ["CHECKERS", "DRIFT", "ERROR", "INVALID", "CheckContext", "Finding", "check_all",
           "check_run"]
