"""Real mode, rank side: every rank process plans and rewrites its own graph, as a real pass would.

A rank gets the target's name (``reference``, ``mutant:NAME``, ``module:callable``: a string, never
a pickled object) and the case as JSON. It builds only its own rank's graph and hands the target
that one module, under its own ``PYTHONHASHSEED`` and environment. The reference driver's digest
exchange is replaced by one over the real process group (``all_gather_object`` of each rank's
group reports per round, then ``validate_group_plans`` among each group's ranks), so a planner whose
plan depends on process-local state (set or dict iteration order, object ids, the device index)
disagrees here as it would on a cluster. Every exchange is tagged, and every rank ends a case
with a ``finish`` exchange, so a rank whose target raised (or whose peers disagreed) never leaves a
peer waiting in a collective: all ranks make the same number of calls and learn every rank's outcome.

Then (a second job of the same case) each rank runs its original and its rewritten graph with
real collectives on exact inputs and returns the outputs; the harness compares them.

``handle`` is the pool's handler (``RankPool(handler=handle)``); ``plan_on_rank`` and
``execute_on_rank`` are also what the multi-node replay under ``torchrun`` calls.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

from fsdp_verify.model import spec_params
from fsdp_verify.model.case import case_from_json
from fsdp_verify.execute.ranks.pool import Job, RankContext, _ensure_groups, _run_graph
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.graph.importer import import_module
from fsdp_verify.reference import driver
from fsdp_verify.reference.planner import validate_group_plans
from fsdp_verify.targets.base import Target
from fsdp_verify.targets.registry import get_target

FINISH = "finish"


class RankDisagreement(ValueError):
    """Ranks exchanged different plans for a group (what ``validate_group_plans`` raises on a cluster)."""

    def __init__(self, message: str, group: str, round_: int, digests: dict[int, Any]):
        self.group, self.round, self.digests = group, round_, digests
        super().__init__(message)


class PeerStopped(RuntimeError):
    """A peer left the exchanges (its target raised, or its group disagreed): this rank stops too."""


@dataclass
class RealJob:
    """One phase of a real-mode case on one rank: ``plan`` (plan, exchange, rewrite) or ``execute``."""

    phase: str
    target: str = ""
    case: dict = field(default_factory=dict)
    seed: int = 0
    mode: str = "exact"
    exact_sources: tuple[str, ...] = ()


class Exchange:
    """The driver's digest exchange over the real process group (the world group, tagged by round)."""

    def __init__(self, rank: int, world: int, record=lambda text: None):
        self.rank, self.world, self.record = rank, world, record
        self.round = 0
        self.last = ""  # the last exchange this rank entered (its flight record of the planning phase)
        self.log: list[dict] = []  # per round: group -> rank -> digest, as exchanged

    def gather(self, tag: str, payload: Any) -> list:
        import torch.distributed as dist
        self.last = f"rank {self.rank} digest exchange ({tag})"
        self.record(self.last)
        out: list = [None] * self.world
        dist.all_gather_object(out, (tag, payload))
        return out

    def exchange_and_validate(self, plans) -> None:
        """Drop-in for ``reference.driver.exchange_and_validate`` with this rank's plan only."""
        self.round += 1
        tag = f"round {self.round}"
        mine = {group: driver.group_report(plan, group) for plan in plans.values() for group in plan.group_ranks}
        got = self.gather(tag, mine)
        elsewhere = {peer: peer_tag for peer, (peer_tag, _) in enumerate(got) if peer_tag != tag}
        if elsewhere:
            raise PeerStopped(f"rank {self.rank} at the {tag} exchange, but " +
                              ", ".join(f"rank {p} at {t}" for p, t in sorted(elsewhere.items())))
        self.log.append({group: {peer: (got[peer][1].get(group) or {}).get("group_digests", {}).get(group)
                                 for peer in range(self.world)} for group in sorted(mine)})
        for group, report in sorted(mine.items()):
            ranks = list(report["group_ranks"][group])
            reports = {peer: got[peer][1].get(group) for peer in ranks if 0 <= peer < self.world}
            digests = {peer: (rep or {}).get("group_digests", {}).get(group) for peer, rep in reports.items()}
            missing = sorted(peer for peer, rep in reports.items() if rep is None)
            if missing or len(reports) != len(ranks):
                raise RankDisagreement(f"round {self.round}: group {group}: ranks {missing} sent no plan for it",
                                       group, self.round, digests)
            try:
                validate_group_plans(reports, group)
            except ValueError as exc:
                raise RankDisagreement(f"round {self.round}: {exc}", group, self.round, digests) from None

    def finish(self, payload: dict) -> list[dict]:
        """Every rank's final payload; repeats until every peer has left its round exchanges."""
        while True:
            got = self.gather(FINISH, payload)
            if all(tag == FINISH for tag, _ in got):
                return [peer_payload for _, peer_payload in got]


