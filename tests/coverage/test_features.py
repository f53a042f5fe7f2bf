"""The shapes a bug class hides in are counted per case: in-place and out= ops in spans, and
non-contiguous all-gather sources (with prefix-sharing scopes and dependent candidates)."""

from __future__ import annotations

from dataclasses import replace

import torch

from fsdp_verify.coverage.reasons import FEATURES, case_features
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.model.case import Case
from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from helpers.cases import plan, two_block_case


def _pair(case: Case, variant) -> tuple[str, str]:
    return next(p for p in mutations.sibling_pairs(case.graph) if mutations.fits(variant, case, p)
                and variant(case, *p) is not None)


def test_a_plain_graph_has_none_of_the_new_features():
    features = case_features(two_block_case())
    assert not features["mutating_ops_in_spans"] and not features["non_contiguous_sources"]
    assert {"mutating_ops_in_spans", "non_contiguous_sources"} <= set(FEATURES)


def test_in_place_and_out_writes_in_a_span_are_counted_and_split_the_pair():
    base = two_block_case(reshard_after_forward=True)
    for variant in (mutations.in_place_between, mutations.out_variant_between):
        a, b = _pair(base, variant)
        case = variant(base, a, b)
        assert case_features(case)["mutating_ops_in_spans"] == 1
        split = [d for d in plan(case).decisions if d["action"] == "split"]
        assert any(d["reason"] == "effect_or_storage_release" for d in split), plan(case).decisions
        outputs = simulate(case, build_world(case)).outputs
        assert set(outputs) == set(case.graph.world())


def _blueprint(layout: str) -> Blueprint:
    return Blueprint(blocks=((ParamDraw((2, 3), view="t", layout=layout), ParamDraw((3, 2), layout=layout)),))


def test_a_column_major_source_is_non_contiguous_counted_and_gathers_the_same_values():
    contiguous, column = Case(render(_blueprint("contiguous"))), Case(render(_blueprint("column_major")))
    assert case_features(column)["non_contiguous_sources"] == 1
    assert not case_features(contiguous)["non_contiguous_sources"]
    module = build_module(localize(column.graph, 0))
    sources = [n.args[0] for n in module.graph.nodes if "all_gather_into_tensor" in str(n.target)]
    assert sources and all(s.op == "call_function" and "transpose" in str(s.target) for s in sources)
    a = simulate(contiguous, build_world(contiguous), seed=3).outputs
    b = simulate(replace(column, seed=contiguous.seed), build_world(column), seed=3).outputs
    assert a.keys() == b.keys()
    for rank in a:
        assert all(torch.equal(x, y) for x, y in zip(a[rank], b[rank]))


def test_a_reduce_scatter_past_its_exact_span_is_counted_as_wrapped_codes():
    wide = Case(render(Blueprint(blocks=((ParamDraw((2, 80), dtype="bfloat16"), ParamDraw((3, 2))),))))
    narrow = Case(render(Blueprint(blocks=((ParamDraw((2, 3), dtype="bfloat16"), ParamDraw((3, 2))),))))
    assert case_features(wide)["wrapped_codes"] == 1
    assert not case_features(narrow)["wrapped_codes"]
