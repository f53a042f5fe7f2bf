"""Findings and the context every checker receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import cached_property
from typing import Any, Optional

from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.execute.simulated import WorldRun
from fsdp_verify.execute.world import simulate
from fsdp_verify.targets.outcome import TargetRun
from fsdp_verify.checks.identity import IdentityCodes, IdentityRun, identity_run, watched_consumers
from fsdp_verify.checks.graph_facts import reads_before_definition
from fsdp_verify.checks.refinement import Refinement, refine

class Severity(str, Enum):
    """How a finding counts. A str, so records on disk keep their plain words."""

    ERROR = "error"  # the target broke an invariant
    DRIFT = "drift"  # values moved within a dtype's tolerance (reduction order): reported, not a bug
    INVALID = "invalid"  # the case itself could not be judged: counted, never a pass

    __str__ = str.__str__
    __format__ = str.__format__


ERROR, DRIFT, INVALID = Severity.ERROR, Severity.DRIFT, Severity.INVALID


@dataclass(frozen=True)
class Finding:
    """One violated invariant: which checker, which of its rules, what is wrong, where, and the
    evidence. ``(checker, rule)`` is what code keys on (signatures, triage, excuses); the message is
    for people only and is never parsed."""

    checker: str
    message: str
    nodes: tuple[str, ...] = ()
    details: dict = field(default_factory=dict)
    rank: Optional[int] = None
    severity: Severity = ERROR
    rule: str = field(kw_only=True)  # the rule's stable id within its checker, e.g. "read_after_free"

    def __post_init__(self) -> None:
        if not isinstance(self.severity, Severity):
            object.__setattr__(self, "severity", Severity(self.severity))

    @property
    def key(self) -> tuple[str, str]:
        """The rule this finding says was broken."""
        return self.checker, self.rule

    def at_rank(self, rank: int) -> "Finding":
        """The same finding, said of ``rank`` (a checker that judged one rank's graphs)."""
        return Finding(self.checker, f"rank {rank}: {self.message}", self.nodes, self.details, rank, self.severity,
                       rule=self.rule)

    def to_json(self) -> dict:
        """A JSON-ready record."""
        return {"checker": self.checker, "rule": self.rule, "message": self.message, "nodes": list(self.nodes),
                "details": self.details, "rank": self.rank, "severity": self.severity.value}

    @classmethod
    def from_json(cls, doc: dict) -> "Finding":
        """The record ``to_json`` wrote."""
        return cls(doc["checker"], doc["message"], tuple(doc["nodes"]), doc["details"], doc["rank"],
                   Severity(doc["severity"]), rule=doc["rule"])


@dataclass(frozen=True)
class Problem:
    """One thing a comparison found wrong, before it becomes a finding: the rule and the words."""

    rule: str
    message: str


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

    @cached_property
    def unordered_reads(self) -> dict[int, list[tuple[str, str]]]:
        """rank -> (reader, input) pairs of its rewrite whose input is not defined above the reader:
        ``dependencies`` reports them; checkers that need a schedule skip such a case, saying why."""
        found = {rank: reads_before_definition(module) for rank, module in self.rewritten.items()}
        return {rank: pairs for rank, pairs in found.items() if pairs}

    def unscheduled(self) -> Optional[str]:
        """Why the rewrite has no schedule to judge (a read above its input's definition), or None."""
        if not self.unordered_reads:
            return None
        return "the rewrite reads a value above its definition (a dependencies finding): no schedule to judge"

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

    @cached_property
    def second_runs(self) -> tuple[IdentityRun | Exception, IdentityRun | Exception, IdentityCodes]:
        """Both worlds run again with codes of each counter's next digit, for the layout checker
        where the shared run's codes repeat (``IdentityCodes.wrapped``); nothing else reads them."""
        codes = self.identity_codes.next_digit()
        consumers = set(self.watched_consumers)
        return (_attempt(lambda: identity_run(self.case, self.original, codes, consumers, launch_inputs=False)),
                _attempt(lambda: identity_run(self.case, self.rewritten, codes, consumers, launch_inputs=False)),
                codes)

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
        return IdentityCodes.of(self.original[min(self.original)], len(self.original))

    @cached_property
    def watched_consumers(self) -> dict[str, str]:
        """Consumers of tagged collective results -> the parameter they read."""
        return watched_consumers(self.original[min(self.original)])


def _attempt(fn):
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - a failing run is evidence, not a harness crash
        return exc
