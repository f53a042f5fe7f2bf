"""A reduce-scatter whose spec is not its input's makes the case invalid input, never a finding;
a spec the planner can fault on its face stays the planner's to skip."""

from __future__ import annotations

import torch

from fsdp_verify.checks import INVALID
from fsdp_verify.checks.annotation import disagreements
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.graph import edit
from fsdp_verify.model.case import Case
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def _spec(case: Case, node: str, **changes) -> Case:
    spec = {**case.graph.node(node).meta["fsdp_bucket_spec"], **changes}
    return Case(edit.update_node(case.graph, node, meta={**case.graph.node(node).meta, "fsdp_bucket_spec": spec}))


def _first_rs(case: Case) -> str:
    return next(n.name for n in case.graph.nodes if n.meta.get("comm_type") == "fsdp_reduce_scatter")


def _found(case: Case) -> list:
    modules = build_world(case, shared=True)
    return disagreements(modules, simulate(case, modules))


def test_a_drawn_graph_s_reduce_scatter_specs_are_its_inputs():
    assert _found(two_block_case()) == []


def test_a_spec_dtype_that_is_not_the_input_s_makes_the_case_invalid_for_every_checker():
    """Packing a float32 gradient as its bf16 spec says is what a planner may do: on a graph no
    annotator writes, that is no bug, and the case is not judged at all."""
    base = two_block_case()
    rs = _first_rs(base)
    case = _spec(base, rs, dtype=torch.bfloat16)
    found = _found(case)
    assert found and {f.node for f in found} == {rs} and "bfloat16" in found[0].spec and "float32" in found[0].input
    findings, _ = check_all(get_target("reference"), case)
    assert [(f.severity, f.rule) for f in findings] == [(INVALID, "spec_disagrees_with_input")]


def test_a_consistent_spec_of_another_shape_is_invalid_too():
    base = two_block_case()
    rs = _first_rs(base)
    spec = base.graph.node(rs).meta["fsdp_bucket_spec"]
    shape, out = tuple(spec["input_shape"]), tuple(spec["output_shape"])
    case = _spec(base, rs, input_shape=(*shape, 1), output_shape=(*out, 1))
    assert _found(case) and _found(case)[0].node == rs


def test_a_spec_the_planner_can_fault_on_its_face_is_a_hazard_and_stays_judged():
    """Unsupported dtypes and inconsistent dims are skip reasons (``unsupported_dtype``,
    ``invalid_dim0_layout``): the planner must see them, so the gate leaves them alone."""
    base = two_block_case()
    rs = _first_rs(base)
    spec = base.graph.node(rs).meta["fsdp_bucket_spec"]
    for changes in ({"dtype": torch.int32}, {"input_shape": (spec["input_shape"][0] + 1, *spec["input_shape"][1:])}):
        case = _spec(base, rs, **changes)
        assert _found(case) == []
        findings, _ = check_all(get_target("reference"), case)
        assert not any(f.rule == "spec_disagrees_with_input" for f in findings)


def test_the_neighbour_s_gain_is_planted_on_forward_gathers_only():
    """On a backward gather the widened product is what the gradient reads: its reduce-scatter's
    spec would name another dtype (seed 3's default mix met it, 116 examples in)."""
    from fsdp_verify.strategies import mutations
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    case = Case(render(Blueprint(blocks=((ParamDraw((2, 4), wire="bfloat16", scaled=True), ParamDraw((3, 4))),),
                                 reshard_after_forward=True)))
    forward = mutations.gain_of_a_dynamic_neighbour(case, "ag_blocks_0_w0", "ag_blocks_0_w1")
    assert forward is not None and _found(forward) == []
    assert mutations.gain_of_a_dynamic_neighbour(case, "ag_bw_blocks_0_w0", "ag_bw_blocks_0_w1") is None
