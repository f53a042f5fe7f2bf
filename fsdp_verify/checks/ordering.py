"""Ordering: every rank's rewrite refines the original's happens-before order, and the ranks
together cannot deadlock (spec sections 4 and 5.3).

Per rank (every rank whose rewritten graph differs from one already judged), under the map of
``refinement.py``:

1. effects (frees, barriers, side-effect and mutating ops) keep their order;
2. every non-view computation, kept collective and wait stays between the same two effects as
   in the original (independent compute may reorder inside that interval, never across it);
3. each fused launch has members that lie in one barrier-free interval, and sits inside it:
   after the last effect, foreign collective or other-phase node before its first member and
   before the first one after its last member (its members' own frees excepted);
4. each group's collectives keep their order (a fused launch stands for all its members);
5. forward stays before backward;
6. (reference-format targets) each fused reduce-scatter's preparation chain is tagged and private,
   so later passes can move it with its launch (spec 1.7).

Across ranks: each group's collective streams agree, and z3 proves a global schedule exists
(``schedule.py``). Data edges, lost nodes and reads of freed storage are ``dependencies``' job.
"""

from __future__ import annotations

import bisect
import hashlib
from collections import Counter
from typing import Optional

from torch import fx

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.graph_facts import FREE_KINDS, c10d_name, has_effect, is_free, is_launch, is_wait, rs_prep_chain
from fsdp_verify.checks.refinement import Refinement, Skeleton, group_of, interval_nodes, launch_of, phase
from fsdp_verify.checks.registry import Checker
from fsdp_verify.checks.schedule import Event, find_deadlock

NAME = "ordering"


def _finding(rank: int, message: str, nodes: tuple[str, ...], rule: str, **details: str) -> Finding:
    return Finding(NAME, f"rank {rank}: {message}", nodes=nodes, rank=rank, details={"rule": rule, **details}, rule=rule)


def _effect_order(ref: Refinement, sk: Skeleton, rank: int) -> list[Finding]:
    kept = [sk.nodes[i] for i in sk.effects if sk.nodes[i].name in ref.image]
    for a, b in zip(kept, kept[1:]):
        if ref.image[a.name] > ref.image[b.name]:
            return [_finding(rank, f"effect order broken: {a.name} came before {b.name} in the original, but the "
                                   f"rewrite has {ref.at(b.name)} before {ref.at(a.name)}", (a.name, b.name), "effects")]
    return []


def _intervals(ref: Refinement, sk: Skeleton, rank: int) -> list[Finding]:
    for node in interval_nodes(sk):
        if node.name not in ref.position:
            continue
        here = ref.position[node.name]
        before, after = sk.effect_before(sk.index[node.name]), sk.effect_after(sk.index[node.name])
        if before is not None and before.name in ref.image and ref.image[before.name] > here:
            return [_finding(rank, f"{node.name} moved before effect {before.name}: the original runs it after "
                                   f"{before.name}, the rewrite at {here}, before {ref.at(before.name)}",
                             (before.name, node.name), "effect_interval")]
        if after is not None and after.name in ref.image and ref.image[after.name] < here:
            return [_finding(rank, f"{node.name} moved after effect {after.name}: the original runs it before "
                                   f"{after.name}, the rewrite at {here}, after {ref.at(after.name)}",
                             (node.name, after.name), "effect_interval")]
    return []


