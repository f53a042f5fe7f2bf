"""Where values first diverge, for the pictures: the node ``checks/divergence.py`` finds on the
first rank (what a picture marks)."""

from __future__ import annotations

from typing import Optional

from fsdp_verify.checks import CheckContext
from fsdp_verify.checks.divergence import first_divergence as _first


def first_divergence(ctx: CheckContext) -> Optional[str]:
    """The name of that node, or None (no divergence, or a graph that cannot run)."""
    if not ctx.run.rewritten:
        return None
    found = _first(ctx.case, ctx.run.originals, ctx.run.rewritten, min(ctx.run.originals))
    return None if found is None else found.node
