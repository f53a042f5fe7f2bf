"""Pure edits of a GraphSpec: each returns a new description and leaves the input untouched.

Mutations (broken tags, inserted barriers, moved sources) are written with these, so every
defect the generator plants is a small, named, replayable change.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable

from fsdp_verify.graph.spec import GraphSpec, NodeSpec

DROP = object()  # a meta value that removes the key


def fresh_name(spec: GraphSpec, prefix: str) -> str:
    """A node name not used in ``spec``."""
    names = {node.name for node in spec.nodes}
    name, index = prefix, 1
    while name in names:
        name, index = f"{prefix}_{index}", index + 1
    return name


def index_of(spec: GraphSpec, name: str) -> int:
    """Position of node ``name``."""
    for index, node in enumerate(spec.nodes):
        if node.name == name:
            return index
    raise KeyError(name)


def update_node(spec: GraphSpec, name: str, *, meta: dict | None = None, args: tuple | None = None,
                kwargs: dict | None = None, target: str | None = None) -> GraphSpec:
    """Change one node: merge ``meta`` (``DROP`` removes a key), replace args/kwargs/target."""
    nodes = list(spec.nodes)
    index = index_of(spec, name)
    node = nodes[index]
    new_meta = dict(node.meta)
    for key, value in (meta or {}).items():
        if value is DROP:
            new_meta.pop(key, None)
        else:
            new_meta[key] = value
    nodes[index] = replace(node, meta=new_meta, args=node.args if args is None else tuple(args),
                           kwargs=node.kwargs if kwargs is None else dict(kwargs),
                           target=node.target if target is None else target)
    return spec.with_nodes(nodes)


def insert_before(spec: GraphSpec, before: str, new_nodes: Iterable[NodeSpec]) -> GraphSpec:
    """Insert nodes, in order, just before node ``before``."""
    nodes = list(spec.nodes)
    index = index_of(spec, before)
    return spec.with_nodes(nodes[:index] + list(new_nodes) + nodes[index:])


def insert_after(spec: GraphSpec, after: str, new_nodes: Iterable[NodeSpec]) -> GraphSpec:
    """Insert nodes, in order, just after node ``after``."""
    nodes = list(spec.nodes)
    index = index_of(spec, after) + 1
    return spec.with_nodes(nodes[:index] + list(new_nodes) + nodes[index:])


def users_of(spec: GraphSpec, name: str) -> list[str]:
    """Names of the nodes that read ``name``, in graph order."""
    return [node.name for node in spec.nodes if name in node.inputs()]


_READ: list = [None, frozenset()]  # the last graph asked about, and what it reads


def read_names(spec: GraphSpec) -> frozenset[str]:
    """The names some node of ``spec`` reads. A draw asks this of one graph for each of its sites;
    the last answer is kept by identity (a GraphSpec is never changed, only replaced)."""
    if _READ[0] is not spec:
        _READ[1] = frozenset(ref for node in spec.nodes for ref in node.inputs())
        _READ[0] = spec
    return _READ[1]


def tagged_launches(spec: GraphSpec, kinds: tuple[str, ...] | None = None) -> list[NodeSpec]:
    """Nodes whose ``comm_type`` is an FSDP collective kind (or one of ``kinds``), in graph order."""
    wanted = kinds or ("fsdp_all_gather", "fsdp_all_gather_backward", "fsdp_reduce_scatter")
    return [node for node in spec.nodes if node.meta.get("comm_type") in wanted]


def call(name: str, target: str, *args: Any, meta: dict | None = None, **kwargs: Any) -> NodeSpec:
    """A call_function NodeSpec; string args naming nodes must be given as NodeRef."""
    return NodeSpec(name, "call_function", target, tuple(args), dict(kwargs), dict(meta or {}))


def in_order(spec: GraphSpec) -> bool:
    """Whether every node reads only nodes before it (what ``validate`` requires of a graph)."""
    seen: set[str] = set()
    for node in spec.nodes:
        if any(ref not in seen for ref in node.inputs()):
            return False
        seen.add(node.name)
    return True


def hoisted(spec: GraphSpec, name: str, before: str) -> GraphSpec | None:
    """``spec`` with node ``name`` moved to just before ``before`` when it sits later and reads
    only earlier nodes (a cast of a parameter before its gather), so that a node inserted there may
    read it; unchanged when it is already earlier; None when it cannot move."""
    at, here = index_of(spec, before), index_of(spec, name)
    if here < at:
        return spec
    earlier = {node.name for node in spec.nodes[:at]}
    node = spec.node(name)
    if node.op != "call_function" or any(ref not in earlier for ref in node.inputs()):
        return None
    return insert_before(spec.with_nodes([n for n in spec.nodes if n.name != name]), before, [node])
