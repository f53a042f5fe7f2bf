"""Data dependencies: the rewrite defines every value above its readers, keeps every node and data
edge, reads collective results only through waits, and never reads storage after a free released it.

Original nodes are matched to rewritten ones by name (FX keeps names; only collective launches
and waits may disappear, replaced by fused collectives). Each violation names the broken edge.
Order (effects, intervals, fused-launch windows, streams, deadlock) is the ``ordering`` checker's.
"""

from __future__ import annotations

import operator

from torch import fx

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.registry import Checker
from fsdp_verify.checks.graph_facts import (aliases_input, alias_class, by_name, is_free, is_launch, is_wait,
                                            launch_name)

NAME = "dependencies"


def _lost_nodes(orig: fx.GraphModule, names: dict[str, fx.Node]) -> list[Finding]:
    lost = [n for n in orig.graph.nodes if n.name not in names and not (is_launch(n) or is_wait(n))]
    return [Finding(NAME, f"node {node.name!r} of the original graph is missing from the rewrite (only "
                             f"collective launches and waits may be replaced)", nodes=(node.name,), rule="node_lost",
                    details={"op": str(node.target)})
            for node in lost]


def _edges(orig: fx.GraphModule, names: dict[str, fx.Node]) -> list[Finding]:
    """Every original edge X -> N with both ends kept must still be there."""
    findings = []
    for node in orig.graph.nodes:
        kept = names.get(node.name)
        if kept is None:
            continue
        now = {n.name for n in kept.all_input_nodes}
        for source in node.all_input_nodes:
            if source.name in names and not is_wait(source) and source.name not in now:
                findings.append(Finding(NAME, f"edge {source.name} -> {node.name} is broken: {node.name!r} no "
                                                 f"longer reads {source.name!r}", nodes=(source.name, node.name),
                                        rule="edge_broken"))
    return findings


def _unwaited_reads(module: fx.GraphModule, orig: fx.GraphModule) -> list[Finding]:
    """Launch results read by anything but a wait, unless the original graph already read them so
    (a launch the planner skipped for its users is left as it was: spec 2.5 rule 12, 5.3 item 8)."""
    before = {(node.name, user.name) for node in orig.graph.nodes if is_launch(node) for user in node.users}
    findings = []
    for node in module.graph.nodes:
        if not is_launch(node):
            continue
        for user in node.users:
            if is_wait(user) or (node.name, user.name) in before:
                continue
            if user.target is operator.getitem and (launch_name(node) or "").endswith("_coalesced"):
                # a coalesced launch returns one tensor per member: indexing it is still the launch,
                # and each element's readers are what must wait (inductor's coalesced mode emits this)
                readers = [u for u in user.users if not is_wait(u) and (node.name, u.name) not in before]
            else:
                readers = [user]
            findings += [Finding(NAME, f"{reader.name!r} reads collective {node.name!r} without waiting for it",
                                 nodes=(node.name, reader.name), rule="read_without_wait") for reader in readers]
    return findings


def reads_after_free(module: fx.GraphModule) -> list[Finding]:
    """Static read-after-free: a node after a free that reads any alias of the freed storage."""
    findings = []
    pos = {node: index for index, node in enumerate(module.graph.nodes)}
    for free in module.graph.nodes:
        if not is_free(free) or not free.args or not isinstance(free.args[0], fx.Node):
            continue
        for alias in alias_class(free.args[0]):
            for user in alias.users:
                if pos[user] > pos[free] and not is_free(user) and not aliases_input(user):
                    findings.append(Finding(NAME, f"{user.name!r} reads {alias.name!r} after {free.name!r} "
                                                     f"freed its storage", nodes=(free.name, alias.name, user.name),
                                            rule="read_after_free"))
    return findings


def _unordered(pairs: list[tuple[str, str]]) -> list[Finding]:
    return [Finding(NAME, f"{reader!r} reads {source!r}, which is not defined above it (a later node or one "
                          f"no longer in the graph)", nodes=(source, reader), rule="read_before_definition")
            for reader, source in pairs]


def check_dependencies(ctx: CheckContext) -> list[Finding]:
    """Every read below its input's definition, data edges kept, waits before reads, no read after free."""
    original, rewritten = ctx.original, ctx.rewritten
    findings: list[Finding] = []
    for rank in sorted(rewritten):
        orig, new = original[rank], rewritten[rank]
        names = by_name(new)
        rank_findings = (
            _unordered(ctx.unordered_reads.get(rank, [])) + _lost_nodes(orig, names) + _edges(orig, names)
            + _unwaited_reads(new, orig) + reads_after_free(new))
        findings.extend(f.at_rank(rank) for f in rank_findings)
        if findings:
            break  # one rank's account is enough; the others are usually the same
    return findings


CHECKER = Checker(NAME, check_dependencies, after=("planner",), summary='data edges, effect order, waits before reads, no read after free')
