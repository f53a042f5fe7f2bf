"""The fusion mutation that puts one bucket's insertion point on a node another bucket's fusion
erases: the reference fuses it right, a rewriter fusing the earlier bucket first breaks the graph."""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.reference import rewrite
from fsdp_verify.strategies import mutated_graphs, mutations
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def _case():
    base = two_block_case(reshard_after_forward=False)  # gathered before the forward: room to move a wait
    pair = next(p for p in mutations.sibling_pairs(base.graph)
                if mutations.anchor_on_foreign_wait(base, *p) is not None)
    return mutations.anchor_on_foreign_wait(base, *pair)


def _earliest_first(jobs, order):
    return sorted(jobs, key=lambda job: order[job[2]])


def test_the_reference_fuses_both_buckets_right():
    assert check_all(get_target("reference"), _case())[0] == []


def test_fusing_the_earlier_bucket_first_loses_the_insertion_point(monkeypatch):
    # the reference's own lint stops the broken graph: the target raises, and says why
    monkeypatch.setattr(rewrite, "_fusion_order", _earliest_first)
    findings, ctx = check_all(get_target("reference"), _case())
    assert {f.key for f in findings} == {("target", "raised")}
    assert ctx.run.error_type == "RuntimeError"


def test_a_rewriter_that_does_not_lint_is_named_by_the_dependencies_rule():
    findings, ctx = check_all(get_target("mutant:fuses_earliest_first"), _case())
    assert ctx.run.error is None
    assert ("dependencies", "read_before_definition") in {f.key for f in findings}
    assert not any(f.rule == "checker_crash" for f in findings)
    assert "ordering" in ctx.skipped  # no schedule to judge: said, never silent


def test_graphs_that_reshard_after_forward_have_no_room():
    base = two_block_case(reshard_after_forward=True)
    assert all(mutations.anchor_on_foreign_wait(base, *p) is None for p in mutations.sibling_pairs(base.graph))


def test_the_draw_plants_the_shape_whatever_the_blueprint_drew():
    labels = []

    # a hundred examples: on forty the share swung from above a quarter to one in forty when an
    # unrelated draw (one-rank expert groups) moved the stream
    @settings(max_examples=100, database=None, derandomize=True, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutated_graphs("tiny", reason="anchor_on_foreign_wait"))
    def draw(case):
        labels.append(case.label)

    draw()
    planted = [label for label in labels if label.startswith("fusion:anchor_on_foreign_wait")]
    assert len(planted) >= len(labels) // 4, labels


def test_the_shape_is_counted_by_coverage():
    from fsdp_verify.coverage.reasons import case_features
    assert case_features(_case())["interleaved_gathers"] == 1
    assert not case_features(two_block_case(reshard_after_forward=False))["interleaved_gathers"]


def test_a_view_left_before_the_fused_launch_is_named_by_the_dependencies_rule():
    """B's source is copied after A's first view, so the fused launch goes after that view: the
    reference moves the view past it; a rewriter that leaves it (and does not lint) hands back a view
    that reads A's copy-out before it is defined."""
    base = two_block_case(reshard_after_forward=True)
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.source_after_view(base, *p) is not None)
    case = mutations.source_after_view(base, *pair)
    assert check_all(get_target("reference"), case)[0] == []
    findings, ctx = check_all(get_target("mutant:views_left_behind"), case)
    assert ctx.run.error is None
    assert ("dependencies", "read_before_definition") in {f.key for f in findings}
