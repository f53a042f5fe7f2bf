"""The bucketing pass driver (spec section 3), for a simulated world of ranks in one process.

Two rounds, AG then RS. Each round plans afresh on every rank's current graph, exchanges
each group's digest report among the group's ranks, validates them with
``validate_group_plans`` (so a disagreement raises on every rank before anything is
rewritten), then applies the round's rewriter on every rank.
"""

from __future__ import annotations

from typing import Callable, Mapping

from torch import fx

from fsdp_verify.reference.planner import BucketPlan, validate_group_plans
from fsdp_verify.reference.rewrite import apply_ag_buckets, apply_rs_buckets

PlanFn = Callable[[int, fx.GraphModule], BucketPlan]
ROUNDS = (apply_ag_buckets, apply_rs_buckets)


def group_report(plan: BucketPlan, group: str) -> dict:
    """What one rank sends to its group's peers in a round."""
    return {"group_ranks": {group: plan.group_ranks[group]}, "group_digests": {group: plan.group_digest(group)}}


def exchange_and_validate(plans: Mapping[int, BucketPlan]) -> None:
    """Validate every group's reports among the ranks that plan says form it; raises ValueError."""
    groups = sorted({group for plan in plans.values() for group in plan.group_ranks})
    for group in groups:
        members = {tuple(plan.group_ranks[group]) for plan in plans.values() if group in plan.group_ranks}
        for ranks in sorted(members):
            reports = {rank: group_report(plans[rank], group) for rank in ranks if rank in plans}
            validate_group_plans(reports, group)


def bucket_world(modules: Mapping[int, fx.GraphModule], plan_for: PlanFn,
                 rounds: tuple = ROUNDS) -> dict[int, list[BucketPlan]]:
    """Run both rounds on every rank's module in place; returns each rank's plan per round."""
    history: dict[int, list[BucketPlan]] = {rank: [] for rank in modules}
    for apply in rounds:
        plans = {rank: plan_for(rank, module) for rank, module in modules.items()}
        exchange_and_validate(plans)
        for rank, module in modules.items():
            apply(module, plans[rank])
            history[rank].append(plans[rank])
    return history
