"""Small, planner-independent facts about FX graphs that several checkers read.

These follow the spec's definitions (sections 1.2-1.6) but are written for the oracles, not
shared with the reference planner, so a planner bug cannot hide behind the same helper.
"""

from __future__ import annotations

import json
import operator
from typing import Callable, Optional

import torch
from torch import fx

from fsdp_verify.graph.ops import is_free_target
from fsdp_verify.model.spec_params import active

FSDP_KINDS = ("fsdp_all_gather", "fsdp_all_gather_backward", "fsdp_reduce_scatter")
FREE_KINDS = ("fsdp_reshard_free", "fsdp_reshard_free_backward")


_C10D_NAMES: dict = {}  # call target -> (namespace, op name) (str() of an op is slow)


def _split(target) -> tuple[str, str | None]:
    parts = str(target).split(".")
    return parts[0], parts[1] if len(parts) > 1 else None


def c10d_name(node: fx.Node, namespaces: tuple[str, ...] | None = None) -> str | None:
    """``all_gather_into_tensor``, ``wait_tensor``... for functional c10d calls (the collective
    namespaces of the spec settings, or ``namespaces``), else None."""
    if node.op != "call_function":
        return None
    try:
        namespace, name = _C10D_NAMES[node.target]
    except KeyError:
        namespace, name = _C10D_NAMES[node.target] = _split(node.target)
    except TypeError:  # an unhashable target
        namespace, name = _split(node.target)
    return name if namespace in (namespaces or active().collective_namespaces) else None


def launch_name(node: fx.Node) -> str | None:
    """The op name when ``node`` may be a tagged kind's launch (spec 1.2 ``is_op`` namespaces)."""
    return c10d_name(node, active().launch_namespaces)


def is_launch(node: fx.Node) -> bool:
    """A functional collective launch (anything c10d but a wait)."""
    name = c10d_name(node)
    return name is not None and name != "wait_tensor"


def is_wait(node: fx.Node) -> bool:
    """A ``wait_tensor`` call."""
    return c10d_name(node) == "wait_tensor"


def is_free(node: fx.Node) -> bool:
    """A storage-release call (tagged or not)."""
    return node.op == "call_function" and is_free_target(node.target)


def _schema(node: fx.Node):
    target = node.target
    if isinstance(target, torch._ops.OpOverloadPacket):
        target = target.default
    return target._schema if isinstance(target, torch._ops.OpOverload) else None


