"""Planner oracle: the invariants of spec section 5.2, recomputed from the graph and the spec.

Nothing here calls the planner's helpers: skip reasons, compatibility keys, the greedy split
replay, offsets, ids and the summary are derived again from node meta and args, so a planner
bug cannot vouch for itself. Input validation (section 2.1-2.3) is judged from the case's
arguments: invalid arguments must be refused with the spec's message, valid ones accepted.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx

from .findings import CheckContext, Finding
from .registry import Checker
from .graph_facts import (FREE_KINDS, FSDP_KINDS, c10d_name, has_effect, is_free, is_launch,
                          is_wait, real_consumers, rs_prep_chain)

NAME = "planner"
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
GROUP_ERROR = "group_ranks must map PG names to distinct ordered non-negative global ranks"


def _int(value: Any) -> bool:
    return type(value) is int


def _device_ok(device: Any) -> bool:
    """Rule 10: a string that ``torch.device`` accepts on this installation."""
    if not isinstance(device, str):
        return False
    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return False
    return True


# -- input validation ------------------------------------------------------------------------

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
                not all(_int(r) and r >= 0 for r in ranks):
            return GROUP_ERROR
    policy = args.policy or {}
    for field_name, floor in (("cap_bytes", 1), ("max_input_distance", 0), ("max_consumer_distance", 0)):
        value = policy.get(field_name)
        if value is not None and (not _int(value) or value < floor):
            return f"{field_name} must be None or a non-negative integer (cap_bytes must be positive)"
    return None


# -- the independent model of one plan ----------------------------------------------------

@dataclass
class Expected:
    """What the spec says the plan of one graph must be."""

    skips: dict[str, str]
    candidates: list[fx.Node]
    keys: dict[fx.Node, tuple]
    ready: dict[fx.Node, int]
    first_use: dict[fx.Node, int]
    size: dict[fx.Node, int]
    scope: dict[str, Optional[tuple]]


def _scope_of(name: Any, plans: Optional[tuple]) -> Optional[tuple]:
    if not isinstance(name, str) or not name:
        return None
    if plans is None:
        parent = name.rsplit(".", 1)[0] if "." in name else f"<parameter:{name}>"
        return (parent,)
    for group in plans:
        if any(name.startswith(fqn + ".") for fqn in group):
            return tuple(group)
    return None


def _shape_ok(shape: Any) -> bool:
    return isinstance(shape, (list, tuple)) and len(shape) > 0 and all(_int(d) and d > 0 for d in shape)


def _skip_reason(node: fx.Node, groups: dict, scope: Optional[tuple], args: Any) -> Optional[str]:
    """The first rule of spec 2.5 that ``node`` fails, or None."""
    meta, kind = node.meta, node.meta["comm_type"]
    rs = kind == "fsdp_reduce_scatter"
    if args.pp_degree != 1 or args.dp_mode != "fsdp":
        return "unsupported_parallel_mode"
    if c10d_name(node) != ("reduce_scatter_tensor" if rs else "all_gather_into_tensor") \
            or meta.get("fsdp_bucket_members"):
        return "unsupported_or_already_bucketed"
    if bool(meta.get("autograd_backward", False)) == (kind == "fsdp_all_gather"):
        return "phase_mismatch"
    if node.kwargs or len(node.args) != (4 if rs else 3):
        return "unsupported_signature"
    group = node.args[-1]
    if not isinstance(node.args[0], fx.Node) or not isinstance(group, str) or group not in groups:
        return "unknown_process_group"
    degree = node.args[-2]
    if not _int(degree) or degree < 2 or degree != len(groups[group]):
        return "group_size_mismatch"
    if meta.get("comm_group", group) != group:
        return "group_metadata_mismatch"
    if not isinstance(meta.get("param_name"), str) or not meta.get("param_name") \
            or not _int(meta.get("state_idx")) or meta["state_idx"] < 0:
        return "missing_parameter_identity"
    spec = meta.get("fsdp_bucket_spec", {})
    if not _shape_ok(spec.get("input_shape")) or not _shape_ok(spec.get("output_shape")):
        return "unknown_or_dynamic_shape"
    if not isinstance(spec.get("dtype"), torch.dtype) or spec["dtype"] not in FLOATS:
        return "unsupported_dtype"
    if not _device_ok(spec.get("device")):
        return "unknown_device"
    small, large = (spec["output_shape"], spec["input_shape"]) if rs else (spec["input_shape"], spec["output_shape"])
    if list(large) != [small[0] * degree, *small[1:]]:
        return "invalid_dim0_layout"
    users = list(node.users)
    if len(users) != 1 or not is_wait(users[0]):
        return "unsupported_wait_users"
    consumers = real_consumers(users[0])
    if not consumers:
        return "no_consumer"
    if rs and node.args[1] not in ("sum", "avg"):
        return "unsupported_reduce_op"
    if rs and any(c.op != "output" for c in consumers):
        return "non_output_rs_consumer"
    if scope is None:
        return "outside_module_plan"
    return None


def expected_scan(module: fx.GraphModule, groups: dict, args: Any, plans: Optional[tuple]) -> Expected:
    """Skip reasons and candidate facts for every tagged collective of ``module``."""
    index = {node: i for i, node in enumerate(module.graph.nodes)}
    model = Expected({}, [], {}, {}, {}, {}, {})
    for node in module.graph.nodes:
        if node.meta.get("comm_type") not in FSDP_KINDS:
            continue
        scope = _scope_of(node.meta.get("param_name"), plans)
        model.scope[node.name] = scope
        reason = _skip_reason(node, groups, scope, args)
        if reason:
            model.skips[node.name] = reason
            continue
        spec, meta = node.meta["fsdp_bucket_spec"], node.meta
        rs = meta["comm_type"] == "fsdp_reduce_scatter"
        model.candidates.append(node)
        model.keys[node] = (meta["comm_type"], bool(meta.get("autograd_backward", False)), scope[0], node.args[-1],
                            tuple(groups[node.args[-1]]), spec["dtype"], spec["device"], node.args[1] if rs else None)
        model.ready[node] = index[node.args[0]]
        model.first_use[node] = min(index[c] for c in real_consumers(next(iter(node.users))))
        model.size[node] = max(math.prod(spec["input_shape"]), math.prod(spec["output_shape"])) * spec["dtype"].itemsize
    return model


def split_check(current: list[fx.Node], candidate: fx.Node, model: Expected, nodes: list[fx.Node],
                index: dict, policy: dict) -> Optional[str]:
    """The first failing split check of spec 2.7 for ``candidate`` joining ``current``."""
    combined = current + [candidate]
    meta = [n.meta for n in combined]
    if len({m["param_name"] for m in meta}) < len(combined) or len({m["state_idx"] for m in meta}) < len(combined):
        return "repeated_parameter_instance"
    if policy.get("cap_bytes") is not None and sum(model.size[n] for n in combined) > policy["cap_bytes"]:
        return "capacity"
    ready, first = [model.ready[n] for n in combined], [model.first_use[n] for n in combined]
    if policy.get("max_input_distance") is not None and max(ready) - min(ready) > policy["max_input_distance"]:
        return "input_distance"
    if policy.get("max_consumer_distance") is not None and max(first) - min(first) > policy["max_consumer_distance"]:
        return "consumer_distance"
    if max(ready) >= min(first):
        return "dependency_conflict"
    rs = candidate.meta["comm_type"] == "fsdp_reduce_scatter"
    prep = set().union(*(rs_prep_chain(n) for n in combined)) if rs else set()
    waits = {next(iter(n.users)) for n in combined}
    backward = bool(candidate.meta.get("autograd_backward", False))
    for node in nodes[index[current[0]] + 1:index[candidate]]:
        if node in prep:
            continue
        if node.meta.get("comm_type") in FREE_KINDS:
            if rs or not is_free(node) or node.kwargs or len(node.args) != 1 or node.args[0] not in waits:
                return "effect_or_storage_release"
        elif has_effect(node):
            return "effect_or_storage_release"
        if is_launch(node) and node not in combined:
            return "intervening_collective"
        if node.op not in ("placeholder", "get_attr", "output") and \
                bool(node.meta.get("autograd_backward", False)) != backward:
            return "phase_boundary"
    return None


def expected_buckets(module: fx.GraphModule, model: Expected, policy: dict) -> tuple[list[list[fx.Node]], list[dict]]:
    """The greedy partition (members in graph order) and split/singleton decisions."""
    nodes = list(module.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    groups: dict[tuple, list[fx.Node]] = {}
    for node in model.candidates:
        groups.setdefault(model.keys[node], []).append(node)
    buckets, decisions = [], []
    for members in groups.values():
        current: list[fx.Node] = []
        for node in members:
            reason = split_check(current, node, model, nodes, index, policy) if current else None
            if reason:
                buckets.append(current)
                decisions.append({"node": node.name, "previous_node": current[-1].name, "action": "split",
                                  "reason": reason})
                current = []
            current.append(node)
            if policy.get("cap_bytes") is not None and model.size[node] > policy["cap_bytes"]:
                decisions.append({"node": node.name, "action": "singleton", "reason": "oversized"})
        if current:
            buckets.append(current)
    buckets.sort(key=lambda b: min(index[n] for n in b))
    return buckets, decisions


def signature_of(module: fx.GraphModule) -> str:
    """Spec 2.11: SHA-256 over each node's name, target, args, kwargs and FSDP meta."""
    keys = ("comm_type", "comm_group", "param_name", "state_idx", "autograd_backward")
    records = [(n.name, str(n.target), str(n.args), str(n.kwargs),
                {k: v for k, v in n.meta.items() if k.startswith("fsdp_") or k in keys}) for n in module.graph.nodes]
    return hashlib.sha256(json.dumps(records, sort_keys=True, default=str).encode()).hexdigest()


