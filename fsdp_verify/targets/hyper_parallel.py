"""``hyper-parallel``: the original planner and rewriters, when ``hyper_parallel`` is installed.

The reference planner keeps the original's public names and signatures, so the original plugs
into the same simulated two-round driver.
"""

from __future__ import annotations

import importlib
from typing import Any, Optional

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.reference.driver import bucket_world
from fsdp_verify.targets.base import Target, TargetNotFound, family
from fsdp_verify.targets.reference import planner_kwargs

MODULE = "hyper_parallel.compile.passes.bucketing"


def unavailable_reason() -> Optional[str]:
    """Why the original cannot be used here, or None when it can."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        return f"{MODULE} is not importable ({exc})"
    missing = [name for name in ("plan_fsdp_buckets", "BucketPolicy", "apply_ag_buckets", "apply_rs_buckets")
               if not hasattr(module, name)]
    return f"{MODULE} lacks {missing}" if missing else None


class HyperParallelTarget(Target):
    """The original ``plan_fsdp_buckets`` with ``apply_ag_buckets`` / ``apply_rs_buckets``."""

    name = "hyper-parallel"
    summary = "the original hyper_parallel planner and rewriters"
    external = True

    def __init__(self) -> None:
        self.module = importlib.import_module(MODULE)

    def plan(self, case: Case, module: fx.GraphModule, rank: int) -> Any:
        return self.module.plan_fsdp_buckets(module, **planner_kwargs(case, rank, self.module.BucketPolicy))

    def rewriters(self) -> tuple:
        return (self.module.apply_ag_buckets, self.module.apply_rs_buckets)

    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        return bucket_world(modules, lambda rank, module: self.plan(case, module, rank), self.rewriters())


@family("hyper-parallel", "the original hyper_parallel planner + rewriters, when installed",
        claims=lambda name: name == "hyper-parallel")
def named(name: str) -> HyperParallelTarget:
    """The target, or TargetNotFound saying why the original planner cannot be loaded."""
    reason = unavailable_reason()
    if reason:
        raise TargetNotFound(f"target 'hyper-parallel' is unavailable: {reason}")
    return HyperParallelTarget()
