"""Planner bugs: one rule of the reference planner patched for the duration of a call."""

from __future__ import annotations

import dataclasses
import logging
import operator
from collections import Counter
from typing import Callable

import torch
from torch import fx

from fsdp_verify.reference import planner, predicates
from fsdp_verify.targets.mutants.base import Patch


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


def size_from_shard_by_shift() -> list[Patch]:
    """The full buffer's size from the shard's, multiplied by a shift of log2(degree) rounded down:
    exact on every power of two, too small on 3, 5 and 6 ranks (the cap then admits too much, and
    ``describe`` reports the wrong size)."""
    def size_bytes(candidate) -> int:
        shift = len(candidate.ranks).bit_length() - 1
        return (planner.packed_numel(candidate) << shift) * candidate.dtype.itemsize
    return [(planner.Candidate, "size_bytes", property(size_bytes))]


def module_prefix_without_dot() -> list[Patch]:
    """A module plan's FQN matches a parameter by a bare prefix: ``blocks.1`` takes ``blocks.10.w0``."""
    def match_module_bucket(param_name, plans):
        return next((group for group in plans for fqn in group if param_name.startswith(fqn)), None)
    return [(planner, "match_module_bucket", match_module_bucket)]


def other_namespaces_unread() -> list[Patch]:
    """``is_op`` accepts the packet itself and its overloads only, whatever the accepted launch
    namespaces: a wait of the legacy ``c10d_functional`` packet is never the kind's own wait."""
    def is_op(node: fx.Node, packet) -> bool:
        target = node.target if node.op == "call_function" else None
        return target is packet or getattr(target, "overloadpacket", None) is packet
    return [(predicates, "is_op", is_op)]


def _hash_order_members() -> list[Patch]:
    """Bucket members in the iteration order of a set of their names: string hashes follow
    ``PYTHONHASHSEED``, so every process orders them its own way (and one process always the same)."""
    def finalize(members):
        by_name: dict = {}
        for member in members:
            by_name.setdefault(member.param_name, []).append(member)
        order = list({member.param_name for member in members})  # set iteration: process-local
        return planner.Bucket(tuple(m for name in order for m in by_name[name]))
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


def cap_exclusive() -> list[Patch]:
    """A bucket whose bytes equal the cap is split: the cap taken as exclusive (``>=`` for ``>``)."""
    original = planner.split_reason

    def split_reason(current, candidate, nodes, order, policy):
        if policy.cap_bytes is not None and policy.cap_bytes > 1:
            policy = dataclasses.replace(policy, cap_bytes=policy.cap_bytes - 1)
        return original(current, candidate, nodes, order, policy)
    return [(planner, "split_reason", split_reason)]


def _device_dependent(rank: int) -> list[Patch]:
    """Ranks on odd device indices split every bucket (grouping depends on the device index)."""
    if rank % 2 == 0:
        return []
    original = planner.split_reason
    return [(planner, "split_reason", lambda *args: original(*args) or "capacity")]


# -- plan content: what the plan reports, with the grouping itself right ----------------------

def _with_decisions(plan: planner.BucketPlan, decisions: list[dict]) -> planner.BucketPlan:
    """``plan`` with other decisions and the reason counts its summary derives from them."""
    counts = {action: dict(Counter(d["reason"] for d in decisions if d["action"] == action))
              for action in ("skip", "split", "singleton")}
    return dataclasses.replace(plan, decisions=tuple(decisions), summary={**plan.summary, "reason_counts": counts})


def misreported_skip(reason: str) -> Callable[[planner.BucketPlan], planner.BucketPlan]:
    """Skips for ``reason`` are reported under the next rule's name (the rule's identity is lost)."""
    wrong = planner.SKIP_REASONS[(planner.SKIP_REASONS.index(reason) + 1) % len(planner.SKIP_REASONS)]

    def edit(plan: planner.BucketPlan) -> planner.BucketPlan:
        return _with_decisions(plan, [{**d, "reason": wrong} if d["action"] == "skip" and d["reason"] == reason
                                      else d for d in plan.decisions])
    return edit


