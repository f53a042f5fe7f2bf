"""Planted bugs: targets that are the reference planner/rewriter with one realistic defect each.

A verification harness is worth the bugs it catches; ``selftest`` fuzzes every mutant and
reports which checker kills it. Planner bugs patch one rule for the duration of a call;
rewriter bugs apply the reference rewrite and then damage it the way a real bug would.
"""

from __future__ import annotations

from fsdp_verify.targets.base import TargetNotFound, family
from fsdp_verify.targets.mutants.base import Mutant
from fsdp_verify.targets.mutants.catalogue import MUTANTS, get_mutant

PREFIX = "mutant:"


@family("mutant:<name>", "a planted bug (fsdp-verify selftest lists them)", claims=lambda name: name.startswith(PREFIX))
def named(name: str) -> Mutant:
    """``mutant:NAME`` -> the planted bug."""
    if name[len(PREFIX):] in MUTANTS:
        return MUTANTS[name[len(PREFIX):]]
    raise TargetNotFound(f"unknown planted bug {name!r}; available: {', '.join(sorted(MUTANTS))}")

__all__ = ["MUTANTS", "Mutant", "get_mutant"]