class _Blocking:
    """Per phase, the sorted original indices a fused launch may not cross: effects, collective
    launches and nodes of the other phase."""

    def __init__(self, sk: Skeleton):
        self.sk = sk
        self.by_phase: dict[bool, list[int]] = {False: [], True: []}
        self.hard: list[int] = []  # effects and launches alone: what binds a graph of one phase too
        for i, node in enumerate(sk.nodes):
            blocking = has_effect(node) or is_launch(node)
            if blocking:
                self.hard.append(i)
            for side in (False, True):
                if blocking or (node.op == "call_function" and phase(node) != side):
                    self.by_phase[side].append(i)

    @staticmethod
    def kind(node: fx.Node) -> str:
        """``effect``, ``collective`` or ``other-phase node``: what a fused launch may not cross."""
        return "effect" if has_effect(node) else "collective" if is_launch(node) else "other-phase node"

    @classmethod
    def describe(cls, node: fx.Node) -> str:
        return f"{cls.kind(node)} {node.name}"

    def window(self, members: list[fx.Node], side: bool, hard: bool = False) -> tuple[
            Optional[fx.Node], Optional[fx.Node], Optional[fx.Node]]:
        """(last blocker before the first member, first after the last, one inside the span); of
        effects and launches alone with ``hard``."""
        index, nodes = self.sk.index, self.sk.nodes
        spots = self.hard if hard else self.by_phase[side]
        first, last = min(index[m.name] for m in members), max(index[m.name] for m in members)
        waits = {w for m in members for w in m.users}
        names = {m.name for m in members}
        private = {n for m in members for n in rs_prep_chain(m)}

        def excused(node: fx.Node) -> bool:
            owned = is_free(node) and node.meta.get("comm_type") in FREE_KINDS and bool(node.args) \
                and node.args[0] in waits and not node.kwargs
            return node.name in names or node in private or owned

        low = bisect.bisect_left(spots, first)
        high = bisect.bisect_right(spots, last)
        inside = next((nodes[i] for i in spots[low:high] if not excused(nodes[i])), None)
        before = nodes[spots[low - 1]] if low > 0 else None
        after = next((nodes[i] for i in spots[high:] if not excused(nodes[i])), None)
        return before, after, inside


def _fused_windows(ref: Refinement, sk: Skeleton, rank: int) -> list[Finding]:
    """Rule 3, first against effects and collectives alone, then against the other phase's nodes
    too: a window that crosses a collective or an effect is named as such even where a node of the
    other phase lies nearer (a pass that never receives joint graphs is excused only a finding
    about the phase boundary, so that finding must not stand for both)."""
    blocking = _Blocking(sk)
    for hard in (True, False):
        found = _windows(ref, sk, rank, blocking, hard)
        if found:
            return found
    return []


def _windows(ref: Refinement, sk: Skeleton, rank: int, blocking: "_Blocking", hard: bool) -> list[Finding]:
    """Rule 3 against ``blocking``'s blockers (effects and launches alone with ``hard``). Blockers that
    survive the rewrite are judged first: a blocker that is itself a member of another fused launch
    only names which of the two moved once no surviving blocker does."""
    windows = []
    for launch, members in ref.members.items():
        members = sorted({m.name: m for m in members}.values(), key=lambda m: sk.index[m.name])
        before, after, inside = blocking.window(members, phase(members[0]), hard)
        names = ", ".join(m.name for m in members)
        if inside is not None and len(members) > 1:
            return [_finding(rank, f"fused launch {launch} has no legal insertion point: its members {names} span "
                                   f"{blocking.describe(inside)} in the original",
                             (launch, inside.name, *(m.name for m in members)), "fused_window",
                             blocker=_Blocking.kind(inside))]
        windows.append((launch, members, before, after))
    for survivors_only in (True, False):
        for launch, members, before, after in windows:
            here = ref.position[launch]
            if before is not None and before.name in ref.image and ref.image[before.name] > here \
                    and (before.name in ref.position) == survivors_only:
                return [_finding(rank, f"fused launch {launch} (at {here}) was hoisted above "
                                       f"{blocking.describe(before)} ({ref.at(before.name)}), which precedes its "
                                       f"first member {members[0].name} in the original", (before.name, launch),
                                 "fused_window", blocker=_Blocking.kind(before))]
            if after is not None and after.name in ref.image and ref.image[after.name] < here \
                    and (after.name in ref.position) == survivors_only:
                return [_finding(rank, f"fused launch {launch} (at {here}) sinks below {blocking.describe(after)} "
                                       f"({ref.at(after.name)}), which follows its last member {members[-1].name} "
                                       f"in the original", (launch, after.name), "fused_window",
                                 blocker=_Blocking.kind(after))]
    return []


def _group_order(ref: Refinement, sk: Skeleton, rank: int) -> list[Finding]:
    streams: dict[str, list[fx.Node]] = {}
    for node in sk.nodes:
        if is_launch(node) and group_of(node) is not None and node.name in ref.image:
            streams.setdefault(group_of(node), []).append(node)
    for group, launches in streams.items():
        for a, b in zip(launches, launches[1:]):
            if ref.image[a.name] > ref.image[b.name]:
                return [_finding(rank, f"group {group!r} issues {b.name} ({ref.image[b.name]}) before {a.name} "
                                       f"({ref.image[a.name]}), against the original's order", (a.name, b.name),
                                 "group_order")]
    return []


