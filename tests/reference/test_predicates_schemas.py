"""The view rule reads a schema's first return: the facts that make that choice safe on every
traced graph, checked against the schemas this torch registers."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.autograd.forward_ad as forward_ad
from torch.fx.experimental.proxy_tensor import make_fx

from fsdp_verify.reference.predicates import _aliases_without_write


def _differing() -> set[str]:
    """Every registered schema whose first and last returns differ in aliasing without a write."""
    found = set()
    for schema in torch._C._jit_get_all_schemas():
        if len(schema.returns) < 2:
            continue
        last = SimpleNamespace(returns=schema.returns[-1:], arguments=schema.arguments)  # what the rule reads
        if _aliases_without_write(schema) != _aliases_without_write(last):
            found.add(schema.name)
    return found


def test_only_unpack_dual_aliases_in_one_return_and_not_in_another():
    assert _differing() <= {"aten::_unpack_dual"}


def test_unpack_dual_is_never_recorded_by_a_trace_below_autograd():
    """Its only kernel is CompositeImplicitAutograd, so a trace of forward-mode AD code records its
    decomposition (``aten.alias``), never the op: no traced graph tells the first return from the last."""
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::_unpack_dual", "CompositeImplicitAutograd")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_unpack_dual", "CompositeExplicitAutograd")

    def tangent_of_sin(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        with forward_ad.dual_level():
            return forward_ad.unpack_dual(forward_ad.make_dual(x, t).sin()).tangent

    graph = make_fx(tangent_of_sin)(torch.randn(3), torch.randn(3)).graph
    targets = {node.target for node in graph.nodes if node.op == "call_function"}
    assert torch.ops.aten._unpack_dual.default not in targets and torch.ops.aten.alias.default in targets