def splits_before_skips(plan: planner.BucketPlan) -> planner.BucketPlan:
    """Split and singleton decisions listed before the skips (spec 2.8 orders skips first)."""
    return _with_decisions(plan, sorted(plan.decisions, key=lambda d: d["action"] == "skip"))


def skip_listed_twice(plan: planner.BucketPlan) -> planner.BucketPlan:
    """The first skip decision appears twice (counted twice too)."""
    skips = [d for d in plan.decisions if d["action"] == "skip"]
    return _with_decisions(plan, [*plan.decisions, dict(skips[0])]) if skips else plan


def parameters_counted_per_collective(plan: planner.BucketPlan) -> planner.BucketPlan:
    """``selected_parameters`` counts collectives, not distinct names."""
    return dataclasses.replace(plan, summary={**plan.summary,
                                              "selected_parameters": plan.summary["selected_collectives"]})


@dataclasses.dataclass(frozen=True)
class _ConstantDigestPlan(planner.BucketPlan):
    """Every group digest is one constant: ranks always agree, whatever they planned."""

    def group_digest(self, group: str) -> str:
        return "0" * 64


@dataclasses.dataclass(frozen=True)
class _LayoutOnlyDigestPlan(planner.BucketPlan):
    """Group digests leave out the wire records: skipped collectives no longer have to agree."""

    def group_digest(self, group: str) -> str:
        layouts = [[member.describe() for member in bucket.members]
                   for bucket in self.buckets if bucket.members[0].group == group]
        return planner._digest((self.group_ranks[group], layouts, []))


def _describe_patched(change: Callable[[dict], dict]) -> Callable[[planner.BucketPlan], planner.BucketPlan]:
    """Members whose ``describe()`` is altered by ``change`` (in the plan's report and its digests)."""
    class Altered(planner.Candidate):
        def describe(self) -> dict:
            return change(super().describe())

    def edit(plan: planner.BucketPlan) -> planner.BucketPlan:
        def alter(member: planner.Candidate) -> planner.Candidate:
            return Altered(**{f.name: getattr(member, f.name) for f in dataclasses.fields(member)})
        return dataclasses.replace(plan, buckets=tuple(dataclasses.replace(b, members=tuple(map(alter, b.members)))
                                                       for b in plan.buckets))
    return edit


def _fqns_flattened(described: dict) -> dict:
    return {**described, "module_fqns": ".".join(described["module_fqns"])}


def _shapes_swapped(described: dict) -> dict:
    return {**described, "input_shape": described["output_shape"], "output_shape": described["input_shape"]}


# -- plans the rewriter does not follow (it applies an edit of the plan it reported) ----------

def _edit_buckets(plan: planner.BucketPlan, change: Callable[[tuple], tuple]) -> planner.BucketPlan:
    return dataclasses.replace(plan, buckets=tuple(
        dataclasses.replace(b, members=change(b.members)) if len(b.members) > 1 else b for b in plan.buckets))


def members_reversed(plan: planner.BucketPlan) -> planner.BucketPlan:
    """Members packed in reverse order (the copy-outs agree, so every value is right)."""
    return _edit_buckets(plan, lambda members: tuple(reversed(members)))


def _window(input_inclusive: bool, dependency_inclusive: bool) -> list[Patch]:
    """``_window_reason`` with each comparison at its boundary as given (the spec's: an input distance
    limit is inclusive, a source at a first consumer conflicts)."""
    def window(current: list, candidate: planner.Candidate, policy: planner.BucketPolicy) -> str | None:
        combined = [*current, candidate]
        ready, first_use = [m.ready for m in combined], [m.first_use for m in combined]
        spread = max(ready) - min(ready)
        if policy.max_input_distance is not None and (spread > policy.max_input_distance if input_inclusive
                                                      else spread >= policy.max_input_distance):
            return "input_distance"
        if policy.max_consumer_distance is not None and max(first_use) - min(first_use) > policy.max_consumer_distance:
            return "consumer_distance"
        conflict = max(ready) >= min(first_use) if dependency_inclusive else max(ready) > min(first_use)
        return "dependency_conflict" if conflict else None
    return [(planner, "_window_reason", window)]


