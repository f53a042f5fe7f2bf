"""Sub-conditions of every skip and split reason: which ``or`` branch of a rule fired.

A reason counts as reached as soon as one of its branches is, so reason coverage hides
generators that only ever trip one branch (a degree of 4 where the rule also rejects True and 1).
Each reason of spec sections 2.5 and 2.7 is split here at every "or" into named sub-conditions,
in the spec's evaluation order. Given a case's rank-0 module and a decision the planner made,
``classify`` names the first sub-condition of the decision's reason that holds. The predicates
read node args and meta directly (the oracle's graph facts, never the planner's helpers), so a
decision no sub-condition explains is reported as such.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from torch import fx

from fsdp_verify.model.case import PlanArgs
from fsdp_verify.checks.graph_facts import (FREE_KINDS, c10d_name, has_effect, is_free, is_launch, is_wait, launch_name,
                                  real_consumers,
                                  rs_prep_chain)

RS = "fsdp_reduce_scatter"
BUCKET_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class Site:
    """What a predicate may read: the decision's node, its graph, the plan's arguments and groups,
    and, for a split, the members already in the bucket it was refused (graph order)."""

    node: fx.Node
    nodes: tuple[fx.Node, ...]
    index: dict
    args: PlanArgs
    groups: dict
    current: tuple[fx.Node, ...] = ()


@dataclass(frozen=True)
class SubCondition:
    """One ``or`` branch of a rule; ``unreachable`` says why no runnable graph can trip it."""

    action: str
    reason: str
    name: str
    holds: Callable[[Site], bool]
    unreachable: str = ""

    @property
    def key(self) -> str:
        """``reason/name``, as reports print it."""
        return f"{self.reason}/{self.name}"


def _int(value: Any) -> bool:
    return type(value) is int


def _meta(site: Site, key: str, default: Any = None) -> Any:
    return site.node.meta.get(key, default)


def _spec(site: Site) -> dict:
    return _meta(site, "fsdp_bucket_spec", {})


def _backward(node: fx.Node) -> bool:
    return bool(node.meta.get("autograd_backward", False))


# -- skip rules (spec 2.5) -------------------------------------------------------------------

def _shape_subconditions(field: str) -> list[tuple[str, Callable[[Site], bool]]]:
    """The four ways one shape field fails rule 8 (the first bad dimension decides the last two)."""

    def first_bad(site: Site) -> Any:
        return next((d for d in _spec(site)[field] if not (_int(d) and d > 0)), None)

    short = field.split("_")[0]
    return [
        (f"{short}_not_a_sequence", lambda s: not isinstance(_spec(s).get(field), (list, tuple))),
        (f"{short}_empty", lambda s: len(_spec(s)[field]) == 0),
        (f"{short}_dim_not_int", lambda s: not _int(first_bad(s)) and first_bad(s) is not None),
        (f"{short}_dim_not_positive", lambda s: _int(first_bad(s))),
    ]


def _wait_users(site: Site) -> list[fx.Node]:
    return list(site.node.users)


_SKIPS: list[tuple[str, str, Callable[[Site], bool]]] = [
    ("unsupported_parallel_mode", "pp_degree", lambda s: s.args.pp_degree != 1),
    ("unsupported_parallel_mode", "dp_mode", lambda s: s.args.dp_mode != "fsdp"),
    ("unsupported_or_already_bucketed", "wrong_op_for_kind",
     lambda s: c10d_name(s.node) != ("reduce_scatter_tensor" if _meta(s, "comm_type") == RS
                                     else "all_gather_into_tensor")),
    ("unsupported_or_already_bucketed", "already_bucketed", lambda s: bool(_meta(s, "fsdp_bucket_members"))),
    ("phase_mismatch", "forward_gather_tagged_backward",
     lambda s: _meta(s, "comm_type") == "fsdp_all_gather" and _backward(s.node)),
    ("phase_mismatch", "backward_gather_untagged",
     lambda s: _meta(s, "comm_type") == "fsdp_all_gather_backward" and not _backward(s.node)),
    ("phase_mismatch", "reduce_scatter_untagged", lambda s: _meta(s, "comm_type") == RS and not _backward(s.node)),
    ("unsupported_signature", "kwargs", lambda s: bool(s.node.kwargs)),
    ("unsupported_signature", "positional_count",
     lambda s: len(s.node.args) != (4 if _meta(s, "comm_type") == RS else 3)),
    ("unknown_process_group", "source_not_node", lambda s: not isinstance(s.node.args[0], fx.Node)),
    ("unknown_process_group", "group_not_str", lambda s: not isinstance(s.node.args[-1], str)),
    ("unknown_process_group", "group_unknown", lambda s: s.node.args[-1] not in s.groups),
    ("group_size_mismatch", "degree_not_int", lambda s: not _int(s.node.args[-2])),
    ("group_size_mismatch", "degree_at_most_1", lambda s: s.node.args[-2] <= 1),
    ("group_size_mismatch", "degree_not_group_size", lambda s: s.node.args[-2] != len(s.groups[s.node.args[-1]])),
    ("group_metadata_mismatch", "comm_group_differs",
     lambda s: "comm_group" in s.node.meta and _meta(s, "comm_group") != s.node.args[-1]),
    ("missing_parameter_identity", "param_name_not_str", lambda s: not isinstance(_meta(s, "param_name"), str)),
    ("missing_parameter_identity", "param_name_empty", lambda s: _meta(s, "param_name") == ""),
    ("missing_parameter_identity", "state_idx_bool", lambda s: isinstance(_meta(s, "state_idx"), bool)),
    ("missing_parameter_identity", "state_idx_not_int", lambda s: not _int(_meta(s, "state_idx"))),
    ("missing_parameter_identity", "state_idx_negative", lambda s: _meta(s, "state_idx") < 0),
    ("unknown_or_dynamic_shape", "missing_spec", lambda s: "fsdp_bucket_spec" not in s.node.meta),
    *(("unknown_or_dynamic_shape", name, holds)
      for field in ("input_shape", "output_shape") for name, holds in _shape_subconditions(field)),
    ("unsupported_dtype", "not_a_dtype", lambda s: not isinstance(_spec(s).get("dtype"), torch.dtype)),
    ("unsupported_dtype", "not_bucketable", lambda s: _spec(s)["dtype"] not in BUCKET_DTYPES),
    ("unknown_device", "device_not_str", lambda s: not isinstance(_spec(s).get("device"), str)),
    ("unknown_device", "device_rejected", lambda s: not _device_accepted(_spec(s)["device"])),
    ("invalid_dim0_layout", "dim0_not_degree_times_shard", lambda s: _bad_dim0(s)),
    ("unsupported_wait_users", "no_users", lambda s: not _wait_users(s)),
    ("unsupported_wait_users", "several_users", lambda s: len(_wait_users(s)) > 1),
    ("unsupported_wait_users", "single_user_not_wait", lambda s: not is_wait(_wait_users(s)[0])),
    ("unsupported_wait_users", "wait_of_another_namespace", lambda s: launch_name(_wait_users(s)[0]) != "wait_tensor"),
    ("no_consumer", "wait_has_no_consumer", lambda s: not real_consumers(_wait_users(s)[0])),
    ("unsupported_reduce_op", "reduce_op_not_sum_or_avg", lambda s: s.node.args[1] not in ("sum", "avg")),
    ("non_output_rs_consumer", "consumer_not_output",
     lambda s: any(c.op != "output" for c in real_consumers(_wait_users(s)[0]))),
    ("outside_module_plan", "no_plan_group_matches", lambda s: _outside_plans(s)),
]


def _device_accepted(device: str) -> bool:
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return False
    return True


def _bad_dim0(site: Site) -> bool:
    spec, degree = _spec(site), site.node.args[-2]
    small, large = ((spec["output_shape"], spec["input_shape"]) if _meta(site, "comm_type") == RS
                    else (spec["input_shape"], spec["output_shape"]))
    return list(large) != [small[0] * degree, *small[1:]]


def _outside_plans(site: Site) -> bool:
    plans, name = site.args.module_bucket_plans, _meta(site, "param_name")
    return plans is not None and not any(name.startswith(fqn + ".")
                                         for group in plans for fqn in ((group,) if isinstance(group, str) else group))


# -- split checks (spec 2.7) -----------------------------------------------------------------

def _members(site: Site) -> list[fx.Node]:
    return [*site.current, site.node]


def _span(site: Site) -> list[fx.Node]:
    """Nodes strictly between the bucket's first launch and the candidate, prep chains left out."""
    prep = set().union(*(rs_prep_chain(m) for m in _members(site) if m.meta.get("comm_type") == RS))
    return [n for n in site.nodes[site.index[site.current[0]] + 1:site.index[site.node]] if n not in prep]


