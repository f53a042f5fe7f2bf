"""Reduce-scatter specs written as the annotator writes them, after a draw changed a gradient.

The spec annotator ([S4]) takes a reduce-scatter's spec dtype from its input's traced
description. A mutation that widens a gathered product (a cast beside an op torch promotes, a
dimensioned gain) changes every gradient computed from it, after the blueprint wrote the specs:
left as written, the graph is one no annotator writes, and the harness rejects it as invalid
(``fsdp_verify/checks/annotation.py``), losing the gather it was drawn for. ``reannotated`` runs
the graph on meta tensors (no memory, no values) and writes each such spec's dtype as the annotator
would. Shapes are left: a gradient of another shape than its spec's is no gradient of the shard.
It shares no code with the gate on purpose: a fault in one is what the other is there to catch.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import Any, Callable, Optional

import torch
from torch import fx

from fsdp_verify.graph import edit
from fsdp_verify.graph.builder import build_module, localize, placeholder_tensors
from fsdp_verify.model.case import Case

RS_KIND = "fsdp_reduce_scatter"
ANNOTATED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _input_dtypes(case: Case) -> dict[str, tuple[torch.dtype, tuple]]:
    """Each tagged reduce-scatter's input (dtype, shape) on rank 0, from a run on meta tensors."""
    import torch.distributed._functional_collectives  # noqa: F401 - the collectives' meta kernels
    spec = localize(case.graph, 0)
    module = build_module(spec)
    facts = placeholder_tensors(spec)
    found: dict[str, tuple[torch.dtype, tuple]] = {}

    class Reader(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            if node.meta.get("comm_type") == RS_KIND and node.args and isinstance(node.args[0], fx.Node):
                value = self.env.get(node.args[0])
                if isinstance(value, torch.Tensor):
                    found[node.name] = (value.dtype, tuple(value.shape))
            return super().run_node(node)

    Reader(module).run(*[torch.empty(facts[node.name][0], dtype=facts[node.name][1], device="meta")
                         for node in spec.nodes if node.op == "placeholder"])
    return found


def reannotated(case: Case) -> Case:
    """``case`` with each reduce-scatter spec whose dtype is not its input's (same shape, a bucketable
    dtype) rewritten to the input's; the case itself where none differs or the graph does not run
    on meta tensors (then the harness's own check decides)."""
    try:
        inputs = _input_dtypes(case)
    except Exception:  # noqa: BLE001 - an op without a meta kernel, a value-dependent shape
        return case
    graph = case.graph
    for name, (dtype, shape) in inputs.items():
        spec = graph.node(name).meta.get("fsdp_bucket_spec")
        if not isinstance(spec, dict) or spec.get("dtype") not in ANNOTATED_DTYPES or spec["dtype"] == dtype \
                or dtype not in ANNOTATED_DTYPES or tuple(spec.get("input_shape") or ()) != shape:
            continue
        graph = edit.update_node(graph, name, meta={"fsdp_bucket_spec": {**spec, "dtype": dtype}})
    return case if graph is case.graph else replace(case, graph=graph)


def reannotating(fn: Callable[..., Optional[Case]]) -> Callable[..., Optional[Case]]:
    """Declare a mutation whose planted product may change a gradient's dtype: what it returns is
    ``reannotated``."""
    @functools.wraps(fn)
    def planted(*args: Any, **kwargs: Any) -> Optional[Case]:
        case = fn(*args, **kwargs)
        return None if case is None else reannotated(case)
    return planted
