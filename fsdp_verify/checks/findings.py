"""Findings and the context every checker receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Optional

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.execute.simulated import WorldRun
from fsdp_verify.execute.world import simulate
from fsdp_verify.targets.outcome import TargetRun
from fsdp_verify.checks.identity import IdentityCodes, IdentityRun, identity_run, watched_consumers
from fsdp_verify.checks.refinement import Refinement, refine

ERROR, DRIFT, INVALID = "error", "drift", "invalid"  # INVALID: the case itself could not be judged


@dataclass(frozen=True)
class Finding:
    """One violated invariant: which checker, what is wrong, where, and the evidence."""

    checker: str
    message: str
    nodes: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)
    rank: Optional[int] = None
    severity: str = ERROR

    def to_json(self) -> dict:
        """A JSON-ready record."""
        return {"checker": self.checker, "message": self.message, "nodes": list(self.nodes),
                "details": self.details, "rank": self.rank, "severity": self.severity}


@dataclass
class CheckContext:
    """What the checkers share for one case: the target's run and lazily computed simulations."""

    run: TargetRun
    target: Any = None
    metrics: dict = field(default_factory=dict)  # figures checkers report besides findings
    skipped: dict = field(default_factory=dict)  # checker name -> why it could not judge this case
    # the caller reads the rewrite after the checks (``show``'s picture): a checker that hands it
    # back to the target (``Checker.hands_back``) hands back a copy
    keep_rewrite: bool = False
    _refinements: dict = field(default_factory=dict, repr=False)
    _reports: dict = field(default_factory=dict, repr=False)

    @property
    def case(self) -> Case:
        return self.run.case

    @property
    def original(self) -> dict[int, fx.GraphModule]:
        return self.run.originals

    @property
    def rewritten(self) -> dict[int, fx.GraphModule]:
        return self.run.rewritten

    @property
    def plans(self) -> dict[int, list]:
        return self.run.plans

    @property
    def has_planner(self) -> bool:
        """Whether the target produces reference-format plans (the plan contracts bind it)."""
        return self.target is not None and self.target.has_planner

    def refinement(self, rank: int) -> Refinement:
        """The refinement map of ``rank``'s rewrite onto its original, computed once per case
        (the ordering and conformance checkers and the picture all read it)."""
        if rank not in self._refinements:
            self._refinements[rank] = refine(self.original[rank], self.rewritten[rank])
        return self._refinements[rank]

    def reports(self, rank: int) -> list[dict]:
        """``to_dict()`` of each of ``rank``'s plans, asked once per case and shared by the checkers
        (which only read them)."""
        if rank not in self._reports:
            self._reports[rank] = [plan.to_dict() for plan in self.plans.get(rank, [])]
        return self._reports[rank]

    @cached_property
    def original_run(self) -> IdentityRun | Exception:
        """The one simulated run of the original graphs (the case's inputs, collective sources
        coded: ``identity``), or why they could not run; every checker that reads a run reads it
        (what the launches sent is read of the rewrite only: conformance)."""
        return _attempt(lambda: identity_run(self.case, self.original, self.identity_codes,
                                             set(self.watched_consumers), launch_inputs=False))

    @cached_property
    def rewritten_run(self) -> IdentityRun | Exception:
        """The one simulated run of the rewritten graphs, on the same inputs and codes."""
        return _attempt(lambda: identity_run(self.case, self.rewritten, self.identity_codes,
                                             set(self.watched_consumers)))

    @property
    def original_sim(self) -> WorldRun | Exception:
        """The original run's outputs, streams and sizes (or why it could not run)."""
        run = self.original_run
        return run if isinstance(run, Exception) else run.world

    @property
    def rewritten_sim(self) -> WorldRun | Exception:
        """The rewritten run's outputs, streams and sizes (or why it could not run)."""
        run = self.rewritten_run
        return run if isinstance(run, Exception) else run.world

    @cached_property
    def plain_runs(self) -> tuple[WorldRun | Exception, WorldRun | Exception]:
        """One run of each world without codes, for the numerics checker where the shared runs
        cannot stand for the graphs' own outputs (``numerics._plain_reasons``)."""
        return (_attempt(lambda: simulate(self.case, self.original)),
                _attempt(lambda: simulate(self.case, self.rewritten)))

    @cached_property
    def identity_codes(self) -> IdentityCodes:
        """Codes for the sources of the first rank's tagged collectives (SPMD: every rank's names)."""
        return IdentityCodes.of(self.original[min(self.original)])

    @cached_property
    def watched_consumers(self) -> dict[str, str]:
        """Consumers of tagged collective results -> the parameter they read."""
        return watched_consumers(self.original[min(self.original)])


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failing run is evidence, not a harness crash
        return exc
