"""The target interface: what the harness asks of a planner + rewriter under test."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Mapping, Sequence

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.targets.generators import Generator


class Target(ABC):
    """A planner + rewriter. ``rewrite`` is required; ``plan`` enables plan-specific oracles."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    external: ClassVar[bool] = False  # code this project does not own: a finding is a defect candidate
    # what a campaign draws from when --strategy is not given: the graphs the target is written for
    default_strategy: ClassVar[str] = "cases"
    # the loggers its code writes to: one case in four runs them at DEBUG (``targets/debug_logs.py``)
    loggers: ClassVar[tuple[str, ...]] = ()
    # global random generators its real callers restore around it: a draw from one of them is no
    # finding (inductor's compile restores torch's)
    restored_generators: ClassVar[tuple[Generator, ...]] = ()

    @abstractmethod
    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        """Plan and rewrite every rank's module in place (or replace entries of ``modules``).

        Returns each rank's plans, one per round, in a format with ``to_dict()`` when the target
        produces reference-format plans, else an empty dict.
        """

    def plan(self, case: Case, module: fx.GraphModule, rank: int) -> Any:
        """A reference-format plan of ``module`` as ``rank`` sees it, without rewriting."""
        raise NotImplementedError(f"target {self.name!r} exposes no planner")

    def rewriters(self) -> tuple:
        """The per-round ``apply(module, plan)`` functions, for stale-plan and idempotence checks."""
        return ()

    # True: ``rewrite`` exchanges each round's group reports among the ranks and must refuse a
    # world whose ranks planned differently (spec 5.4.3), before rewriting any rank
    exchanges_plans: ClassVar[bool] = False

    def validate_reports(self, reports: Mapping[int, dict], group: str) -> None:
        """Judge one group's exchanged reports (spec 2.12): return when they agree, raise
        ValueError when a rank is missing or extra or the ranks or digests disagree."""
        raise NotImplementedError(f"target {self.name!r} exposes no report validator")

    def module_plans(self, model: Any, block_module_types: Any, module_bucket_plans: Any) -> tuple:
        """Module plans for ``model`` (spec 2.2 ``build_module_bucket_plans``): the outermost modules
        of the block types, then the explicit groups; ValueError for a bad argument."""
        raise NotImplementedError(f"target {self.name!r} builds no module plans")

    @property
    def has_module_plans(self) -> bool:
        """Whether ``module_plans`` is implemented (spec 2.2's model rules apply)."""
        return type(self).module_plans is not Target.module_plans

    @property
    def has_validator(self) -> bool:
        """Whether ``validate_reports`` is implemented (spec 5.2.14 applies)."""
        return type(self).validate_reports is not Target.validate_reports

    def options(self) -> dict[str, tuple]:
        """The target's configuration space still open (option -> choices): a campaign draws one
        configuration per example and records it in the case; empty when nothing is left to draw."""
        return {}

    def configure(self, options: dict[str, Any]) -> "Target":
        """This target under one drawn configuration (``options`` as :meth:`options` offers them)."""
        if options:
            raise ValueError(f"target {self.name!r} takes no options, got {sorted(options)}")
        return self

    def normalise(self, case: Case) -> Case:
        """``case`` in the form this target receives in practice (as a real pipeline would hand it over)."""
        return case

    def contract_mismatches(self, case: Case, checkers: tuple[str, ...] = (), findings: Sequence[Any] = ()) -> list[str]:
        """Forms in ``case`` that this target never receives in practice, as far as they bear on a
        failure found by ``checkers`` (such a failure is a contract mismatch, not a defect);
        ``findings`` (the error findings themselves) lets a target excuse one rule, not a checker."""
        return []

    @property
    def has_planner(self) -> bool:
        """Whether ``plan`` is implemented (plan-specific oracles apply)."""
        return type(self).plan is not Target.plan


class TargetNotFound(LookupError):
    """No target of that name; the message lists what is available."""


@dataclass(frozen=True)
class Family:
    """Targets named by a pattern (``torch-inductor[:mode][@fsdp]``, ``mutant:<name>``): which names
    it claims and how it makes the target of one (raising TargetNotFound for a claimed name it
    cannot make)."""

    pattern: str
    summary: str
    claims: Callable[[str], bool]
    make: Callable[[str], "Target"]


BUILTINS: dict[str, Callable[[], "Target"]] = {}
FAMILIES: list[Family] = []


def builtin(name: str) -> Callable[[type], type]:
    """Register a Target class under ``name`` (its module is imported by the registry)."""
    def register(cls: type) -> type:
        BUILTINS[name] = cls
        return cls
    return register


def family(pattern: str, summary: str, claims: Callable[[str], bool]) -> Callable[[Callable], Callable]:
    """Register ``make(name) -> Target`` for every name ``claims`` accepts."""
    def register(make: Callable[[str], "Target"]) -> Callable[[str], "Target"]:
        FAMILIES.append(Family(pattern, summary, claims, make))
        return make
    return register
