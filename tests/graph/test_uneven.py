"""Uneven shards: a rank that pads a short shard has a graph of its own (``ParamSpec.padding``)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from hypothesis import HealthCheck, Phase, find, settings

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.execute.world import build_world
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.graph.spec import graph_from_json, padded_result, unpadded, validate
from fsdp_verify.graph.values import SpecError
from fsdp_verify.strategies import fsdp_graphs
from fsdp_verify.strategies.uneven import uneven_cases
from fsdp_verify.targets import get_target
from fsdp_verify.targets.mutants.catalogue import MUTANTS
from helpers.cases import two_block_case


def _padded(case, rows: int = 1, rank: int = 1):
    param = case.graph.params[0]
    graph = replace(case.graph, params=(replace(param, padding=((rank, rows),)), *case.graph.params[1:]))
    return replace(case, graph=graph), param


def test_a_short_rank_pads_its_shard_before_the_first_read_and_nothing_else_moves():
    case, param = _padded(two_block_case())
    validate(case.graph)
    assert graph_from_json(case.graph.to_json()) == case.graph
    even, short = localize(case.graph, 0), localize(case.graph, 1)
    assert [n.name for n in even.nodes] == [n.name for n in case.graph.nodes]
    names = [n.name for n in short.nodes]
    assert unpadded(param.placeholder) in names and len(names) == len(even.nodes) + 2  # the pad and the unpad
    pad = short.node(param.placeholder)
    assert pad.target == "aten.constant_pad_nd.default" and pad.inputs() == [unpadded(param.placeholder)]
    first_reader = next(n for n in case.graph.nodes if param.placeholder in n.inputs())
    assert names[names.index(param.placeholder) + 1] == first_reader.name  # just before its first read
    assert localize(short, 1) == short  # no padding is left to apply
    # The gradient's reduce-scatter gives the padded shard; the rank keeps its own rows, as DTensor
    # narrows an uneven shard: a slice named as the wait was, so every reader is unchanged.
    scatter = next(n for n in case.graph.nodes if n.meta.get("comm_type") == "fsdp_reduce_scatter"
                   and n.meta.get("param_name") == param.fqn)
    wait = next(n for n in case.graph.nodes if n.inputs()[:1] == [scatter.name] and "wait" in n.target)
    kept = short.node(wait.name)
    assert kept.target == "aten.slice.Tensor" and kept.args[1:] == (0, 0, param.shard_shape[0] - 1)
    assert short.node(padded_result(wait.name)).inputs() == [scatter.name]
    assert names.index(padded_result(wait.name)) + 1 == names.index(wait.name)
    assert set(names) - {n.name for n in even.nodes} == {unpadded(param.placeholder), padded_result(wait.name)}
    placeholders = {n.name for n in short.nodes if n.op == "placeholder"}
    named = {n.meta["param_node"] for n in short.nodes if "param_node" in n.meta}
    assert named and named <= placeholders  # the FSDP pass tags the rank's own placeholder (spec 1.4)
    rows = param.shard_shape[0]
    assert make_inputs(case.graph, 1)[[n.name for n in short.nodes if n.op == "placeholder"].index(
        unpadded(param.placeholder))].shape[0] == rows - 1
    module = build_world(case, shared=True)[1]
    assert any(n.name == unpadded(param.placeholder) for n in module.graph.nodes)
    build_module(short)  # lints


def _renamed(nodes: tuple, old: str, new: str) -> tuple:
    """``nodes`` with node ``old`` called ``new``, and its readers' positional references with it."""
    nodes = tuple(replace(n, name=new) if n.name == old else n for n in nodes)
    return tuple(replace(n, args=tuple(type(a)(new) if getattr(a, "name", None) == old else a for a in n.args))
                 for n in nodes)


def test_a_node_named_as_a_padded_rank_s_gradient_wait_is_refused():
    case = two_block_case()
    param = case.graph.params[0]
    wait = next(n for n in case.graph.nodes if n.meta.get("param_name") == param.fqn and "wait" in n.target
                and n.meta.get("wait_for", "").startswith("rs"))
    nodes = _renamed(case.graph.nodes, "sum_1", padded_result(wait.name))
    graph = replace(case.graph, nodes=nodes, params=(replace(param, padding=((1, 1),)), *case.graph.params[1:]))
    with pytest.raises(SpecError, match="gradient wait takes"):
        validate(graph)


