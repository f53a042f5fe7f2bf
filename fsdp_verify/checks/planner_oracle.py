"""Planner oracle: the invariants of spec section 5.2, against the plan ``plan_model`` derives.

Every field of every plan (each round, each rank) is compared with the spec's own plan of the
same graph: decisions (order and duplicates too), buckets and their ``describe()``, summary,
ids, signature and group digests (recomputed from wire records). Input validation (section
2.1-2.3) is judged from the case's arguments: invalid arguments must be refused with the spec's
message, valid ones accepted. Across ranks, ``validate_group_plans`` semantics (spec 2.12).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from enum import Enum
from typing import Any, Callable, Iterator, Mapping, Optional

from torch import fx

from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.graph.clone import clone_module
from fsdp_verify.checks.findings import CheckContext, Finding, Problem
from fsdp_verify.checks.plan_model import (expected_report, plain_int, resigned, signature_of, signature_records,
                         signatures)
from fsdp_verify.checks.registry import Checker
from fsdp_verify.strategies import mutations

NAME = "planner"
GROUP_ERROR = "group_ranks must map PG names to distinct ordered non-negative global ranks"


# -- input validation ------------------------------------------------------------------------

# The validator's error for a group whose ranks' reports disagree (spec 2.12).
DISAGREE = "Bucket plans disagree for group"


def expected_argument_error(args: Any, group_ranks: Any) -> Optional[str]:
    """The message the planner must raise for these arguments, or None when they are valid."""
    plans = args.module_bucket_plans
    if plans is not None:
        if not isinstance(plans, (list, tuple)):
            return "module_bucket_plans must be a list or tuple of module groups"
        seen: list[str] = []
        for entry in plans:
            group = (entry,) if isinstance(entry, str) else entry
            if not isinstance(group, (list, tuple)) or not group:
                return "Each module bucket group must be a FQN or a nonempty list/tuple"
            for fqn in group:
                if (not isinstance(fqn, str) or fqn == "" or set(fqn) & set("*?[]")
                        or any(p == "" or p.strip() != p for p in fqn.split("."))):
                    return f"Invalid explicit module FQN: {fqn!r}"
                if any(fqn == o or fqn.startswith(o + ".") or o.startswith(fqn + ".") for o in seen):
                    return f"Overlapping module bucket scopes: {fqn!r}"
                seen.append(fqn)
    for name, ranks in dict(group_ranks).items():
        ranks = tuple(ranks)
        if not isinstance(name, str) or not ranks or len(set(ranks)) != len(ranks) or \
                not all(plain_int(r) and r >= 0 for r in ranks):
            return GROUP_ERROR
    policy = args.policy or {}
    for field_name, floor in (("cap_bytes", 1), ("max_input_distance", 0), ("max_consumer_distance", 0)):
        value = policy.get(field_name)
        if value is not None and (not plain_int(value) or value < floor):
            return f"{field_name} must be None or a non-negative integer (cap_bytes must be positive)"
    return None


# -- comparing -----------------------------------------------------------------------------

def _skip_problems(want: list[dict], got: list[dict], label: str) -> list[Problem]:
    """Spec 5.2.2-3 and 2.8: each tagged launch skipped once, for its first failing rule, in graph order."""
    expected = {d["node"]: d["reason"] for d in want}
    found = Counter(d.get("node") for d in got)
    problems = [Problem("skip_duplicate", f"{label}: {node} is skipped {count} times (decisions must be duplicate-free)")
                for node, count in found.items() if count > 1]
    reasons = {d.get("node"): d.get("reason") for d in got}
    for node, reason in expected.items():
        if reasons.get(node) != reason:
            problems.append(Problem(f"missed_skip_{reason}" if reasons.get(node) is None else "skip_reason",
                                    f"{label}: {node} should be skipped as {reason}, plan says "
                                    f"{reasons.get(node, 'candidate')}"))
    for node, reason in reasons.items():
        if node not in expected:
            problems.append(Problem("skip_unfounded", f"{label}: {node} is skipped as {reason} but passes every skip rule"))
    if not problems and got != want:
        problems.append(Problem("skip_order", f"{label}: skip decisions are not in graph order (or carry other "
                                              f"fields): expected {[d['node'] for d in want][:6]}, plan has "
                                              f"{[d.get('node') for d in got][:6]}"))
    return problems


def _first_difference(want: Any, got: Any, path: str) -> Optional[str]:
    """The path of the first field where ``got`` differs from ``want``, with both values."""
    if want == got:  # the common case, compared in C before any walk
        return None
    if isinstance(want, dict) and isinstance(got, dict):
        for key in sorted(set(want) | set(got)):
            if key not in got or key not in want:
                return f"{path}.{key} is {'missing' if key not in got else 'unexpected'}"
            found = _first_difference(want[key], got[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        for index, (a, b) in enumerate(zip(want, got)):
            found = _first_difference(a, b, f"{path}[{index}]")
            if found:
                return found
        return None
    return None if want == got else f"{path} is {str(got)[:80]}, expected {str(want)[:80]}"


class Expectations:
    """The spec's plan of each graph a case's ranks planned, derived once per distinct graph.

    ``expected_report`` reads only what ``signature_of`` hashes (names, targets, args, kwargs, FSDP
    meta), the rank's groups and the arguments, so ranks whose graphs share a signature and whose
    groups agree share one derivation: an SPMD world derives one plan, not one per rank. Graphs
    that differ only by device indices (``signatures``' canonical hash: each rank of a ``cuda`` world sees
    its own) share one derivation too, re-signed with each graph's own signature.
    """

    def __init__(self, args: Any) -> None:
        self.args = args
        self.plans = None if args.module_bucket_plans is None else \
            tuple((g,) if isinstance(g, str) else tuple(g) for g in args.module_bucket_plans)
        self._reports: dict[tuple[str, str], dict] = {}
        self._canonical: dict[tuple[str, str], dict] = {}
        # by module id: (the module, kept so ids stay unique; its signature; its canonical hash)
        self._signatures: dict[int, tuple[fx.GraphModule, str, Optional[str]]] = {}

    def _signed(self, module: fx.GraphModule) -> tuple[fx.GraphModule, str, Optional[str]]:
        if id(module) not in self._signatures:
            self._signatures[id(module)] = (module, *signatures(signature_records(module)))
        return self._signatures[id(module)]

    def signature(self, module: fx.GraphModule) -> str:
        """``signature_of(module)``, hashed once per module."""
        return self._signed(module)[1]

    def report(self, module: fx.GraphModule, groups: dict,
               signed: Optional[tuple[str, Optional[str]]] = None) -> dict:
        """``expected_report`` of ``module`` under ``groups``, shared by equal graphs and by graphs
        equal up to device indices (``signed``: its ``signatures``, for a graph that will change,
        which must not be remembered by id)."""
        signature, canonical = self._signed(module)[1:] if signed is None else signed
        groups_key = json.dumps(groups, sort_keys=True, default=str)
        if (signature, groups_key) not in self._reports:
            shared = self._canonical.get((canonical, groups_key)) if canonical is not None else None
            if shared is not None:
                report = resigned(shared, signature)
            else:
                report = expected_report(module, groups, self.args, self.plans, signature)
                if canonical is not None:
                    self._canonical[(canonical, groups_key)] = report
            self._reports[(signature, groups_key)] = report
        return self._reports[(signature, groups_key)]


class RoundWatch:
    """What the planner oracle learns from the target's own ``plan`` calls while its run holds the
    graphs (``targets.watch``), before its driver rewrites them in place.

    - The spec's plan of each graph a rank planned after its first plan (its first is judged
      against the original). Judging a later round needs the graph its plan was made for; without
      this the oracle rebuilds it by re-applying the target's earlier rounds to a fresh original,
      per rank. Kept by the plan object the target returned, so a plan is judged against the graph
      it was made for, whatever the round (an object returned twice is ambiguous: replayed).
    - Purity on those later calls: the graph's signature before and after the target planned it
      (a planner that changes only graphs with fused launches; the oracle's own purity check plans
      a fresh original, which has none).

    It reads the graphs and never plans or writes. ``cpu`` is the CPU seconds spent here (the
    harness's, not the target's); ``on_event`` hears "start" and "end" around each piece of work
    (an isolated run's deadline leaves it out). Calls are taken one at a time (a target may plan
    from threads), and none after ``close``."""

    def __init__(self, case: Any, modules: dict[int, fx.GraphModule],
                 on_event: Optional[Callable[[str], None]] = None) -> None:
        self.case, self.modules, self.on_event = case, modules, on_event
        self.expectations = Expectations(case.plan_args)
        self.calls: Counter = Counter()
        self.seen: dict[int, tuple[Any, Optional[int], Optional[dict]]] = {}  # id(plan) -> (plan, rank, report)
        self.impure: list[str] = []  # the plan calls that changed the graph they planned
        self.cpu = 0.0
        self.closed = False
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def _working(self) -> Iterator[None]:
        self._tell("start")
        start = time.process_time()
        try:
            yield
        finally:
            self.cpu += time.process_time() - start
            self._tell("end")

    def _tell(self, event: str) -> None:
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:  # noqa: BLE001 - the watch must not raise into the target's run
                self.on_event = None

    def before(self, rank: int, module: fx.GraphModule) -> Optional[dict]:
        """What to keep of ``module`` as it stands before the target plans it, for a rank's second
        and later plans of its own module: its signature and the spec's plan of it."""
        with self._lock:
            if self.closed:
                return None
            self.calls[rank] += 1
            call = self.calls[rank]
            if call == 1 or module is not self.modules.get(rank):
                return None
            with self._working():
                try:
                    signed = signatures(signature_records(module))
                    return {"call": call, "signature": signed[0], "module": module,
                            "report": self.expectations.report(module, self.case.group_ranks(rank), signed)}
                except Exception:  # noqa: BLE001 - such a plan is judged as if unwatched (replayed)
                    return None

    def after(self, rank: int, plan: Any, seen: dict) -> None:
        with self._lock:
            if self.closed:
                return
            with self._working():
                try:
                    if signature_of(seen["module"]) != seen["signature"]:
                        self.impure.append(f"rank {rank}'s plan {seen['call']}")
                except Exception:  # noqa: BLE001 - the watch must not raise into the target's run
                    pass
            # one plan object returned twice (refilled, or a stale one): which graph it was made
            # for is ambiguous, so its rounds are replayed
            self.seen[id(plan)] = (plan, rank, seen["report"]) if id(plan) not in self.seen else (None, None, None)

    def close(self) -> None:
        """No more calls: the target's run is over (a thread it left behind is not watched)."""
        with self._lock:
            self.closed, self.on_event = True, None

    def reports(self, rank: int, plans: list) -> Optional[list[dict]]:
        """The expected reports of ``plans`` (rank ``rank``'s), when every one was watched."""
        found = [self.seen.get(id(plan)) for plan in plans]
        if len({id(plan) for plan in plans}) != len(plans) or \
                any(entry is None or entry[0] is not plan or entry[1] != rank for entry, plan in zip(found, plans)):
            return None
        return [entry[2] for entry in found]


