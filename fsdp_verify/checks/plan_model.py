"""The spec's plan of one graph, derived from node meta and args alone (spec sections 2.4-2.11).

Nothing here calls a planner: skip reasons, keys, the greedy split replay, offsets, ids, the
summary, wire records and group digests are recomputed from the graph, so a planner bug cannot
vouch for itself. ``expected_report`` is the whole ``to_dict()`` a correct planner returns.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

import torch
from torch import fx

from fsdp_verify.model.spec_params import active
from fsdp_verify.checks.graph_facts import (FREE_KINDS, FSDP_KINDS, has_effect, is_free, is_launch, launch_name,
                          real_consumers, rs_prep_chain, signed_meta)

FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
RS_KIND = "fsdp_reduce_scatter"


def plain_int(value: Any) -> bool:
    """An int that is not a bool: degrees, indices and dims must be plain."""
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
    wire: dict[str, list]


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
    return isinstance(shape, (list, tuple)) and len(shape) > 0 and all(plain_int(d) and d > 0 for d in shape)


def _skip_reason(node: fx.Node, groups: dict, scope: Optional[tuple], args: Any) -> Optional[str]:
    """The first rule of spec 2.5 that ``node`` fails, or None."""
    meta, kind = node.meta, node.meta["comm_type"]
    rs = kind == "fsdp_reduce_scatter"
    if args.pp_degree != 1 or args.dp_mode != "fsdp":
        return "unsupported_parallel_mode"
    if launch_name(node) != ("reduce_scatter_tensor" if rs else "all_gather_into_tensor") \
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
    if not plain_int(degree) or degree < 2 or degree != len(groups[group]):
        return "group_size_mismatch"
    if meta.get("comm_group", group) != group:
        return "group_metadata_mismatch"
    if not isinstance(meta.get("param_name"), str) or not meta.get("param_name") \
            or not plain_int(meta.get("state_idx")) or meta["state_idx"] < 0:
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
    if len(users) != 1 or launch_name(users[0]) != "wait_tensor":
        return "unsupported_wait_users"
    consumers = real_consumers(users[0], active().getitem_views)
    if not consumers:
        return "no_consumer"
    if rs and node.args[1] not in ("sum", "avg"):
        return "unsupported_reduce_op"
    if rs and any(c.op != "output" for c in consumers):
        return "non_output_rs_consumer"
    if scope is None:
        return "outside_module_plan"
    return None


def wire_record(node: fx.Node) -> tuple:
    """Spec 2.4 step 3: what every tagged collective contributes to its group's digest."""
    spec = dict(node.meta.get("fsdp_bucket_spec", {}))
    if "device" in spec:
        spec["device"] = str(spec["device"]).split(":", 1)[0]
    kind = node.meta.get("comm_type")
    reduce_op = node.args[1] if kind == RS_KIND and len(node.args) > 1 else None
    return (kind, node.meta.get("param_name"), node.meta.get("state_idx"), spec, reduce_op)


def expected_scan(module: fx.GraphModule, groups: dict, args: Any, plans: Optional[tuple]) -> Expected:
    """Skip reasons and candidate facts for every tagged collective of ``module``."""
    index = {node: i for i, node in enumerate(module.graph.nodes)}
    model = Expected({}, [], {}, {}, {}, {}, {}, {group: [] for group in groups})
    for node in module.graph.nodes:
        if node.meta.get("comm_type") not in FSDP_KINDS:
            continue
        scope = _scope_of(node.meta.get("param_name"), plans)
        model.scope[node.name] = scope
        if node.args and isinstance(node.args[-1], str) and node.args[-1] in groups:
            model.wire[node.args[-1]].append(wire_record(node))
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
        model.first_use[node] = min(index[c] for c in real_consumers(next(iter(node.users)), active().getitem_views))
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
    settings = active()
    for node in nodes[index[current[0]] + 1:index[candidate]]:
        if node in prep:
            continue
        if node.meta.get("comm_type") in FREE_KINDS:
            if rs or not is_free(node) or node.kwargs or len(node.args) != 1 or node.args[0] not in waits:
                return "effect_or_storage_release"
        elif has_effect(node) and (settings.opaque_calls_are_barriers or node.op == "call_function"):
            return "effect_or_storage_release"
        elif settings.foreign_waits_are_barriers and launch_name(node) == "wait_tensor" and node.args[0] not in combined:
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


