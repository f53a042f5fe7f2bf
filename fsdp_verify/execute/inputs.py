"""Deterministic per-rank input values for a graph's placeholders.

``exact`` values are small dyadic numbers (k/8, |k| <= 8): every sum and product the
generated graphs form stays exact in every float dtype, so summation order cannot change bits.
``random`` values are standard normal, for drift measurements.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterable

import torch

from fsdp_verify.graph.builder import placeholder_tensors
from fsdp_verify.graph.spec import GraphSpec

MODES = ("exact", "random")


def _generator(seed: int, rank: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}:{rank}:{name}".encode()))


def make_inputs(spec: GraphSpec, rank: int, seed: int = 0, mode: str = "exact",
                device: str | torch.device = "cpu") -> list[Any]:
    """One tensor per placeholder, in graph order: this rank's shards and inputs."""
    if mode not in MODES:
        raise ValueError(f"unknown input mode {mode!r}; expected one of {MODES}")
    facts = placeholder_tensors(spec)
    highs = {item.placeholder: item.high for item in spec.inputs}
    values = []
    for node in spec.nodes:
        if node.op != "placeholder":
            continue
        shape, dtype = facts[node.name]
        gen = _generator(seed, rank, node.name)
        if not dtype.is_floating_point:
            high = highs.get(node.name) or 8
            values.append(torch.randint(0, high, shape, generator=gen).to(dtype).to(device))
            continue
        if mode == "exact":
            base = torch.randint(-8, 9, shape, generator=gen).to(torch.float64) / 8
        else:
            base = torch.randn(shape, generator=gen, dtype=torch.float64)
        values.append(base.to(dtype).to(device))
    return values


def exact_override(names: Iterable[str], seed: int) -> Callable[[int, Any, Any], Any]:
    """An override that replaces the named nodes' values by exact dyadics (k/8, |k| <= 8).

    Feeding reductions such values makes every summation order exact, so real collectives
    (whose ring order differs from the simulator's rank order) still agree bit for bit.
    """
    wanted = frozenset(names)

    def override(rank: int, node: Any, value: Any) -> Any:
        if node.name not in wanted or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        gen = _generator(seed, rank, f"exact:{node.name}")
        codes = torch.randint(-8, 9, tuple(value.shape), generator=gen).to(torch.float64) / 8
        return codes.to(value.dtype).to(value.device)
    return override
