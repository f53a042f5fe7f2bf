"""Layout offsets: the plan's packed layout is right, and the rewrite really uses it.

The plan check recomputes offsets from the member shapes (spec section 2.10). The run check
replaces every collective's source with *identity tensors*: each element carries a code that
names (parameter, rank, element). All-gathers only move data, so any distinct bit pattern works;
for reduce-scatters one rank contributes codes and the others zeros, so every sum is exact.
Every consumer of a collective result must then receive, position by position, the same codes
in the rewrite as in the original; a mismatch is decoded into the member it came from.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import fx

from ..execute.world import simulate
from .findings import CheckContext, Finding
from .registry import Checker
from .graph_facts import FSDP_KINDS, is_wait, real_consumers
from .numerics import run_failure

NAME = "layout"
_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}
_EXACT_INT = {torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53}


def _plan_findings(ctx: CheckContext) -> list[Finding]:
    findings = []
    for rank in sorted(ctx.plans):
        for report in ctx.reports(rank):
            for bucket in report["buckets"]:
                offset = 0
                for member in bucket["members"]:
                    rs = member["kind"] == "fsdp_reduce_scatter"
                    numel = math.prod(member["output_shape"] if rs else member["input_shape"])
                    if member["local_offset"] != offset or member["local_numel"] != numel:
                        findings.append(Finding(
                            NAME, f"rank {rank}: bucket {bucket['bucket_id']} member {member['param_name']} has "
                                     f"offset {member['local_offset']}, numel {member['local_numel']}; expected "
                                     f"{offset}, {numel}", nodes=(member["param_name"],), rank=rank))
                        return findings
                    offset += numel
    return findings


class IdentityCodes:
    """Identity tensors for the sources of the original graph's tagged collectives."""

    def __init__(self, sources: dict[str, tuple[str, str]]) -> None:
        self.sources = dict(sources)  # source node -> (param, kind)
        self.table: dict[tuple, tuple[str, int, int]] = {}
        self.bases: dict[tuple[str, int], int] = {}
        self.next_base = 1

    @classmethod
    def of(cls, original: fx.GraphModule) -> "IdentityCodes":
        """Codes for the sources of every tagged collective of ``original``."""
        return cls({node.args[0].name: (str(node.meta.get("param_name")), node.meta["comm_type"])
                    for node in original.graph.nodes if node.meta.get("comm_type") in FSDP_KINDS
                    and node.args and isinstance(node.args[0], fx.Node)})

    def _base(self, param: str, rank: int, count: int) -> int:
        """Code ranges are handed out on first use (the original's run) and reused for the rewrite."""
        if (param, rank) not in self.bases:
            self.bases[(param, rank)] = self.next_base
            self.next_base += count
        return self.bases[(param, rank)]

    def value(self, rank: int, node: fx.Node, value: Any, contributor: int) -> Any:
        if node.name not in self.sources or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        param, kind = self.sources[node.name]
        count = value.numel()
        if kind == "fsdp_reduce_scatter":
            if rank != contributor:
                return torch.zeros_like(value)
            limit = _EXACT_INT.get(value.dtype, 256)
            base = self._base(param, -1, count)
            codes = ((torch.arange(count, dtype=torch.float64) + base) % (limit - 1) + 1).to(value.dtype)
            return codes.reshape(value.shape)
        ints = _INT_VIEW[value.element_size()]
        base = self._base(param, rank, count)
        raw = torch.arange(base, base + count, dtype=torch.int64)
        if value.element_size() == 2:
            raw = raw % 0x7800 + 1  # below the fp16/bf16 exponent ranges that hold inf/nan
        codes = raw.to(ints).view(value.dtype).reshape(value.shape)
        for index, bits in enumerate(raw.tolist()):
            self.table[(value.element_size(), bits)] = (param, rank, index)
        return codes

    def decode(self, tensor: torch.Tensor, position: int) -> str:
        flat = tensor.detach().contiguous().reshape(-1)
        if position >= flat.numel() or tensor.element_size() not in _INT_VIEW:
            return "?"
        bits = int(flat.view(_INT_VIEW[tensor.element_size()])[position])
        found = self.table.get((tensor.element_size(), bits))
        return f"{found[0]} (rank {found[1]}, element {found[2]})" if found else f"value {float(flat[position])}"


