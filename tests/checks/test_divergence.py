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


def test_a_lost_node_is_named_by_its_operator_not_its_name():
    # Two causes of one rule: a deduplicated add and a folded pre-gather cast. Keyed by (checker,
    # rule) alone, the second was kept as a repeat of the first and never triaged on its own.
    from fsdp_verify.checks.findings import Finding

    def lost(name: str, op: str) -> list:
        return [Finding("dependencies", f"node {name!r} lost", nodes=(name,), rule="node_lost", details={"op": op})]
    assert signature(lost("add", "aten.add.Tensor")) == signature(lost("add_7", "aten.add.Tensor"))
    assert signature(lost("add", "aten.add.Tensor")) != signature(lost("_to_copy", "aten._to_copy.default"))
    import torch
    from torch import fx
    from fsdp_verify.checks.dependencies import _lost_nodes
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten.neg.default, (x,)))
    found = _lost_nodes(fx.GraphModule(torch.nn.Module(), graph), {"x": x})
    assert found[0].details["op"] == "aten.neg.default"