def window_exclusive() -> list[Patch]:
    """The dependency window splits only where the latest source comes after the earliest consumer
    (``>`` for ``>=``): a member whose source is another member's first consumer (ready == first use)
    joins it, and the fused bucket waits on itself."""
    return _window(True, False)


def input_distance_exclusive() -> list[Patch]:
    """The input distance limit is exclusive (``>=`` for ``>``): a pair exactly at the limit splits."""
    return _window(False, True)


def reduce_op_as_node(plan: planner.BucketPlan) -> planner.BucketPlan:
    """Each reduce-scatter member's reduce op is the launch's first argument (its source node) where
    the spec wants the op's name: the plan holds a graph node, which no pipe can pickle."""
    return dataclasses.replace(plan, buckets=tuple(
        dataclasses.replace(b, members=tuple(dataclasses.replace(m, reduce_op=m.source) if m.kind == planner.RS_KIND
                                             else m for m in b.members)) for b in plan.buckets))


def last_member_left_out(plan: planner.BucketPlan) -> planner.BucketPlan:
    """The last member of each multi-member bucket stays its own launch."""
    return _edit_buckets(plan, lambda members: members[:-1])


def _marks(key: str, fused_only: bool = False) -> list[Patch]:
    """Classifying a collective writes FSDP meta ``key`` into the graph being planned (impure).
    ``fused_only``: only on fused launches, so only from round 2 on (a fresh original has none,
    and only the target's own later plans, or a re-plan of its rewrite, show it)."""
    original = planner._classify

    def classify(node, *args):
        if not fused_only or node.meta.get("fsdp_bucket_members"):
            node.meta[key] = True
        return original(node, *args)
    return [(planner, "_classify", classify)]


def alternating_plans() -> Callable[[planner.BucketPlan], planner.BucketPlan]:
    """Every other plan lists its buckets in reverse: planning the same graph twice disagrees."""
    calls = Counter()

    def edit(plan: planner.BucketPlan) -> planner.BucketPlan:
        calls["plans"] += 1
        return dataclasses.replace(plan, buckets=type(plan.buckets)(reversed(plan.buckets))) \
            if calls["plans"] % 2 == 0 else plan
    return edit


def barrier_without_writes() -> list[Patch]:
    """``is_barrier`` that counts FX side effects and frees but not ops whose schema writes an
    argument (in-place and ``out=`` variants): a span holding ``neg_`` on a member's source fuses."""
    from fsdp_verify.reference import predicates
    original = predicates.is_barrier

    def is_barrier(node) -> bool:
        schema = predicates._schema(node.target) if node.op == "call_function" else None
        if schema is not None and any(arg.alias_info is not None and arg.alias_info.is_write
                                      for arg in schema.arguments):
            return False
        return original(node)
    return [(predicates, "is_barrier", is_barrier)]


def module_plans_built(*, outermost: bool = True, scopes_checked: bool = True, tuple_required: bool = True,
                       dot_boundary: bool = True, explicit_first: bool = False, root_skipped: bool = True) -> list[Patch]:
    """``build_module_bucket_plans`` with one of its spec 2.2 rules off: nested blocks kept, explicit
    scopes never looked up in the model, block types taken from any sequence, a block's
    descendants found by a bare prefix (``layers.1`` hides ``layers.10``), the explicit groups
    put before the blocks (the order says who owns which parameters), or the model itself taken
    for a block where its type is one (its FQN is empty, which the plans refuse)."""
    from torch import nn

    def build(model, *, block_module_types=(), module_bucket_plans=()):
        if not isinstance(model, nn.Module):
            raise ValueError("model must be a torch.nn.Module")
        kinds = block_module_types
        if (tuple_required and not isinstance(kinds, tuple)) or not all(
                isinstance(kind, type) and issubclass(kind, nn.Module) for kind in kinds):
            raise ValueError("block_module_types must be a tuple of torch.nn.Module subclasses")
        kinds = tuple(kinds)
        explicit = planner.normalize_module_bucket_plans(module_bucket_plans)
        modules = dict(model.named_modules())
        for fqn in (f for group in explicit for f in group):
            if scopes_checked and fqn not in modules:
                raise ValueError(f"Module bucket scope does not exist in model: {fqn!r}")
        blocks: list[str] = []
        for fqn, module in modules.items():
            if (fqn or not root_skipped) and kinds and isinstance(module, kinds) and not (outermost and any(
                    fqn.startswith(parent + "." if dot_boundary else parent) for parent in blocks)):
                blocks.append(fqn)
        return planner.normalize_module_bucket_plans([*explicit, *blocks] if explicit_first else [*blocks, *explicit])
    return [(planner, "build_module_bucket_plans", build)]