@pytest.mark.parametrize("padding, field", [(((7, 1),), "not in the world"), (((1, 0),), "takes 1 to"),
                                            (((1, 1), (1, 1)), "padded twice")])
def test_bad_padding_is_refused_naming_the_field(padding, field):
    case = two_block_case()
    graph = replace(case.graph, params=(replace(case.graph.params[0], padding=padding), *case.graph.params[1:]))
    with pytest.raises(SpecError) as error:
        validate(graph)
    assert "params[0].padding" in str(error.value) and field in str(error.value)


def _disagreeing(case) -> bool:
    """Whether the reference refuses ``case`` because its ranks' plans disagree."""
    target = get_target("reference")
    try:
        target.rewrite(case, build_world(case))
    except ValueError as error:
        return "Bucket plans disagree" in str(error)
    return False


@pytest.fixture(scope="module")
def disagreeing():
    """A drawn case whose ranks' plans disagree, so the reference refuses it."""
    return find(uneven_cases(fsdp_graphs("tiny")), _disagreeing,
                settings=settings(database=None, max_examples=300, phases=[Phase.generate], derandomize=True,
                                  suppress_health_check=list(HealthCheck)))


def test_ranks_whose_graphs_make_their_plans_disagree_stop_as_the_spec_says(disagreeing):
    """The reference raises (spec 3.6) and that is judged right; a driver that leaves the round out
    instead is caught by the planner oracle's rule, on a graph only uneven shards give."""
    findings, ctx = check_all(get_target("reference"), disagreeing)
    assert findings == []
    from fsdp_verify.report.tally import proofs_of
    assert proofs_of(ctx.metrics)["planner_disagreements_stopped"] == 1  # said: no rewrite was judged
    rules = {f.key for f in check_all(MUTANTS["disagreement_unbucketed"], disagreeing)[0]}
    assert ("planner", "disagreement_not_stopped") in rules


def test_real_ranks_take_a_refusal_the_spec_makes_for_right_and_no_other(disagreeing):
    from fsdp_verify.checks.planner_oracle import disagreeing_groups
    from fsdp_verify.execute.ranks.judge import _disagreed_as_the_spec_does
    group = disagreeing_groups(disagreeing, build_world(disagreeing))[0]
    refused = {rank: {"status": "disagree", "group": group} for rank in disagreeing.graph.world()}
    assert _disagreed_as_the_spec_does(disagreeing, refused)
    even = replace(disagreeing, graph=replace(disagreeing.graph, params=tuple(
        replace(p, padding=()) for p in disagreeing.graph.params)))
    assert not _disagreed_as_the_spec_does(even, refused)  # even ranks never disagree rightly
    one = {**refused, min(refused): {"status": "ok"}}
    assert not _disagreed_as_the_spec_does(disagreeing, one)  # a rank that went on: rank-dependent


def test_invalid_planner_arguments_on_uneven_ranks_are_refused_before_any_plan_is_derived():
    """The planner must refuse these first; deriving the ranks' plans from them would crash."""
    from fsdp_verify.model.case import PlanArgs
    case, _ = _padded(two_block_case())
    case = replace(case, plan_args=PlanArgs(module_bucket_plans=[["blocks.0", 7]]))
    assert check_all(get_target("reference"), case)[0] == []


def test_a_tag_of_any_json_value_beside_padding_localises():
    """Tags may hold anything a file says (broken on purpose); only a name is renamed."""
    case, param = _padded(two_block_case())
    nodes = [replace(n, meta={**n.meta, "param_node": ["not", "a", "name"]}) if "param_node" in n.meta else n
             for n in case.graph.nodes]
    graph = replace(case.graph, nodes=tuple(nodes))
    assert [n.meta.get("param_node") for n in localize(graph, 1).nodes if "param_node" in n.meta][0] == \
        ["not", "a", "name"]


@pytest.mark.parametrize("value", ["1:1", [[1]], [[1, True]], [[-1, 1]], [1, 1]])
def test_a_padding_that_is_no_list_of_pairs_is_refused_naming_the_field(value):
    doc = two_block_case().graph.to_json()
    doc["params"][0]["padding"] = value
    with pytest.raises(SpecError) as error:
        graph_from_json(doc)
    assert "params[0].padding" in str(error.value)


