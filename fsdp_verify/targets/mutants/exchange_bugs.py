"""Exchange bugs: the reference validator and driver, each wrong in one way a real one has been.

Each validator bug edits the reports so the spec's own ``validate_group_plans`` sees agreement
where one kind of disagreement was, then calls it: the bug is exactly one blind rule.
"""

from __future__ import annotations

from typing import Callable, Mapping

from torch import fx

from fsdp_verify.reference import driver, planner

Validate = Callable[[Mapping[int, dict], str], None]
VALIDATE = planner.validate_group_plans  # the spec's own, as imported: a patch never wraps a patch


def validator(bug: Callable[[Validate], Validate]) -> list:
    """Patches that make ``bug`` of the spec's validator the one the planner exports and the driver calls."""
    wrong = bug(VALIDATE)
    return [(planner, "validate_group_plans", wrong), (driver, "validate_group_plans", wrong)]


def _as_reports(plans_by_rank: Mapping[int, object]) -> dict[int, dict]:
    return {rank: plan.to_dict() if isinstance(plan, planner.BucketPlan) else dict(plan)
            for rank, plan in plans_by_rank.items()}


def ignores_missing_rank(validate: Validate) -> Validate:
    """Only the ranks that reported are compared: a missing rank's report is made up from the first."""
    def check(plans_by_rank: Mapping[int, object], group: str) -> None:
        reports = _as_reports(plans_by_rank)
        first = next(iter(reports.values()), None)
        expected = first["group_ranks"].get(group, ()) if first else ()
        validate({**{rank: first for rank in expected}, **reports} if first else reports, group)
    return check


def ignores_extra_rank(validate: Validate) -> Validate:
    """Reports from ranks outside the group are dropped instead of refused."""
    def check(plans_by_rank: Mapping[int, object], group: str) -> None:
        reports = _as_reports(plans_by_rank)
        first = next(iter(reports.values()), None)
        expected = set(first["group_ranks"].get(group, ())) if first else set()
        validate({rank: report for rank, report in reports.items() if rank in expected} or reports, group)
    return check


def ignores_rank_order(validate: Validate) -> Validate:
    """The group's ranks are compared as sets: a rank that lists them in another order passes."""
    def check(plans_by_rank: Mapping[int, object], group: str) -> None:
        reports = _as_reports(plans_by_rank)
        for report in reports.values():
            ranks = report["group_ranks"].get(group)
            if ranks is not None:
                report["group_ranks"] = {**report["group_ranks"], group: sorted(ranks)}
        validate(reports, group)
    return check


def ranks_compared_pairwise(validate: Validate) -> Validate:
    """Each report's ranks are compared with the first's pairwise through ``zip``, which stops at the
    shorter: a report naming only a prefix of the group passes."""
    def check(plans_by_rank: Mapping[int, object], group: str) -> None:
        reports = _as_reports(plans_by_rank)
        first = next(iter(reports.values()), None)
        expected = list(first["group_ranks"].get(group, ())) if first else []
        for report in reports.values():
            ranks = report["group_ranks"].get(group)
            if ranks is not None and all(a == b for a, b in zip(ranks, expected)):
                report["group_ranks"] = {**report["group_ranks"], group: expected}
        validate(reports, group)
    return check


def ignores_digest(validate: Validate) -> Validate:
    """Only the ranks are compared, never the digests."""
    def check(plans_by_rank: Mapping[int, object], group: str) -> None:
        reports = _as_reports(plans_by_rank)
        first = next(iter(reports.values()), {"group_digests": {}})
        for report in reports.values():
            report["group_digests"] = {**report["group_digests"], group: first["group_digests"].get(group)}
        validate(reports, group)
    return check


def exchange_skipped(plans: Mapping[int, planner.BucketPlan]) -> None:
    """The driver never exchanges: each rank rewrites with its own plan."""


def first_group_only(plans: Mapping[int, planner.BucketPlan]) -> None:
    """The driver validates only the first group in name order, and only its first subgroup."""
    groups = sorted({group for plan in plans.values() for group in plan.group_ranks})
    if not groups:
        return
    ranks = min(tuple(plan.group_ranks[groups[0]]) for plan in plans.values() if groups[0] in plan.group_ranks)
    VALIDATE({rank: driver.group_report(plans[rank], groups[0]) for rank in ranks if rank in plans}, groups[0])


def rewrite_then_exchange(modules: Mapping[int, fx.GraphModule], plan_for, rounds: tuple = driver.ROUNDS):
    """The driver applies each round on every rank, then validates: a refused round is already written."""
    history: dict[int, list] = {rank: [] for rank in modules}
    for apply in rounds:
        plans = {rank: plan_for(rank, module) for rank, module in modules.items()}
        for rank, module in modules.items():
            apply(module, plans[rank])
            history[rank].append(plans[rank])
        driver.exchange_and_validate(plans)
    return history


def disagreement_unbucketed(modules: Mapping[int, fx.GraphModule], plan_for, rounds: tuple = driver.ROUNDS):
    """A round whose ranks disagree is left out on every rank, where spec 3.6 raises: safe (every
    rank keeps its graph), but a job whose ranks' graphs differ runs unbucketed without a word. Only
    ranks whose graphs differ (uneven shards) disagree on their own."""
    history: dict[int, list] = {rank: [] for rank in modules}
    for apply in rounds:
        plans = {rank: plan_for(rank, module) for rank, module in modules.items()}
        try:
            driver.exchange_and_validate(plans)
        except ValueError:
            agreed = False
        else:
            agreed = True
        for rank, module in modules.items():
            if agreed:
                apply(module, plans[rank])
            history[rank].append(plans[rank])
    return history
