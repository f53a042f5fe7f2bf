"""Whether a case's reduce-scatter specs say what its graph computes: a precondition of judging it.

The spec annotator (spec section 1, step 8, [S4]) takes a reduce-scatter's spec dtype and shape
from the traced description of its input, so on every graph a target receives in practice they
agree. A generated graph whose edits changed a gradient after its spec was written (a cast that
promotes, a gain that widens or broadcasts the product) is one no annotator writes: a planner
that trusts its spec, as the spec says it may, packs that gradient wrongly. Such a case is invalid
input, never the target's bug, so the run's verdict on it is ``invalid``.

Only specs the planner cannot fault on their face are compared, of real reduce-scatters: a spec
dtype outside the planner's bucket dtypes, malformed or inconsistent shapes, or another op under
the tag is a hazard the planner must skip by its reason (``unsupported_dtype``,
``unknown_or_dynamic_shape``, ``invalid_dim0_layout``, ``unsupported_or_already_bucketed``), and
judging that skip is the point of the case.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from torch import fx

from fsdp_verify.checks.plan_model import FLOATS, RS_KIND
from fsdp_verify.execute.simulated import WorldRun


@dataclass(frozen=True)
class SpecDisagreement:
    """One reduce-scatter whose spec (dtype and shape) is not its input's on one rank."""

    rank: int
    node: str
    spec: str  # ``dtype [dims]``
    input: str

    def describe(self) -> str:
        """``rank R: N's spec says D, its input is E``."""
        return f"rank {self.rank}: {self.node}'s spec says {self.spec}, its input is {self.input}"


def disagreements(modules: Mapping[int, fx.GraphModule], run: WorldRun) -> list[SpecDisagreement]:
    """The annotated reduce-scatters of the original ``modules`` whose well-formed spec names
    another dtype or shape than their input had in ``run`` (the original world's run), rank by rank."""
    found = []
    for rank, records in sorted(run.streams.items()):
        module = modules.get(rank)
        if module is None:
            continue
        specs = {node.name: node.meta["fsdp_bucket_spec"] for node in module.graph.nodes
                 if node.meta.get("comm_type") == RS_KIND and isinstance(node.meta.get("fsdp_bucket_spec"), dict)
                 and _well_formed(node.meta["fsdp_bucket_spec"], node.meta.get("fsdp_degree"))}
        for record in records:
            spec = specs.get(record.node)
            if spec is None or record.op != "reduce_scatter_tensor":
                continue
            if str(spec["dtype"]) != record.dtype or tuple(spec["input_shape"]) != tuple(record.shape):
                found.append(SpecDisagreement(rank, record.node, _described(spec["dtype"], spec["input_shape"]),
                                              _described(record.dtype, record.shape)))
    return found


def _described(dtype: object, shape: object) -> str:
    return f"{str(dtype).removeprefix('torch.')} {list(shape)}"


def _well_formed(spec: dict, degree: object) -> bool:
    """Whether the spec is what the annotator writes for some input (a bucketable dtype, static
    positive dims, the output's dim 0 the input's divided by the degree, a degree over 1): a spec
    the planner cannot fault on its face. One it can is a hazard, whatever the input."""
    shape, out = spec.get("input_shape"), spec.get("output_shape")
    if spec.get("dtype") not in FLOATS or not isinstance(degree, int) or isinstance(degree, bool) \
            or degree <= 1 or not isinstance(shape, (tuple, list)) or not isinstance(out, (tuple, list)) \
            or not shape or len(shape) != len(out):
        return False
    if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in (*shape, *out)):
        return False
    return shape[0] == out[0] * degree and tuple(shape[1:]) == tuple(out[1:])
