"""The declarative, versioned description of an FSDP-tagged joint graph (``GraphSpec``).

A description is plain data: process groups, parameters, other inputs and an ordered node
list whose args and meta may hold any value, including wrong or missing FSDP tags (the
generator breaks tags on purpose). It round-trips through JSON exactly and is the unit that
strategies generate, the corpus stores and the builder materialises.
"""

from __future__ import annotations

import json
import keyword
import math
import re
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import torch

from fsdp_verify.graph import collectives
from fsdp_verify.graph.limits import MAX_DEPTH, MAX_DIM, MAX_INT, MAX_NODES, MAX_NUMEL, MAX_RANKS
from fsdp_verify.graph.ops import resolve_target
from fsdp_verify.graph.values import DTYPES, NodeRef, SpecError, decode, encode, node_refs

SCHEMA_VERSION = 1
NODE_OPS = ("placeholder", "call_function", "output")
#: Meta key of a node that carries a traced value (``{"dtype": NAME, "shape": [...]}``): the builder
#: gives it ``meta["val"]``, a meta tensor of that dtype and shape, as a tracer would. Graphs a pass
#: has edited hold traced nodes beside untraced ones (the pass's own); a walk that reads a traced
#: value's rank or dtype wrongly is seen only there.
TRACED = "traced"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class ParamSpec:
    """One FSDP-sharded parameter: its placeholder holds this rank's shard.

    ``padding`` makes the shards uneven, as a dim-0 size the degree does not divide does: each
    ``(rank, rows)`` names a rank that holds ``rows`` fewer rows and pads its shard back to
    ``shard_shape`` before anything reads it (``builder.localize``), as SimpleFSDP pads an uneven
    DTensor shard before its all-gather. Those ranks' graphs differ from the others'."""

    fqn: str
    placeholder: str
    shard_shape: tuple[int, ...]
    dtype: str
    device: str
    state_idx: int
    group: str
    padding: tuple[tuple[int, int], ...] = ()

    def pad_rows(self, rank: int) -> int:
        """Rows ``rank`` adds to its shard (0: it holds a whole one)."""
        return dict(self.padding).get(rank, 0)


@dataclass(frozen=True)
class InputSpec:
    """A non-parameter placeholder (activations, tangents): a per-rank tensor input.

    ``high`` bounds integer inputs (token ids: values in [0, high)); 0 means unbounded.
    """

    placeholder: str
    shape: tuple[int, ...]
    dtype: str
    high: int = 0


@dataclass(frozen=True)
class NodeSpec:
    """One FX node. ``args``/``kwargs``/``meta`` hold decoded values (NodeRef, dtype, tuples)."""

    name: str
    op: str
    target: str = ""
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)

    def inputs(self) -> list[str]:
        """Names of the nodes this node reads, in argument order (a new list each call)."""
        # Worked out once per node: the coverage features and the mutations walk every node's
        # inputs many times over, and a NodeSpec is frozen (nothing edits its args in place).
        try:
            return list(self.__dict__["_inputs"])
        except KeyError:
            refs = node_refs(self.args)
            if self.kwargs:
                refs += node_refs(list(self.kwargs.values()))
            names = self.__dict__["_inputs"] = tuple(ref.name for ref in refs)
            return list(names)