def watch_rounds(case: Any, modules: dict[int, fx.GraphModule],
                 on_event: Optional[Callable[[str], None]] = None) -> Optional[RoundWatch]:
    """A ``RoundWatch`` for a run of ``case`` on ``modules``, or None when the planner oracle will
    judge no later round (invalid arguments must be refused before any plan)."""
    first = min(case.graph.world(), default=None)
    if first is None or expected_argument_error(case.plan_args, case.group_ranks(first)) is not None:
        return None
    return RoundWatch(case, modules, on_event)


def _judge(want: dict, plan: dict, label: str) -> list[Problem]:
    """Problems of one plan of one graph: the plan's whole ``to_dict()`` against the
    spec's ``want`` (skips, bucket membership and splits first, as they explain most other
    differences)."""
    got = json.loads(json.dumps(plan, sort_keys=True, default=str))
    decisions = got.get("decisions") if isinstance(got.get("decisions"), list) else []
    problems = _skip_problems([d for d in want["decisions"] if d["action"] == "skip"],
                              [d for d in decisions if isinstance(d, dict) and d.get("action") == "skip"], label)
    if problems:
        return problems[:3]
    members = [[[m["param_name"], m["kind"]] for m in b["members"]] for b in want["buckets"]]
    planned = [[[m.get("param_name"), m.get("kind")] for m in b.get("members", [])] for b in got.get("buckets", [])]
    if planned != members:
        first = next((i for i, (a, b) in enumerate(zip(members, planned)) if a != b), min(len(members), len(planned)))
        return [Problem("bucket_members", f"{label}: bucket {first} should hold "
                                          f"{members[first] if first < len(members) else 'no bucket'}, plan has "
                                          f"{planned[first] if first < len(planned) else 'no bucket'} "
                                          f"({len(members)} buckets expected, {len(planned)} planned)")]
    splits = [d for d in want["decisions"] if d["action"] != "skip"]
    if [d for d in decisions if d.get("action") != "skip"] != splits:
        return [Problem("split_decisions", f"{label}: split/singleton decisions differ: expected {splits[:4]}, "
                                           f"plan has {[d for d in decisions if d.get('action') != 'skip'][:4]}")]
    if decisions != want["decisions"]:
        problems.append(Problem("decision_order",
                                f"{label}: decision order is not skips in graph order, then splits and singletons"))
    for field_name in ("buckets", "summary", "signature", "module_bucket_plans", "group_ranks", "group_digests"):
        found = _first_difference(want[field_name], got.get(field_name), field_name)
        if found:
            problems.append(Problem(f"plan_{field_name}", f"{label}: plan {found}"))
    extra = sorted(set(got) - set(want))
    if extra:
        problems.append(Problem("plan_extra_fields", f"{label}: plan has fields the spec does not name: {extra}"))
    return problems[:3]


