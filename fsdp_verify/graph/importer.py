"""Turn an FSDP-tagged ``GraphModule`` back into a GraphSpec, so foreign graphs can be stored.

A module built by :func:`build_module` carries its header and round-trips exactly. For a
module produced elsewhere the header is derived: parameters from tagged placeholders and
their all-gathers, other inputs from ``meta["val"]``/``tensor_meta``, ranks from the caller.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import fx

from fsdp_verify.graph.builder import HEADER_KEY
from fsdp_verify.graph.ops import target_name
from fsdp_verify.graph.spec import GraphSpec, InputSpec, NodeSpec, ParamSpec, validate
from fsdp_verify.graph.values import DTYPE_NAMES, NodeRef, Opaque, SpecError, encode

# Meta that tracing machinery writes and that no FSDP rule reads; never part of a description.
TRACER_META = frozenset({
    "val", "tensor_meta", "example_value", "stack_trace", "nn_module_stack", "source_fn_stack",
    "original_aten", "from_node", "seq_nr", "torch_fn", "grapharg", "unbacked_bindings",
    "partitioner_tag", "recompute", "ac_graph_id", "custom", "eager_input_vals",
})


def import_module(graph_module: fx.GraphModule,
                  group_ranks: Mapping[str, tuple[int, ...]] | None = None) -> GraphSpec:
    """Describe ``graph_module``; ``group_ranks`` is needed for modules built elsewhere."""
    nodes = [_node_spec(node) for node in graph_module.graph.nodes]
    header = graph_module.meta.get(HEADER_KEY)
    if header is not None:
        spec = GraphSpec(dict(header["groups"]), tuple(header["params"]), tuple(header["inputs"]),
                         tuple(nodes), dict(header["attrs"]), header["version"])
    else:
        if group_ranks is None:
            raise SpecError("group_ranks", "a module not built by fsdp-verify needs group_ranks to be described")
        spec = _derive(graph_module, nodes, group_ranks)
    validate(spec)
    return spec


def _node_spec(node: fx.Node) -> NodeSpec:
    path = f"node {node.name}"

    def ref(arg: fx.Node) -> NodeRef:
        return NodeRef(arg.name)

    args = fx.node.map_arg(node.args, ref)
    kwargs = fx.node.map_arg(dict(node.kwargs), ref)
    meta = {}
    for key, value in node.meta.items():
        if key in TRACER_META:
            continue
        try:
            encode(value, f"{path}.meta.{key}")
        except SpecError:
            value = Opaque(repr(value))
        meta[key] = value
    target = target_name(node.target) if node.op == "call_function" else ""
    if node.op not in ("placeholder", "call_function", "output"):
        raise SpecError(path, f"node op {node.op!r} cannot be described (only placeholder, call_function, output)")
    return NodeSpec(node.name, node.op, target, tuple(args), kwargs, meta)


def _tensor_facts(node: fx.Node) -> tuple[tuple[int, ...], str] | None:
    val = node.meta.get("val", node.meta.get("example_value"))
    if isinstance(val, torch.Tensor) and val.dtype in DTYPE_NAMES:
        return tuple(int(d) for d in val.shape), DTYPE_NAMES[val.dtype]
    tmeta = node.meta.get("tensor_meta")
    if tmeta is not None and getattr(tmeta, "dtype", None) in DTYPE_NAMES:
        return tuple(int(d) for d in tmeta.shape), DTYPE_NAMES[tmeta.dtype]
    return None


def _derive(graph_module: fx.GraphModule, nodes: list[NodeSpec],
            group_ranks: Mapping[str, tuple[int, ...]]) -> GraphSpec:
    groups = {name: (tuple(ranks),) for name, ranks in group_ranks.items()}
    gathers: dict[str, fx.Node] = {}
    for node in graph_module.graph.nodes:
        if node.op == "call_function" and str(node.meta.get("comm_type", "")).startswith("fsdp_all_gather"):
            if node.args and isinstance(node.args[0], fx.Node):
                gathers.setdefault(node.args[0].name, node)
    params, inputs = [], []
    for node in graph_module.graph.find_nodes(op="placeholder"):
        facts = _tensor_facts(node)
        gather = gathers.get(node.name)
        if facts is None:
            raise SpecError(f"node {node.name}", "placeholder has no meta['val'] or tensor_meta to give its shape")
        shape, dtype = facts
        if gather is not None:
            bucket_spec = gather.meta.get("fsdp_bucket_spec") or {}
            params.append(ParamSpec(
                fqn=str(node.meta.get("param_name") or gather.meta.get("param_name") or node.name),
                placeholder=node.name, shard_shape=shape, dtype=dtype,
                device=str(bucket_spec.get("device", "cpu")),
                state_idx=int(node.meta.get("state_idx", gather.meta.get("state_idx", -1)) or 0),
                group=str(gather.args[-1])))
        else:
            inputs.append(InputSpec(node.name, shape, dtype))
    attrs: dict[str, Any] = {}
    for key in ("state_fqns", "num_state_inputs", "state_is_param", "loss_dict_keys"):
        if hasattr(graph_module, key):
            value = getattr(graph_module, key)
            attrs[key] = list(value) if isinstance(value, tuple) else value
    return GraphSpec(groups, tuple(params), tuple(inputs), tuple(nodes), attrs)


__all__ = ["TRACER_META", "import_module"]
