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


def test_a_one_rank_group_is_counted_unannotated_and_skipped_by_rule_5():
    """Expert parallelism as wide as the FSDP group leaves the experts' FSDP group one rank wide: the
    spec annotator writes no bucket spec for degree 1 (spec 1.4 step 8) and the planner skips the
    launches as group_size_mismatch; a planner that takes degree 1 on a one-rank group is caught."""
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.targets import get_target
    blocks = ((ParamDraw((2, 4)), ParamDraw((2, 4), expert=True)), (ParamDraw((2, 2)), ParamDraw((3,), expert=True)))
    case = Case(render(Blueprint(blocks=blocks, degree=4, expert_degree=1)))
    assert case_features(case)["one_rank_groups"] == 1 and not case_features(two_block_case())["one_rank_groups"]
    experts = [n for n in case.graph.nodes if n.meta.get("comm_group") == "fsdp_expert"]
    assert experts and all("fsdp_bucket_spec" not in n.meta and n.args[-2] == 1 for n in experts)
    reasons = {d["reason"] for d in plan(case).decisions if d["action"] == "skip"}
    assert reasons == {"group_size_mismatch"}
    assert not check_all(get_target("reference"), case)[0]
    findings, _ = check_all(get_target("mutant:one_rank_group_accepted"), case, only=("planner",))
    assert findings


def test_two_groups_of_one_size_with_different_ranks_are_counted():
    contiguous = ((ParamDraw((2, 3), expert=True), ParamDraw((2, 3), expert=True)),)
    strided = ((ParamDraw((2, 3), expert=True), ParamDraw((2, 3), expert=True, strided_group=True)),)
    assert case_features(Case(render(Blueprint(blocks=strided, degree=4, expert_degree=2))))["groups_of_one_size"]
    assert not case_features(Case(render(Blueprint(blocks=contiguous, degree=4, expert_degree=2))))["groups_of_one_size"]
