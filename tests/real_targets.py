"""Targets for the real-mode tests, loaded by ``module:callable`` inside the rank processes."""

from __future__ import annotations

import os
import time

from fsdp_verify.targets.reference import ReferenceTarget


class Slow(ReferenceTarget):
    """The reference target, three seconds late on every rank (time to kill a rank mid-case)."""

    name = "slow"

    def rewrite(self, case, modules):
        time.sleep(3)
        return super().rewrite(case, modules)


class OddRankRaises(ReferenceTarget):
    """Raises on odd rank processes only (``RANK`` from the environment): a rank-dependent outcome."""

    name = "odd_rank_raises"

    def rewrite(self, case, modules):
        if int(os.environ.get("RANK", "0")) % 2:
            raise RuntimeError("this rank's environment breaks the planner")
        return super().rewrite(case, modules)


class OddRankExits(ReferenceTarget):
    """Kills its own process on odd ranks (a native crash inside a rank)."""

    name = "odd_rank_exits"

    def rewrite(self, case, modules):
        if int(os.environ.get("RANK", "0")) % 2:
            os._exit(3)
        return super().rewrite(case, modules)


def staged_handler(job, ctx):
    """The pool's default job with collectives staged through CPU copies, as gloo with CUDA compute
    runs them (so that path is tested on a machine without a GPU)."""
    from fsdp_verify.execute.distributed import _default_handler
    ctx.staged = True
    return _default_handler(job, ctx)