def _fresh_original(ctx: CheckContext, rank: int) -> fx.GraphModule:
    """A new copy of ``rank``'s original graph, built from the description as the originals were
    (``orchestrate.run_target``, which validated and linted it): cheaper than copying the module."""
    return build_module(localize(ctx.case.graph, rank), validated=True, lint=False)


def _rounds(ctx: CheckContext, rank: int, reports: list[dict], plans: list,
            expectations: Expectations, replayed: dict[tuple[str, str], fx.GraphModule],
            spare: dict[int, fx.GraphModule]) -> tuple[list[fx.GraphModule], Optional[str]]:
    """The graph each round's plan was made for: later graphs are rebuilt by re-applying the
    target's own earlier rounds to a copy of the original (possible for in-process runs only).
    ``replayed`` remembers each replay by (graph signature, reported plan), so ranks that planned
    the same graph the same way share one replay (the rewriter is a function of graph and plan);
    ``spare`` holds fresh originals already built (taken, not copied).
    A replay that raises ends the list, with why (the plan does not fit the graph it claims)."""
    rewriters = ctx.target.rewriters() if ctx.target is not None else ()
    graphs = [ctx.original[rank]]
    for index in range(1, len(plans)):
        if len(rewriters) < index or not hasattr(plans[index - 1], "buckets"):
            break
        key = (expectations.signature(graphs[-1]), json.dumps(reports[index - 1], sort_keys=True, default=str))
        if key not in replayed:
            if index > 1:
                graph = clone_module(graphs[-1])
            else:
                graph = spare.pop(rank) if rank in spare else _fresh_original(ctx, rank)
            try:
                rewriters[index - 1](graph, plans[index - 1])
            except Exception as exc:  # noqa: BLE001 - the target's own run applied this plan
                return graphs, (f"rank {rank}: round {index}'s plan cannot be re-applied to the graph it was "
                                f"made for ({type(exc).__name__}: {str(exc)[:160]}): it was planned on another graph")
            replayed[key] = graph
        graphs.append(replayed[key])
    return graphs, None


