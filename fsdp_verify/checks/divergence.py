"""Where two graphs' values part: bit for bit, and at the first node both graphs hold.

``bit_difference`` compares two tensors bit for bit (NaN payloads and zero signs included).
``first_divergence`` runs both worlds again with every value of one rank kept and returns the
first node of the rewrite, present in both graphs, whose value differs: the operator there names a
value failure (one bug, one finding) and the pictures mark the node. It runs only for a case
already failing (or shown), so its cost, a copy of every value of one rank, is paid once, not per
case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx
from torch.utils._pytree import tree_flatten

from fsdp_verify.execute.world import simulate
from fsdp_verify.model.case import Case

_INT_VIEW = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bit_difference(a: torch.Tensor, b: torch.Tensor) -> dict | None:
    """None when ``a`` and ``b`` are bitwise identical, else where and by how much they differ."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return {"reason": f"shape/dtype {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}",
                "differs": "shape" if a.shape != b.shape else "dtype"}
    if a.numel() == 0:
        return None
    x, y = a.detach().contiguous().cpu(), b.detach().contiguous().cpu()
    if not x.dtype.is_floating_point:
        return None if torch.equal(x, y) else {"reason": "values differ", "differs": "values"}
    ints = _INT_VIEW[x.element_size()]
    xi, yi = x.view(ints).reshape(-1).to(torch.int64), y.view(ints).reshape(-1).to(torch.int64)
    differ = xi != yi
    if not bool(differ.any()):
        return None
    index = int(differ.nonzero()[0])
    abs_diff = (x.reshape(-1).double() - y.reshape(-1).double()).abs()
    return {"differs": "values", "first_index": index, "expected": float(x.reshape(-1)[index]), "actual": float(y.reshape(-1)[index]),
            "max_abs_diff": float(abs_diff.nan_to_num(float("inf")).max()),
            "max_ulp_diff": int((xi - yi).abs().max()), "elements_differing": int(differ.sum())}


@dataclass(frozen=True)
class Divergence:
    """The first node both graphs hold whose value differs, its operator, and what differs."""

    node: str
    op: str
    differs: str  # "values", "dtype" or "shape"


def _values(case: Case, modules: dict[int, fx.GraphModule], rank: int) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def observe(at: int, node: fx.Node, inputs: tuple, result: Any) -> None:
        if at != rank:
            return
        if node.op == "output":  # the outputs, flattened, stand for the output node
            flat = [t.detach().reshape(-1) for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor)]
            seen[node.name] = torch.cat([t.to(torch.float64) for t in flat]) if flat else None
        elif isinstance(result, torch.Tensor) and result.untyped_storage().size():
            seen[node.name] = result.detach().clone()

    simulate(case, modules, observe=observe)
    return seen


def op_name(node: fx.Node) -> str:
    """``aten.mm.default`` for an OpOverload, the callable's name otherwise (``output``)."""
    target = node.target
    return str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target))


def first_divergence(case: Case, original: dict[int, fx.GraphModule], rewritten: dict[int, fx.GraphModule],
                     rank: int) -> Optional[Divergence]:
    """That node on ``rank`` (the output node when only the outputs differ), or None: the worlds
    agree on it, or cannot run again."""
    try:
        before, after = _values(case, original, rank), _values(case, rewritten, rank)
    except Exception:  # noqa: BLE001 - a run that fails is reported by the checkers, not here
        return None
    for node in rewritten[rank].graph.nodes:
        a, b = before.get(node.name), after.get(node.name)
        diff = bit_difference(a, b) if a is not None and b is not None else None
        if diff is not None:
            return Divergence(node.name, op_name(node), diff["differs"])
    return None