def _unowned_chain(site: Site) -> bool:
    """A member's source tagged as a preparation that is not its own (spec 1.7: another bucket's
    owner, or a source tagged forward) lies in the span, of the other phase."""
    span = set(_span(site))
    for member in _members(site):
        inputs = member.all_input_nodes
        if (member.meta.get("comm_type") == RS and len(inputs) == 1 and inputs[0] in span
                and inputs[0].meta.get("fsdp_reduce_scatter_prepare") and not rs_prep_chain(member)
                and _backward(inputs[0]) != _backward(site.node)):
            return True
    return False


def _size(node: fx.Node) -> int:
    spec = node.meta["fsdp_bucket_spec"]
    return max(math.prod(spec["input_shape"]), math.prod(spec["output_shape"])) * spec["dtype"].itemsize


def _limit(site: Site, name: str) -> Optional[int]:
    return (site.args.policy or {}).get(name)


def _spread(values: list[int]) -> int:
    return max(values) - min(values)


def _ready(site: Site) -> list[int]:
    return [site.index[m.args[0]] for m in _members(site)]


def _first_use(site: Site) -> list[int]:
    return [min(site.index[c] for c in real_consumers(next(iter(m.users)))) for m in _members(site)]


def _key(node: fx.Node) -> tuple:
    spec, name = node.meta.get("fsdp_bucket_spec", {}), node.meta.get("param_name", "")
    reduce_op = node.args[1] if node.meta.get("comm_type") == RS else None
    return (node.meta.get("comm_type"), _backward(node), name.rpartition(".")[0], node.args[-1],
            spec.get("dtype"), spec.get("device"), reduce_op)


