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
    orchestration records that reason so a skipped check is reported, never silent. ``after``
    names the checkers it runs after: the more basic rules first, so a failure is named by the
    rule it breaks first (``engine/signature.py``), and the planner before all (a target that
    raised is judged by it).
    """

    name: str
    run: Callable[[CheckContext], list[Finding]]
    after: tuple[str, ...] = ()
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


def run_order(package: list[Checker], plugins: list[Checker]) -> list[Checker]:
    """Every checker after those it names in ``after``; among the ready ones the project's own
    first, then by name; those that hand the rewrite back to the target after all others."""
    everyone = package + plugins
    names = [c.name for c in everyone]
    duplicate = next((n for n in names if names.count(n) > 1), None)
    if duplicate is not None:
        raise CheckerError(f"two checkers are called {duplicate!r}")
    handing_back = {c.name for c in everyone if c.hands_back}
    for checker in everyone:
        missing = sorted(set(checker.after) - set(names))
        if missing:
            raise CheckerError(f"checker {checker.name!r} runs after {missing}, which no checker is called")
        if not checker.hands_back and set(checker.after) & handing_back:
            raise CheckerError(f"checker {checker.name!r} runs after a checker that hands the rewrite back, "
                               f"which runs last: mark it hands_back too")
    own = {c.name for c in package}
    ordered: list[Checker] = []
    for last in (False, True):
        waiting = [c for c in everyone if c.hands_back == last]
        while waiting:
            done = {c.name for c in ordered}
            ready = [c for c in waiting if set(c.after) <= done]
            if not ready:
                raise CheckerError(f"checkers {sorted(c.name for c in waiting)} name each other in after=: a cycle")
            chosen = min(ready, key=lambda c: (c.name not in own, c.name))
            ordered.append(chosen)
            waiting.remove(chosen)
    return ordered


@lru_cache(maxsize=1)
def registered() -> dict[str, Checker]:
    """Every checker by name, in run order (``run_order``)."""
    return {c.name: c for c in run_order(_package_checkers(), _entry_point_checkers())}


def default_checkers() -> dict[str, Checker]:
    """The checkers every case runs."""
    return {name: c for name, c in registered().items() if c.default}