def aliases_input(node: fx.Node, getitem_views: bool = True) -> bool:
    """The result shares storage with its first input (a view, or, with ``getitem_views``, getitem of
    a multi-output view op: of the op itself, so ``split(w)[0][0]``, an index of what a getitem picked,
    is a consumer, as is ``w[0]``)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        source = node.args[0]
        return (getitem_views and isinstance(source, fx.Node) and source.target is not operator.getitem
                and aliases_input(source))
    schema = _schema(node)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def has_effect(node: fx.Node) -> bool:
    """Frees, FX side-effectful calls and mutating ops: nodes whose order is observable."""
    if node.op in ("call_module", "call_method"):
        return True
    if node.op != "call_function" or c10d_name(node) is not None:
        return False
    if is_free(node) or node.target in fx.node._side_effectful_functions:
        return True
    schema = _schema(node)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def view_closure(node: fx.Node, getitem_views: bool = True) -> tuple[list[fx.Node], list[fx.Node]]:
    """(the views reachable from ``node``, the non-view readers of ``node`` or of those views), in
    discovery order: the one view-chain walk of the oracle side."""
    views: list[fx.Node] = []
    readers: list[fx.Node] = []
    seen, stack = {node}, [node]
    while stack:
        for user in stack.pop().users:
            if aliases_input(user, getitem_views):
                if user not in seen:
                    seen.add(user)
                    views.append(user)
                    stack.append(user)
            elif user not in readers:
                readers.append(user)
    return views, readers


def real_consumers(wait: fx.Node, getitem_views: bool = True) -> list[fx.Node]:
    """Non-view readers of ``wait``, reached through view chains (spec 2.5's consumer set)."""
    return view_closure(wait, getitem_views)[1]


def storage_root(node: fx.Node, is_view: Callable[[fx.Node], bool] = aliases_input) -> fx.Node:
    """The node that owns the storage ``node`` aliases (walking up the chain of what ``is_view`` calls
    a view: by default the ops whose schema declares the alias)."""
    while is_view(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def alias_class(node: fx.Node) -> list[fx.Node]:
    """Every node sharing ``node``'s storage: its root and all views below the root."""
    root = storage_root(node)
    return [root, *view_closure(root)[0]]


def reads_before_definition(module: fx.GraphModule) -> list[tuple[str, str]]:
    """(reader, input) for every input that is not defined above its reader: a later node or one
    no longer in the graph. FX runs nodes in list order, so such a graph has no schedule; a
    rewriter that inserts before a node another fusion erased leaves exactly this when it does
    not lint."""
    defined: set[fx.Node] = set()
    found = []
    for node in module.graph.nodes:
        found += [(node.name, source.name) for source in node.all_input_nodes if source not in defined]
        defined.add(node)
    return found


def positions(module: fx.GraphModule) -> dict[str, int]:
    """Node name -> index."""
    return {node.name: index for index, node in enumerate(module.graph.nodes)}


def by_name(module: fx.GraphModule) -> dict[str, fx.Node]:
    """Node name -> node."""
    return {node.name: node for node in module.graph.nodes}


def rs_prep_chain(launch: fx.Node) -> set[fx.Node]:
    """Spec 1.7, restated: the private reshape/cat/contiguous chain owned by the launch's bucket id."""
    inputs = launch.all_input_nodes
    if len(inputs) != 1 or set(inputs[0].users) != {launch} or inputs[0].meta.get("autograd_backward") is False:
        return set()
    owner = inputs[0].meta.get("fsdp_reduce_scatter_prepare")
    if not owner or (active().rs_owner_is_bucket_id and owner != launch.meta.get("fsdp_bucket_id")):
        return set()
    chain, stack = set(), [inputs[0]]
    while stack:
        node = stack.pop()
        if node in chain or node.meta.get("fsdp_bucket_prepare") != owner:
            continue
        # a target may put any callable here (its name need not be dotted): not aten, not the chain
        parts = str(node.target).split(".") if node.op == "call_function" else []
        if len(parts) < 2 or parts[0] != "aten" or parts[1] not in ("reshape", "cat", "contiguous"):
            return set()
        chain.add(node)
        stack.extend(node.all_input_nodes)
    return set() if any(set(n.users) - chain - {launch} for n in chain) else chain


def fingerprint(module: fx.GraphModule) -> list[tuple]:
    """What the generated code would say, node by node (name, op, target, args, kwargs, in
    order), without generating code: two graphs with equal fingerprints compute the same."""
    return [(n.name, n.op, str(n.target), str(n.args), str(n.kwargs)) for n in module.graph.nodes]


SIGNED_META = ("comm_type", "comm_group", "param_name", "state_idx", "autograd_backward")


def signed_meta(node: fx.Node) -> dict:
    """The meta spec 2.11's signature hashes: every ``fsdp_`` key and the tags in ``SIGNED_META``."""
    return {k: v for k, v in node.meta.items() if k.startswith("fsdp_") or k in SIGNED_META}


def _meta_text(nodes: list[fx.Node]) -> str:
    """One text of the nodes' signed meta: JSON with sorted keys as the signature encodes it, or,
    for keys JSON cannot sort or write (tuples, mixed types), a canonical repr."""
    metas = [signed_meta(n) for n in nodes]
    try:
        return json.dumps(metas, sort_keys=True, default=str)
    except TypeError:
        return repr(_canonical(metas))


def _canonical(value: object) -> object:
    if isinstance(value, dict):
        return ("dict", tuple(sorted((repr(k), _canonical(v)) for k, v in value.items())))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_canonical(v) for v in value))
    return str(value)


def snapshot(module: fx.GraphModule) -> tuple[list[tuple], str]:
    """A graph as a target could change it when it is handed back: each node (itself, its name,
    op, target and the argument containers, which FX replaces on any change) and one text of the
    signed meta (nested values included). Half the cost of hashing the signature again."""
    nodes = list(module.graph.nodes)
    return [(n, n.name, n.op, n.target, n._args, n._kwargs) for n in nodes], _meta_text(nodes)


def _first_meta_change(nodes: list[fx.Node], text: str) -> Optional[str]:
    """The first node whose signed meta differs from what JSON ``text`` holds for it (None when
    ``text`` is not JSON)."""
    try:
        was = json.loads(text)
    except ValueError:
        return None
    for node, meta in zip(nodes, was):
        try:
            if json.loads(json.dumps(signed_meta(node), sort_keys=True, default=str)) != meta:
                return node.name
        except TypeError:
            return node.name
    return None


def changed(module: fx.GraphModule, before: tuple[list[tuple], str]) -> Optional[str]:
    """Where ``module`` differs from its ``snapshot`` ``before``, in words (None: nowhere). An
    argument container replaced by an equal one is no change."""
    entries, meta = before
    nodes = list(module.graph.nodes)
    if len(nodes) != len(entries):
        return f"it has {len(nodes)} nodes instead of {len(entries)}"
    for node, (old, name, op, target, args, kwargs) in zip(nodes, entries):
        if node is not old or node.name != name or node.op != op or \
                (node.target is not target and str(node.target) != str(target)):
            return f"node {name!r} was replaced, renamed or retargeted"
        if (node._args is not args and str(node._args) != str(args)) or \
                (node._kwargs is not kwargs and str(node._kwargs) != str(kwargs)):
            return f"node {name!r} has other arguments"
    if _meta_text(nodes) != meta:
        name = _first_meta_change(nodes, meta)
        return f"node {name!r} has other FSDP meta" if name else "a node's FSDP meta changed"
    return None
