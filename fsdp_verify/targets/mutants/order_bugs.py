"""Ordering bugs: a correct reference rewrite with one node moved (or one tag lost) the way a
scheduling or rewriting bug would, keeping every value the same, so only an ordering oracle can
tell. Each damage leaves the graph alone when it has nothing to apply to (never crashes).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import fx

from fsdp_verify.graph import collectives
from fsdp_verify.graph.ops import is_free_target
from fsdp_verify.reference.predicates import is_barrier, is_view
from fsdp_verify.targets.mutants.rewrite_bugs import fused_launches

aten = torch.ops.aten
AG = ("fsdp_all_gather", "fsdp_all_gather_backward")


def _c10d(node: fx.Node) -> bool:
    return node.op == "call_function" and collectives.is_collective(node.target)


_COPY_NODES = (aten.clone.default, aten.slice.Tensor, aten.cat.default)  # what the rewriter itself adds


def _compute(node: fx.Node) -> bool:
    """A plain computation of the original program: not a view, collective, wait, effect or copy."""
    return node.op == "call_function" and not is_view(node) and not _c10d(node) and not is_barrier(node) \
        and node.target not in _COPY_NODES


def _copy_in(launch: fx.Node) -> list[fx.Node]:
    """The fused AG launch with its copy-in (flatten each source, concatenate), in graph order."""
    cat = launch.args[0]
    return [*cat.args[0], cat, launch]


def _effect_before(node: fx.Node) -> Optional[fx.Node]:
    """The nearest effect above ``node`` (None when a placeholder or collective comes first)."""
    current = node.prev
    while current.op != "root" and current.op != "placeholder":
        if is_barrier(current):
            return current
        if _c10d(current):
            return None
        current = current.prev
    return None


def fused_launch_early(module: fx.GraphModule, rank: int) -> None:
    """A fused all-gather (with its copy-in) is placed one step early, above the effect before it."""
    for launch in fused_launches(module, AG):
        block = _copy_in(launch)
        effect = _effect_before(block[0])
        if effect is not None:
            for node in block:
                effect.prepend(node)
            return


def fused_launch_hoisted(module: fx.GraphModule, rank: int) -> None:
    """The last fused all-gather (with its copy-in) is hoisted to the top of the graph."""
    launches = fused_launches(module, AG)
    if not launches:
        return
    top = next(n for n in module.graph.nodes if n.op != "placeholder")
    for node in _copy_in(launches[-1]):
        top.prepend(node)


def owned_free_moved_later(module: fx.GraphModule, rank: int) -> None:
    """A member's free (of its copy-out) is moved below the next computation after it."""
    for free in module.graph.nodes:
        if free.op != "call_function" or not is_free_target(free.target) or not free.args:
            continue
        copy = free.args[0]
        if not (isinstance(copy, fx.Node) and is_view(copy) and copy.args and isinstance(copy.args[0], fx.Node)
                and copy.args[0].target is aten.clone.default):
            continue
        later = free.next
        while later.op == "call_function" and not _compute(later):
            later = later.next
        if later.op == "call_function" and copy not in later.all_input_nodes:
            later.append(free)
            return


def _storage(node: fx.Node) -> fx.Node:
    while is_view(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def compute_across_effect(module: fx.GraphModule, rank: int) -> None:
    """A computation next to a barrier (an effect that is not a free: ``owned_free_moved_later`` covers
    frees) is moved to its other side; its inputs and users allow the move, so every value stays."""
    position = {n: i for i, n in enumerate(module.graph.nodes)}
    for effect in list(module.graph.nodes):
        if not is_barrier(effect) or is_free_target(effect.target):
            continue
        touched = {_storage(n) for n in effect.all_input_nodes}
        for node, after in ((effect.prev, True), (effect.next, False)):
            if not _compute(node) or node in effect.all_input_nodes or effect in node.all_input_nodes \
                    or touched & {_storage(n) for n in node.all_input_nodes}:
                continue
            if after and all(position[u] > position[effect] for u in node.users):
                effect.append(node)
                return
            if not after and all(position[i] < position[effect] for i in node.all_input_nodes):
                effect.prepend(node)
                return


def rs_prep_untagged(module: fx.GraphModule, rank: int) -> None:
    """A fused reduce-scatter's preparation chain loses its tags below the last node."""
    for launch in fused_launches(module, ("fsdp_reduce_scatter",)):
        cat = launch.args[0].args[0]
        for node in (cat, *cat.args[0]):
            node.meta.pop("fsdp_bucket_prepare", None)
        return


def rs_prep_shared(module: fx.GraphModule, rank: int) -> None:
    """A node outside the bucket also reads a fused reduce-scatter's packed gradients."""
    for launch in fused_launches(module, ("fsdp_reduce_scatter",)):
        cat = launch.args[0].args[0]
        with module.graph.inserting_after(cat):
            module.graph.call_function(aten.sum.default, (cat,), {}).meta["autograd_backward"] = True
        return


def _movable_before(anchor: fx.Node, launch: fx.Node) -> Optional[list[fx.Node]]:
    """``launch`` with the inputs it needs that lie below ``anchor``, if all are plain computations."""
    position = {n: i for i, n in enumerate(anchor.graph.nodes)}
    needed, stack = set(), [launch]
    while stack:
        node = stack.pop()
        for source in node.all_input_nodes:
            if position[source] > position[anchor] and source not in needed:
                if _c10d(source) or is_barrier(source):
                    return None
                needed.add(source)
                stack.append(source)
    return sorted(needed, key=position.__getitem__) + [launch]


def rank_dependent_group_order(module: fx.GraphModule, rank: int) -> None:
    """Odd ranks issue a later collective of another group (and wait for it) before an earlier one
    of the same effect interval: every rank alone is fine, together they deadlock."""
    if rank % 2 == 0:
        return
    launches = [n for n in module.graph.nodes if _c10d(n) and "wait_tensor" not in str(n.target)
                and len(n.users) == 1 and isinstance(n.args[-1], str)]
    position = {n: i for i, n in enumerate(module.graph.nodes)}
    barriers = [position[n] for n in module.graph.nodes if is_barrier(n)]
    for i, first in enumerate(launches):
        for later in launches[i + 1:]:
            if later.args[-1] == first.args[-1] or any(position[first] < b < position[later] for b in barriers):
                continue  # same group, or an effect between them (that would be a different bug)
            block = _movable_before(first, later)
            if block is None:
                continue
            for node in block + [next(iter(later.users))]:
                first.prepend(node)
            return
