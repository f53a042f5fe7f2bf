"""Identity tensors: every collective source carries codes that name (parameter, rank, element),
and one run of each world records what the layout and conformance checkers read.

All-gathers only move data, so any distinct bit pattern works: each code's bits are a counter,
decodable back to its parameter, rank and element. For reduce-scatters every rank contributes
integer codes small enough that the sum over the group stays exact in the source's dtype (at most
``(limit - 1) // degree`` each), so a sum is the same whatever order the ranks are added in and a
misplaced or missing contribution changes it. One run per world serves both checkers: the layout
checker compares what each consumer of a collective receives, the conformance checker what each
fused launch sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from ..case import Case
from ..execute.world import simulate
from .graph_facts import FSDP_KINDS, is_launch, is_wait, real_consumers

INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_EXACT_INT = {torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53}


class IdentityCodes:
    """Identity tensors for the sources of the original graph's tagged collectives."""

    def __init__(self, sources: dict[str, tuple[str, str, int]]) -> None:
        self.sources = dict(sources)  # source node -> (param, kind, group size)
        self.table: dict[tuple, tuple[str, int, int]] = {}
        self.bases: dict[tuple[str, int], int] = {}
        self.next_base = 1

    @classmethod
    def of(cls, original: fx.GraphModule) -> "IdentityCodes":
        """Codes for the sources of every tagged collective of ``original``."""
        return cls({node.args[0].name: (str(node.meta.get("param_name")), node.meta["comm_type"], _degree(node))
                    for node in original.graph.nodes if node.meta.get("comm_type") in FSDP_KINDS
                    and node.args and isinstance(node.args[0], fx.Node)})

    def _base(self, param: str, rank: int, count: int) -> int:
        """Code ranges are handed out on first use (the original's run) and reused for the rewrite."""
        if (param, rank) not in self.bases:
            self.bases[(param, rank)] = self.next_base
            self.next_base += count
        return self.bases[(param, rank)]

    def value(self, rank: int, node: fx.Node, value: Any) -> Any:
        """``value`` replaced by its codes when ``node`` is a source (floating tensors only)."""
        if node.name not in self.sources or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        param, kind, degree = self.sources[node.name]
        count = value.numel()
        base = self._base(param, rank, count)
        if kind == "fsdp_reduce_scatter":
            span = max(1, (_EXACT_INT.get(value.dtype, 256) - 1) // degree)
            codes = (torch.arange(count, dtype=torch.float64) + base) % span + 1
            return codes.to(value.dtype).reshape(value.shape)
        raw = torch.arange(base, base + count, dtype=torch.int64)
        if value.element_size() == 2:
            raw = raw % 0x7800 + 1  # below the fp16/bf16 exponent ranges that hold inf/nan
        codes = raw.to(INT_VIEW[value.element_size()]).view(value.dtype).reshape(value.shape)
        for index, bits in enumerate(raw.tolist()):
            self.table[(value.element_size(), bits)] = (param, rank, index)
        return codes

    def decode(self, tensor: torch.Tensor, position: int) -> str:
        """Which parameter, rank and element the code at ``position`` came from (all-gathers)."""
        flat = tensor.detach().contiguous().reshape(-1)
        if position >= flat.numel() or tensor.element_size() not in INT_VIEW:
            return "?"
        bits = int(flat.view(INT_VIEW[tensor.element_size()])[position])
        found = self.table.get((tensor.element_size(), bits))
        return f"{found[0]} (rank {found[1]}, element {found[2]})" if found else f"value {float(flat[position])}"


def _degree(node: fx.Node) -> int:
    """The group size a functional collective names (its second-to-last argument), or 1."""
    size = node.args[-2] if len(node.args) >= 2 else 1
    return size if isinstance(size, int) and size > 0 else 1


def watched_consumers(original: fx.GraphModule) -> dict[str, str]:
    """Consumers of every tagged collective result (through views) -> the parameter they read."""
    return {consumer.name: str(node.meta.get("param_name")) for node in original.graph.nodes
            if node.meta.get("comm_type") in FSDP_KINDS
            for wait in node.users if is_wait(wait) for consumer in real_consumers(wait)}


@dataclass
class IdentityRun:
    """What one identity run recorded, by (rank, node name): the inputs of every watched consumer
    and launch (``None`` for a tensor already released), and the codes every source produced."""

    inputs: dict[tuple[int, str], list] = field(default_factory=dict)
    sources: dict[tuple[int, str], torch.Tensor] = field(default_factory=dict)


def identity_run(case: Case, modules: dict[int, fx.GraphModule], codes: IdentityCodes,
                 consumers: set[str]) -> IdentityRun:
    """Run ``modules`` with every source replaced by its codes, recording ``consumers``' and every
    launch's inputs and each source's codes."""
    launches = {node.name for module in modules.values() for node in module.graph.nodes if is_launch(node)}
    seen = IdentityRun()

    def observe(rank: int, node: fx.Node, inputs: tuple, result: Any) -> None:
        if node.name in codes.sources and isinstance(result, torch.Tensor):
            seen.sources[(rank, node.name)] = result.detach().clone()
        if node.name in consumers or node.name in launches:
            # a free's input is already released when the free has run
            seen.inputs[(rank, node.name)] = [
                t.detach().clone() if isinstance(t, torch.Tensor) and (t.untyped_storage().size() or not t.numel())
                else None for t in inputs]

    simulate(case, modules, observe=observe, override=codes.value, watch=set(codes.sources) | consumers | launches,
             overridden=set(codes.sources))
    return seen
