"""Where values first diverge: the earliest node of the rewrite, present in both graphs, whose value
on the first rank differs bit for bit from the original's (what a picture marks)."""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import fx
from torch.utils._pytree import tree_flatten

from fsdp_verify.checks import CheckContext
from fsdp_verify.checks.numerics import bit_difference
from fsdp_verify.execute.world import simulate


def _values(ctx: CheckContext, modules: dict[int, fx.GraphModule], rank: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def observe(at: int, node: fx.Node, inputs: tuple, result: Any) -> None:
        if at != rank:
            return
        if node.op == "output":  # the outputs, flattened, stand for the output node
            flat = [t.detach().reshape(-1) for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
            seen[node.name] = torch.cat([t.to(torch.float64) for t in flat]) if flat else None
        elif isinstance(result, torch.Tensor) and result.untyped_storage().size():
            seen[node.name] = result.detach().clone()

    simulate(ctx.case, modules, observe=observe)
    return seen


def first_divergence(ctx: CheckContext) -> Optional[str]:
    """The name of that node, or None (no divergence, or a graph that cannot run)."""
    if not ctx.run.rewritten:
        return None
    rank = min(ctx.run.originals)
    try:
        before = _values(ctx, ctx.run.originals, rank)
        after = _values(ctx, ctx.run.rewritten, rank)
    except Exception:  # noqa: BLE001 - a run that fails is reported by the checkers, not here
        return None
    for node in ctx.run.rewritten[rank].graph.nodes:
        a, b = before.get(node.name), after.get(node.name)
        if a is not None and b is not None and (a.shape != b.shape or a.dtype != b.dtype or bit_difference(a, b)):
            return node.name
    return None
