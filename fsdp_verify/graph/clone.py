"""An independent copy of a graph module, at a fraction of ``copy.deepcopy``'s cost.

Checkers copy modules before handing them to a target that may mutate them (re-planning,
applying a stale plan, replaying a round). ``copy.deepcopy`` of a ``GraphModule`` creates every
node through ``Graph.create_node``, which walks each node's arguments with pytree looking for
symbolic ints; a copy of a graph that was already built has none to find.
"""

from __future__ import annotations

import copy

import torch
from torch import fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from fsdp_verify.graph.builder import set_inputs

_PLAIN = frozenset(_LazyGraphModule(torch.nn.Module(), fx.Graph()).__dict__) | {"_code", "_lineno_map"}


def _plain(module: fx.GraphModule) -> bool:
    """No submodules, parameters, buffers, hooks or attribute reads: everything lives in the graph,
    ``meta`` and plain attributes (what ``graph.builder`` makes and the in-process targets keep)."""
    kind = type(module)
    if kind.__qualname__.endswith("<locals>.GraphModuleImpl"):  # GraphModule makes a class per instance
        kind = kind.__mro__[1]
    return (kind in (fx.GraphModule, _LazyGraphModule) and not module._modules
            and not module._parameters and not module._buffers and not module._forward_hooks
            and not module._forward_pre_hooks
            and not any(node.op in ("get_attr", "call_module", "call_method") for node in module.graph.nodes))


def clone_module(module: fx.GraphModule) -> fx.GraphModule:
    """A copy as independent as ``copy.deepcopy(module)``: new nodes with the same names, targets,
    arguments and types, each node's meta copied one level deep (as ``Graph.node_copy`` does),
    the module's ``meta`` and other attributes deep-copied. Any other module is deep-copied."""
    if not _plain(module):
        return copy.deepcopy(module)
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    lookup = env.__getitem__
    for node in module.graph.nodes:
        if node.op == "output":
            new = graph.output(fx.map_arg(node.args[0], lookup), node.type)
        else:
            new = graph.create_node(node.op, node.target, name=node.name, type_expr=node.type)
            set_inputs(new, fx.map_arg(node.args, lookup) if node.args else (),
                       fx.map_arg(node.kwargs, lookup) if node.kwargs else {})
        if type(node.meta) is dict:
            new.meta.update(node.meta)  # a fresh node's meta is empty: one level deep, as node_copy
        else:
            new.meta = copy.copy(node.meta)  # keep a target's own mapping type
        env[node] = new
    result = _LazyGraphModule(torch.nn.Module(), graph)
    result.meta = copy.deepcopy(module.meta)
    for key, value in module.__dict__.items():
        if key not in _PLAIN:
            setattr(result, key, copy.deepcopy(value))
    return result
