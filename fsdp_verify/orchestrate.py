"""Running one case: build its per-rank graphs, hand them to a target, and judge the result with
every registered checker. Campaign, gate, replay, selftest and the pytest plugin all come here;
``checks/`` and ``execute/`` never import this module.
"""

from __future__ import annotations

import multiprocessing
import traceback
from typing import Mapping, Optional

from torch import fx

from .case import Case
from .checks import CheckContext, Finding, default_checkers, registered
from .checks.planner_oracle import expected_argument_error
from .execute.world import build_world
from .graph.builder import build_module
from .targets.base import Target
from .targets.outcome import PlanRecord, TargetRun, TargetTimeout


def _lint(modules: Mapping[int, fx.GraphModule]) -> None:
    for rank, module in modules.items():
        try:
            module.graph.lint()
        except Exception as exc:  # noqa: BLE001 - FX raises plain errors
            raise RuntimeError(f"rank {rank}: the rewritten graph does not lint: {exc}") from exc


def _fail(run: TargetRun, exc: BaseException) -> TargetRun:
    run.error = "".join(traceback.format_exception(exc)).strip()
    run.error_type = type(exc).__name__
    run.error_message = (str(exc).strip().splitlines() or [""])[0]
    return run


def run_target(target: Target, case: Case, deadline: Optional[float] = None) -> TargetRun:
    """Apply ``target`` to fresh copies of the case's graphs; an exception becomes ``error``.

    With a ``deadline`` the target runs in a forked child that is killed when time runs out (a
    hanging target becomes a ``TargetTimeout`` error, the harness goes on); its rewritten graphs
    come back as JSON descriptions and its plans as ``PlanRecord`` reports.
    """
    run = TargetRun(case, build_world(case))
    if deadline is not None:
        return _run_isolated(target, case, run, deadline)
    modules = build_world(case)
    try:
        run.plans = target.rewrite(case, modules) or {}
        _lint(modules)
    except Exception as exc:  # noqa: BLE001 - any target failure is a reported outcome
        return _fail(run, exc)
    run.rewritten = modules
    return run


def _child(target: Target, case: Case, conn) -> None:
    from .graph.importer import import_module
    try:
        modules = build_world(case)
        plans = target.rewrite(case, modules) or {}
        _lint(modules)
        conn.send(("ok", {rank: import_module(m).to_json() for rank, m in modules.items()},
                   {rank: [p.to_dict() for p in rounds] for rank, rounds in plans.items()}))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("error", type(exc).__name__, "".join(traceback.format_exception(exc)).strip(),
                   (str(exc).strip().splitlines() or [""])[0]))


def _run_isolated(target: Target, case: Case, run: TargetRun, deadline: float) -> TargetRun:
    from .graph.spec import graph_from_json
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(target, case, child), daemon=True)
    process.start()
    child.close()
    try:
        if not parent.poll(deadline):
            raise TargetTimeout(f"target {target.name!r} did not finish within {deadline:g}s")
        message = parent.recv()
    except TargetTimeout as exc:
        return _fail(run, exc)
    except EOFError:
        process.join(5)
        return _fail(run, RuntimeError(f"target {target.name!r} died (exit code {process.exitcode})"))
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
    if message[0] == "error":
        run.error_type, run.error, run.error_message = message[1], message[2], message[3]
        return run
    run.rewritten = {rank: build_module(graph_from_json(doc)) for rank, doc in message[1].items()}
    run.plans = {rank: [PlanRecord(r) for r in rounds] for rank, rounds in message[2].items()}
    return run


def _target_failure(ctx: CheckContext) -> list[Finding]:
    """A target that raised: the planner oracle judges whether refusing was right; otherwise a finding."""
    findings = registered()["planner"].run(ctx)
    first = min(ctx.case.graph.world())
    refused_rightly = ctx.has_planner and \
        expected_argument_error(ctx.case.plan_args, ctx.case.group_ranks(first)) is not None
    if not refused_rightly:
        findings.append(Finding("target", f"target {getattr(ctx.target, 'name', '?')} raised "
                                          f"{ctx.run.error_type}: {ctx.run.error_message}",
                                details={"traceback": ctx.run.error}))
    return findings


def check_run(ctx: CheckContext, only: tuple[str, ...] | None = None) -> list[Finding]:
    """Every applicable checker on one target run; a crashing checker is itself a finding and a
    checker that cannot judge the case is recorded in ``ctx.skipped``."""
    if ctx.run.error is not None:
        return _target_failure(ctx)
    findings: list[Finding] = []
    chosen = registered() if only is not None else default_checkers()
    for name, checker in chosen.items():
        if only is not None and name not in only:
            continue
        reason = checker.skip_reason(ctx) if checker.skip_reason is not None else None
        if reason is not None:
            ctx.skipped[name] = reason
            continue
        try:
            findings.extend(checker.run(ctx))
        except Exception as exc:  # noqa: BLE001 - a checker crash must not hide other verdicts
            findings.append(Finding(name, f"checker {name} crashed: {type(exc).__name__}: {exc}",
                                    details={"kind": "checker_crash"}))
    return findings


def check_all(target: Target, case: Case, only: tuple[str, ...] | None = None,
              deadline: float | None = None) -> tuple[list[Finding], CheckContext]:
    """Run ``target`` on ``case`` (in a killable child when ``deadline`` is set) and every checker."""
    ctx = CheckContext(run_target(target, case, deadline), target)
    return check_run(ctx, only), ctx