@dataclass(frozen=True)
class GraphSpec:
    """A whole graph: groups, parameters, inputs and nodes.

    ``groups`` maps a process-group name to its subgroups (each an ordered tuple of global
    ranks) which partition the world: ``fsdp`` usually has one subgroup holding every rank,
    an expert group several (every rank belongs to one of them, as in expert parallelism).
    """

    groups: Mapping[str, tuple[tuple[int, ...], ...]]
    params: tuple[ParamSpec, ...]
    inputs: tuple[InputSpec, ...]
    nodes: tuple[NodeSpec, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    version: int = SCHEMA_VERSION

    def world(self) -> tuple[int, ...]:
        """Every global rank, sorted."""
        return tuple(sorted({r for parts in self.groups.values() for part in parts for r in part}))

    def group_ranks(self, rank: int) -> dict[str, tuple[int, ...]]:
        """The ``group_ranks`` argument a planner sees on ``rank``: each group's subgroup of it."""
        return {name: next(part for part in parts if rank in part) for name, parts in self.groups.items()}

    def degree(self, group: str) -> int:
        """The size of every subgroup of ``group``."""
        return len(self.groups[group][0])

    def node(self, name: str) -> NodeSpec:
        """The node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def param(self, fqn: str) -> ParamSpec:
        """The parameter called ``fqn``."""
        for param in self.params:
            if param.fqn == fqn:
                return param
        raise KeyError(fqn)

    @property
    def uneven(self) -> bool:
        """Whether some rank pads a shard: its graph is not the others' (``ParamSpec.padding``)."""
        return any(param.padding for param in self.params)

    def with_nodes(self, nodes: list[NodeSpec]) -> "GraphSpec":
        """The same graph with another node list."""
        return replace(self, nodes=tuple(nodes))

    def to_json(self) -> dict:
        """The typed-JSON document of this graph."""
        return {
            "schema": "fsdp-verify/graph",
            "version": self.version,
            "groups": {name: list(parts[0]) if len(parts) == 1 else [list(part) for part in parts]
                       for name, parts in self.groups.items()},
            "params": [{"fqn": p.fqn, "placeholder": p.placeholder, "shard_shape": list(p.shard_shape),
                        "dtype": p.dtype, "device": p.device, "state_idx": p.state_idx, "group": p.group,
                        **({"padding": [list(pair) for pair in p.padding]} if p.padding else {})}
                       for p in self.params],
            "inputs": [{"placeholder": i.placeholder, "shape": list(i.shape), "dtype": i.dtype,
                        **({"high": i.high} if i.high else {})} for i in self.inputs],
            "nodes": [_encode_node(node, f"nodes[{i}]") for i, node in enumerate(self.nodes)],
            "attrs": encode(dict(self.attrs), "attrs"),
        }

    def dumps(self) -> str:
        """Canonical JSON text (sorted keys), suitable for hashing and diffing."""
        return json.dumps(self.to_json(), sort_keys=True, allow_nan=False)


def _encode_node(node: NodeSpec, path: str) -> dict:
    out: dict[str, Any] = {"name": node.name, "op": node.op}
    if node.target:
        out["target"] = node.target
    if node.args:
        out["args"] = encode(list(node.args), f"{path}.args")
    if node.kwargs:
        out["kwargs"] = encode(dict(node.kwargs), f"{path}.kwargs")
    if node.meta:
        out["meta"] = encode(dict(node.meta), f"{path}.meta")
    return out


def graph_from_json(doc: Any) -> GraphSpec:
    """Decode and validate a graph document; raises one SpecError naming the field and reason."""
    if not isinstance(doc, dict):
        raise SpecError("", "a graph document must be a JSON object")
    version = doc.get("version")
    if version != SCHEMA_VERSION:
        raise SpecError("version", f"unsupported graph schema version {version!r}; this build reads {SCHEMA_VERSION}")
    groups = _groups(_field(doc, "groups", dict, ""))
    params = tuple(_param(item, f"params[{i}]") for i, item in enumerate(_field(doc, "params", list, "")))
    inputs = tuple(_input(item, f"inputs[{i}]") for i, item in enumerate(_field(doc, "inputs", list, "")))
    node_docs = _field(doc, "nodes", list, "")
    if len(node_docs) > MAX_NODES:
        raise SpecError("nodes", f"{len(node_docs)} nodes; the limit is {MAX_NODES}")
    nodes = tuple(_node(item, f"nodes[{i}]") for i, item in enumerate(node_docs))
    attrs = decode(doc.get("attrs", {}), "attrs")
    if not isinstance(attrs, dict):
        raise SpecError("attrs", "must be an object")
    spec = GraphSpec(groups, params, inputs, nodes, attrs, version)
    validate(spec)
    return spec


def validate(spec: GraphSpec) -> None:
    """Check structure: unique identifier names, refs to earlier nodes, one trailing output."""
    _validate_groups(spec)
    seen: dict[str, int] = {}
    for index, node in enumerate(spec.nodes):
        path = f"nodes[{index}]"
        if node.op not in NODE_OPS:
            raise SpecError(f"{path}.op", f"must be one of {NODE_OPS}, got {node.op!r}")
        if not _NAME.match(node.name) or keyword.iskeyword(node.name):
            raise SpecError(f"{path}.name", f"{node.name!r} is not a valid node name (a Python identifier)")
        if node.name in seen:
            raise SpecError(f"{path}.name", f"duplicate node name {node.name!r} (first at nodes[{seen[node.name]}])")
        for ref in node.inputs():
            if ref not in seen:
                raise SpecError(f"{path}.args", f"refers to {ref!r}, which is not an earlier node")
        if node.op == "call_function":
            resolve_target(node.target, f"{path}.target")  # allow-listed, never imported from the document
        traced_value(node, f"{path}.meta.{TRACED}")
        seen[node.name] = index
    outputs = [i for i, node in enumerate(spec.nodes) if node.op == "output"]
    if outputs != [len(spec.nodes) - 1]:
        raise SpecError("nodes", "exactly one output node, as the last node, is required")
    placeholders = {node.name for node in spec.nodes if node.op == "placeholder"}
    described = [p.placeholder for p in spec.params] + [i.placeholder for i in spec.inputs]
    for index, name in enumerate(described):
        if name not in placeholders:
            raise SpecError(f"params/inputs[{index}]", f"placeholder {name!r} is not a placeholder node")
    if len(set(described)) != len(described):
        raise SpecError("params/inputs", "a placeholder is described twice")
    missing = placeholders - set(described)
    if missing:
        raise SpecError("inputs", f"placeholders without a description: {sorted(missing)}")


def _validate_groups(spec: GraphSpec) -> None:
    world = spec.world()
    for name, parts in spec.groups.items():
        ranks = [r for part in parts for r in part]
        if len(set(ranks)) != len(ranks):
            raise SpecError(f"groups.{name}", "a rank appears twice")
        if tuple(sorted(ranks)) != world:
            raise SpecError(f"groups.{name}", f"subgroups must cover every rank of the world {list(world)}")
        if len({len(part) for part in parts}) != 1:
            raise SpecError(f"groups.{name}", "subgroups must all have the same size")
    for index, param in enumerate(spec.params):
        if param.group not in spec.groups:
            raise SpecError(f"params[{index}].group", f"unknown group {param.group!r}")
        _validate_padding(spec, param, f"params[{index}].padding", world)


def _validate_padding(spec: GraphSpec, param: ParamSpec, path: str, world: tuple[int, ...]) -> None:
    ranks = [rank for rank, _ in param.padding]
    if len(set(ranks)) != len(ranks):
        raise SpecError(path, "a rank is padded twice")
    for rank, rows in param.padding:
        if rank not in world:
            raise SpecError(path, f"rank {rank} is not in the world {list(world)}")
        if not param.shard_shape or not 1 <= rows <= param.shard_shape[0]:
            raise SpecError(path, f"rank {rank} pads {rows} rows; a shard of shape {list(param.shard_shape)} "
                                  f"takes 1 to its first dimension's size")
    if not param.padding:
        return
    if any(node.name == unpadded(param.placeholder) for node in spec.nodes):
        raise SpecError(path, f"a node is named {unpadded(param.placeholder)!r}, the name a padded rank's "
                              f"placeholder takes")
    taken = {node.name for node in spec.nodes}
    for wait in gradient_waits(spec.nodes, {param.fqn: param}):
        if padded_result(wait) in taken:
            raise SpecError(path, f"a node is named {padded_result(wait)!r}, the name a padded rank's "
                                  f"gradient wait takes")
    for cast in padded_casts(spec.nodes, {param.placeholder}):
        if unpadded(cast) in taken:
            raise SpecError(path, f"a node is named {unpadded(cast)!r}, the name a padded rank's cast of its "
                                  f"own rows takes")


def unpadded(placeholder: str) -> str:
    """The name of a padded rank's own placeholder (its padded shard keeps ``placeholder``)."""
    return f"{placeholder}_unpadded"


def padded_result(wait: str) -> str:
    """The name a padded rank's gradient reduce-scatter wait takes (its own rows keep ``wait``)."""
    return f"{wait}_padded"


def gradient_waits(nodes: Any, fqns: Mapping[str, Any]) -> dict[str, Any]:
    """The waits of the FSDP reduce-scatters of the parameters named in ``fqns``, each to its
    parameter's value in ``fqns``: what a padded rank narrows (``builder.localize``)."""
    scatters = {node.name: fqns[node.meta["param_name"]] for node in nodes
                if node.meta.get("comm_type") == "fsdp_reduce_scatter" and node.meta.get("param_name") in fqns}
    return {node.name: scatters[node.inputs()[0]] for node in nodes
            if collectives.is_wait(node.target) and node.inputs()[:1] and node.inputs()[0] in scatters}


# The casts a short rank applies to its own rows before padding them.
CASTS = frozenset({"prims.convert_element_type.default", "aten._to_copy.default"})
PAD = "aten.constant_pad_nd.default"


def cast_dtype(node: Any) -> torch.dtype | None:
    """The dtype a cast (an ``fx.Node`` or a graph description's node) casts to, by position or by
    keyword (``_to_copy`` takes it by keyword only); None for anything else."""
    if str(node.target) not in CASTS:
        return None
    to_copy = str(node.target) == "aten._to_copy.default"
    dtype = node.args[1] if not to_copy and len(node.args) == 2 else node.kwargs.get("dtype")
    return dtype if isinstance(dtype, torch.dtype) else None


def padded_casts(nodes: Any, placeholders: Any) -> dict[str, str]:
    """The casts that read one of ``placeholders`` directly, each to that placeholder. A short rank
    casts its own rows and pads the cast (``builder.localize``), as SimpleFSDP does: DTensor casts
    the local shard (``forward_dtype``), then the redistribution pads it for the gather; so a pad
    sits between the cast and the all-gather, where a pass walking from a gather to its cast meets it."""
    return {node.name: node.args[0].name for node in nodes
            if node.op == "call_function" and node.target in CASTS and node.args
            and isinstance(node.args[0], NodeRef) and node.args[0].name in placeholders}


def pad_widths(shape: tuple[int, ...], rows: int) -> list[int]:
    """``constant_pad_nd`` widths that add ``rows`` rows after dim 0 of a tensor of ``shape``
    (the last dim's pair comes first)."""
    return [0] * (2 * len(shape) - 1) + [rows]


def phase_of(node: NodeSpec) -> dict:
    """The ``autograd_backward`` tag of ``node``, for a node added beside it (empty when untagged)."""
    return {"autograd_backward": node.meta["autograd_backward"]} if "autograd_backward" in node.meta else {}


def _field(doc: dict, key: str, kind: type, path: str) -> Any:
    where = f"{path}.{key}" if path else key
    if key not in doc:
        raise SpecError(where, "missing")
    if not isinstance(doc[key], kind) or (kind is int and isinstance(doc[key], bool)):
        raise SpecError(where, f"must be a {kind.__name__}, got {type(doc[key]).__name__}")
    return doc[key]


def _shape(value: Any, path: str) -> tuple[int, ...]:
    if not isinstance(value, list) or any(not isinstance(d, int) or isinstance(d, bool) or d < 0 for d in value):
        raise SpecError(path, "must be a list of non-negative integers")
    if len(value) > MAX_DEPTH or any(d > MAX_DIM for d in value):
        raise SpecError(path, f"at most {MAX_DEPTH} dimensions of at most 2**31 each")
    if math.prod(value) > MAX_NUMEL:
        raise SpecError(path, f"{math.prod(value)} elements; the limit is {MAX_NUMEL} (2**26) per tensor")
    return tuple(value)


def traced_value(node: NodeSpec, path: str = "") -> tuple[str, tuple[int, ...]] | None:
    """The dtype name and shape of ``node``'s traced value (``TRACED``), None where it has none."""
    doc = node.meta.get(TRACED)
    if doc is None:
        return None
    if not isinstance(doc, dict) or set(doc) != {"dtype", "shape"}:
        raise SpecError(path, 'must be an object with exactly "dtype" and "shape"')
    if not isinstance(doc["dtype"], str):
        raise SpecError(f"{path}.dtype", f"must be a dtype name, got {type(doc['dtype']).__name__}")
    shape = list(doc["shape"]) if isinstance(doc["shape"], (list, tuple)) else doc["shape"]
    return _dtype_name(doc["dtype"], f"{path}.dtype"), _shape(shape, f"{path}.shape")


def _dtype_name(value: Any, path: str) -> str:
    if value not in DTYPES:
        raise SpecError(path, f"unknown dtype {value!r}")
    return value


def _groups(doc: dict) -> dict[str, tuple[tuple[int, ...], ...]]:
    groups = {}
    for name, ranks in doc.items():
        path = f"groups.{name}"
        parts = ranks if isinstance(ranks, list) and ranks and all(isinstance(r, list) for r in ranks) else [ranks]
        subgroups = []
        for part in parts:
            if (not isinstance(part, list) or not part
                    or any(not isinstance(r, int) or isinstance(r, bool) or r < 0 for r in part)):
                raise SpecError(path, "must be a non-empty list of non-negative integer ranks, "
                                      "or a list of such lists (one per subgroup)")
            if any(r >= MAX_RANKS for r in part):
                raise SpecError(path, f"ranks must be below {MAX_RANKS} (the simulated world's limit)")
            subgroups.append(tuple(part))
        groups[name] = tuple(subgroups)
    return groups


def _param(doc: Any, path: str) -> ParamSpec:
    if not isinstance(doc, dict):
        raise SpecError(path, "must be an object")
    return ParamSpec(
        fqn=_field(doc, "fqn", str, path), placeholder=_field(doc, "placeholder", str, path),
        shard_shape=_shape(_field(doc, "shard_shape", list, path), f"{path}.shard_shape"),
        dtype=_dtype_name(_field(doc, "dtype", str, path), f"{path}.dtype"),
        device=_field(doc, "device", str, path), state_idx=_field(doc, "state_idx", int, path),
        group=_field(doc, "group", str, path), padding=_padding(doc.get("padding", []), f"{path}.padding"))


def _padding(value: Any, path: str) -> tuple[tuple[int, int], ...]:
    if (not isinstance(value, list) or len(value) > MAX_RANKS
            or any(not isinstance(pair, list) or len(pair) != 2
                   or any(not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_INT for v in pair)
                   for pair in value)):
        raise SpecError(path, "must be a list of [rank, rows] pairs of non-negative integers")
    return tuple((rank, rows) for rank, rows in value)


def _input(doc: Any, path: str) -> InputSpec:
    if not isinstance(doc, dict):
        raise SpecError(path, "must be an object")
    high = doc.get("high", 0)
    if not isinstance(high, int) or isinstance(high, bool) or high < 0 or high > MAX_INT:
        raise SpecError(f"{path}.high", "must be a non-negative integer")
    return InputSpec(placeholder=_field(doc, "placeholder", str, path),
                     shape=_shape(_field(doc, "shape", list, path), f"{path}.shape"),
                     dtype=_dtype_name(_field(doc, "dtype", str, path), f"{path}.dtype"), high=high)


def _bound_sizes(value: Any, path: str) -> None:
    """A list of integers in an argument may be a size (``aten.ones``, ``view``): bound its elements."""
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value) \
                and math.prod(abs(v) for v in value) > MAX_NUMEL:
            raise SpecError(path, f"a size of {math.prod(abs(v) for v in value)} elements; the limit is {MAX_NUMEL}")
        for index, item in enumerate(value):
            _bound_sizes(item, f"{path}[{index}]")


