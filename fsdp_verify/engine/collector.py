"""The garbage collector's settings while a campaign checks cases.

Torch, Hypothesis and the target are loaded once and live for the whole run: frozen out of the
collector's sight, each collection walks only what the examples allocate. Young collections every
100,000 allocations instead of CPython's 700: a case allocates millions of short-lived objects
(FX nodes, plans, tensors), and at the default threshold the collector's walks grew with the graph
(measured on a 10k-node case: 25% of the check's CPU time, and the 1k -> 10k growth exponents of
building and re-planning fell by 0.1-0.2 without them). Cyclic garbage (FX graphs) still goes at
the next young collection; the largest case measured here grew its peak memory by 17%.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

THRESHOLDS = (100_000, 50, 100)


def settle(tuned: bool = True, generation: int = 2) -> None:
    """Freeze what is loaded and, when ``tuned``, raise the thresholds (undone only by the caller:
    a benchmark keeps them for the rest of its process); the garbage of generations up to
    ``generation`` is collected first, so it is not frozen with the rest."""
    gc.collect(generation)
    gc.freeze()
    if tuned:
        gc.set_threshold(*THRESHOLDS)


FULL_EVERY = 8  # blocks between full collections, in a process that runs campaigns one after another
_owed = 0  # blocks that ended since the last full collection of their garbage


@contextlib.contextmanager
def tuned() -> Iterator[None]:
    """Freeze what is loaded and raise the thresholds for the block; both restored after it.

    Only the young generations are collected before the first block's freeze. A full collection
    walks every object of the process: 185 ms in a test worker that imported everything, once per
    campaign (a sixth of a self-test hunt's CPU, and a mutant runs a campaign per phase). What the
    oldest generation holds of garbage is frozen with the rest for the block and handed back to the
    collector after it.

    What the block leaves (its live caches and its garbage) is walked by the start of a later
    block, not by the end of this one: a command that runs one campaign and exits never pays that
    walk (0.6-1 CPU-s after 200 examples). Processes that run campaigns one after another (self-test
    hunts, a mutant's phases) collect the young generations before each freeze and all of them
    before every ``FULL_EVERY``-th: the oldest generation's garbage of at most that many blocks is
    frozen with the rest meanwhile, never piled up, and the walk over everything loaded (a sixth of
    a hunt) is paid once per ``FULL_EVERY`` blocks."""
    global _owed
    before = gc.get_threshold()
    full = _owed >= FULL_EVERY
    settle(generation=2 if full else 1)
    _owed = 0 if full else _owed
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
        _owed += 1