def _expected_rounds(ctx: CheckContext, rank: int, reports: list[dict], plans: list,
                     expectations: Expectations, replayed: dict[tuple[str, str], fx.GraphModule],
                     spare: dict[int, fx.GraphModule]) -> tuple[list[dict], Optional[str]]:
    """The spec's plan of the graph each of ``rank``'s plans was made for: the first round's is
    the original's; later ones were derived during the target's run (``RoundWatch``) or, when
    any was not, come from replaying the earlier rounds (``_rounds``)."""
    groups = ctx.case.group_ranks(rank)
    watch = ctx.run.watched
    later = watch.reports(rank, plans[1:]) if isinstance(watch, RoundWatch) and len(plans) > 1 else None
    counts = ctx.metrics.setdefault(NAME, {"later_rounds_watched": 0, "later_rounds_replayed": 0})
    if later is not None:
        counts["later_rounds_watched"] += len(later)
        return [expectations.report(ctx.original[rank], groups), *later], None
    counts["later_rounds_replayed"] += len(plans) - 1
    graphs, unreplayable = _rounds(ctx, rank, reports, plans, expectations, replayed, spare)
    return [expectations.report(graph, groups) for graph in graphs], unreplayable


def _first_round_plans(ctx: CheckContext) -> dict[int, list]:
    """Every rank's first-round plan of its original graph (empty when planning itself raises)."""
    try:
        return {rank: [ctx.target.plan(ctx.case, _fresh_original(ctx, rank), rank)]
                for rank in ctx.original}
    except Exception:  # noqa: BLE001 - a crashing planner is the ``target`` finding's business
        return {}


