"""Build a case's per-rank graphs, hand them to a target, and run graphs in the simulated world."""

from __future__ import annotations

import copy
import multiprocessing
import traceback
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from torch import fx

from .case import Case
from .execute.inputs import make_inputs
from .execute.simulated import WorldRun, run_world
from .graph.builder import build_module, localize
from .targets.base import Target


def build_world(case: Case) -> dict[int, fx.GraphModule]:
    """One module per rank, each with that rank's device index in its specs."""
    return {rank: build_module(localize(case.graph, rank)) for rank in case.graph.world()}


@dataclass
class TargetRun:
    """What a target did to one case: the untouched originals, its rewrites and plans, or its error."""

    case: Case
    originals: dict[int, fx.GraphModule]
    rewritten: dict[int, fx.GraphModule] = field(default_factory=dict)
    plans: dict[int, list[Any]] = field(default_factory=dict)
    error: Optional[str] = None
    error_type: Optional[str] = None
    error_message: Optional[str] = None  # the first line of the exception message


class PlanRecord:
    """A plan that crossed a process boundary: its ``to_dict()`` report and nothing else."""

    def __init__(self, report: dict):
        self.report = report

    def to_dict(self) -> dict:
        return copy.deepcopy(self.report)

    def group_digest(self, group: str) -> str:
        return self.report["group_digests"][group]


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


class TargetTimeout(RuntimeError):
    """The target did not finish within the deadline."""


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


def simulate(case: Case, modules: Mapping[int, fx.GraphModule], *, seed: Optional[int] = None,
             mode: str = "exact", observe=None, override=None,
             inputs: Optional[Mapping[int, list]] = None) -> WorldRun:
    """Run ``modules`` (one per rank) in the simulated world on the case's inputs."""
    seed = case.seed if seed is None else seed
    values = inputs or {rank: make_inputs(case.graph, rank, seed, mode) for rank in modules}
    return run_world(modules, values, lambda rank, group: case.graph.group_ranks(rank)[group], observe, override)