def _phase_order(ref: Refinement, sk: Skeleton, rank: int) -> list[Finding]:
    calls = [n for n in sk.nodes if n.op == "call_function"]
    flags = [phase(n) for n in calls]
    if flags != sorted(flags):
        return []  # the original itself interleaves phases: nothing to preserve
    forward = [ref.image[n.name] for n in calls if not phase(n) and n.name in ref.image]
    backward = {ref.image[n.name]: n.name for n in calls if phase(n) and n.name in ref.image}
    if forward and backward and max(forward) > min(backward):
        late = next(n.name for n in calls if not phase(n) and ref.image.get(n.name) == max(forward))
        early = backward[min(backward)]
        return [_finding(rank, f"forward node {late} ({max(forward)}) runs after backward node {early} "
                               f"({min(backward)})", (early, late), "phase")]
    return []


def _prep_chains(ref: Refinement, rank: int) -> list[Finding]:
    by_name = {n.name: n for n in ref.rewritten.graph.nodes}
    known = {n.name for n in ref.original.graph.nodes}
    for name, members in ref.members.items():
        launch = by_name[name]
        if c10d_name(launch) != "reduce_scatter_tensor" or len(members) < 2:
            continue
        copy_in, stack = set(), list(launch.all_input_nodes)
        while stack:
            node = stack.pop()
            if node.name not in known and node not in copy_in:
                copy_in.add(node)
                stack.extend(node.all_input_nodes)
        chain = rs_prep_chain(launch)
        if chain == copy_in:
            continue
        shared = next(((n, u) for n in sorted(copy_in, key=lambda n: ref.position[n.name])
                       for u in n.users if u is not launch and u not in copy_in), None)
        untagged = sorted(n.name for n in copy_in - chain)
        if shared is not None:
            why = f"its preparation node {shared[0].name} is also read by {shared[1].name} (edge " \
                  f"{shared[0].name} -> {shared[1].name}), so the chain is not private"
            nodes = (name, shared[0].name, shared[1].name)
        else:
            why = f"its preparation nodes {', '.join(untagged)} are not returned by rs_layout_preparation " \
                  f"(untagged, wrongly owned or of another op)"
            nodes = (name, *untagged)
        return [_finding(rank, f"fused reduce-scatter {name}: {why}; a pass moving the launch with its chain "
                               f"would break the order", nodes, "rs_preparation")]
    return []


# Every meta key the per-rank rules read (here, in ``refinement.py`` and in ``graph_facts.py``):
# phase and kind verbatim; the bucket tags, which the rules only compare with one another and test
# for emptiness, by order of first appearance (their ids embed the graph's signature, which
# differs between the ranks of a ``cuda`` world only because each rank sees its own device).
READ_META = ("autograd_backward", "comm_type")
INTERNED_META = ("fsdp_bucket_id", "fsdp_bucket_prepare", "fsdp_reduce_scatter_prepare")


def _fingerprint(module: fx.GraphModule) -> str:
    """Ranks with equal fingerprints get equal verdicts: names, ops, targets, arguments and the meta
    the rules read (``READ_META``, ``INTERNED_META``)."""
    digest = hashlib.sha1()
    labels: dict[str, int] = {}
    for node in module.graph.nodes:
        tags = [repr(node.meta.get(key)) for key in READ_META]
        for key in INTERNED_META:
            value = node.meta.get(key)
            tags.append(f"#{labels.setdefault(value, len(labels))}" if isinstance(value, str) and value
                        else repr(value))
        digest.update(f"{node.name}|{node.op}|{node.target}|{node.args}|{node.kwargs}|{tags}\n".encode())
    return digest.hexdigest()


def _rank_findings(ctx: CheckContext, rank: int) -> list[Finding]:
    sk = Skeleton.of(ctx.original[rank])
    ref = ctx.refinement(rank)
    if ref.unmapped:
        ctx.metrics.setdefault("ordering", {})[f"rank {rank} unmapped collectives"] = len(ref.unmapped)
    rules = [_effect_order, _intervals, _fused_windows, _group_order, _phase_order]
    # A finding about the phase boundary alone is reported only where no later rule finds more: it
    # is all a pass that never receives joint graphs is excused, and must not hide what else broke.
    boundary: list[Finding] = []
    for rule in rules:
        found = rule(ref, sk, rank)
        if found and not all(_about_phases(f) for f in found):
            return found
        boundary = boundary or found
    return boundary or (_prep_chains(ref, rank) if ctx.has_planner else [])


