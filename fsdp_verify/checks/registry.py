"""The checker registry: every module of this package that defines ``CHECKER``, plus the
``fsdp_verify.checkers`` entry-point group, so a new checker (the project's or a user's) is one file.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Callable, Optional

from fsdp_verify.checks.findings import CheckContext, Finding

ENTRY_POINT_GROUP = "fsdp_verify.checkers"


@dataclass(frozen=True)
class Checker:
    """A pure function of one context that returns findings, and when it applies.

    ``skip_reason(ctx)`` says why the checker cannot judge this context (None: it can); the
    orchestration records that reason so a skipped check is reported, never silent.
    """

    name: str
    run: Callable[[CheckContext], list[Finding]]
    order: int = 100
    summary: str = ""
    skip_reason: Optional[Callable[[CheckContext], Optional[str]]] = None
    default: bool = True  # False: only when asked for by name (needs an execution resource)
    # True: hands the target's own rewrite back to it, in place (no copy), so it runs after every
    # checker that reads the rewrite; a change it sees is its finding
    hands_back: bool = False


class CheckerError(LookupError):
    """An entry point or module that does not provide a Checker."""


def _package_checkers() -> list[Checker]:
    found = []
    for info in pkgutil.iter_modules(importlib.import_module(__package__).__path__):
        module = importlib.import_module(f"{__package__}.{info.name}")
        checker = getattr(module, "CHECKER", None)
        if isinstance(checker, Checker):
            found.append(checker)
    return found


def _entry_point_checkers() -> list[Checker]:
    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        checker = point.load()
        if not isinstance(checker, Checker):
            raise CheckerError(f"entry point {point.name} = {point.value} is not an fsdp_verify Checker")
        found.append(checker)
    return found


@lru_cache(maxsize=1)
def registered() -> dict[str, Checker]:
    """Every checker by name, in run order (the planner first, execution-backed ones later, and
    those that hand the rewrite back to the target last)."""
    checkers: dict[str, Checker] = {}
    for checker in sorted(_package_checkers() + _entry_point_checkers(),
                          key=lambda c: (c.hands_back, c.order, c.name)):
        if checker.name in checkers:
            raise CheckerError(f"two checkers are called {checker.name!r}")
        checkers[checker.name] = checker
    return checkers


def default_checkers() -> dict[str, Checker]:
    """The checkers every case runs."""
    return {name: c for name, c in registered().items() if c.default}
