"""The target leaves the process's global random generators as it found them.

Bucketing changes where collectives run, never what the step computes; a planner or rewriter that
draws from a global generator changes every random number the step draws after it (dropout masks,
initialisation), and ranks that planned different graphs draw different numbers. Its plans and
rewrites can all be right, so only the generators' states before and after its run tell
(``targets/generators.py``, read by ``engine/run_case.run_target`` around the target's call alone).
A generator the target's real callers restore around it (``Target.restored_generators``: inductor's
compile restores torch's) is no finding; the metrics count such draws, so the excuse is visible.
"""

from __future__ import annotations

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.registry import Checker

NAME = "generators"


def check_generators(ctx: CheckContext) -> list[Finding]:
    """A finding for each generator the run moved that its callers do not restore."""
    restored = set(getattr(ctx.target, "restored_generators", ()))
    drawn = list(ctx.run.generators_drawn)
    excused = [name for name in drawn if name in restored]
    if excused:
        ctx.metrics.setdefault(NAME, {})["excused"] = len(excused)
    moved = [name.value for name in drawn if name not in restored]
    if not moved:
        return []
    return [Finding(NAME, f"the target's plan and rewrite moved the global random generator(s) {moved}: every "
                          f"random number the step draws after them (dropout, initialisation) shifts, and ranks "
                          f"that planned different graphs drift apart", details={"generators": moved},
                    rule="global_generator_drawn")]


CHECKER = Checker(NAME, check_generators, after=("planner",),
                  summary="the target leaves the global random generators (torch, Python, numpy) as it found them")
