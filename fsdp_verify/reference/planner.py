"""Reference FSDP bucket planner, written from spec section 2.

A read-only dry run: it scans the tagged collectives of one joint graph, skips what cannot be
bucketed (with the first failing rule as the reason), groups the rest by compatibility key and
greedily splits each group where fusion would be unsafe. Public names, signatures, reason
strings and messages match the original ``hyper_parallel`` planner so either can be a target.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Optional, Sequence, Union

import torch
from torch import fx, nn

from fsdp_verify.graph.ops import C10D, is_free_target
from fsdp_verify.graph.values import fresh_copy
from fsdp_verify.model.spec_params import active
from fsdp_verify.reference import predicates as helpers

_LOG = logging.getLogger(__name__)

AG_KINDS = ("fsdp_all_gather", "fsdp_all_gather_backward")
RS_KIND = "fsdp_reduce_scatter"
KINDS = (*AG_KINDS, RS_KIND)
FREE_KINDS = ("fsdp_reshard_free", "fsdp_reshard_free_backward")
BUCKET_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
SIGNATURE_META = ("comm_type", "comm_group", "param_name", "state_idx", "autograd_backward")

SKIP_REASONS = (
    "unsupported_parallel_mode", "unsupported_or_already_bucketed", "phase_mismatch",
    "unsupported_signature", "unknown_process_group", "group_size_mismatch",
    "group_metadata_mismatch", "missing_parameter_identity", "unknown_or_dynamic_shape",
    "unsupported_dtype", "unknown_device", "invalid_dim0_layout", "unsupported_wait_users",
    "no_consumer", "unsupported_reduce_op", "non_output_rs_consumer", "outside_module_plan",
)
SPLIT_REASONS = (
    "incompatible_key", "repeated_parameter_instance", "capacity", "input_distance",
    "consumer_distance", "dependency_conflict", "effect_or_storage_release",
    "intervening_collective", "phase_boundary",
)

ModuleBucketPlans = Sequence[Union[str, Sequence[str]]]

GROUP_RANKS_ERROR = "group_ranks must map PG names to distinct ordered non-negative global ranks"
POLICY_ERROR = "{} must be None or a non-negative integer (cap_bytes must be positive)"


def _plain_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- module scopes ---------------------------------------------------------------------------

def _invalid_fqn(fqn: object) -> bool:
    if not isinstance(fqn, str) or not fqn or any(char in fqn for char in "*?[]"):
        return True
    return any(not part or part != part.strip() for part in fqn.split("."))


def _overlaps(a: str, b: str) -> bool:
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def normalize_module_bucket_plans(plans: ModuleBucketPlans) -> tuple[tuple[str, ...], ...]:
    """Freeze explicit module groups; reject wildcards, empty parts and overlapping scopes."""
    if not isinstance(plans, (list, tuple)):
        raise ValueError("module_bucket_plans must be a list or tuple of module groups")
    accepted: list[str] = []
    groups = []
    for entry in plans:
        group = (entry,) if isinstance(entry, str) else entry
        if not isinstance(group, (list, tuple)) or len(group) == 0:
            raise ValueError("Each module bucket group must be a FQN or a nonempty list/tuple")
        for fqn in group:
            if _invalid_fqn(fqn):
                raise ValueError(f"Invalid explicit module FQN: {fqn!r}")
            if any(_overlaps(fqn, old) for old in accepted):
                raise ValueError(f"Overlapping module bucket scopes: {fqn!r}")
            accepted.append(fqn)
        groups.append(tuple(group))
    return tuple(groups)


def match_module_bucket(param_name: str, plans: tuple[tuple[str, ...], ...]) -> Optional[tuple[str, ...]]:
    """The first plan group holding an FQN that is a dot-boundary prefix of ``param_name``."""
    for group in plans:
        for fqn in group:
            if param_name.startswith(fqn + "."):
                return group
    return None


def build_module_bucket_plans(model: nn.Module, *, block_module_types: tuple[type[nn.Module], ...] = (),
                              module_bucket_plans: ModuleBucketPlans = ()) -> tuple[tuple[str, ...], ...]:
    """Outermost block modules of the given types, then the explicit groups, validated on ``model``."""
    if not isinstance(model, nn.Module):
        raise ValueError("model must be a torch.nn.Module")
    if not isinstance(block_module_types, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, nn.Module) for kind in block_module_types):
        raise ValueError("block_module_types must be a tuple of torch.nn.Module subclasses")
    explicit = normalize_module_bucket_plans(module_bucket_plans)
    modules = dict(model.named_modules())
    for group in explicit:
        for fqn in group:
            if fqn not in modules:
                raise ValueError(f"Module bucket scope does not exist in model: {fqn!r}")
    blocks: list[str] = []
    for fqn, module in modules.items():
        if not fqn or not block_module_types or not isinstance(module, block_module_types):
            continue
        if not any(fqn.startswith(parent + ".") for parent in blocks):
            blocks.append(fqn)
    return normalize_module_bucket_plans([*blocks, *explicit])


# -- policy and plan data --------------------------------------------------------------------

@dataclass(frozen=True)
class BucketPolicy:
    """Optional physical limits inside a module group; all None means module-driven grouping."""

    cap_bytes: Optional[int] = None
    max_input_distance: Optional[int] = None
    max_consumer_distance: Optional[int] = None

    def __post_init__(self) -> None:
        for name, floor in (("cap_bytes", 1), ("max_input_distance", 0), ("max_consumer_distance", 0)):
            value = getattr(self, name)
            if value is not None and (not _plain_int(value) or value < floor):
                raise ValueError(POLICY_ERROR.format(name))


def packed_numel(candidate: Any) -> int:
    """A member's slice of the packed buffer, from the spec's fields alone (kind and shapes), so
    rewriters also take plans whose candidates carry exactly the spec's fields (a user's planner)."""
    return math.prod(candidate.output_shape if candidate.kind == RS_KIND else candidate.input_shape)


@dataclass(frozen=True)
class Candidate:
    """One bucketable collective with its static layout and plan-time scheduling bounds."""

    launch: fx.Node = field(repr=False)
    wait: fx.Node = field(repr=False)
    source: fx.Node = field(repr=False)
    param_name: str
    state_idx: int
    kind: str
    backward: bool
    scope: str
    module_fqns: tuple[str, ...]
    group: str
    ranks: tuple[int, ...]
    dtype: torch.dtype
    device: str
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    ready: int
    first_use: int
    reduce_op: Optional[str]

    @property
    def size_bytes(self) -> int:
        """The full (larger) buffer: the AG output or the RS input."""
        return max(math.prod(self.input_shape), math.prod(self.output_shape)) * self.dtype.itemsize

    @property
    def key(self) -> tuple:
        """Everything two members must share to be fused."""
        return (self.kind, self.backward, self.scope, self.group, self.ranks, self.dtype, self.device,
                self.reduce_op)

    @property
    def local_numel(self) -> int:
        """Elements this rank contributes (AG) or receives (RS): its slice of the packed buffer."""
        return packed_numel(self)

    def describe(self) -> dict:
        """Rank-independent layout facts: no nodes, no device index."""
        return {"param_name": self.param_name, "state_idx": self.state_idx, "kind": self.kind,
                "backward": self.backward, "scope": self.scope, "module_fqns": self.module_fqns,
                "group": self.group, "ranks": self.ranks, "dtype": str(self.dtype),
                "device_type": torch.device(self.device).type, "input_shape": self.input_shape,
                "output_shape": self.output_shape, "reduce_op": self.reduce_op}


@dataclass(frozen=True)
class Bucket:
    """Members in packing order; a singleton is never rewritten."""

    members: tuple[Candidate, ...]
    bucket_id: str = ""

    @property
    def supports_ag_rewrite(self) -> bool:
        """A multi-member all-gather bucket (independent copy-out)."""
        return len(self.members) > 1 and self.members[0].kind in AG_KINDS

    @property
    def supports_rs_rewrite(self) -> bool:
        """A multi-member reduce-scatter bucket."""
        return len(self.members) > 1 and self.members[0].kind == RS_KIND

    def describe(self) -> dict:
        """Members with packed offsets, bytes and the plan-time window."""
        offset, members = 0, []
        for member in self.members:
            members.append({**member.describe(), "local_offset": offset, "local_numel": packed_numel(member)})
            offset += packed_numel(member)
        return {"bucket_id": self.bucket_id,
                "rewrite_supported": self.supports_ag_rewrite or self.supports_rs_rewrite,
                "members": members, "size_bytes": sum(m.size_bytes for m in self.members),
                "latest_input": max(m.ready for m in self.members),
                "earliest_consumer": min(m.first_use for m in self.members),
                "fusable": len(self.members) > 1}


def _digest(value: object) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


@dataclass(frozen=True)
class BucketPlan:
    """The dry-run result for one graph snapshot; ``to_dict`` stays valid after rewriting."""

    buckets: tuple[Bucket, ...]
    decisions: tuple[dict, ...]
    signature: str
    group_ranks: dict[str, tuple[int, ...]]
    wire_collectives: dict[str, list]
    module_bucket_plans: Optional[tuple[tuple[str, ...], ...]]
    summary: dict = field(default_factory=dict)

    def group_digest(self, group: str) -> str:
        """Layout, order and wire records of one group, free of rank-local facts."""
        layouts = [[member.describe() for member in bucket.members]
                   for bucket in self.buckets if bucket.members[0].group == group]
        return _digest((self.group_ranks[group], layouts, self.wire_collectives.get(group, [])))

    def to_dict(self) -> dict:
        """An independent, JSON-ready copy of every planning fact."""
        return fresh_copy({
            "buckets": [bucket.describe() for bucket in self.buckets],
            "decisions": self.decisions, "summary": self.summary, "signature": self.signature,
            "module_bucket_plans": self.module_bucket_plans, "group_ranks": self.group_ranks,
            "group_digests": {group: self.group_digest(group) for group in self.group_ranks}})


def graph_signature(graph: fx.Graph) -> str:
    """SHA-256 of every node's name, target, args, kwargs and FSDP meta: rejects stale plans."""
    records = []
    for node in graph.nodes:
        meta = {key: value for key, value in node.meta.items()
                if key.startswith("fsdp_") or key in SIGNATURE_META}
        records.append((node.name, str(node.target), str(node.args), str(node.kwargs), meta))
    return _digest(records)