def _exchange_problems(case: Any, plans: dict[int, list[dict]], expected: dict[int, list[dict]],
                       stopped: bool) -> list[Finding]:
    """Spec 2.12 on every group and round: each member rank reports, with the same ranks and digest
    (``plans``: each rank's reports, round by round). Where the spec's own plans of the ranks differ
    (``expected``: ranks whose graphs differ, as uneven shards make them), differing digests are
    right, and the round must stop (spec 3.6: the validation raises on every rank)."""
    findings = []
    rounds = {rank: len(plans[rank]) for rank in plans}
    if len(set(rounds.values())) > 1:
        findings.append(Finding(NAME, f"ranks planned different numbers of rounds: {rounds}", rule="round_count"))
    for round_index in range(min(rounds.values())):
        reports = {rank: plans[rank][round_index] for rank in plans}
        for group, ranks in case.group_ranks(min(plans)).items():
            members = [rank for rank in ranks if rank in reports]
            if len(members) != len(ranks):
                findings.append(Finding(NAME, f"group {group} round {round_index + 1}: reports expected for ranks "
                                                 f"{list(ranks)}, ranks {sorted(set(ranks) - set(members))} have none",
                                        rule="group_reports_missing"))
                continue
            if _digests_differ(expected, members, group, round_index):
                if not stopped:
                    findings.append(Finding(NAME, f"group {group} {list(ranks)} round {round_index + 1}: the ranks' "
                                                     f"graphs differ and so do the spec's plans of them, but the "
                                                     f"target went on (spec 3.6: a disagreement stops the round)",
                                            rule="disagreement_not_stopped"))
                continue
            digests = {json.dumps(reports[r].get("group_digests", {}).get(group)) for r in members}
            claimed = {json.dumps(reports[r].get("group_ranks", {}).get(group)) for r in members}
            if len(digests) > 1 or len(claimed) > 1:
                findings.append(Finding(NAME, f"group {group} {list(ranks)} round {round_index + 1}: ranks planned "
                                                 f"different digests", rule="group_digests_differ"))
    return findings


