"""One value bug, one finding: a value difference is named by the operator where the two worlds'
values first part, so the same bug on other shapes is one signature and two bugs are two."""

from fsdp_verify.checks.divergence import first_divergence
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.engine.signature import signature
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def _numerics(mutant: str, case):
    findings, ctx = check_all(get_target(f"mutant:{mutant}"), case)
    return [f for f in findings if f.checker == "numerics" and f.rule == "output_differs"], ctx


def test_a_copy_out_bug_parts_at_the_first_consumer_of_the_gathered_parameter():
    found, ctx = _numerics("swapped_copy_out", two_block_case())
    assert found and found[0].details["first_differs"] == "values"
    op = found[0].details["first_divergent_op"]
    assert op.startswith("aten.") and op != "output"  # a kept compute node, not the outputs
    where = first_divergence(ctx.case, ctx.original, ctx.rewritten, found[0].rank)
    assert where is not None and where.node == found[0].details["first_divergent"]


def test_the_same_bug_on_other_shapes_is_one_signature_and_another_bug_is_another():
    two, _ = _numerics("swapped_copy_out", two_block_case())
    four, _ = _numerics("swapped_copy_out", two_block_case(degree=4))
    other, _ = _numerics("avg_twice", two_block_case())
    assert two and four and other
    assert signature(two) == signature(four)
    assert signature(other) != signature(two)
    assert signature(other).cause.startswith("values at ")


def test_the_reference_has_no_divergence():
    findings, ctx = check_all(get_target("reference"), two_block_case())
    assert findings == []
    assert first_divergence(ctx.case, ctx.original, ctx.rewritten, 0) is None
