"""The refinement map from a rewritten graph onto its original, and the original's happens-before
skeleton (spec sections 4 and 5.3).

A node that keeps its name stands for itself. An original collective that disappeared is mapped
to the collective that now delivers its value: starting at each surviving reader of the old wait,
the reader's argument in the same position is followed upwards through the rewrite's new nodes
(copy-outs, slices, views) to a wait, and from that wait to its launch. This needs nothing from
the target (no meta, no plan), so a target that fuses differently is judged by the same map.
"""

from __future__ import annotations

import bisect
import operator
from dataclasses import dataclass, field
from typing import Any, Optional

from torch import fx

from fsdp_verify.checks.graph_facts import aliases_input, has_effect, is_launch, is_wait

MAX_CLIMB = 64  # new nodes walked from a reader up to the wait that feeds it


def launch_of(wait: fx.Node) -> Optional[fx.Node]:
    """The launch a wait completes (through ``getitem`` of a coalesced launch), or None."""
    source = wait.args[0] if wait.args else wait.kwargs.get("tensor")
    while isinstance(source, fx.Node) and source.target is operator.getitem:
        source = source.args[0]
    return source if isinstance(source, fx.Node) and is_launch(source) else None


def group_of(launch: fx.Node) -> Optional[str]:
    """The group name a launch addresses (its last positional argument, or ``group_name``)."""
    if "group_name" in launch.kwargs:
        value = launch.kwargs["group_name"]
    else:
        value = launch.args[-1] if launch.args else None
    return value if isinstance(value, str) else None


def phase(node: fx.Node) -> bool:
    """True for backward nodes."""
    return bool(node.meta.get("autograd_backward"))


@dataclass
class Refinement:
    """Positions in the rewrite, and the rewrite position standing for each original node."""

    original: fx.GraphModule
    rewritten: fx.GraphModule
    position: dict[str, int]  # rewritten node name -> index
    image: dict[str, int] = field(default_factory=dict)  # original node name -> rewritten index
    members: dict[str, list[fx.Node]] = field(default_factory=dict)  # new launch -> original launches
    unmapped: list[str] = field(default_factory=list)  # vanished original collectives with no image

    def kept(self, node: fx.Node) -> bool:
        return node.name in self.position

    def at(self, name: str) -> str:
        return f"{name} (now at {self.image.get(name, self.position.get(name))})"


def _climb(start: fx.Node, known: set[str]) -> Optional[fx.Node]:
    """From a rewritten argument, up through new nodes to the first wait (None if none is near)."""
    stack, seen = [start], set()
    while stack and len(seen) < MAX_CLIMB:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if is_wait(node):
            return node
        if node.name in known:
            continue  # an original node: its value is not the collective's
        stack.extend(node.all_input_nodes)
    return None


def _leaves(value: Any) -> list:
    """The leaves of nested tuples, lists and dicts (values, in order), as ``tree_flatten`` gives
    them for node arguments, without pytree's per-node type registry lookups."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in _leaves(item)]
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _leaves(item)]
    return [value]


def refine(original: fx.GraphModule, rewritten: fx.GraphModule) -> Refinement:
    """Map every original node onto the rewrite (see the module docstring)."""
    position = {node.name: i for i, node in enumerate(rewritten.graph.nodes)}
    ref = Refinement(original, rewritten, position)
    known = {node.name for node in original.graph.nodes}
    new = {node.name: node for node in rewritten.graph.nodes}
    for node in original.graph.nodes:
        if node.name in position:
            ref.image[node.name] = position[node.name]
    readers = {user for wait in original.graph.nodes if is_wait(wait) and wait.name not in position
               for user in wait.users}
    for node in sorted(readers, key=lambda n: n.name):
        now = new.get(node.name)
        if now is None:
            continue
        before, after = _leaves((node.args, node.kwargs)), _leaves((now.args, now.kwargs))
        if len(before) != len(after):
            continue
        for old, value in zip(before, after):
            if not (isinstance(old, fx.Node) and is_wait(old) and old.name not in position
                    and isinstance(value, fx.Node)) or old.name in ref.image:
                continue
            wait = _climb(value, known)
            launch = launch_of(wait) if wait is not None else None
            old_launch = launch_of(old)
            if launch is None or old_launch is None:
                continue
            ref.image[old.name] = position[wait.name]
            ref.image[old_launch.name] = position[launch.name]
            if launch.name not in known:
                ref.members.setdefault(launch.name, []).append(old_launch)
    ref.unmapped = [n.name for n in original.graph.nodes
                    if (is_launch(n) or is_wait(n)) and n.name not in ref.image]
    return ref


@dataclass
class Skeleton:
    """The original graph's order facts, computed once: node indices and the effect chain."""

    nodes: list[fx.Node]
    index: dict[str, int]
    effects: list[int]  # indices of nodes whose order is observable (frees, barriers, side effects)

    @staticmethod
    def of(module: fx.GraphModule) -> "Skeleton":
        nodes = list(module.graph.nodes)
        return Skeleton(nodes, {n.name: i for i, n in enumerate(nodes)},
                        [i for i, n in enumerate(nodes) if has_effect(n)])

    def effect_before(self, index: int) -> Optional[fx.Node]:
        at = bisect.bisect_left(self.effects, index)
        return self.nodes[self.effects[at - 1]] if at > 0 else None

    def effect_after(self, index: int) -> Optional[fx.Node]:
        at = bisect.bisect_right(self.effects, index)
        return self.nodes[self.effects[at]] if at < len(self.effects) else None


def interval_nodes(skeleton: Skeleton) -> list[fx.Node]:
    """Original nodes bound to their effect interval: non-view calls that are not effects."""
    return [n for n in skeleton.nodes if n.op == "call_function" and not has_effect(n) and not aliases_input(n)]
