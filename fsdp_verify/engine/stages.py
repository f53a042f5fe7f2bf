"""Where a campaign's CPU goes, stage by stage, measured where each stage runs.

Each stage is timed with ``time.process_time`` in the process that does the work: generation, the
real ranks, reporting and the parent's half of isolation in the campaign's process; building,
the target and every checker in the case's child (or in-process). The child's figures travel back
with its report (``ctx.metrics[CPU]``), so a campaign sums them without a profiler. Work shared
between checkers (one identity run serves several) is charged to the checker that first asks
for it: the per-checker figures say where time went, not what a checker would cost alone.
"""

from __future__ import annotations

import contextlib
import time
from enum import Enum
from typing import Iterator, MutableMapping

CPU = "cpu"  # the key of a case's stage figures in its metrics


class Stage(str, Enum):
    """A campaign stage. A str, so the figures stay plain words in JSON."""

    GENERATION = "generation"  # drawing a case and rendering its graph (Hypothesis strategies)
    BUILD = "build"  # building each rank's fx modules: the target's copies and the checkers' originals
    TARGET = "target"  # the target's own plan+rewrite (the planner oracle's round watch taken out)
    ROUND_WATCH = "planner oracle within the target's run"  # deriving later rounds while the target runs
    ISOLATION = "isolation"  # requests, replies and forks: the parent's wait excluded, its CPU and the child's rest
    REAL_RANKS = "real ranks"  # the parent's work for --ranks real (rank processes not included)
    REPORTING = "reporting"  # accounting, saving cases, progress
    OTHER = "other"  # the rest of the campaign process: Hypothesis's engine and shrinker

    __str__ = str.__str__
    __format__ = str.__format__


def checker(name: str) -> str:
    """The stage of one checker: ``check:layout``."""
    return f"check:{name}"


@contextlib.contextmanager
def timed(into: MutableMapping[str, float], stage: str) -> Iterator[None]:
    """Add the CPU seconds of the block to ``into[stage]``."""
    key, began = str(stage), time.process_time()
    try:
        yield
    finally:
        into[key] = into.get(key, 0.0) + time.process_time() - began


def add(into: MutableMapping[str, float], figures: MutableMapping[str, float]) -> None:
    for stage, seconds in figures.items():
        into[stage] = into.get(stage, 0.0) + seconds


class StageClock:
    """A campaign's stage figures (``figures``, the Result's dict) and what of them this process
    measured itself (``here``), so the rest of its CPU is Hypothesis's own (``finish``)."""

    def __init__(self, figures: MutableMapping[str, float]):
        self.figures = figures
        self.here = 0.0
        self.began = time.process_time()

    @contextlib.contextmanager
    def local(self, stage: str) -> Iterator[None]:
        """Time a block of this process as ``stage``."""
        began = time.process_time()
        try:
            with timed(self.figures, stage):
                yield
        finally:
            self.here += time.process_time() - began

    def case(self, parent: float, child: MutableMapping[str, float], isolated: bool) -> None:
        """One case judged: ``parent`` CPU seconds this process spent in it, ``child`` the stage
        figures its judge measured. Isolated, the parent's share is isolation work (requests and
        replies); in-process, the child's figures were measured here, and the parent's share beyond
        them is glue (configuring the target, the [I] settings)."""
        add(self.figures, child)
        if isolated:
            self.figures[str(Stage.ISOLATION)] = self.figures.get(str(Stage.ISOLATION), 0.0) + parent
        else:
            rest = max(0.0, parent - sum(child.values()))
            self.figures[str(Stage.OTHER)] = self.figures.get(str(Stage.OTHER), 0.0) + rest
        self.here += parent

    def finish(self) -> None:
        """Charge this process's CPU that no stage measured to ``other`` (Hypothesis's engine)."""
        rest = time.process_time() - self.began - self.here
        self.figures[str(Stage.OTHER)] = self.figures.get(str(Stage.OTHER), 0.0) + max(0.0, rest)
        self.here += max(0.0, rest)