# -- comparing -----------------------------------------------------------------------------

def _judge(module: fx.GraphModule, plan: dict, groups: dict, args: Any, label: str) -> list[str]:
    """Problems of one plan of one graph, as sentences."""
    norm = None
    if args.module_bucket_plans is not None:
        norm = tuple((g,) if isinstance(g, str) else tuple(g) for g in args.module_bucket_plans)
    model = expected_scan(module, groups, args, norm)
    problems = []
    got_skips = {d["node"]: d["reason"] for d in plan["decisions"] if d["action"] == "skip"}
    for node, reason in model.skips.items():
        if got_skips.get(node) != reason:
            problems.append(f"{label}: {node} should be skipped as {reason}, plan says "
                            f"{got_skips.get(node, 'candidate')}")
    for node, reason in got_skips.items():
        if node not in model.skips:
            problems.append(f"{label}: {node} is skipped as {reason} but passes every skip rule")
    if problems:
        return problems[:3]
    buckets, decisions = expected_buckets(module, model, args.policy or {})
    expected_members = [[[n.meta["param_name"], n.meta["comm_type"]] for n in
                         sorted(b, key=lambda n: (n.meta["state_idx"], n.meta["param_name"]))] for b in buckets]
    got_members = [[[m["param_name"], m["kind"]] for m in b["members"]] for b in plan["buckets"]]
    if got_members != expected_members:
        first = next((i for i, (a, b) in enumerate(zip(expected_members, got_members)) if a != b),
                     min(len(expected_members), len(got_members)))
        want = expected_members[first] if first < len(expected_members) else "no bucket"
        have = got_members[first] if first < len(got_members) else "no bucket"
        return [f"{label}: bucket {first} should hold {want}, plan has {have} "
                f"({len(expected_members)} buckets expected, {len(got_members)} planned)"]
    got_decisions = [d for d in plan["decisions"] if d["action"] != "skip"]
    if got_decisions != decisions:
        return [f"{label}: split/singleton decisions differ: expected {decisions[:4]}, plan has {got_decisions[:4]}"]
    signature = signature_of(module)
    if plan["signature"] != signature:
        problems.append(f"{label}: plan signature {plan['signature'][:12]} is not the graph's {signature[:12]}")
    for i, (bucket, nodes) in enumerate(zip(plan["buckets"], buckets)):
        if bucket["bucket_id"] != f"{signature[:12]}:bucket_{i}":
            problems.append(f"{label}: bucket {i} has id {bucket['bucket_id']}")
        if bucket["latest_input"] != max(model.ready[n] for n in nodes) or \
                bucket["earliest_consumer"] != min(model.first_use[n] for n in nodes):
            problems.append(f"{label}: bucket {i} window ({bucket['latest_input']}, {bucket['earliest_consumer']}) "
                            f"is not ({max(model.ready[n] for n in nodes)}, {min(model.first_use[n] for n in nodes)})")
        if bucket["size_bytes"] != sum(model.size[n] for n in nodes) or bucket["fusable"] != (len(nodes) > 1):
            problems.append(f"{label}: bucket {i} size/fusable fields are wrong")
        if len(nodes) > 1 and not bucket["latest_input"] < bucket["earliest_consumer"]:
            problems.append(f"{label}: bucket {i} has latest_input >= earliest_consumer")
    summary = plan["summary"]
    tagged = [n for n in module.graph.nodes if n.meta.get("comm_type") in FSDP_KINDS]
    counts = {a: dict(Counter(d["reason"] for d in plan["decisions"] if d["action"] == a))
              for a in ("skip", "split", "singleton")}
    scoped = [(model.scope[n.name], n.meta.get("param_name")) for n in tagged if model.scope[n.name] is not None]
    kinds = [b[0].meta["comm_type"] for b in buckets if len(b) > 1]
    expect = {"tagged_collectives": len(tagged), "candidate_collectives": len(model.candidates),
              "buckets": len(buckets), "singletons": sum(len(b) == 1 for b in buckets), "reason_counts": counts,
              "selected_collectives": len(scoped), "selected_parameters": len(set(scoped)),
              "rs_rewrite_candidates": kinds.count("fsdp_reduce_scatter"),
              "ag_rewrite_candidates": len(kinds) - kinds.count("fsdp_reduce_scatter"),
              "unmatched_module_paths": [path for group in norm or () for path in group
                                         if not any(sc == group and str(name).startswith(path + ".")
                                                    for sc, name in scoped)]}
    for key, value in expect.items():
        if summary.get(key) != value:
            problems.append(f"{label}: summary {key} is {summary.get(key)}, expected {value}")
    return problems[:3]


