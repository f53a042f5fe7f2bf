"""The real-rank checker's declaration: its name, order and summary, which the catalogue's planted
bugs name. The work runs in ``fsdp_verify.execute.ranks.judge``, in the harness's own process after
``check_all``, since its rank pools outlive a case's forked child; here it only says so as its skip
reason when a shrink step asks ``check_all`` for it."""

from __future__ import annotations

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.registry import Checker

NAME = "real_ranks"

IN_HARNESS = ("judged in the harness's process after check_all (real_ranks.judge, --ranks real): the rank pools "
              "outlive a case's forked child")


def _judged_by_the_harness(ctx: CheckContext) -> list[Finding]:
    raise RuntimeError(f"{NAME}: {IN_HARNESS}")  # never reached: the skip reason always answers


CHECKER = Checker(NAME, _judged_by_the_harness, after=("memory",), default=False, skip_reason=lambda ctx: IN_HARNESS,
                  summary="real rank processes: each plans with its own hash seed, digests exchanged over the real "
                          "process group, real collectives vs the simulated world (--ranks real; judged by the "
                          "campaign, replay and gate after check_all)")