def validate_group_plans(plans_by_rank: Mapping[int, Union[BucketPlan, dict]], group: str) -> None:
    """Reject exchanged reports that miss a rank or disagree on ranks or digest."""
    if not plans_by_rank:
        raise ValueError("No rank reports supplied")
    reports = {rank: plan.to_dict() if isinstance(plan, BucketPlan) else plan
               for rank, plan in plans_by_rank.items()}
    first = next(iter(reports.values()))
    expected = first["group_ranks"].get(group)
    if expected is None or set(plans_by_rank) != set(expected):
        raise ValueError(f"Expected reports for group {group} ranks {expected}")
    for report in reports.values():
        if (tuple(report["group_ranks"].get(group, ())) != tuple(expected)
                or report["group_digests"].get(group) != first["group_digests"].get(group)):
            raise ValueError(f"Bucket plans disagree for group {group}")


# -- the scan --------------------------------------------------------------------------------

def consumers_of(wait: fx.Node) -> set[fx.Node]:
    """Real (non-view) users of a wait, reached through immutable view chains."""
    return set(helpers.view_closure(wait)[1])


def _identity_reason(node: fx.Node, kind: str, groups: dict) -> Optional[str]:
    """Rules 2-7: phase, call signature, group, degree, group meta, parameter identity."""
    if bool(node.meta.get("autograd_backward", False)) != (kind != "fsdp_all_gather"):
        return "phase_mismatch"
    if node.kwargs or len(node.args) != (4 if kind == RS_KIND else 3):
        return "unsupported_signature"
    source, group = node.args[0], node.args[-1]
    if not isinstance(source, fx.Node) or not isinstance(group, str) or group not in groups:
        return "unknown_process_group"
    degree = node.args[-2]
    if not _plain_int(degree) or degree <= 1 or degree != len(groups[group]):
        return "group_size_mismatch"
    if "comm_group" in node.meta and node.meta["comm_group"] != group:
        return "group_metadata_mismatch"
    name, index = node.meta.get("param_name"), node.meta.get("state_idx")
    if not isinstance(name, str) or not name or not _plain_int(index) or index < 0:
        return "missing_parameter_identity"
    return None


