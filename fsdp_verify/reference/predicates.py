"""The helper predicates of spec section 1.6, explicit and replaceable.

The originals (``passes/overlap/utils.py``) are not public, so their behaviour is a model whose
open points are the [I] settings of ``fsdp_verify.model.spec_params``; the oracles read the same
settings, so a pinned or drawn setting changes both sides at once.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch import fx
from torch.fx.node import _side_effectful_functions

from fsdp_verify.graph.ops import is_free_target
from fsdp_verify.model.spec_params import active

_PREP_SCHEMAS = ("aten::reshape", "aten::cat", "aten::contiguous")


def _schema(target: Any) -> torch._C.FunctionSchema | None:
    if isinstance(target, torch._ops.OpOverload):
        return target._schema
    if isinstance(target, torch._ops.OpOverloadPacket):
        overload = getattr(target, "default", None)
        return overload._schema if overload is not None else None
    return None


def _namespace(target: Any) -> str | None:
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace
    if isinstance(target, torch._ops.OpOverloadPacket):
        return target._qualified_op_name.split("::")[0]
    return None


def is_op(node: fx.Node, packet: torch._ops.OpOverloadPacket) -> bool:
    """A call of ``packet`` itself or of any of its overloads (the FSDP pass uses packets), or of the
    same op in another of the accepted launch namespaces."""
    if node.op != "call_function":
        return False
    target = node.target
    if target is packet or (isinstance(target, torch._ops.OpOverload) and target.overloadpacket is packet):
        return True
    name = packet._qualified_op_name.split("::")[-1]
    own = target.overloadpacket if isinstance(target, torch._ops.OpOverload) else target
    return (isinstance(own, torch._ops.OpOverloadPacket) and own._qualified_op_name.split("::")[-1] == name
            and _namespace(own) in active().launch_namespaces)


def _aliases_without_write(schema: torch._C.FunctionSchema | None) -> bool:
    if schema is None or not schema.returns:
        return False
    info = schema.returns[0].alias_info
    if info is None or info.is_write:
        return False
    return not any(arg.alias_info is not None and arg.alias_info.is_write for arg in schema.arguments)


def is_view(node: fx.Node) -> bool:
    """A call whose result aliases an input without writing (view, reshape, transpose, ...)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        source = node.args[0] if node.args else None
        return (active().getitem_views and isinstance(source, fx.Node) and source.op == "call_function"
                and _aliases_without_write(_schema(source.target)))
    return _aliases_without_write(_schema(node.target))


def view_closure(node: fx.Node) -> tuple[list[fx.Node], list[fx.Node]]:
    """(the views reachable from ``node`` through view chains, the non-view readers of ``node`` or
    of those views), each in discovery order: the one view-chain walk of the reference side."""
    views: list[fx.Node] = []
    readers: list[fx.Node] = []
    seen, stack = {node}, [node]
    while stack:
        for user in stack.pop().users:
            if is_view(user):
                if user not in seen:
                    seen.add(user)
                    views.append(user)
                    stack.append(user)
            elif user not in readers:
                readers.append(user)
    return views, readers


def is_collective(node: fx.Node) -> bool:
    """A functional c10d launch: any ``_c10d_functional`` op except ``wait_tensor``."""
    if node.op != "call_function" or _namespace(node.target) not in active().collective_namespaces:
        return False
    return not str(node.target).split(".")[1] == "wait_tensor"


def is_barrier(node: fx.Node) -> bool:
    """A node with effects: FX side-effectful targets (waits and launches aside), mutating ops,
    and, when the model says so, opaque module/method calls."""
    if node.op in ("call_module", "call_method"):
        return active().opaque_calls_are_barriers
    if node.op != "call_function" or is_collective(node):
        return False
    if _namespace(node.target) in active().collective_namespaces:
        return False  # wait_tensor
    if node.target in _side_effectful_functions or is_free_target(node.target):
        return True
    schema = _schema(node.target)
    return schema is not None and any(arg.alias_info is not None and arg.alias_info.is_write
                                      for arg in schema.arguments)


def rs_layout_preparation(launch: fx.Node) -> list[fx.Node]:
    """The private reshape/cat/contiguous chain feeding an RS launch, or [] (spec section 1.7)."""
    inputs = launch.all_input_nodes
    if len(inputs) != 1:
        return []
    source = inputs[0]
    if set(source.users) != {launch} or source.meta.get("autograd_backward") is False:
        return []
    owner = source.meta.get("fsdp_reduce_scatter_prepare")
    if not owner:
        return []
    if active().rs_owner_is_bucket_id and owner != launch.meta.get("fsdp_bucket_id"):
        return []
    chain: list[fx.Node] = []
    seen: set[fx.Node] = set()
    stack = [source]
    while stack:
        node = stack.pop()
        if node in seen or node.meta.get("fsdp_bucket_prepare") != owner:
            continue
        schema = _schema(node.target) if node.op == "call_function" else None
        if schema is None or schema.name not in _PREP_SCHEMAS:
            return []
        seen.add(node)
        chain.append(node)
        stack.extend(node.all_input_nodes)
    members = seen | {launch}
    if any(set(node.users) - members for node in chain):
        return []
    return chain