def _writes(node: Optional[fx.Node]) -> bool:
    """An in-place or ``out=`` op: its schema writes an argument (no FX side effect needed)."""
    schema = getattr(node.target, "_schema", None) if node is not None and node.op == "call_function" else None
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _effect(site: Site) -> Optional[fx.Node]:
    """The first node of the span that is a tagged free no member owns, or any other effect."""
    waits = {next(iter(m.users), None) for m in _members(site)}
    ag = site.node.meta.get("comm_type") != RS
    for node in _span(site):
        if node.meta.get("comm_type") in FREE_KINDS:
            owned = ag and is_free(node) and not node.kwargs and len(node.args) == 1 and node.args[0] in waits
            if not owned:
                return node
        elif has_effect(node):
            return node
    return None


_SPLITS: list[tuple[str, str, Callable[[Site], bool]]] = [
    ("incompatible_key", "key_differs", lambda s: _key(s.current[-1]) != _key(s.node)),
    ("repeated_parameter_instance", "param_name",
     lambda s: len({m.meta.get("param_name") for m in _members(s)}) < len(_members(s))),
    ("repeated_parameter_instance", "state_idx",
     lambda s: len({m.meta.get("state_idx") for m in _members(s)}) < len(_members(s))),
    ("capacity", "sum_over_cap",
     lambda s: _limit(s, "cap_bytes") is not None and sum(map(_size, _members(s))) > _limit(s, "cap_bytes")),
    ("input_distance", "ready_spread_over_limit",
     lambda s: _limit(s, "max_input_distance") is not None and _spread(_ready(s)) > _limit(s, "max_input_distance")),
    ("consumer_distance", "first_use_spread_over_limit",
     lambda s: (_limit(s, "max_consumer_distance") is not None
                and _spread(_first_use(s)) > _limit(s, "max_consumer_distance"))),
    ("dependency_conflict", "consumer_not_after_latest_input", lambda s: max(_ready(s)) >= min(_first_use(s))),
    ("effect_or_storage_release", "unowned_free",
     lambda s: _effect(s) is not None and _effect(s).meta.get("comm_type") in FREE_KINDS),
    ("effect_or_storage_release", "writes_argument", lambda s: _writes(_effect(s))),
    ("effect_or_storage_release", "barrier", lambda s: _effect(s) is not None),
    ("intervening_collective", "foreign_launch_in_span",
     lambda s: any(is_launch(n) and n not in s.current for n in _span(s))),
    ("phase_boundary", "unowned_chain_in_span", _unowned_chain),
    ("phase_boundary", "other_phase_node_in_span",
     lambda s: any(n.op == "call_function" and _backward(n) != _backward(s.node) for n in _span(s))),
    ("oversized", "own_size_over_cap",
     lambda s: _limit(s, "cap_bytes") is not None and _size(s.node) > _limit(s, "cap_bytes")),
]

UNREACHABLE = {
    "unknown_process_group/source_not_node":
        "a launch whose input is not a node has no tensor to gather: the graph cannot run (and the "
        "graph description cannot hold a tensor constant)",
    "unknown_process_group/group_not_str":
        "executors resolve a collective's group by name: a launch whose group_name is not a str cannot "
        "run (a ProcessGroup object is not representable in a graph description)",
    "incompatible_key/key_differs":
        "plan_fsdp_buckets groups candidates by key before the greedy pass (spec 2.7)",
}

SUBCONDITIONS: tuple[SubCondition, ...] = tuple(
    SubCondition("skip", reason, name, holds, UNREACHABLE.get(f"{reason}/{name}", ""))
    for reason, name, holds in _SKIPS) + tuple(
    SubCondition("singleton" if reason == "oversized" else "split", reason, name, holds,
                 UNREACHABLE.get(f"{reason}/{name}", ""))
    for reason, name, holds in _SPLITS)


def of_reason(action: str, reason: str) -> tuple[SubCondition, ...]:
    """The sub-conditions of one reason, in evaluation order."""
    return tuple(s for s in SUBCONDITIONS if s.action == action and s.reason == reason)


def classify(site: Site, action: str, reason: str) -> Optional[SubCondition]:
    """The first sub-condition of ``reason`` that holds at ``site``; None when none explains it."""
    return next((s for s in of_reason(action, reason) if s.holds(site)), None)
