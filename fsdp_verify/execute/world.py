"""A case's per-rank graphs and one simulated run of them: what every executor starts from."""

from __future__ import annotations

from typing import Mapping, Optional

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.graph.builder import HEADER_KEY, build_module, localize
from fsdp_verify.graph.clone import clone_module
from fsdp_verify.graph.spec import GraphSpec, validate
from fsdp_verify.graph.values import fresh_copy
from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.execute.simulated import WorldRun, run_world


def build_world(case: Case, shared: bool = False) -> dict[int, fx.GraphModule]:
    """One module per rank, each with that rank's device index in its specs (the description is
    validated once and the first rank's graph of each padding linted: localising changes device
    indices only, and, for a rank that pads a shard, adds its pads).
    ``shared``, for callers that only read the modules (the originals a run is checked against):
    ranks whose graphs are the same (no device index to localise, no shard padded) share one module,
    and the others' are copies of the first of their padding that share its meta values but their
    bucket specs (ranks that pad the same rows have the same nodes)."""
    validate(case.graph)
    modules: dict[int, fx.GraphModule] = {}
    unlocalised: Optional[fx.GraphModule] = None  # the module ranks share, when ``shared``
    localised: dict[tuple, fx.GraphModule] = {}  # by padding: the module the others copy, when ``shared``
    linted: set[tuple] = set()  # paddings whose graph has been linted once
    for rank in case.graph.world():
        spec = localize(case.graph, rank)
        padding = tuple(param.pad_rows(rank) for param in case.graph.params)
        if shared and spec is case.graph:
            if unlocalised is None:
                unlocalised = build_module(spec, validated=True, lint=padding not in linted)
                linted.add(padding)
            modules[rank] = unlocalised
        elif shared and padding in localised:
            modules[rank] = relocalised(localised[padding], spec)
        else:
            modules[rank] = build_module(spec, validated=True, lint=padding not in linted)
            linted.add(padding)
            if shared:
                localised[padding] = modules[rank]
    return modules


def relocalised(module: fx.GraphModule, spec: GraphSpec) -> fx.GraphModule:
    """What ``build_module(spec)`` makes, for reading only, from ``module``, built from another
    localisation of the same description (``localize`` changes bucket-spec devices and parameter
    devices only): a copy whose nodes share their meta values with ``module``'s but for their
    own bucket specs. A third cheaper than building (no argument walk, meta copy or validation)."""
    copy = clone_module(module)
    for node, node_spec in zip(copy.graph.nodes, spec.nodes):
        if "fsdp_bucket_spec" in node_spec.meta:
            node.meta["fsdp_bucket_spec"] = fresh_copy(node_spec.meta["fsdp_bucket_spec"])
    copy.meta[HEADER_KEY]["params"] = list(spec.params)
    return copy


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