def _digests_differ(expected: dict[int, list[dict]], ranks: list[int], group: str, round_index: int) -> bool:
    """Whether the spec's plans of ``ranks``' graphs differ on ``group`` in that round."""
    digests = {json.dumps(expected[rank][round_index].get("group_digests", {}).get(group))
               for rank in ranks if rank in expected and round_index < len(expected[rank])}
    return len(digests) > 1


def disagreeing_groups(case: Any, originals: Mapping[int, fx.GraphModule],
                       expectations: Optional[Expectations] = None) -> tuple[str, ...]:
    """Groups whose ranks' first-round plans, as the spec derives them from each rank's graph, differ:
    spec 3.6 then stops the round on every rank. Only ranks whose graphs differ by more than device
    indices (uneven shards) can disagree: a digest holds no device index (spec 2.11). ``expectations``:
    the run's own (its reports are remembered by graph signature, so the ones derived while watching
    the target plan the same originals are reused, never those of another graph)."""
    if not case.graph.uneven:
        return ()
    expectations = expectations or Expectations(case.plan_args)
    digests = {rank: expectations.report(module, case.group_ranks(rank))["group_digests"]
               for rank, module in originals.items()}
    return tuple(group for group in sorted({group for found in digests.values() for group in found})
                 if any(len({json.dumps(digests[rank].get(group)) for rank in part if rank in digests}) > 1
                        for part in case.graph.groups.get(group, ())))


def expected_disagreement(ctx: CheckContext) -> Optional[str]:
    """The first group whose ranks' plans the spec stops (``disagreeing_groups``), for a planning target."""
    if ctx.target is None or not ctx.target.has_planner:
        return None
    watch = ctx.run.watched
    expectations = watch.expectations if isinstance(watch, RoundWatch) else None
    return next(iter(disagreeing_groups(ctx.case, ctx.original, expectations)), None)


class Refusal(Enum):
    """Why the spec has a planning target raise (and so a raise is no finding)."""

    ARGUMENTS = "invalid planner arguments"  # refused before any exchange (spec 2.1)
    DISAGREEMENT = "ranks' plans disagree"  # the validator stops the round on every rank (spec 3.6)


def spec_refusal(ctx: CheckContext) -> Optional[Refusal]:
    """The refusal the spec gives for the target's error: invalid planner arguments, or a group whose
    ranks' plans the spec itself makes differ, refused with the validator's error naming it (spec
    2.12); None where the error is no refusal of the spec's."""
    if not ctx.has_planner or ctx.run.error is None:
        return None
    if expected_argument_error(ctx.case.plan_args, ctx.case.group_ranks(min(ctx.case.graph.world()))) is not None:
        return Refusal.ARGUMENTS  # no plan is derived from such arguments
    group = expected_disagreement(ctx)
    return Refusal.DISAGREEMENT if group is not None and f"{DISAGREE} {group}" in ctx.run.error else None


def _argument_probes(ctx: CheckContext, module: fx.GraphModule, rank: int) -> list[Finding]:
    """Spec 2.1-2.3 on every case, not only on the few drawn with broken arguments: the planner is
    asked once per broken-argument form of ``mutations.ARG_MUTATIONS`` (the forms the generator
    plants) and must refuse each with the spec's message. A right planner refuses before it scans,
    so this costs a few argument checks per case."""
    findings = []
    for name, broken in mutations.ARG_MUTATIONS.items():
        probe = ctx.case.with_args(**broken)
        expected = expected_argument_error(probe.plan_args, probe.group_ranks(rank))
        try:
            ctx.target.plan(probe, module, rank)
        except Exception as exc:  # noqa: BLE001 - what the planner raised is judged below
            if expected is not None and (not isinstance(exc, ValueError) or expected not in str(exc)):
                findings.append(Finding(NAME, f"probe {name}: the planner raised {type(exc).__name__}: {exc}; "
                                              f"expected {expected!r}", rule="wrong_argument_error"))
            continue
        if expected is not None:
            findings.append(Finding(NAME, f"probe {name}: invalid planner arguments were accepted; expected: "
                                          f"{expected}", rule="invalid_arguments_accepted"))
    return findings


