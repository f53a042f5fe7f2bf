"""Calls with no operator schema (Python's operators, as a symbolic trace records them) are no
views: a gradient read by ``-`` has a consumer other than the output, and the planner skips it."""

from __future__ import annotations

import operator

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.graph.builder import build_module
from fsdp_verify.report.repro import target_expr
from fsdp_verify.strategies import mutations
from fsdp_verify.targets import get_target
from fsdp_verify.targets.inductor import TorchInductorTarget
from helpers.cases import decision_for, plan, two_block_case


def _case():
    case = two_block_case()
    launch = next(n for n in mutations.launches(case.graph) if mutations.fits(mutations.rs_python_consumer, case, n))
    return mutations.rs_python_consumer(case, launch), launch


def test_the_reference_skips_a_gradient_read_by_a_python_operator():
    case, launch = _case()
    assert "operator.neg" in {n.target for n in case.graph.nodes}
    assert decision_for(plan(case), launch, "skip")["reason"] == "non_output_rs_consumer"
    assert check_all(get_target("reference"), case)[0] == []


def test_a_planner_that_takes_schemaless_calls_for_views_is_named_by_the_planner_oracle():
    case, _ = _case()
    findings, _ = check_all(get_target("mutant:schemaless_calls_are_views"), case)
    assert ("planner", "missed_skip_non_output_rs_consumer") in {f.key for f in findings}


def test_the_graph_runs_and_a_repro_names_the_operator():
    case, _ = _case()
    module = build_module(case.graph)
    assert operator.neg in {n.target for n in module.graph.nodes}
    assert target_expr("operator.neg") == "operator.neg"


def test_inductor_receives_the_aten_op_make_fx_lowers_it_to():
    case, _ = _case()
    inductor = TorchInductorTarget()
    assert inductor.contract_mismatches(case)  # the raw form is not what inductor receives
    normal = inductor.normalise(case)
    targets = {n.target for n in normal.graph.nodes}
    assert "operator.neg" not in targets and "aten.neg.default" in targets
    assert not inductor.contract_mismatches(normal)


def test_every_python_operator_a_graph_may_hold_has_its_aten_op_for_inductor():
    from fsdp_verify.graph.ops import FUNCTIONS, PYTHON_OPERATORS
    from fsdp_verify.targets.inductor import ATEN_OF_PYTHON_OPERATOR
    assert set(ATEN_OF_PYTHON_OPERATOR) == set(PYTHON_OPERATORS) <= set(FUNCTIONS)


def test_the_shape_is_counted_by_coverage():
    from fsdp_verify.coverage.reasons import case_features
    case, _ = _case()
    assert case_features(case)["schemaless_consumers"] == 1
    assert not case_features(two_block_case())["schemaless_consumers"]
