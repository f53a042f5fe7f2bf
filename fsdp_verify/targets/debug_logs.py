"""A target's loggers at DEBUG for one case in ``DEBUG_EVERY``: code a pass runs only when its
logger is enabled for DEBUG (a per-bucket line that indexes a second member, a dump that walks the
graph) is otherwise never run by a campaign, and a user who turns the logs on meets its crash first.
The records go nowhere (a null handler, not propagated), so the output is the same either way."""

from __future__ import annotations

import contextlib
import logging
from typing import Iterator, Sequence

from fsdp_verify.model.case import Case
from fsdp_verify.targets.base import Target

# One case in this many, by the case's seed: a shrunk case keeps seed 0, so keeps its loggers at
# DEBUG, and a replay of a saved case runs them as the campaign did.
DEBUG_EVERY = 4


def at_debug(case: Case) -> bool:
    """Whether ``case`` runs its target with the target's loggers at DEBUG."""
    return case.seed % DEBUG_EVERY == 0


def loggers_held(target: Target, case: Case) -> tuple[str, ...]:
    """The loggers a run of ``target`` on ``case`` holds at DEBUG (a harness run and its repro alike)."""
    return tuple(target.loggers) if at_debug(case) else ()


@contextlib.contextmanager
def debug_logs(names: Sequence[str]) -> Iterator[None]:
    """Each logger of ``names`` at DEBUG into a null handler while the block runs, then as it was."""
    saved = []
    for name in names:
        logger = logging.getLogger(name)
        handler = logging.NullHandler()
        saved.append((logger, logger.level, logger.propagate, handler))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, level, propagate, handler in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


__all__ = ["DEBUG_EVERY", "at_debug", "debug_logs", "loggers_held"]