def check_planner(ctx: CheckContext) -> list[Finding]:
    """Validation, purity, skip/greedy oracles, ids, windows, summary, cross-rank digests."""
    original, plans = ctx.original, ctx.plans
    case = ctx.case
    if ctx.target is None or not ctx.target.has_planner:
        return []  # planner arguments mean nothing to a target without a planner
    first = min(case.graph.world())
    expected_error = expected_argument_error(case.plan_args, case.group_ranks(first))
    if expected_error is not None:
        if ctx.run.error is None:
            return [Finding(NAME, f"invalid planner arguments were accepted; expected: {expected_error}",
                            rule="invalid_arguments_accepted")]
        if expected_error not in ctx.run.error:
            return [Finding(NAME, f"invalid planner arguments raised the wrong error; expected "
                                     f"{expected_error!r}, got {ctx.run.error_type}: {ctx.run.error_message}",
                            rule="wrong_argument_error")]
        return []
    if ctx.run.error is not None:
        plans = _first_round_plans(ctx)  # judge what the planner decided before the target failed
    if not plans:
        return []
    reports = {rank: ctx.reports(rank) for rank in plans} if plans is ctx.plans else \
        {rank: [plan.to_dict() for plan in rounds] for rank, rounds in plans.items()}
    watch = ctx.run.watched
    expectations = watch.expectations if isinstance(watch, RoundWatch) else Expectations(case.plan_args)
    replayed: dict[tuple[str, str], fx.GraphModule] = {}
    module = _fresh_original(ctx, first)
    before = expectations.signature(original[first])  # a copy hashes as its original
    plan_a = ctx.target.plan(case, module, first).to_dict()
    plan_b = ctx.target.plan(case, module, first).to_dict()  # two in a row: a period-2 planner shows
    findings = _argument_probes(ctx, module, first)
    if signature_of(module) != before:
        findings.append(Finding(NAME, "planning mutated the graph (purity)", rule="purity"))
    # a copy planning left as it was is the fresh original its rank's replay starts from
    spare = {} if findings else {first: module}
    if json.dumps(plan_a, sort_keys=True, default=str) != json.dumps(plan_b, sort_keys=True, default=str):
        findings.append(Finding(NAME, "planning the same graph twice gave different plans (determinism)",
                                rule="determinism"))
    if isinstance(watch, RoundWatch) and watch.impure:
        findings.append(Finding(NAME, f"planning mutated the graph (purity): {', '.join(watch.impure[:3])} in the "
                                      f"target's run changed the graph it planned", rule="purity"))
    expected: dict[int, list[dict]] = {}
    for rank in sorted(plans):
        wanted, unreplayable = _expected_rounds(ctx, rank, reports[rank], plans[rank], expectations, replayed, spare)
        expected[rank] = wanted
        if unreplayable:
            findings.append(Finding(NAME, unreplayable, rank=rank, rule="rounds_unreplayable"))
        for round_index, want in enumerate(wanted):
            for problem in _judge(want, reports[rank][round_index], f"rank {rank} round {round_index + 1}"):
                findings.append(Finding(NAME, problem.message, rank=rank, rule=problem.rule))
        if findings:
            return findings
    return findings + _exchange_problems(case, reports, expected, stopped=ctx.run.error is not None)

CHECKER = Checker(NAME, check_planner, summary='planner invariants of spec 5.2, re-derived from the graph')