def signature_records(module: fx.GraphModule) -> list[tuple]:
    """What spec 2.11's signature hashes, node by node: name, target, args, kwargs and FSDP meta."""
    return [(n.name, str(n.target), str(n.args), str(n.kwargs), signed_meta(n)) for n in module.graph.nodes]


def signature_of(module: fx.GraphModule, records: Optional[list[tuple]] = None) -> str:
    """Spec 2.11: SHA-256 over each node's name, target, args, kwargs and FSDP meta (``records``:
    ``signature_records(module)`` when the caller has them)."""
    return _digest(signature_records(module) if records is None else records)


@functools.lru_cache(maxsize=1024)
def _device_type(device: str) -> Optional[str]:
    """The type of a device string ``torch.device`` accepts (rule 10), else None."""
    return torch.device(device).type if _device_ok(device) else None


# Meta keys whose values are bucket ids (``<signature[:12]>:bucket_<i>``): a later round's graph
# names the earlier round's buckets, so graphs of ranks that differ by device index differ here too.
BUCKET_ID_META = ("fsdp_bucket_id", "fsdp_bucket_prepare", "fsdp_reduce_scatter_prepare")
_SIGNED_ID = re.compile(r"[0-9a-f]{12}:")


def signatures(records: list[tuple]) -> tuple[str, Optional[str]]:
    """``signature_of`` and a device-canonical hash of the same ``signature_records``, from one
    JSON encoding. The second renames every bucket-spec device that ``torch.device`` accepts by
    order of first appearance, keeping its type and the text before ``:``, and every signature
    prefix of a bucket id (``BUCKET_ID_META``) by order of first appearance; equal hashes mean the
    graphs differ at most by a one-to-one renaming of such devices within each type and of such
    prefixes (the ranks of one world see ``cuda:0``, ``cuda:1``, ..., and their later rounds name
    buckets planned on those graphs). ``expected_report`` reads a device only through its type,
    that text, its validity and its equality with other devices, and a bucket id only through its
    equality with another (an RS prep chain's owner), so the reports of such graphs differ only in
    the signature. None when a name or value holds a NUL character (the placeholders are
    NUL-delimited, so no sharing is claimed)."""
    labels: dict[str, str] = {}
    prefixes: dict[str, str] = {}
    renamed, placed = [], 0
    for name, target, args, kwargs, meta in records:
        spec = meta.get("fsdp_bucket_spec")
        device = spec.get("device") if isinstance(spec, dict) else None
        if isinstance(device, str) and _device_type(device) is not None:
            label = labels.setdefault(
                device, f"\x00{_device_type(device)}\x01{device.split(':', 1)[0]}\x01{len(labels)}\x00")
            meta = {**meta, "fsdp_bucket_spec": {**spec, "device": label}}
            placed += 1
        ids = {key: meta[key] for key in BUCKET_ID_META
               if isinstance(meta.get(key), str) and _SIGNED_ID.match(meta[key])}
        if ids:
            meta = {**meta, **{key: prefixes.setdefault(value[:12], f"\x00id\x01{len(prefixes)}\x00") + value[12:]
                               for key, value in ids.items()}}
            placed += len(ids)
        renamed.append((name, target, args, kwargs, meta))
    text = json.dumps(renamed, sort_keys=True, default=str)
    if text.count("\\u0000") != 2 * placed:
        return _digest(records), None
    canonical = hashlib.sha256(text.encode()).hexdigest()
    for device, label in labels.items():
        text = text.replace(json.dumps(label), json.dumps(device))
    for prefix, label in prefixes.items():
        text = text.replace(json.dumps(label)[1:-1], prefix)
    return hashlib.sha256(text.encode()).hexdigest(), canonical


def resigned(report: dict, signature: str) -> dict:
    """``report`` (an ``expected_report``) for a graph that differs from its own only as
    ``signatures``' canonical hash allows, whose signature is ``signature``: the signature and the bucket
    ids it prefixes replaced."""
    buckets = [{**bucket, "bucket_id": f"{signature[:12]}:{bucket['bucket_id'].split(':', 1)[1]}"}
               for bucket in report["buckets"]]
    return {**report, "buckets": buckets, "signature": signature}