def static_shape(shape: object) -> bool:
    """Rule 8: a shape of plain positive ints, at least one."""
    return (isinstance(shape, (list, tuple)) and len(shape) > 0
            and all(_plain_int(dim) and dim > 0 for dim in shape))


def _layout_reason(kind: str, degree: int, spec: dict) -> Optional[str]:
    """Rules 8-11: static shapes, bucketable dtype, known device, dim-0 sharding."""
    input_shape, output_shape = spec.get("input_shape"), spec.get("output_shape")
    if not static_shape(input_shape) or not static_shape(output_shape):
        return "unknown_or_dynamic_shape"
    dtype = spec.get("dtype")
    if not isinstance(dtype, torch.dtype) or dtype not in BUCKET_DTYPES:
        return "unsupported_dtype"
    device = spec.get("device")
    if not isinstance(device, str):
        return "unknown_device"
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return "unknown_device"
    smaller, larger = (output_shape, input_shape) if kind == RS_KIND else (input_shape, output_shape)
    if tuple(larger) != (smaller[0] * degree, *smaller[1:]):
        return "invalid_dim0_layout"
    return None


def _classify(node: fx.Node, scope: Optional[tuple], groups: dict, order: dict) -> tuple:
    """(Candidate, None) for a bucketable collective, else (None, first failing skip reason)."""
    kind = node.meta["comm_type"]
    packet = C10D.reduce_scatter_tensor if kind == RS_KIND else C10D.all_gather_into_tensor
    if not helpers.is_op(node, packet) or node.meta.get("fsdp_bucket_members"):
        return None, "unsupported_or_already_bucketed"
    reason = _identity_reason(node, kind, groups)
    if reason:
        return None, reason
    spec = node.meta.get("fsdp_bucket_spec", {})
    reason = _layout_reason(kind, node.args[-2], spec)
    if reason:
        return None, reason
    users = list(node.users)
    if len(users) != 1 or not helpers.is_op(users[0], C10D.wait_tensor):
        return None, "unsupported_wait_users"
    wait = users[0]
    consumers = consumers_of(wait)
    if not consumers:
        return None, "no_consumer"
    if kind == RS_KIND:
        if node.args[1] not in ("sum", "avg"):
            return None, "unsupported_reduce_op"
        if any(user.op != "output" for user in consumers):
            return None, "non_output_rs_consumer"
    if scope is None:
        return None, "outside_module_plan"
    group = node.args[-1]
    candidate = Candidate(
        launch=node, wait=wait, source=node.args[0], param_name=node.meta["param_name"],
        state_idx=node.meta["state_idx"], kind=kind, backward=bool(node.meta.get("autograd_backward", False)),
        scope=scope[0], module_fqns=scope, group=group, ranks=groups[group], dtype=spec["dtype"],
        device=spec["device"], input_shape=tuple(spec["input_shape"]), output_shape=tuple(spec["output_shape"]),
        ready=order[node.args[0]], first_use=min(order[user] for user in consumers),
        reduce_op=node.args[1] if kind == RS_KIND else None)
    return candidate, None


