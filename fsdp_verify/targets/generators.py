"""The process's global random generators around a target's run.

A planner or rewriter that draws from them (a runtime estimate that times a copy of random inputs,
a random tie-break, an op run on real memory where meta was meant) shifts every random number the
training step draws after it: dropout masks and initialisation no longer match the unbucketed
program's, and two ranks that planned different graphs drift apart. Its plans and rewrites may all
be right, so no other check sees it: the states before and after the run are compared.
"""

from __future__ import annotations

import random
import sys
from enum import Enum
from typing import Any

import torch


class Generator(str, Enum):
    """A global generator a target may draw from."""

    TORCH = "torch"  # the CPU default generator: torch.rand, randn, randperm, dropout on CPU
    TORCH_CUDA = "torch.cuda"  # every device's default generator, when CUDA is initialised already
    PYTHON = "random"  # the ``random`` module's shared instance
    NUMPY = "numpy.random"  # numpy's legacy global RandomState, when numpy is loaded already


def snapshot() -> dict[Generator, Any]:
    """Each global generator's state now. Reading a state draws nothing and initialises nothing:
    CUDA's and numpy's are read only where the process holds them already."""
    states: dict[Generator, Any] = {Generator.TORCH: torch.random.get_rng_state(),
                                    Generator.PYTHON: random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states[Generator.TORCH_CUDA] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states[Generator.NUMPY] = numpy.random.get_state(legacy=False)
    return states


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return isinstance(after, torch.Tensor) and torch.equal(before, after)
    if isinstance(before, (list, tuple)):
        return isinstance(after, (list, tuple)) and len(before) == len(after) and \
            all(_same(a, b) for a, b in zip(before, after))
    if isinstance(before, dict):
        return isinstance(after, dict) and before.keys() == after.keys() and \
            all(_same(before[key], after[key]) for key in before)
    if type(before).__module__ == "numpy":  # an array of a numpy state
        return type(after) is type(before) and bool((before == after).all())
    return before == after


def drawn(before: dict[Generator, Any]) -> tuple[Generator, ...]:
    """The generators of ``before`` whose state differs now (a reseed counts: the stream moved)."""
    after = snapshot()
    return tuple(name for name, state in before.items() if name not in after or not _same(state, after[name]))


__all__ = ["Generator", "drawn", "snapshot"]