def cap_zero_accepted() -> list[Patch]:
    """The policy admits ``cap_bytes=0`` (the floor of the distances applied to the cap too)."""
    def post_init(self) -> None:
        for name in ("cap_bytes", "max_input_distance", "max_consumer_distance"):
            value = getattr(self, name)
            if value is not None and (not planner._plain_int(value) or value < 0):
                raise ValueError(planner.POLICY_ERROR.format(name))
    return [(planner.BucketPolicy, "__post_init__", post_init)]


def input_distance_floor_lowered() -> list[Patch]:
    """The policy admits ``max_input_distance=-1`` (its floor taken one below the consumer distance's)."""
    def post_init(self) -> None:
        for name, floor in (("cap_bytes", 1), ("max_input_distance", -1), ("max_consumer_distance", 0)):
            value = getattr(self, name)
            if value is not None and (not planner._plain_int(value) or value < floor):
                raise ValueError(planner.POLICY_ERROR.format(name))
    return [(planner.BucketPolicy, "__post_init__", post_init)]


def fqn_type_unchecked() -> list[Patch]:
    """An explicit FQN is checked for wildcards before its type: an int raises TypeError."""
    def invalid(fqn) -> bool:
        if not fqn or any(char in fqn for char in "*?[]"):
            return True
        return any(not part or part != part.strip() for part in fqn.split("."))
    return [(planner, "_invalid_fqn", invalid)]


def fqn_trailing_space_accepted() -> list[Patch]:
    """An explicit FQN part is refused for whitespace only where it sorts before its stripped self
    (leading whitespace): ``blocks.0 `` is accepted as a module that no model has."""
    def invalid(fqn) -> bool:
        if not isinstance(fqn, str) or not fqn or any(char in fqn for char in "*?[]"):
            return True
        return any(not part or part < part.strip() for part in fqn.split("."))
    return [(planner, "_invalid_fqn", invalid)]


def degree_rule_weakened(accepts: Callable[[object, int], bool]) -> list[Patch]:
    """Rule 5 of spec 2.5 passes a degree ``accepts(degree, group size)`` lets through: the launch is
    judged by the later rules as if its degree were the group's size (a group of one rank as if it
    had a second)."""
    original = planner._identity_reason

    def identity_reason(node, kind, groups):
        found = original(node, kind, groups)
        group = node.args[-1] if node.args else None
        if found != "group_size_mismatch" or group not in groups or not accepts(node.args[-2], len(groups[group])):
            return found
        ranks = tuple(groups[group]) + (-1,) * max(0, 2 - len(groups[group]))
        saved = node.args
        node.args = (*saved[:-2], len(ranks), saved[-1])
        try:
            return original(node, kind, {**groups, group: ranks})
        finally:
            node.args = saved
    return [(planner, "_identity_reason", identity_reason)]


def group_meta_compared_by_order() -> list[Patch]:
    """Rule 6 of spec 2.5 compares the meta's group name with the launch's by order (``>``, not
    ``!=``): a meta naming a group that sorts before the launch's (the default group, ``"0"``) passes,
    and the launch is judged by the later rules as if its meta named its own group."""
    original = planner._identity_reason

    def identity_reason(node, kind, groups):
        found = original(node, kind, groups)
        group, named = node.args[-1] if node.args else None, node.meta.get("comm_group")
        if found != "group_metadata_mismatch" or not isinstance(named, str) or not isinstance(group, str) \
                or not named < group:
            return found
        node.meta["comm_group"] = group
        try:
            return original(node, kind, groups)
        finally:
            node.meta["comm_group"] = named
    return [(planner, "_identity_reason", identity_reason)]


