"""Where two graphs' values first part: the first node the rewrite kept whose value differs.

A differing output says that a rewrite is wrong, not where. The failure's identity (one bug, one
finding) is the operator where the values first part, found by running both worlds again with
every value of the failing rank kept, and comparing the nodes the rewrite kept (same name in
both graphs) in the original's order. Run only for a case already failing, so its cost (a copy of
every value of one rank) is paid once per failure, not per case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx

from fsdp_verify.execute.world import simulate
from fsdp_verify.model.case import Case

OUTPUT = "output"  # what parts when no kept node's value does: the graph's outputs themselves


@dataclass(frozen=True)
class Divergence:
    """The first kept node whose value differs, its operator, and what differs."""

    node: str
    op: str
    differs: str  # "values", "dtype" or "shape"


def _record(rank: int, kept: set[str], into: dict[str, torch.Tensor]):
    def observe(at: int, node: fx.Node, args: tuple, result: Any) -> None:
        if at == rank and node.name in kept and isinstance(result, torch.Tensor):
            into[node.name] = result.detach().clone()
    return observe


def _differs(a: torch.Tensor, b: torch.Tensor) -> Optional[str]:
    if a.shape != b.shape:
        return "shape"
    if a.dtype != b.dtype:
        return "dtype"
    if a.numel() and a.dtype.is_floating_point:
        ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        same = torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))  # bits: NaN == NaN
    else:
        same = torch.equal(a, b)
    return None if same else "values"


def op_name(node: fx.Node) -> str:
    """``aten.mm.default`` for an OpOverload, the callable's name otherwise."""
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def first_divergence(case: Case, original: dict[int, fx.GraphModule], rewritten: dict[int, fx.GraphModule],
                     rank: int) -> Optional[Divergence]:
    """The first node (in ``rank``'s original order, placeholders aside) kept by the rewrite whose
    value differs between plain runs of the two worlds; ``OUTPUT`` when the kept nodes all agree
    but an output differs; None when the runs cannot be had or agree (a difference only coded
    sources show)."""
    before = [n for n in original[rank].graph.nodes if n.op not in ("placeholder", "output")]
    kept = {n.name for n in before} & {n.name for n in rewritten[rank].graph.nodes}
    seen: tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]] = ({}, {})
    try:
        runs = [simulate(case, modules, observe=_record(rank, kept, values))
                for modules, values in zip((original, rewritten), seen)]
    except Exception:  # noqa: BLE001 - a world that cannot run again locates nothing
        return None
    for node in before:
        a, b = seen[0].get(node.name), seen[1].get(node.name)
        if a is not None and b is not None:
            differs = _differs(a, b)
            if differs:
                return Divergence(node.name, op_name(node), differs)
    outputs = [(x, y) for x, y in zip(runs[0].outputs.get(rank, []), runs[1].outputs.get(rank, []))
               if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)]
    for x, y in outputs:
        differs = _differs(x, y)
        if differs:
            return Divergence(OUTPUT, OUTPUT, differs)
    return None
