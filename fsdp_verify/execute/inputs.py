"""Deterministic per-rank input values for a graph's placeholders.

``exact`` values are small dyadic numbers (k/8, |k| <= 8): every sum and product the
generated graphs form stays exact in every float dtype, so summation order cannot change bits.
``random`` values are standard normal, for drift measurements.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterable

import torch

from fsdp_verify.graph.builder import localize, placeholder_tensors
from fsdp_verify.graph.spec import GraphSpec

MODES = ("exact", "random")


def _generator(seed: int, rank: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}:{rank}:{name}".encode()))


# ``input_tensor`` and ``exact_tensor`` use torch and zlib alone: ``fsdp-verify repro`` copies their
# source (and ``_generator``'s) into the scripts it writes, so a script's inputs are these bits.
def input_tensor(shape: tuple, dtype: torch.dtype, seed: int, rank: int, name: str, high: int = 0,
                 mode: str = "exact", device: str | torch.device = "cpu") -> torch.Tensor:
    """The value of placeholder ``name`` on ``rank``: integers in [0, high or 8), floats k/8."""
    gen = _generator(seed, rank, name)
    if not dtype.is_floating_point:
        return torch.randint(0, high or 8, shape, generator=gen).to(dtype).to(device)
    if mode == "exact":
        base = torch.randint(-8, 9, shape, generator=gen).to(torch.float64) / 8
    else:
        base = torch.randn(shape, generator=gen, dtype=torch.float64)
    return base.to(dtype).to(device)


def exact_tensor(seed: int, rank: int, name: str, value: torch.Tensor) -> torch.Tensor:
    """Exact dyadics (k/8, |k| <= 8) in place of node ``name``'s floating ``value``."""
    gen = _generator(seed, rank, f"exact:{name}")
    codes = torch.randint(-8, 9, tuple(value.shape), generator=gen).to(torch.float64) / 8
    return codes.to(value.dtype).to(value.device)


def make_inputs(spec: GraphSpec, rank: int, seed: int = 0, mode: str = "exact",
                device: str | torch.device = "cpu") -> list[Any]:
    """One tensor per placeholder, in graph order: this rank's shards and inputs (of the graph
    ``spec`` is on ``rank``: a rank that pads a shard holds fewer rows)."""
    if mode not in MODES:
        raise ValueError(f"unknown input mode {mode!r}; expected one of {MODES}")
    spec = localize(spec, rank)
    facts = placeholder_tensors(spec)
    highs = {item.placeholder: item.high for item in spec.inputs}
    return [input_tensor(facts[node.name][0], facts[node.name][1], seed, rank, node.name, highs.get(node.name, 0),
                         mode, device)
            for node in spec.nodes if node.op == "placeholder"]


def exact_override(names: Iterable[str], seed: int) -> Callable[[int, Any, Any], Any]:
    """An override that replaces the named nodes' values by exact dyadics (k/8, |k| <= 8).

    Feeding reductions such values makes every summation order exact, so real collectives
    (whose ring order differs from the simulator's rank order) still agree bit for bit.
    """
    wanted = frozenset(names)

    def override(rank: int, node: Any, value: Any) -> Any:
        if node.name not in wanted or not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        return exact_tensor(seed, rank, node.name, value)
    return override