def _rounds(ctx: CheckContext, original: fx.GraphModule, plans: list) -> list[tuple[fx.GraphModule, Any]]:
    """Each round's plan with the graph it was made for: later graphs are rebuilt by re-applying the
    target's own earlier rounds to a copy of the original (possible for in-process runs only)."""
    rewriters = ctx.target.rewriters() if ctx.target is not None else ()
    pairs = [(original, plans[0])]
    graph = original
    for index, plan in enumerate(plans[1:], start=1):
        if len(rewriters) < index or not hasattr(plans[index - 1], "buckets"):
            break
        graph = copy.deepcopy(graph)
        rewriters[index - 1](graph, plans[index - 1])
        pairs.append((graph, plan))
    return pairs


def _first_round_plans(ctx: CheckContext) -> dict[int, list]:
    """Every rank's first-round plan of its original graph (empty when planning itself raises)."""
    try:
        return {rank: [ctx.target.plan(ctx.case, copy.deepcopy(module), rank)]
                for rank, module in ctx.original.items()}
    except Exception:  # noqa: BLE001 - a crashing planner is the ``target`` finding's business
        return {}


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
            return [Finding(NAME, f"invalid planner arguments were accepted; expected: {expected_error}")]
        if expected_error not in ctx.run.error:
            return [Finding(NAME, f"invalid planner arguments raised the wrong error; expected "
                                     f"{expected_error!r}, got {ctx.run.error_type}: {ctx.run.error_message}")]
        return []
    if ctx.run.error is not None:
        plans = _first_round_plans(ctx)  # judge what the planner decided before the target failed
    if not plans:
        return []
    module = copy.deepcopy(original[first])
    before = signature_of(module)
    plan_a = ctx.target.plan(case, module, first).to_dict()
    plan_b = ctx.target.plan(case, module, first).to_dict()
    findings = []
    if signature_of(module) != before:
        findings.append(Finding(NAME, "planning mutated the graph (purity)"))
    if json.dumps(plan_a, sort_keys=True, default=str) != json.dumps(plan_b, sort_keys=True, default=str):
        findings.append(Finding(NAME, "planning the same graph twice gave different plans (determinism)"))
    for rank in sorted(plans):
        for round_index, (graph, plan) in enumerate(_rounds(ctx, original[rank], plans[rank])):
            for problem in _judge(graph, plan.to_dict(), case.group_ranks(rank), case.plan_args,
                                  f"rank {rank} round {round_index + 1}"):
                findings.append(Finding(NAME, problem, rank=rank))
        if findings:
            return findings
    digests: dict[tuple, set] = {}
    for rank in sorted(plans):
        for group, ranks in case.group_ranks(rank).items():
            for round_index, plan in enumerate(plans[rank]):
                digests.setdefault((group, tuple(ranks), round_index), set()).add(plan.group_digest(group))
    for (group, ranks, round_index), values in sorted(digests.items()):
        if len(values) > 1:
            findings.append(Finding(NAME, f"group {group} {list(ranks)} round {round_index + 1}: ranks planned "
                                             f"different digests"))
    return findings


CHECKER = Checker(NAME, check_planner, order=10, summary='planner invariants of spec 5.2, re-derived from the graph')