def dim0_layout_by_order() -> list[Patch]:
    """Rule 11 compares the larger shape with the expected one by order (``<``), not equality: a shape
    too small is refused, one too large passes."""
    original = planner._layout_reason

    def layout_reason(kind, degree, spec):
        found = original(kind, degree, spec)
        if found != "invalid_dim0_layout":
            return found
        smaller, larger = ((spec["output_shape"], spec["input_shape"]) if kind == planner.RS_KIND
                           else (spec["input_shape"], spec["output_shape"]))
        return found if tuple(larger) < (smaller[0] * degree, *smaller[1:]) else None
    return [(planner, "_layout_reason", layout_reason)]


def unread_launch_without_consumer() -> list[Patch]:
    """The wait-users rule counts only a second user: a launch nothing reads passes it and is skipped
    by the next rule that looks, as having no consumer (the reason names the wrong defect)."""
    original = planner._classify

    def classify(node, scope, groups, order):
        found = original(node, scope, groups, order)
        if found[1] == "unsupported_wait_users" and not node.users:
            return None, "no_consumer"
        return found
    return [(planner, "_classify", classify)]


def kinds_by_identity() -> list[Patch]:
    """Tagged launches recognised by identity with the planner's own kind constants (``is``): right on
    graphs tagged from those interned constants, wrong on graphs loaded from disk."""
    original = planner._identity_reason

    def identity_reason(node, kind, groups):
        if not any(kind is known for known in planner.KINDS):
            return "unsupported_signature"
        return original(node, kind, groups)
    return [(planner, "_identity_reason", identity_reason)]


def rs_prep_not_excluded() -> list[Patch]:
    """The span checks of spec 2.7 see an RS bucket's own preparation chains as ordinary nodes: a
    chain's source carries no phase tag (spec 1.7), so it splits the bucket as a phase flip."""
    original = planner._span_reason

    def span_reason(current, candidate, nodes, order):
        saved = planner.helpers.rs_layout_preparation
        planner.helpers.rs_layout_preparation = lambda launch: []
        try:
            return original(current, candidate, nodes, order)
        finally:
            planner.helpers.rs_layout_preparation = saved
    return [(planner, "_span_reason", span_reason)]


def prep_owner_by_identity() -> list[Patch]:
    """The RS preparation walk compares each chain node's tag with the owner by identity (``is``):
    right where the tags share one string object, wrong on graphs loaded from disk or from another
    process, where the chain comes out empty and its untagged source splits the bucket as a phase
    flip."""
    from fsdp_verify.reference import predicates
    original = predicates.rs_layout_preparation

    def by_identity(launch):
        chain = original(launch)
        owner = launch.all_input_nodes[0].meta.get("fsdp_reduce_scatter_prepare") if chain else None
        return chain if all(node.meta.get("fsdp_bucket_prepare") is owner for node in chain) else []
    return [(predicates, "rs_layout_preparation", by_identity)]


def prep_owner_by_prefix() -> list[Patch]:
    """The RS preparation walk takes a chain for the launch's own where the owner and the launch's
    bucket id share their signature prefix (``<signature[:12]>:``): a chain another bucket of the
    same round prepared is then crossed."""
    from fsdp_verify.model import spec_params
    from fsdp_verify.reference import predicates
    original = predicates.rs_layout_preparation

    def by_prefix(launch):
        chain = original(launch)
        inputs = launch.all_input_nodes
        owner = inputs[0].meta.get("fsdp_reduce_scatter_prepare") if len(inputs) == 1 else None
        bucket = launch.meta.get("fsdp_bucket_id")
        if chain or not isinstance(owner, str) or not isinstance(bucket, str) or \
                owner.partition(":")[0] != bucket.partition(":")[0]:
            return chain
        with spec_params.use(dataclasses.replace(spec_params.active(), rs_owner_is_bucket_id=False)):
            return original(launch)
    return [(predicates, "rs_layout_preparation", by_prefix)]