def _json(value: Any) -> Any:
    """The JSON form of a plan fact (tuples become lists, dtypes strings), for exact comparison."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def member_describe(node: fx.Node, model: Expected, groups: dict) -> dict:
    """Spec 2.10 ``Candidate.describe()``: rank-independent facts, device type only."""
    meta, spec = node.meta, node.meta["fsdp_bucket_spec"]
    rs = meta["comm_type"] == RS_KIND
    scope = model.scope[node.name]
    return {"param_name": meta["param_name"], "state_idx": meta["state_idx"], "kind": meta["comm_type"],
            "backward": bool(meta.get("autograd_backward", False)), "scope": scope[0], "module_fqns": scope,
            "group": node.args[-1], "ranks": tuple(groups[node.args[-1]]), "dtype": str(spec["dtype"]),
            "device_type": torch.device(spec["device"]).type, "input_shape": tuple(spec["input_shape"]),
            "output_shape": tuple(spec["output_shape"]), "reduce_op": node.args[1] if rs else None}


def _packed(bucket: list[fx.Node]) -> list[fx.Node]:
    """Packing order (spec 2.7): (state_idx, param_name)."""
    return sorted(bucket, key=lambda n: (n.meta["state_idx"], n.meta["param_name"]))


def _bucket_describe(bucket: list[fx.Node], bucket_id: str, model: Expected, groups: dict) -> dict:
    """Spec 2.10 ``Bucket.describe()`` with the offset rule."""
    members, offset = [], 0
    for node in _packed(bucket):
        spec = node.meta["fsdp_bucket_spec"]
        numel = math.prod(spec["output_shape"] if node.meta["comm_type"] == RS_KIND else spec["input_shape"])
        members.append({**member_describe(node, model, groups), "local_offset": offset, "local_numel": numel})
        offset += numel
    return {"bucket_id": bucket_id, "rewrite_supported": len(bucket) > 1, "members": members,
            "size_bytes": sum(model.size[n] for n in bucket), "latest_input": max(model.ready[n] for n in bucket),
            "earliest_consumer": min(model.first_use[n] for n in bucket), "fusable": len(bucket) > 1}


def expected_report(module: fx.GraphModule, groups: dict, args: Any, plans: Optional[tuple],
                    signature: Optional[str] = None) -> dict:
    """The JSON form of the ``to_dict()`` a correct planner returns for ``module`` (spec 2.8-2.11);
    ``signature``: ``signature_of(module)`` when the caller has it."""
    model = expected_scan(module, groups, args, plans)
    buckets, splits = expected_buckets(module, model, args.policy or {})
    decisions = [{"node": node, "action": "skip", "reason": reason} for node, reason in model.skips.items()]
    decisions += splits
    signature = signature_of(module) if signature is None else signature
    described = [_bucket_describe(b, f"{signature[:12]}:bucket_{i}", model, groups) for i, b in enumerate(buckets)]
    digests = {}
    for group, ranks in groups.items():
        layouts = [[member_describe(n, model, groups) for n in _packed(b)] for b in buckets
                   if _packed(b)[0].args[-1] == group]
        digests[group] = _digest((tuple(ranks), layouts, model.wire.get(group, [])))
    tagged = [n for n in module.graph.nodes if n.meta.get("comm_type") in FSDP_KINDS]
    scoped = [(model.scope[n.name], n.meta.get("param_name")) for n in tagged if model.scope[n.name] is not None]
    kinds = [b[0].meta["comm_type"] for b in buckets if len(b) > 1]
    summary = {"tagged_collectives": len(tagged), "selected_parameters": len(set(scoped)),
               "selected_collectives": len(scoped), "candidate_collectives": len(model.candidates),
               "buckets": len(buckets), "singletons": sum(len(b) == 1 for b in buckets),
               "rs_rewrite_candidates": kinds.count(RS_KIND), "ag_rewrite_candidates": len(kinds) - kinds.count(RS_KIND),
               "reason_counts": {a: dict(Counter(d["reason"] for d in decisions if d["action"] == a))
                                 for a in ("skip", "split", "singleton")},
               "unmatched_module_paths": [path for group in plans or () for path in group
                                          if not any(sc == group and str(name).startswith(path + ".")
                                                     for sc, name in scoped)]}
    return _json({"buckets": described, "decisions": decisions, "summary": summary, "signature": signature,
                  "module_bucket_plans": plans, "group_ranks": {g: tuple(r) for g, r in groups.items()},
                  "group_digests": digests})