def _scope(name: object, module_plans: Optional[tuple]) -> Optional[tuple[str, ...]]:
    if not isinstance(name, str) or not name:
        return None
    if module_plans is not None:
        return match_module_bucket(name, module_plans)
    return (name.rpartition(".")[0] or f"<parameter:{name}>",)


def _wire_record(node: fx.Node) -> tuple:
    spec = dict(node.meta.get("fsdp_bucket_spec", {}))
    if "device" in spec:
        spec["device"] = str(spec["device"]).split(":", 1)[0]
    kind = node.meta.get("comm_type")
    reduce_op = node.args[1] if kind == RS_KIND and len(node.args) > 1 else None
    return (kind, node.meta.get("param_name"), node.meta.get("state_idx"), spec, reduce_op)


# -- physical bucketing ----------------------------------------------------------------------

def _membership_reason(current: list[Candidate], candidate: Candidate, policy: BucketPolicy) -> Optional[str]:
    if current[-1].key != candidate.key:
        return "incompatible_key"
    combined = [*current, candidate]
    if (len({m.param_name for m in combined}) != len(combined)
            or len({m.state_idx for m in combined}) != len(combined)):
        return "repeated_parameter_instance"
    if policy.cap_bytes is not None and sum(m.size_bytes for m in combined) > policy.cap_bytes:
        return "capacity"
    return None