@contextlib.contextmanager
def real_driver(exchange: Exchange) -> Iterator[None]:
    """The reference driver (and every mutant built on it) exchanging digests through ``exchange``."""
    saved = driver.exchange_and_validate
    driver.exchange_and_validate = exchange.exchange_and_validate
    try:
        yield
    finally:
        driver.exchange_and_validate = saved


_TARGETS: dict[str, Target] = {}


def _target(name: str) -> Target:
    if name not in _TARGETS:
        _TARGETS[name] = get_target(name)
    return _TARGETS[name]


def _round_digests(plans: list) -> tuple[list[dict], int]:
    """Per round, group -> digest of the plans a target returned (empty when they carry none), and
    how many plans carried none (the harness says their planning was not compared)."""
    digests, undigested = [], 0
    for plan in plans:
        try:
            report = plan.to_dict()
            digests.append(dict(report.get("group_digests", {})))
        except Exception:  # noqa: BLE001 - a plan without a reference report has no digests to compare
            digests.append({})
            undigested += 1
    return digests, undigested


def plan_on_rank(target_name: str, case_doc: dict, rank: int, world: int, record=lambda text: None,
                 state: Optional[dict] = None, cache: Optional[dict] = None) -> dict:
    """Plan and rewrite this rank's graph with real digest exchanges; every rank's outcome, the same
    on every rank (``peers``), and this rank's rewritten graph as a document. With ``cache`` (process
    groups by ranks) the case's groups are registered by name first, as a real pass finds them."""
    case = case_from_json(case_doc)
    if cache is not None:  # every rank, before its target runs: new_group is a collective of the world
        _ensure_groups({name: [list(p) for p in parts] for name, parts in case.graph.groups.items()}, rank, cache)
    target = _target(target_name)
    if case.target_options and type(target).configure is not Target.configure:
        target = target.configure(dict(case.target_options))
    exchange = Exchange(rank, world, record)
    outcome: dict[str, Any] = {"rank": rank, "status": "ok", "hashseed": os.environ.get("PYTHONHASHSEED"),
                               "pid": os.getpid()}
    modules, plans = {}, []
    with spec_params.use(case.spec), real_driver(exchange):
        try:
            modules = {rank: build_module(localize(case.graph, rank))}
            returned = target.rewrite(case, modules)
            plans = list((returned or {}).get(rank, []))
            modules[rank].graph.lint()
        except RankDisagreement as exc:
            outcome.update(status="disagree", message=str(exc), group=exc.group, round=exc.round,
                           seen={str(k): v for k, v in exc.digests.items()})
        except PeerStopped as exc:
            outcome.update(status="peer_stopped", message=str(exc))
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a target failure is an outcome, not the rank's end
            outcome.update(status="target_error", error_type=type(exc).__name__,
                           message=(str(exc).strip().splitlines() or [""])[0],
                           traceback="".join(traceback.format_exception(exc))[-4000:])
    outcome["digests"], outcome["undigested"] = _round_digests(plans)
    outcome["flight"] = exchange.last or "none"
    outcome["exchanged"] = [{g: {str(r): d for r, d in per.items()} for g, per in rnd.items()} for rnd in exchange.log]
    peers = exchange.finish({k: v for k, v in outcome.items() if k != "traceback"})
    result = dict(outcome, peers=peers)
    if outcome["status"] == "ok":
        try:
            result["rewritten"] = import_module(modules[rank]).to_json()
        except Exception as exc:  # noqa: BLE001 - a graph the importer cannot describe is reported
            result.update(status="target_error", error_type=type(exc).__name__,
                          message=f"the rewritten graph cannot be described: {exc}")
    if state is not None:
        state.clear()
        state.update(case=case, rewritten=result.get("rewritten"))
    return result


def execute_on_rank(job: RealJob, state: dict, rank: int, device: str, slot: Any, cache: dict,
                    staged: bool = False) -> dict:
    """Run this rank's original and rewritten graph (from the plan phase) with real collectives."""
    case = state["case"]
    groups = {name: [list(p) for p in parts] for name, parts in case.graph.groups.items()}
    _ensure_groups(groups, rank, cache)
    run = Job(groups, localize(case.graph, rank).to_json(), state["rewritten"], job.seed, job.mode, job.exact_sources)
    with spec_params.use(case.spec):
        return {kind: _run_graph(getattr(run, kind), run, rank, device, slot, staged)
                for kind in ("original", "rewritten")}


def handle(job: RealJob, ctx: RankContext) -> dict:
    """The rank pool's handler for real-mode jobs."""
    if job.phase == "plan":
        return plan_on_rank(job.target, job.case, ctx.rank, ctx.world, ctx.record, ctx.state, ctx.cache)
    if job.phase == "execute":
        return execute_on_rank(job, ctx.state, ctx.rank, ctx.device, ctx.slot, ctx.cache, ctx.staged)
    if job.phase == "env":
        return {"hashseed": os.environ.get("PYTHONHASHSEED"), "pid": os.getpid(), "device": ctx.device,
                "hash": hash("fsdp-verify")}
    raise ValueError(f"unknown real-mode phase {job.phase!r}")