def prep_forward_source_accepted() -> list[Patch]:
    """The RS preparation walk refuses a source tagged forward only where it also has other users
    (the two guards of spec 1.7 joined as one): a private source tagged forward starts a chain."""
    from fsdp_verify.reference import predicates
    original = predicates.rs_layout_preparation

    def joined(launch):
        inputs = launch.all_input_nodes
        source = inputs[0] if len(inputs) == 1 else None
        if source is None or source.meta.get("autograd_backward") is not False or set(source.users) != {launch}:
            return original(launch)
        del source.meta["autograd_backward"]  # read as untagged for the walk, then put back
        try:
            return original(launch)
        finally:
            source.meta["autograd_backward"] = False
    return [(predicates, "rs_layout_preparation", joined)]


def prep_walk_stops_at_boundary() -> list[Patch]:
    """The RS preparation walk stops at the first node outside the chain it pops, not only skips it:
    a chain of two branches (spec 4.3's halves) loses the branch still on the stack."""
    from fsdp_verify.reference import predicates
    original = predicates.rs_layout_preparation

    def stopping(launch):
        chain = original(launch)
        if not chain:
            return chain
        owner = chain[0].meta.get("fsdp_bucket_prepare")
        kept, stack, seen = [], [chain[0]], set()
        while stack:
            node = stack.pop()
            if node in seen or node.meta.get("fsdp_bucket_prepare") != owner:
                break
            seen.add(node)
            kept.append(node)
            stack.extend(node.all_input_nodes)
        return kept
    return [(predicates, "rs_layout_preparation", stopping)]


def any_getitem_is_a_view() -> list[Patch]:
    """``is_view`` that takes every ``getitem`` of a node for a view, not only one of a multi-output view
    op: a symbolic trace's ``w[0]`` of a gathered parameter is then no consumer, so the first use the
    dependency window reads comes later than it is."""
    from fsdp_verify.reference import predicates
    original = predicates.is_view

    def is_view(node: fx.Node) -> bool:
        if node.op == "call_function" and node.target is operator.getitem and node.args \
                and isinstance(node.args[0], fx.Node):
            return True
        return original(node)
    return [(predicates, "is_view", is_view)]


def schemaless_calls_are_views() -> list[Patch]:
    """``is_view`` that takes a call with no operator schema (Python's ``operator.neg``) for a view:
    the walk to consumers passes through it, so what reads a gradient through ``-`` looks unread."""
    from fsdp_verify.reference import predicates
    original = predicates._aliases_without_write
    return [(predicates, "_aliases_without_write", lambda schema: True if schema is None else original(schema))]


def negative_dims_accepted() -> list[Patch]:
    """Rule 8 refuses a dim of 0 but not a negative one (``dim != 0``): a spec naming a shape of -1
    elements passes, and its bucket is planned from a negative size."""
    def static_shape(shape) -> bool:
        return (isinstance(shape, (list, tuple)) and len(shape) > 0
                and all(planner._plain_int(dim) and dim != 0 for dim in shape))
    return [(planner, "static_shape", static_shape)]


def debug_log_reads_second_member() -> list[Patch]:
    """The per-bucket DEBUG line names a bucket's first two members (``members[1]``): a bucket of one
    raises IndexError, but only with the planner's logger at DEBUG, which a run leaves off unless it
    turns the target's loggers on (spec 2.13: per-bucket lines are DEBUG)."""
    correct = planner._log

    def log(plan, selected: dict, counts: Counter, order: dict) -> None:
        if planner._LOG.isEnabledFor(logging.DEBUG):
            for bucket in plan.buckets:
                planner._LOG.debug("FSDP bucket pair: %s %s", bucket.members[0].param_name,
                                   bucket.members[1].param_name)
        correct(plan, selected, counts, order)
    return [(planner, "_log", log)]


def estimates_with_random_inputs() -> list[Patch]:
    """The planner estimates each bucket's cost by running its copy on random inputs, as runtime
    estimators that benchmark do: the buckets are the spec's, but each estimate draws from torch's
    global generator, so every random number the step draws afterwards (dropout masks) shifts."""
    correct = planner._physical_buckets

    def physical(*args, **kwargs) -> list:
        buckets = correct(*args, **kwargs)
        for bucket in buckets:
            torch.cat([torch.randn(2) for _ in bucket.members])  # the estimate itself is thrown away
        return buckets
    return [(planner, "_physical_buckets", physical)]