def _window_reason(current: list[Candidate], candidate: Candidate, policy: BucketPolicy) -> Optional[str]:
    combined = [*current, candidate]
    ready = [m.ready for m in combined]
    first_use = [m.first_use for m in combined]
    if policy.max_input_distance is not None and max(ready) - min(ready) > policy.max_input_distance:
        return "input_distance"
    if policy.max_consumer_distance is not None and max(first_use) - min(first_use) > policy.max_consumer_distance:
        return "consumer_distance"
    # Only views may move past the latest input; real consumers (frees too) must stay after it.
    if max(ready) >= min(first_use):
        return "dependency_conflict"
    return None


def _owned_free(node: fx.Node, candidate: Candidate, combined: list[Candidate]) -> bool:
    """A free of exactly one AG member's wait: copy-out keeps it crossable."""
    return (candidate.kind != RS_KIND and node.op == "call_function" and is_free_target(node.target)
            and not node.kwargs and any(node.args == (member.wait,) for member in combined))


def _foreign_wait(node: fx.Node, owned: set) -> bool:
    """The wait of a collective that is not one of the bucket's launches."""
    return helpers.is_op(node, C10D.wait_tensor) and bool(node.args) and node.args[0] not in owned


def _span_reason(current: list[Candidate], candidate: Candidate, nodes: list, order: dict) -> Optional[str]:
    combined = [*current, candidate]
    owned = {m.launch for m in combined}
    preparations: set[fx.Node] = set()
    for member in combined:
        if member.kind == RS_KIND:
            preparations.update(helpers.rs_layout_preparation(member.launch))
    for node in nodes[order[current[0].launch] + 1:order[candidate.launch]]:
        if node in preparations:
            continue
        if node.meta.get("comm_type") in FREE_KINDS:
            if not _owned_free(node, candidate, combined):
                return "effect_or_storage_release"
        elif helpers.is_barrier(node) or (active().foreign_waits_are_barriers and _foreign_wait(node, owned)):
            return "effect_or_storage_release"
        if helpers.is_collective(node) and node not in owned:
            return "intervening_collective"
        if (node.op not in ("placeholder", "get_attr", "output")
                and bool(node.meta.get("autograd_backward", False)) != candidate.backward):
            return "phase_boundary"
    return None


def split_reason(current: list[Candidate], candidate: Candidate, nodes: list, order: dict,
                 policy: BucketPolicy) -> Optional[str]:
    """Why ``candidate`` cannot join ``current`` (first failing check of spec 2.7), or None."""
    return (_membership_reason(current, candidate, policy) or _window_reason(current, candidate, policy)
            or _span_reason(current, candidate, nodes, order))


def _finalize(members: list[Candidate]) -> Bucket:
    return Bucket(tuple(sorted(members, key=lambda m: (m.state_idx, m.param_name))))


def _physical_buckets(candidates: list[Candidate], nodes: list, order: dict, policy: BucketPolicy,
                      decisions: list) -> list[Bucket]:
    by_key: dict[tuple, list[Candidate]] = {}
    for candidate in candidates:
        by_key.setdefault(candidate.key, []).append(candidate)
    buckets = []
    for group in by_key.values():
        current: list[Candidate] = []
        for candidate in group:
            reason = split_reason(current, candidate, nodes, order, policy) if current else None
            if reason:
                buckets.append(_finalize(current))
                decisions.append({"node": candidate.launch.name, "previous_node": current[-1].launch.name,
                                  "action": "split", "reason": reason})
                current = []
            current.append(candidate)
            if policy.cap_bytes is not None and candidate.size_bytes > policy.cap_bytes:
                decisions.append({"node": candidate.launch.name, "action": "singleton", "reason": "oversized"})
        if current:
            buckets.append(_finalize(current))
    buckets.sort(key=lambda bucket: min(order[m.launch] for m in bucket.members))
    return buckets


def _freeze_group_ranks(group_ranks: Mapping) -> dict[str, tuple[int, ...]]:
    groups = {name: tuple(ranks) for name, ranks in group_ranks.items()}
    for name, ranks in groups.items():
        if (not isinstance(name, str) or not ranks or len(set(ranks)) != len(ranks)
                or not all(_plain_int(rank) and rank >= 0 for rank in ranks)):
            raise ValueError(GROUP_RANKS_ERROR)
    return groups


def _unmatched(selected: dict) -> list[str]:
    return [path for scope, names in selected.items() for path in scope
            if not any(name.startswith(path + ".") for name in names)]