def _unpad_before_its_split(case) -> bool:
    """Whether some short rank narrows a gradient before the point its fused reduce-scatter is
    placed at (after the bucket's last source): the view must then move after the split."""
    target = get_target("reference")
    world = build_world(case)
    for rank, module in world.items():
        nodes = list(module.graph.nodes)
        index = {n.name: i for i, n in enumerate(nodes)}
        unpads = {n.args[0].name: index[n.name] for n in nodes if n.target is torch.ops.aten.slice.Tensor
                  and n.args[0].name == padded_result(n.name)}
        for bucket in target.plan(case, module, rank).buckets:
            anchor = max(min(index[m.launch.name] for m in bucket.members), max(m.ready for m in bucket.members) + 1)
            if len(bucket.members) > 1 and any(unpads.get(m.wait.name, anchor) < anchor for m in bucket.members):
                return True
    return False


def test_the_reference_moves_a_short_rank_s_unpad_after_the_fused_reduce_scatter():
    """A short rank narrows its gradient right after the member's wait, which may come before the
    fused reduce-scatter's split (the bucket launches after its last source): the reference moves
    that view after the split, as it moves an all-gather member's views. Before, the short rank's
    rewrite failed its lint ("used before it has been defined") on 1 draw in a few."""
    case = find(uneven_cases(fsdp_graphs("tiny")), _unpad_before_its_split,
                settings=settings(database=None, max_examples=500, phases=[Phase.generate],
                                  suppress_health_check=list(HealthCheck)))
    findings, _ = check_all(get_target("reference"), case)
    assert not [f for f in findings if f.severity in ("error", "invalid")], [f.message for f in findings]


def _cast_gather_case():
    """One block: a bf16 cast of a (2, 4) float32 shard gathered beside a plain float32 gather."""
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    blocks = ((ParamDraw((2, 4), view="t", wire="bfloat16"), ParamDraw((3,), view="flat")),)
    return Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))


def test_a_short_rank_casts_its_own_rows_then_pads_the_cast_as_simple_fsdp_does():
    case, param = _padded(_cast_gather_case())
    validate(case.graph)
    cast = next(n for n in case.graph.nodes if n.target == "prims.convert_element_type.default"
                and n.inputs() == [param.placeholder])
    short = localize(case.graph, 1)
    names = [n.name for n in short.nodes]
    own = short.node(unpadded(cast.name))
    assert own.target == cast.target and own.inputs() == [unpadded(param.placeholder)] and own.args[1:] == cast.args[1:]
    pad = short.node(cast.name)  # named as the cast: every reader (the gather) is the other ranks'
    assert pad.target == "aten.constant_pad_nd.default" and pad.inputs() == [own.name]
    assert pad.args[1] == [0, 0, 0, 1]
    assert names.index(own.name) + 1 == names.index(cast.name)
    gather = next(n for n in short.nodes if cast.name in n.inputs())
    assert gather.meta.get("comm_type") == "fsdp_all_gather"
    # the placeholder is padded only where something else reads it (here: nothing before the backward)
    assert set(names) - {n.name for n in localize(case.graph, 0).nodes} >= {unpadded(cast.name)}
    build_module(short)  # lints
    errors = [f for f in check_all(get_target("reference"), case)[0] if f.severity == "error"]
    assert not errors, errors
    # A walk that does not follow a pad hands a short rank's member back in the parameter's dtype:
    # with the pad between the cast and the gather, the plain bf16 gather shows it.
    killed = {f.checker for f in check_all(MUTANTS["pad_unknown_to_the_walk"], case)[0] if f.severity == "error"}
    assert killed & {"layout", "numerics"}, killed


def test_a_node_named_as_a_padded_rank_s_own_cast_is_refused():
    case, param = _padded(_cast_gather_case())
    cast = next(n for n in case.graph.nodes if n.target == "prims.convert_element_type.default")
    with pytest.raises(SpecError, match="cast of its own rows"):
        validate(replace(case.graph, nodes=_renamed(case.graph.nodes, "sum_1", unpadded(cast.name))))


def test_the_written_script_casts_a_short_rank_s_own_rows_then_pads_as_the_builder_does(tmp_path):
    import runpy

    from fsdp_verify.report import repro
    case, _ = _padded(_cast_gather_case())
    script = tmp_path / "repro.py"
    script.write_text(repro.write(case, "reference").text)
    namespace = runpy.run_path(str(script), run_name="not_main")
    for rank in case.graph.world():
        written, built = namespace["build_graph"](rank), build_module(localize(case.graph, rank))
        assert [(n.name, n.op, str(n.target), str(n.args)) for n in written.graph.nodes] == \
            [(n.name, n.op, str(n.target), str(n.args)) for n in built.graph.nodes]
