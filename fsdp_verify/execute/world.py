"""A case's per-rank graphs and one simulated run of them: what every executor starts from."""

from __future__ import annotations

from typing import Mapping, Optional

from torch import fx

from ..case import Case
from ..graph.builder import build_module, localize
from ..graph.spec import validate
from .inputs import make_inputs
from .simulated import WorldRun, run_world


def build_world(case: Case) -> dict[int, fx.GraphModule]:
    """One module per rank, each with that rank's device index in its specs (the description is
    validated once and the first rank's graph linted: localising changes device indices only)."""
    validate(case.graph)
    first = min(case.graph.world(), default=None)
    return {rank: build_module(localize(case.graph, rank), validated=True, lint=rank == first)
            for rank in case.graph.world()}


def simulate(case: Case, modules: Mapping[int, fx.GraphModule], *, seed: Optional[int] = None,
             mode: str = "exact", observe=None, override=None, watch=None, overridden=None,
             inputs: Optional[Mapping[int, list]] = None) -> WorldRun:
    """Run ``modules`` (one per rank) in the simulated world on the case's inputs (``observe``
    sees only the nodes named in ``watch`` when it is given, ``override`` only those named in
    ``overridden``)."""
    seed = case.seed if seed is None else seed
    values = inputs or {rank: make_inputs(case.graph, rank, seed, mode) for rank in modules}
    return run_world(modules, values, lambda rank, group: case.graph.group_ranks(rank)[group], observe, override,
                     watch, overridden)
