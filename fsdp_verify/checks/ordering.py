"""z3 ordering constraints over the collective skeleton (launches, waits, frees, effects, first
consumers, phases, per-group streams).

Only the skeleton is encoded, as bounded integer difference constraints: solving over every
node stops scaling near 10k variables, while checking a given order by substitution is cheap.
(a) the rewritten order is checked by substitution; a violation is explained by the unsat core
of the constraints plus the observed positions; (b) for every fused bucket, z3 searches the
original graph for a legal insertion point (after the latest input, before the earliest
consumer, on the members' side of every effect); (c) each group's collective stream must be
identical across ranks.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import z3
from torch import fx

from .findings import CheckContext, Finding
from .registry import Checker
from .graph_facts import (FSDP_KINDS, alias_class, aliases_input, by_name, c10d_name, has_effect, is_free, is_launch, is_wait,
                          real_consumers, rs_prep_chain)

NAME = "ordering"


@dataclass(frozen=True)
class Rule:
    """``before`` must precede ``after``; ``why`` is the human reason used in explanations."""

    before: str
    after: str
    why: str


def _first_consumers(wait: fx.Node, index: dict[fx.Node, int]) -> list[fx.Node]:
    return sorted(real_consumers(wait), key=index.__getitem__)[:1]


def skeleton_rules(original: fx.GraphModule, rewritten: fx.GraphModule) -> list[Rule]:
    """The happens-before rules the rewritten graph must satisfy."""
    index = {node: i for i, node in enumerate(rewritten.graph.nodes)}
    rules: list[Rule] = []
    for node in rewritten.graph.nodes:
        if is_launch(node):
            for source in node.all_input_nodes:
                rules.append(Rule(source.name, node.name, f"{node.name} reads its input {source.name}"))
            for wait in node.users:
                rules.append(Rule(node.name, wait.name, f"{wait.name} waits for {node.name}"))
                for consumer in _first_consumers(wait, index) if is_wait(wait) else []:
                    rules.append(Rule(wait.name, consumer.name, f"consumer {consumer.name} reads {wait.name}"))
        if is_free(node) and node.args and isinstance(node.args[0], fx.Node):
            for alias in alias_class(node.args[0]):
                for reader in alias.users:
                    if reader is not node and not is_free(reader) and not aliases_input(reader):
                        rules.append(Rule(reader.name, node.name,
                                          f"{node.name} frees storage that {reader.name} reads ({alias.name})"))
    kept = by_name(rewritten)
    effects = [n.name for n in original.graph.nodes if has_effect(n) and n.name in kept]
    rules += [Rule(a, b, f"effects {a} and {b} keep their order") for a, b in zip(effects, effects[1:])]
    streams: dict[str, list[str]] = {}
    for node in original.graph.nodes:
        if is_launch(node) and node.name in kept and node.args:
            streams.setdefault(str(node.args[-1]), []).append(node.name)
    for group, launches in streams.items():
        rules += [Rule(a, b, f"group {group} issues {a} before {b}") for a, b in zip(launches, launches[1:])]
    forward = [n.name for n in original.graph.nodes
               if n.op == "call_function" and n.name in kept and not n.meta.get("autograd_backward")]
    backward = [n.name for n in original.graph.nodes
                if n.op == "call_function" and n.name in kept and n.meta.get("autograd_backward")]
    order = {n.name: i for i, n in enumerate(original.graph.nodes)}
    if forward and backward and max(order[n] for n in forward) < min(order[n] for n in backward):
        rules.append(Rule(forward[-1], backward[0], "the forward phase ends before the backward phase begins"))
    return rules


def _violations(rules: list[Rule], position: dict[str, int]) -> list[Rule]:
    """Rules the given order breaks: one z3 substitution of the whole conjunction, then, only if it
    is false, a per-rule pass to name the broken ones."""
    checked = [r for r in rules if r.before in position and r.after in position]
    if not checked:
        return []
    variables = {name: z3.Int(name) for rule in checked for name in (rule.before, rule.after)}
    values = [(var, z3.IntVal(position[name])) for name, var in variables.items()]
    conjunction = z3.And([variables[r.before] < variables[r.after] for r in checked])
    if z3.is_true(z3.simplify(z3.substitute(conjunction, *values))):
        return []
    return [r for r in checked if position[r.before] >= position[r.after]]


def explain(rules: list[Rule], position: dict[str, int], broken: list[Rule]) -> str:
    """The unsat core of the broken rules plus the observed positions, as one sentence."""
    solver = z3.Solver()
    variables = {name: z3.Int(name) for rule in broken for name in (rule.before, rule.after)}
    for i, rule in enumerate(broken):
        solver.assert_and_track(variables[rule.before] < variables[rule.after], f"rule{i}")
    for name, var in variables.items():
        solver.assert_and_track(var == position[name], f"at:{name}")
    if solver.check() != z3.unsat:
        return "; ".join(rule.why for rule in broken)
    core = {str(c) for c in solver.unsat_core()}
    reasons = [rule.why for i, rule in enumerate(broken) if f"rule{i}" in core]
    placed = [f"{name} is at {position[name]}" for name in variables if f"at:{name}" in core]
    return f"{'; '.join(reasons)}, but {', '.join(placed)}"


def _fused_members(original: fx.GraphModule, launch: fx.Node) -> list[fx.Node]:
    """The original launches a fused launch replaces (by kind, group and member parameter names)."""
    names = set(launch.meta.get("fsdp_bucket_members") or ())
    kind = launch.meta.get("comm_type")
    return [n for n in original.graph.nodes if n.meta.get("comm_type") == kind and n.meta.get("param_name") in names
            and c10d_name(n) == c10d_name(launch) and not n.meta.get("fsdp_bucket_members")
            and n.args and n.args[-1] == launch.args[-1]]


@dataclass
class Barriers:
    """Per phase, the sorted indices of nodes a fused launch may not cross (effects, other
    collectives, nodes of the other phase), computed once per graph."""

    index: dict[fx.Node, int]
    nodes: list[fx.Node]
    by_phase: dict[bool, list[int]]

    @staticmethod
    def of(graph: fx.Graph) -> "Barriers":
        nodes = list(graph.nodes)
        index = {node: i for i, node in enumerate(nodes)}
        by_phase: dict[bool, list[int]] = {False: [], True: []}
        for i, node in enumerate(nodes):
            blocking = has_effect(node) or is_launch(node)
            for phase in (False, True):
                other = node.op == "call_function" and bool(node.meta.get("autograd_backward")) != phase
                if blocking or other:
                    by_phase[phase].append(i)
        return Barriers(index, nodes, by_phase)

    def describe(self, i: int) -> str:
        node = self.nodes[i]
        what = "effect" if has_effect(node) else "collective" if is_launch(node) else "other-phase node"
        return f"{what} {node.name} (index {i})"


def insertion_point(original: fx.GraphModule, members: list[fx.Node], barriers: Barriers | None = None
                    ) -> tuple[bool, str]:
    """Whether some position P in the original admits the fused launch; else the core's reason.

    Only the tightest bound of each side is asserted, so the solver stays tiny and the unsat
    core names exactly the two nodes that leave no room.
    """
    barriers = barriers or Barriers.of(original.graph)
    index = barriers.index
    phase = bool(members[0].meta.get("autograd_backward"))
    lower: list[tuple[int, str]] = []
    upper: list[tuple[int, str]] = []
    for member in members:
        lower += [(index[s], f"after input {s.name} (index {index[s]})") for s in member.all_input_nodes]
        for wait in member.users:
            upper += [(index[c], f"before consumer {c.name} (index {index[c]})") for c in _first_consumers(wait, index)]
    first, last = min(index[m] for m in members), max(index[m] for m in members)
    waits = {w for m in members for w in m.users}
    private = set().union(*(rs_prep_chain(m) for m in members)) | set(members)
    blocking = barriers.by_phase[phase]
    low, high = bisect.bisect_left(blocking, first), bisect.bisect_right(blocking, last)
    for i in blocking[low:high]:
        node = barriers.nodes[i]
        owned_free = is_free(node) and bool(node.args) and node.args[0] in waits
        if node not in private and not owned_free:
            return False, f"outside the members' span, which contains {barriers.describe(i)}"
    if low > 0:
        lower.append((blocking[low - 1], f"after {barriers.describe(blocking[low - 1])}"))
    if high < len(blocking):
        upper.append((blocking[high], f"before {barriers.describe(blocking[high])}"))
    point = z3.Int("P")
    solver = z3.Solver()
    solver.add(point >= 0, point < len(index))
    if lower:
        bound, label = max(lower)
        solver.assert_and_track(point > bound, label)
    if upper:
        bound, label = min(upper)
        solver.assert_and_track(point < bound, label)
    if solver.check() == z3.sat:
        return True, ""
    return False, " and ".join(sorted(str(c) for c in solver.unsat_core()))


def _streams_agree(ctx: CheckContext) -> list[Finding]:
    run = ctx.rewritten_sim
    if isinstance(run, Exception):
        return []
    findings = []
    for rank, records in sorted(run.streams.items()):
        for other in ctx.case.graph.world():
            if other <= rank or other not in run.streams:
                continue
            shared = set(ctx.case.graph.group_ranks(rank).items()) & set(ctx.case.graph.group_ranks(other).items())
            for group, _ in shared:
                mine = [r.signature() for r in records if r.group == group]
                theirs = [r.signature() for r in run.streams[other] if r.group == group]
                if mine != theirs:
                    findings.append(Finding(NAME, f"group {group!r}: ranks {rank} and {other} issue different "
                                                     f"collective sequences", details={"group": group}))
    return findings[:1]


def check_ordering(ctx: CheckContext) -> list[Finding]:
    """(a) happens-before holds in the rewrite, (b) each fused bucket has a legal point, (c) streams agree."""
    original, rewritten = ctx.original, ctx.rewritten
    rank = min(rewritten)
    orig, new = original[rank], rewritten[rank]
    position = {node.name: i for i, node in enumerate(new.graph.nodes)}
    rules = skeleton_rules(orig, new)
    broken = _violations(rules, position)
    if broken:
        return [Finding(NAME, f"rank {rank}: ordering violated: {explain(rules, position, broken)}",
                        nodes=tuple({r.before for r in broken} | {r.after for r in broken}), rank=rank,
                        details={"violations": [r.why for r in broken]})]
    known = by_name(orig)
    findings = []
    barriers = Barriers.of(orig.graph)
    for launch in new.graph.nodes:
        if is_launch(launch) and launch.name not in known and launch.meta.get("comm_type") in FSDP_KINDS:
            members = _fused_members(orig, launch)
            if len(members) < 2:
                continue
            ok, reason = insertion_point(orig, members, barriers)
            if not ok:
                names = ", ".join(m.name for m in members)
                findings.append(Finding(NAME, f"rank {rank}: fused launch {launch.name} has no legal insertion "
                                                 f"point for members {names}: it must be {reason}",
                                        nodes=(launch.name, *(m.name for m in members)), rank=rank))
    return findings + _streams_agree(ctx)


CHECKER = Checker(NAME, check_ordering, order=30, summary='z3: happens-before refinement and cross-rank deadlock freedom')
