"""Build a case's per-rank graphs, hand them to a target, and run graphs in the simulated world."""

from __future__ import annotations

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


def run_target(target: Target, case: Case) -> TargetRun:
    """Apply ``target`` to fresh copies of the case's graphs; an exception becomes ``error``."""
    run = TargetRun(case, build_world(case))
    modules = build_world(case)
    try:
        run.plans = target.rewrite(case, modules) or {}
    except Exception as exc:  # noqa: BLE001 - any target failure is a reported outcome
        run.error = "".join(traceback.format_exception(exc)).strip()
        run.error_type = type(exc).__name__
        return run
    run.rewritten = modules
    return run


def simulate(case: Case, modules: Mapping[int, fx.GraphModule], *, seed: Optional[int] = None,
             mode: str = "exact", observe=None, override=None,
             inputs: Optional[Mapping[int, list]] = None) -> WorldRun:
    """Run ``modules`` (one per rank) in the simulated world on the case's inputs."""
    seed = case.seed if seed is None else seed
    values = inputs or {rank: make_inputs(case.graph, rank, seed, mode) for rank in modules}
    return run_world(modules, values, lambda rank, group: case.graph.group_ranks(rank)[group], observe, override)