def plan_fsdp_buckets(graph_module: fx.GraphModule, *, group_ranks: Mapping[str, tuple[int, ...]],
                      module_bucket_plans: Optional[ModuleBucketPlans] = None,
                      policy: Optional[BucketPolicy] = None, pp_degree: int = 1,
                      dp_mode: str = "fsdp") -> BucketPlan:
    """Plan physical buckets for the tagged FSDP collectives of ``graph_module``; never mutates it."""
    policy = policy or BucketPolicy()
    module_plans = None if module_bucket_plans is None else normalize_module_bucket_plans(module_bucket_plans)
    groups = _freeze_group_ranks(group_ranks)
    graph_module.graph.lint()
    nodes = list(graph_module.graph.nodes)
    order = {node: index for index, node in enumerate(nodes)}
    decisions: list[dict] = []
    candidates: list[Candidate] = []
    wire: dict[str, list] = {group: [] for group in groups}
    selected: dict[tuple, set] = {scope: set() for scope in module_plans or ()}
    counts: Counter = Counter()
    tagged = 0
    for node in nodes:
        if node.meta.get("comm_type") not in KINDS:
            continue
        tagged += 1
        name = node.meta.get("param_name")
        scope = _scope(name, module_plans)
        if scope is not None:
            selected.setdefault(scope, set()).add(name)
            counts[scope] += 1
        group = node.args[-1] if node.args else None
        if isinstance(group, str) and group in wire:
            wire[group].append(_wire_record(node))
        if pp_degree != 1 or dp_mode != "fsdp":
            candidate, reason = None, "unsupported_parallel_mode"
        else:
            candidate, reason = _classify(node, scope, groups, order)
        if reason:
            decisions.append({"node": node.name, "action": "skip", "reason": reason})
        else:
            candidates.append(candidate)
    buckets = _physical_buckets(candidates, nodes, order, policy, decisions)
    signature = graph_signature(graph_module.graph)
    buckets = [replace(bucket, bucket_id=f"{signature[:12]}:bucket_{index}") for index, bucket in enumerate(buckets)]
    summary = {
        "tagged_collectives": tagged,
        "selected_parameters": sum(len(names) for names in selected.values()),
        "selected_collectives": sum(counts.values()),
        "candidate_collectives": len(candidates),
        "buckets": len(buckets),
        "singletons": sum(len(bucket.members) == 1 for bucket in buckets),
        "rs_rewrite_candidates": sum(bucket.supports_rs_rewrite for bucket in buckets),
        "ag_rewrite_candidates": sum(bucket.supports_ag_rewrite for bucket in buckets),
        "reason_counts": {action: dict(Counter(d["reason"] for d in decisions if d["action"] == action))
                          for action in ("skip", "split", "singleton")},
        "unmatched_module_paths": _unmatched(selected) if module_plans is not None else [],
    }
    plan = BucketPlan(tuple(buckets), tuple(decisions), signature, groups, wire, module_plans, summary)
    _log(plan, selected, counts, order)
    return plan


def _log(plan: BucketPlan, selected: dict, counts: Counter, order: dict) -> None:
    _LOG.info("FSDP bucket plan: graph=%s summary=%s", plan.signature[:12], plan.summary)
    if not _LOG.isEnabledFor(logging.DEBUG):
        return
    for scope, names in selected.items():
        _LOG.debug("FSDP bucket scope: graph=%s modules=%s parameters=%s collectives=%s",
                   plan.signature[:12], scope, sorted(names), counts[scope])
    for decision in plan.decisions:
        _LOG.debug("FSDP bucket decision: graph=%s %s", plan.signature[:12], decision)
    for bucket in plan.buckets:
        first = bucket.members[0]
        action = ("rewrite_rs" if bucket.supports_rs_rewrite
                  else "rewrite_ag_copy_out" if bucket.supports_ag_rewrite else "singleton")
        _LOG.debug("FSDP bucket planned: bucket=%s modules=%s kind=%s group=%s ranks=%s dtype=%s device=%s "
                   "reduce_op=%s members=%s input_span=%s original_launches=%s action=%s",
                   bucket.bucket_id, first.module_fqns, first.kind, first.group, first.ranks, first.dtype,
                   first.device, first.reduce_op, [m.param_name for m in bucket.members],
                   (min(m.ready for m in bucket.members), max(m.ready for m in bucket.members)),
                   [(m.launch.name, order[m.launch]) for m in bucket.members], action)