def _watched(original: fx.GraphModule) -> dict[str, str]:
    """Consumers of every tagged collective result (through views) -> the parameter they read."""
    return {consumer.name: str(node.meta.get("param_name")) for node in original.graph.nodes
            if node.meta.get("comm_type") in FSDP_KINDS
            for wait in node.users if is_wait(wait) for consumer in real_consumers(wait)}


def _capture(ctx: CheckContext, modules: dict[int, fx.GraphModule], codes: IdentityCodes, watched: dict[str, str],
             contributor_index: int) -> dict:
    seen: dict = {}

    def observe(rank: int, node: fx.Node, inputs: tuple, result: Any) -> None:
        if node.name in watched:  # a free's input is already released when the free has run
            seen[(rank, node.name)] = [t.detach().clone() if isinstance(t, torch.Tensor)
                                       and (t.untyped_storage().size() or not t.numel()) else None for t in inputs]

    def override(rank: int, node: fx.Node, value: Any) -> Any:
        group = ctx.case.graph.group_ranks(rank)
        ranks = next(iter(group.values())) if group else (rank,)
        contributor = ranks[min(contributor_index, len(ranks) - 1)]
        return codes.value(rank, node, value, contributor)

    simulate(ctx.case, modules, observe=observe, override=override)
    return seen


def _compare(before: dict, after: dict, codes: IdentityCodes, watched: dict[str, str]) -> list[Finding]:
    for (rank, name), inputs in sorted(before.items()):
        if (rank, name) not in after:
            continue
        for slot, (x, y) in enumerate(zip(inputs, after[(rank, name)])):
            if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
                continue
            if x.shape != y.shape or x.dtype != y.dtype:
                return [Finding(NAME, f"rank {rank}: consumer {name!r} of {watched[name]} received a "
                                         f"{tuple(y.shape)} {y.dtype} tensor instead of {tuple(x.shape)} {x.dtype}",
                                nodes=(name,), rank=rank, details={"param": watched[name]})]
            ints = _INT_VIEW.get(x.element_size())
            if ints is None or not x.is_floating_point():
                continue
            xi, yi = x.contiguous().view(ints).reshape(-1), y.contiguous().view(ints).reshape(-1)
            differ = (xi != yi).nonzero()
            if len(differ):
                position = int(differ[0])
                return [Finding(NAME, f"rank {rank}: consumer {name!r} of {watched[name]} received "
                                         f"{codes.decode(y, position)} at position {position} where the original "
                                         f"delivers {codes.decode(x, position)}",
                                nodes=(name,), rank=rank,
                                details={"param": watched[name], "input": slot, "position": position})]
    return []


def check_layout(ctx: CheckContext) -> list[Finding]:
    """Plan offsets are contiguous per the numel rule, and every consumer gets its own elements."""
    original, rewritten = ctx.original, ctx.rewritten
    findings = _plan_findings(ctx)
    if findings:
        return findings
    first = min(original)
    codes = IdentityCodes.of(original[first])
    watched = _watched(original[first])
    if not codes.sources or not watched:
        return []
    # The contributing rank changes reduce-scatter sources only: without one, a second run
    # would repeat the first bit for bit.
    reduces = any(kind == "fsdp_reduce_scatter" for _, kind in codes.sources.values())
    for contributor in sorted({0, max(ctx.case.graph.world())}) if reduces else [0]:
        try:
            before = _capture(ctx, original, codes, watched, contributor)
        except Exception:  # noqa: BLE001 - the numerics checker reports an original that cannot run
            return []
        try:
            after = _capture(ctx, rewritten, codes, watched, contributor)
        except Exception as exc:  # noqa: BLE001
            return [run_failure(NAME, exc)]
        findings = _compare(before, after, codes, watched)
        if findings:
            return findings
    return []


CHECKER = Checker(NAME, check_layout, order=40, summary='packed offsets, checked with identity tensors')
