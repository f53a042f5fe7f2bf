"""The catalogue of planted bugs (see the package docstring)."""

from __future__ import annotations

import contextlib
import dataclasses
import operator
from typing import Any, Callable, Iterator

import torch
from torch import fx

from ...case import Case
from ...graph.ops import _free_tensor_storage
from ...reference import planner, predicates, rewrite
from ...reference.driver import bucket_world
from ..reference import ReferenceTarget

aten = torch.ops.aten
Patch = tuple[Any, str, Any]


@contextlib.contextmanager
def _patched(patches: list[Patch]) -> Iterator[None]:
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class Mutant(ReferenceTarget):
    """The reference target with one planted bug."""

    def __init__(self, name: str, summary: str, patches: Callable[[], list[Patch]] = list,
                 damage: Callable[[fx.GraphModule, int], None] | None = None,
                 rank_patches: Callable[[int], list[Patch]] | None = None,
                 plan_type: type | None = None):
        self.name, self.summary = f"mutant:{name}", summary
        self._patches, self._damage, self._rank_patches = patches, damage, rank_patches
        self._plan_type = plan_type

    def plan(self, case: Case, module: fx.GraphModule, rank: int) -> planner.BucketPlan:
        extra = self._rank_patches(rank) if self._rank_patches else []
        with _patched(self._patches() + extra):
            plan = super().plan(case, module, rank)
        if self._plan_type is not None:
            plan = self._plan_type(**{f.name: getattr(plan, f.name) for f in dataclasses.fields(plan)})
        return plan

    def rewriters(self) -> tuple:
        def wrap(apply):
            def mutated(module, plan):
                with _patched(self._patches()):
                    return apply(module, plan)
            return mutated
        return tuple(wrap(apply) for apply in super().rewriters())

    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        plans = bucket_world(modules, lambda rank, module: self.plan(case, module, rank), self.rewriters())
        if self._damage is not None:
            for rank, module in modules.items():
                self._damage(module, rank)
                module.graph.lint()
                module.recompile()
        return plans


# -- planner bugs ------------------------------------------------------------------------------

def _key_without(*positions: int) -> list[Patch]:
    original = planner.Candidate.key.fget

    def key(self):
        return tuple(part for index, part in enumerate(original(self)) if index not in positions)
    return [(planner.Candidate, "key", property(key))]


def _suppress(reason: str) -> list[Patch]:
    original = planner.split_reason

    def split_reason(*args):
        found = original(*args)
        return None if found == reason else found
    return [(planner, "split_reason", split_reason)]


def _graph_order_members() -> list[Patch]:
    def finalize(members):
        return planner.Bucket(tuple(members))
    return [(planner, "_finalize", finalize)]


@dataclasses.dataclass(frozen=True)
class _OffByOnePlan(planner.BucketPlan):
    """A plan whose reported offsets of later members are one too high."""

    def to_dict(self) -> dict:
        out = super().to_dict()
        for bucket in out["buckets"]:
            for member in bucket["members"][1:]:
                member["local_offset"] += 1
        return out


def _cap_off_by_one() -> list[Patch]:
    original = planner.split_reason

    def split_reason(current, candidate, nodes, order, policy):
        if policy.cap_bytes is not None:
            policy = dataclasses.replace(policy, cap_bytes=policy.cap_bytes + 1)
        return original(current, candidate, nodes, order, policy)
    return [(planner, "split_reason", split_reason)]


def _device_dependent(rank: int) -> list[Patch]:
    """Ranks on odd device indices split every bucket (grouping depends on the device index)."""
    if rank % 2 == 0:
        return []
    original = planner.split_reason
    return [(planner, "split_reason", lambda *args: original(*args) or "capacity")]


# -- rewriter bugs: damage a correct rewrite -----------------------------------------------------

def _fused(module: fx.GraphModule, kinds: tuple[str, ...]) -> list[fx.Node]:
    return [n for n in module.graph.nodes if n.meta.get("fsdp_bucket_members") and n.meta.get("comm_type") in kinds
            and n.op == "call_function"]


AG = ("fsdp_all_gather", "fsdp_all_gather_backward")
RS = ("fsdp_reduce_scatter",)


def _copy_outs(launch: fx.Node) -> list[fx.Node]:
    wait = next(iter(launch.users))
    rows = next(iter(wait.users))
    return [u for u in rows.users if u.target is aten.slice.Tensor]


def swap_copy_out_offsets(module: fx.GraphModule, rank: int) -> None:
    """The first member's copy-out reads columns at the second member's offset."""
    for launch in _fused(module, AG):
        slices = _copy_outs(launch)
        if len(slices) >= 2:
            first, second = slices[0], slices[1]
            total = first.args[0].args[1][1]
            width = first.args[3] - first.args[2]
            start = min(second.args[2], total - width)
            first.args = (first.args[0], 1, start, start + width)
            return


def free_moved_early(module: fx.GraphModule, rank: int) -> None:
    """A member's free is moved right after the copy-out, before the member's consumers."""
    for launch in _fused(module, AG):
        for copy_slice in _copy_outs(launch):
            clone = next(iter(copy_slice.users))
            result = next(iter(clone.users))
            frees = [u for u in result.users if u.target is _free_tensor_storage]
            readers = [u for u in result.users if u.target is not _free_tensor_storage]
            if frees and readers:
                result.append(frees[0])
                return


def copy_out_reads_launch(module: fx.GraphModule, rank: int) -> None:
    """Copy-out reads the fused launch's handle instead of its wait."""
    for launch in _fused(module, AG):
        wait = next(iter(launch.users))
        rows = next(iter(wait.users))
        rows.replace_input_with(wait, launch)
        return


