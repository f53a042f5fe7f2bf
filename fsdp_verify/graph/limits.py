"""Bounds on what a graph or case document may hold, so reading a hostile or corrupt file costs
bounded time and memory. Each refusal names the field and the limit it broke."""

from __future__ import annotations

MAX_DEPTH = 32  # nesting of lists, tuples and objects inside one value (args, kwargs, meta)
MAX_INT = 2 ** 53  # magnitude of any integer (JSON's exact range)
MAX_NODES = 100_000  # nodes in one graph
MAX_RANKS = 64  # ranks in one simulated world
MAX_DIM = 2 ** 31  # one dimension of a shape
MAX_NUMEL = 2 ** 26  # elements of one placeholder tensor (256 MiB of float32)