def _node(doc: Any, path: str) -> NodeSpec:
    if not isinstance(doc, dict):
        raise SpecError(path, "must be an object")
    unknown = set(doc) - {"name", "op", "target", "args", "kwargs", "meta"}
    if unknown:
        raise SpecError(path, f"unknown keys {sorted(unknown)}")
    args = decode(doc.get("args", []), f"{path}.args")
    kwargs = decode(doc.get("kwargs", {}), f"{path}.kwargs")
    meta = decode(doc.get("meta", {}), f"{path}.meta")
    if not isinstance(args, list):
        raise SpecError(f"{path}.args", "must be a list")
    if not isinstance(kwargs, dict) or not isinstance(meta, dict):
        raise SpecError(path, "kwargs and meta must be objects")
    target = doc.get("target", "")
    if not isinstance(target, str):
        raise SpecError(f"{path}.target", "must be a string")
    _bound_sizes(args, f"{path}.args")
    return NodeSpec(_field(doc, "name", str, path), _field(doc, "op", str, path), target,
                    tuple(args), kwargs, meta)


def graph_from_text(text: str, file: str | None = None) -> GraphSpec:
    """Parse a JSON text into a GraphSpec; errors name the file when given."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError("", f"not valid JSON: {exc}", file) from None
    try:
        return graph_from_json(doc)
    except SpecError as exc:
        raise exc.in_file(file) if file else exc


__all__ = ["SCHEMA_VERSION", "GraphSpec", "InputSpec", "NodeRef", "NodeSpec", "ParamSpec",
           "graph_from_json", "graph_from_text", "unpadded", "validate"]