def avg_twice(module: fx.GraphModule, rank: int) -> None:
    """The fused reduce-scatter averages, then divides by the degree once more."""
    for launch in _fused(module, RS):
        if launch.args[1] == "avg":
            wait = next(iter(launch.users))
            with module.graph.inserting_after(wait):
                divided = module.graph.call_function(aten.div.Tensor, (wait, float(launch.args[2])))
            wait.replace_all_uses_with(divided, delete_user_cb=lambda user: user is not divided)
            return


def wrong_group(module: fx.GraphModule, rank: int) -> None:
    """The fused launch names the wrong process group."""
    groups = {n.args[-1] for n in module.graph.nodes if n.op == "call_function" and str(n.target).startswith(
        "_c10d_functional.") and n.args and isinstance(n.args[-1], str)}
    for launch in _fused(module, AG + RS):
        other = sorted(groups - {launch.args[-1]})
        if other:
            launch.args = (*launch.args[:-1], other[0])
            return


def drop_fused_meta(module: fx.GraphModule, rank: int) -> None:
    """Fused launches lose ``fsdp_bucket_members``: re-planning would bucket them again."""
    for launch in _fused(module, AG + RS):
        launch.meta.pop("fsdp_bucket_members")


def rank_dependent_packing(module: fx.GraphModule, rank: int) -> None:
    """Odd ranks pack an AG bucket's first two members in the other order (a cross-rank layout bug)."""
    if rank % 2 == 0:
        return
    for launch in _fused(module, AG):
        cat = launch.args[0]
        parts = list(cat.args[0])
        if len(parts) >= 2:
            parts[0], parts[1] = parts[1], parts[0]
            cat.args = (parts, *cat.args[1:])
            return


def leak_fused_buffers(module: fx.GraphModule, rank: int) -> None:
    """Each fused AG result is copied three times and kept alive to the end of the graph."""
    output = next(iter(module.graph.find_nodes(op="output")))
    for launch in _fused(module, AG):
        wait = next(iter(launch.users))
        with module.graph.inserting_after(wait):
            copies = [module.graph.call_function(aten.clone.default, (wait,)) for _ in range(3)]
        with module.graph.inserting_before(output):
            module.graph.call_function(operator.getitem, (copies, 0))


MUTANTS: dict[str, Mutant] = {m.name.split(":", 1)[1]: m for m in (
    Mutant("key_ignores_dtype", "bucket key ignores dtype", lambda: _key_without(5)),
    Mutant("key_ignores_reduce_op", "bucket key ignores the reduce op", lambda: _key_without(7)),
    Mutant("key_ignores_group", "bucket key ignores the process group (name and ranks)",
           lambda: _key_without(3, 4)),
    # Dropping only the phase flag would be an equivalent mutant: the kind already implies it.
    Mutant("key_ignores_kind_and_phase", "bucket key ignores the collective kind and the phase",
           lambda: _key_without(0, 1)),
    Mutant("barrier_ignored", "barriers and untagged effects inside a span are ignored",
           lambda: [(predicates, "is_barrier", lambda node: False)]),
    Mutant("foreign_collective_ignored", "a foreign collective inside a span is ignored",
           lambda: _suppress("intervening_collective")),
    Mutant("foreign_free_ignored", "a free of a non-member inside a span is ignored",
           lambda: [(planner, "_owned_free", lambda node, candidate, combined: True)]),
    Mutant("phase_flip_ignored", "a phase flip inside a span is ignored", lambda: _suppress("phase_boundary")),
    Mutant("dependency_conflict_ignored", "a consumer before the latest input is ignored",
           lambda: _suppress("dependency_conflict")),
    Mutant("device_index_grouping", "grouping depends on the rank's device index", rank_patches=_device_dependent),
    Mutant("members_unsorted", "bucket members kept in graph order, not (state_idx, name)", _graph_order_members),
    Mutant("offsets_off_by_one", "plan offsets of later members are off by one", plan_type=_OffByOnePlan),
    Mutant("cap_off_by_one", "the byte cap admits one byte too many", _cap_off_by_one),
    Mutant("repeated_parameter_accepted", "a repeated parameter may join a bucket",
           lambda: _suppress("repeated_parameter_instance")),
    Mutant("stale_plan_accepted", "the rewriter applies plans made for another graph",
           lambda: [(rewrite, "check_fresh", lambda module, plan: None)]),
    Mutant("swapped_copy_out", "AG copy-out reads the wrong member's columns", damage=swap_copy_out_offsets),
    Mutant("free_moved_early", "a member free is moved before the member's consumers", damage=free_moved_early),
    Mutant("copy_out_before_wait", "AG copy-out reads the launch before its wait", damage=copy_out_reads_launch),
    Mutant("avg_twice", "the fused RS divides by the degree twice", damage=avg_twice),
    Mutant("wrong_group_name", "the fused launch names the wrong process group", damage=wrong_group),
    Mutant("fused_meta_dropped", "fused launches lack fsdp_bucket_members", damage=drop_fused_meta),
    Mutant("rank_dependent_packing", "odd ranks pack bucket members in another order", damage=rank_dependent_packing),
    Mutant("leaked_buffers", "fused AG buffers are copied and kept alive to the end", damage=leak_fused_buffers),
)}


def get_mutant(name: str) -> Mutant:
    """The mutant called ``name``."""
    return MUTANTS[name]
