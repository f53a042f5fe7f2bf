"""Materialise a GraphSpec as a real ``torch.fx.GraphModule``.

Targets come from the allow-list in :mod:`fsdp_verify.graph.ops`; the description's header
(groups, params, inputs, attrs) rides along in ``graph_module.meta["fsdp_verify"]`` so the
importer can restore it exactly.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Optional

import torch
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from fsdp_verify.graph.ops import resolve_target
from fsdp_verify.graph.spec import (PAD, GraphSpec, InputSpec, NodeSpec, ParamSpec, gradient_waits, pad_widths,
                                    padded_casts, padded_result, phase_of, traced_value, unpadded, validate)
from fsdp_verify.graph.values import NodeRef, SpecError, dtype_from_name, fresh_copy, map_refs

HEADER_KEY = "fsdp_verify"
_DEVICE_INDEX = re.compile(r"^([A-Za-z_]+):(\d+)$")


def build_module(spec: GraphSpec, validated: bool = False, lint: bool = True) -> fx.GraphModule:
    """Build and lint the graph the description names (a lazily compiled ``GraphModule``);
    ``validated`` says the caller has validated ``spec`` (or the graph it was localised from),
    ``lint=False`` that a graph built from it (or from another localisation of it) already linted."""
    if not validated:
        validate(spec)
    graph = fx.Graph()
    env: dict[str, fx.Node] = {}

    def lookup(ref: NodeRef) -> fx.Node:
        return env[ref.name]

    for index, node_spec in enumerate(spec.nodes):
        path = f"nodes[{index}]"
        args = map_refs(tuple(node_spec.args), lookup)
        # keyword names as new strings too, as a graph loaded from disk has them (see TAG_KEYS)
        kwargs = {unshared(key): value for key, value in map_refs(dict(node_spec.kwargs), lookup).items()}
        if node_spec.op == "placeholder":
            node = graph.placeholder(node_spec.name)
        elif node_spec.op == "output":
            if len(args) != 1 or kwargs:
                raise SpecError(f"{path}.args", "the output node takes exactly one argument")
            node = graph.output(args[0])
        else:
            target = resolve_target(node_spec.target, f"{path}.target")
            node = add_call(graph, target, args, kwargs, node_spec.name)
        if node_spec.op != "output" and node.name != node_spec.name:
            raise SpecError(f"{path}.name", f"FX renamed {node_spec.name!r} to {node.name!r}; pick another name")
        node.meta.update(fresh_copy(dict(node_spec.meta)))
        traced = traced_value(node_spec)
        if traced is not None:  # a meta tensor: dtype and shape, no storage
            node.meta["val"] = torch.empty(traced[1], dtype=dtype_from_name(traced[0]), device="meta")
        _unshare_tags(node)
        env[node_spec.name] = node
    try:
        if lint:
            graph.lint()
    except Exception as exc:  # noqa: BLE001 - FX raises plain RuntimeErrors
        raise SpecError("nodes", f"the graph does not lint: {exc}") from None
    # Lazy: Python code is generated only if something calls or prints the module; the harness
    # interprets graphs, so eager code generation was a fifth of a fuzz example's time.
    module = _LazyGraphModule(torch.nn.Module(), graph)
    for key, value in spec.attrs.items():
        if key.isidentifier():
            setattr(module, key, copy.deepcopy(value))
    module.meta[HEADER_KEY] = {"groups": dict(spec.groups), "params": list(spec.params),
                               "inputs": list(spec.inputs), "attrs": copy.deepcopy(dict(spec.attrs)),
                               "version": spec.version}
    return module


# Tag values a planner compares with its own constants or with one another. A planner comparing
# them by identity (``is``) works on graphs tagged from the same interned constants (or one string
# object shared by a prep chain's nodes) and fails on graphs loaded from disk or another process,
# whose strings are new objects: every built graph is like those.
TAG_KEYS = ("comm_type", "comm_group", "param_name", "fsdp_bucket_id", "fsdp_bucket_prepare",
            "fsdp_reduce_scatter_prepare")


def unshared(text: str) -> str:
    """An equal string that is a new object (a one-character string stays CPython's shared one)."""
    return (text + " ")[:-1]


def _unshare_tags(node: fx.Node) -> None:
    for key in TAG_KEYS:
        if type(node.meta.get(key)) is str:
            node.meta[key] = unshared(node.meta[key])
    if node.op == "call_function" and any(type(arg) is str for arg in node.args):
        node.args = tuple(unshared(arg) if type(arg) is str else arg for arg in node.args)


def add_call(graph: fx.Graph, target: object, args: tuple, kwargs: dict, name: Optional[str] = None) -> fx.Node:
    """``graph.create_node("call_function", ...)`` with the arguments set afterwards: create_node
    walks them with pytree looking for symbolic ints (neither a spec nor the reference rewriter
    makes any), at 60% of its cost."""
    node = graph.create_node("call_function", target, name=name)
    set_inputs(node, args, kwargs)
    return node


def set_inputs(node: fx.Node, args: tuple, kwargs: dict) -> None:
    """``node.args, node.kwargs = args, kwargs`` for a node that has none yet, in one step. FX's
    assignment runs the same update (users, input nodes, immutable containers) but first takes
    the node out of the graph's lookup table and files it again, which is keyed by op and target
    only: half of the assignment's cost, for nothing an argument changes."""
    if args or kwargs:
        node._update_args_kwargs(args, kwargs if kwargs else node.kwargs)


def localize(spec: GraphSpec, local_index: int) -> GraphSpec:
    """The same graph as seen by rank ``local_index`` (``spec`` itself when it names no device
    index and the rank pads no shard).

    Device indices change (``cuda:0`` -> ``cuda:3``): the planner must give the same group digests
    on every rank although graph signatures differ. A rank that pads a shard (``ParamSpec.padding``)
    holds fewer rows in its own placeholder (``unpadded(name)``); a ``constant_pad_nd`` named as the
    parameter's placeholder was, just before the first node that reads it, restores the shard's
    shape, so every other node, name and shape is the other ranks'. A cast of the placeholder casts
    the rank's own rows (``unpadded(cast)``) and a pad named as the cast follows it, in SimpleFSDP's
    order (``spec.padded_casts``). Only the node count, the padded
    ranks' placeholders (and the ``param_node`` tags naming them) and what is ready where differ:
    what a pass deciding on rank-local facts sees. The result has no padding left, so localising it
    again changes nothing.
    """
    changed = False

    def relabel(device: object) -> object:
        nonlocal changed
        match = _DEVICE_INDEX.match(device) if isinstance(device, str) else None
        changed = changed or match is not None
        return f"{match.group(1)}:{local_index}" if match else device

    nodes = []
    for node in spec.nodes:
        bucket_spec = node.meta.get("fsdp_bucket_spec")
        if isinstance(bucket_spec, dict) and "device" in bucket_spec:
            meta = dict(node.meta)
            meta["fsdp_bucket_spec"] = {**bucket_spec, "device": relabel(bucket_spec["device"])}
            node = type(node)(node.name, node.op, node.target, node.args, node.kwargs, meta)
        nodes.append(node)
    params = tuple(ParamSpec(p.fqn, p.placeholder, p.shard_shape, p.dtype, relabel(p.device), p.state_idx, p.group)
                   for p in spec.params)
    if spec.uneven:
        changed = True
        nodes, params = _padded(nodes, params, {p.placeholder: p.pad_rows(local_index) for p in spec.params})
    return GraphSpec(spec.groups, params, spec.inputs, tuple(nodes), spec.attrs, spec.version) if changed else spec


def _padded(nodes: list[NodeSpec], params: tuple[ParamSpec, ...],
            rows: dict[str, int]) -> tuple[list[NodeSpec], tuple[ParamSpec, ...]]:
    """The nodes and parameters of a rank that pads ``rows[placeholder]`` rows onto each shard."""
    padded = {name: count for name, count in rows.items() if count}
    shapes = {p.placeholder: p.shard_shape for p in params}
    casts = padded_casts(nodes, padded)
    out: list[NodeSpec] = []
    for node in nodes:
        if node.op == "placeholder" and node.name in padded:
            out.append(replace(node, name=unpadded(node.name), target=unpadded(node.name)))
            continue
        tag = node.meta.get("param_node")
        if isinstance(tag, str) and rows.get(tag, 0):  # the FSDP pass names the rank's placeholder (spec 1.4)
            node = replace(node, meta={**node.meta, "param_node": unpadded(tag)})
        # the pad runs in its reader's phase: a backward graph's pad (a recomputed gather's source)
        # is a backward node, not a forward node standing inside the backward's buckets
        phase = phase_of(node)
        if node.name in casts:  # cast the own rows, then pad the cast (zeros cast to zeros: same values)
            own = casts[node.name]
            out.append(replace(node, name=unpadded(node.name), args=(NodeRef(unpadded(own)), *node.args[1:])))
            out.append(NodeSpec(node.name, "call_function", PAD,
                                (NodeRef(unpadded(node.name)), pad_widths(shapes[own], rows[own])), meta=phase))
            continue
        for name in [name for name in node.inputs() if name in padded]:
            out.append(NodeSpec(name, "call_function", PAD,
                                (NodeRef(unpadded(name)), pad_widths(shapes[name], padded.pop(name))), meta=phase))
        out.append(node)
    local = tuple(replace(p, placeholder=unpadded(p.placeholder),
                          shard_shape=(p.shard_shape[0] - rows[p.placeholder], *p.shard_shape[1:]))
                  if rows[p.placeholder] else p for p in params)
    kept = {p.fqn: p.shard_shape[0] - rows[p.placeholder] for p in params if rows.get(p.placeholder)}
    return _unpadded_gradients(out, kept), local


def _unpadded_gradients(nodes: list[NodeSpec], kept: dict[str, int]) -> list[NodeSpec]:
    """A padded rank's gradient reduce-scatter gives a padded shard; the rank keeps its own rows,
    as DTensor narrows an uneven shard after its reduce-scatter: a ``slice`` named as the wait was,
    just after the wait (renamed ``padded_result``), so every reader is the other ranks'."""
    waits = gradient_waits(nodes, kept)
    if not waits:
        return nodes
    out: list[NodeSpec] = []
    for node in nodes:
        if node.name not in waits:
            out.append(node)
            continue
        out.append(replace(node, name=padded_result(node.name)))
        out.append(NodeSpec(node.name, "call_function", "aten.slice.Tensor",
                            (NodeRef(padded_result(node.name)), 0, 0, waits[node.name]), meta=phase_of(node)))
    return out


def placeholder_tensors(spec: GraphSpec) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    """Shape and dtype of every placeholder, parameters (shards) and inputs alike."""
    out: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for item in (*spec.params, *spec.inputs):
        shape = item.shard_shape if isinstance(item, ParamSpec) else item.shape
        out[item.placeholder] = (tuple(shape), dtype_from_name(item.dtype))
    return out


__all__ = ["HEADER_KEY", "InputSpec", "add_call", "build_module", "localize", "placeholder_tensors", "set_inputs"]
