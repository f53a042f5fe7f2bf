"""A case's per-rank graphs and one simulated run of them: what every executor starts from."""

from __future__ import annotations

from typing import Mapping, Optional

from torch import fx

from ..case import Case
from ..graph.builder import build_module, localize
from ..graph.spec import validate
from .inputs import make_inputs
from .simulated import WorldRun, run_world


def build_world(case: Case, shared: bool = False) -> dict[int, fx.GraphModule]:
    """One module per rank, each with that rank's device index in its specs (the description is
    validated once and the first rank's graph linted: localising changes device indices only).
    ``shared``: ranks whose graphs are the same (no device index to localise) share one module,
    for callers that only read them (the originals a run is checked against)."""
    validate(case.graph)
    first = min(case.graph.world(), default=None)
    modules: dict[int, fx.GraphModule] = {}
    unlocalised: Optional[fx.GraphModule] = None  # the module ranks share, when ``shared``
    for rank in case.graph.world():
        spec = localize(case.graph, rank)
        if shared and spec is case.graph:
            if unlocalised is None:
                unlocalised = build_module(spec, validated=True, lint=rank == first)
            modules[rank] = unlocalised
        else:
            modules[rank] = build_module(spec, validated=True, lint=rank == first)
    return modules


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
