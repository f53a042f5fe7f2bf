"""A planted bug: the reference target with one defect, and the checker(s) meant to kill it."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Callable, Iterator, Mapping

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.reference import driver, planner
from fsdp_verify.targets.reference import ReferenceTarget

Patch = tuple[Any, str, Any]
Damage = Callable[[fx.GraphModule, int], None]


@contextlib.contextmanager
def _patched(patches: list[Patch]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class Mutant(ReferenceTarget):
    """The reference target with one planted bug.

    ``kills`` names the checker(s) whose rule the bug breaks: the self-test counts a kill by any
    other checker (or by a crash) separately, so a checker that cannot fire shows up. ``hunt`` is
    the campaign strategy the self-test hunts it with (``skip:REASON`` / ``rule:REASON`` for a bug in
    one skip, split, singleton or fusion rule, ``rule:REASON/VARIANT`` where one variant of its shapes
    tells it, ``@FOCUS`` after either to draw the blueprints from a focus, a focus such as ``wide``
    where a rare draw of the mix does).
    ``needs="real"``: a bug only real rank processes can show (its plan depends on process-local
    state that is the same for every simulated rank): the self-test hunts it with ``--ranks real``,
    and a simulated self-test lists it as not hunted, never as killed or survived.
    """

    def __init__(self, name: str, summary: str, kills: tuple[str, ...], patches: Callable[[], list[Patch]] = list,
                 damage: Damage | None = None, rank_patches: Callable[[int], list[Patch]] | None = None,
                 plan_type: type | None = None, last_rank_only: bool = False,
                 plan_edit: Callable[[planner.BucketPlan], planner.BucketPlan] | None = None, hunt: str = "hazards",
                 apply_edit: Callable[[planner.BucketPlan], planner.BucketPlan] | None = None, needs: str = ""):
        self.name, self.summary, self.kills, self.hunt = f"mutant:{name}", summary, kills, hunt
        self.needs = needs
        self._patches, self._damage, self._rank_patches = patches, damage, rank_patches
        self._plan_type, self._last_rank_only, self._plan_edit = plan_type, last_rank_only, plan_edit
        self._apply_edit = apply_edit  # the rewriter acts on this edit of the plan it reports

    def patches(self) -> list[Patch]:
        """Every patch the bug applies (a rank-dependent bug's as rank 0 has them): what it replaces."""
        return list(self._patches()) + (list(self._rank_patches(0)) if self._rank_patches else [])

    def plan(self, case: Case, module: fx.GraphModule, rank: int) -> planner.BucketPlan:
        extra = self._rank_patches(rank) if self._rank_patches else []
        with _patched(self._patches() + extra):
            plan = super().plan(case, module, rank)
        if self._plan_type is not None:
            plan = self._plan_type(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)})
        return self._plan_edit(plan) if self._plan_edit is not None else plan

    def rewriters(self) -> tuple:
        def wrap(apply):
            def mutated(module, plan):
                with _patched(self._patches()):
                    return apply(module, self._apply_edit(plan) if self._apply_edit else plan)
            return mutated
        return tuple(wrap(apply) for apply in super().rewriters())

    def validate_reports(self, reports: Mapping[int, dict], group: str) -> None:
        with _patched(self._patches()):
            super().validate_reports(reports, group)

    def module_plans(self, model: Any, block_module_types: Any, module_bucket_plans: Any) -> tuple:
        with _patched(self._patches()):
            return super().module_plans(model, block_module_types, module_bucket_plans)

    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        with _patched(self._patches()):  # a bug in the driver's exchange acts here
            plans = driver.bucket_world(modules, lambda rank, module: self.plan(case, module, rank), self.rewriters())
        if self._damage is not None:
            for rank, module in modules.items():
                if self._last_rank_only and rank != max(case.graph.world()):  # one rank per process in real mode
                    continue
                self._damage(module, rank)
                module.graph.lint()
                module.recompile()
        return plans