def _about_phases(finding: Finding) -> bool:
    """A finding about the forward/backward boundary alone: forward kept before backward, or a
    fused window blocked by a node of the other phase (rule 3 names an effect or a collective
    first, where one blocks it too)."""
    return finding.rule == "phase" or (finding.rule == "fused_window"
                                       and finding.details.get("blocker") == "other-phase node")


def _programs(ctx: CheckContext) -> tuple[dict[int, list[Event]], list[Finding]]:
    """Each rank's collective skeleton, and a finding for any group whose streams disagree."""
    programs: dict[int, list[Event]] = {}
    streams: dict[tuple, dict[int, list[Event]]] = {}
    for rank, module in sorted(ctx.rewritten.items()):
        groups = ctx.case.graph.group_ranks(rank)
        counters: dict[tuple, int] = {}
        slot_of: dict[fx.Node, tuple] = {}
        events: list[Event] = []
        for node in module.graph.nodes:
            if is_launch(node):
                group = group_of(node)
                if group not in groups:
                    continue  # an unknown group cannot run at all: the simulated world reports it
                key = (group, tuple(groups[group]))
                slot = (*key, counters.get(key, 0))
                counters[key] = slot[2] + 1
                slot_of[node] = slot
                op = f"{c10d_name(node)}({', '.join(str(a) for a in node.args[1:-1])})"
                events.append(Event(node.name, slot, False, op))
                streams.setdefault(key, {}).setdefault(rank, []).append(events[-1])
            elif is_wait(node) and launch_of(node) in slot_of:
                events.append(Event(node.name, slot_of[launch_of(node)], True))
        programs[rank] = events
    for (group, ranks), per_rank in sorted(streams.items()):
        mine = {r: [e.op for e in per_rank.get(r, [])] for r in ranks if r in ctx.rewritten}
        first = min(mine)
        for other, ops in mine.items():
            if ops != mine[first]:
                k = next((i for i, (a, b) in enumerate(zip(mine[first], ops)) if a != b), min(len(ops),
                                                                                                 len(mine[first])))
                return programs, [Finding(NAME, f"group {group!r} {list(ranks)}: collective #{k} differs across "
                                                f"ranks: rank {first} issues {_nth(per_rank, first, k)}, rank "
                                                f"{other} issues {_nth(per_rank, other, k)}",
                                          details={"rule": "streams", "group": group}, rule="streams")]
    return programs, []


def _nth(per_rank: dict[int, list[Event]], rank: int, k: int) -> str:
    events = per_rank.get(rank, [])
    return f"{events[k].op} at {events[k].node}" if k < len(events) else "nothing"


def check_ordering(ctx: CheckContext) -> list[Finding]:
    """Per-rank refinement of the original order (the first broken rule), and always the cross-rank
    verdict beside it: streams that disagree, or a deadlock. A per-rank finding must not hide a
    cross-rank one (triage may call the first a contract mismatch; the second never is)."""
    judged: set[str] = set()
    found: list[Finding] = []
    for rank in sorted(ctx.rewritten):
        fingerprint = _fingerprint(ctx.rewritten[rank])
        if fingerprint in judged:
            continue
        judged.add(fingerprint)
        found = _rank_findings(ctx, rank)
        if found:
            break
    programs, streams = _programs(ctx)
    if streams:
        return found + streams
    proofs: Counter = Counter()
    deadlock = find_deadlock(programs, proofs)
    ctx.metrics[NAME] = {"segments_by_lockstep": proofs["lockstep"], "segments_by_z3": proofs["z3"]}
    if deadlock is not None:
        found = found + [Finding(NAME, f"ranks {', '.join(map(str, deadlock.ranks))}: {deadlock.describe()}",
                                 nodes=deadlock.nodes, details={"rule": f"deadlock_{deadlock.model}",
                                                                "model": deadlock.model,
                                                                "ranks": list(deadlock.ranks)},
                                 rule=f"deadlock_{deadlock.model}")]
    return found


CHECKER = Checker(NAME, check_ordering, after=("dependencies",), skip_reason=CheckContext.unscheduled,
                  summary="every rank refines the original happens-before order; z3: a global schedule exists")
