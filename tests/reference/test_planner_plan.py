"""Plan contents: offsets, to_dict, ids, digests, summary and purity (spec 2.7-2.11, 5.2)."""

from __future__ import annotations

import copy
import json
import math
import operator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_verify.checks.plan_model import expected_report
from fsdp_verify.execute.world import build_world
from fsdp_verify.graph.builder import build_module
from fsdp_verify.strategies import fsdp_graphs, mutated_graphs
from fsdp_verify.targets.reference import ReferenceTarget
from fsdp_verify.reference.planner import graph_signature, plan_fsdp_buckets
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.model.case import Case
from helpers.cases import plan, two_block_case


def test_offsets_and_describe_for_ag_and_rs_buckets():
    result = plan(two_block_case()).to_dict()
    ag = next(b for b in result["buckets"] if b["members"][0]["kind"] == "fsdp_all_gather")
    rs = next(b for b in result["buckets"] if b["members"][0]["kind"] == "fsdp_reduce_scatter")
    # block 0: w0 shard (2, 4) -> full (4, 4); w1 shard (3,) -> full (6,)
    assert [(m["param_name"], m["local_offset"], m["local_numel"]) for m in ag["members"]] == [
        ("blocks.0.w0", 0, 8), ("blocks.0.w1", 8, 3)]
    assert [(m["param_name"], m["local_offset"], m["local_numel"]) for m in rs["members"]] == [
        ("blocks.0.w0", 0, 8), ("blocks.0.w1", 8, 3)]
    assert ag["size_bytes"] == (16 + 6) * 4 and rs["size_bytes"] == (16 + 6) * 4
    assert ag["fusable"] and ag["rewrite_supported"]
    assert ag["latest_input"] < ag["earliest_consumer"]
    member = ag["members"][0]
    assert member == {"param_name": "blocks.0.w0", "state_idx": 0, "kind": "fsdp_all_gather", "backward": False,
                      "scope": "blocks.0", "module_fqns": ("blocks.0",), "group": "fsdp", "ranks": (0, 1),
                      "dtype": "torch.float32", "device_type": "cuda", "input_shape": (2, 4),
                      "output_shape": (4, 4), "reduce_op": None, "local_offset": 0, "local_numel": 8}
    assert rs["members"][0]["reduce_op"] == "avg" and rs["members"][0]["input_shape"] == (4, 4)
    assert set(result) == {"buckets", "decisions", "summary", "signature", "module_bucket_plans",
                           "group_ranks", "group_digests"}
    json.dumps(result, default=str)


def test_members_sorted_by_state_idx_not_graph_order():
    # backward regathers run in reverse parameter order, but members pack by (state_idx, name)
    result = plan(two_block_case())
    backward = next(b for b in result.buckets if b.members[0].kind == "fsdp_all_gather_backward")
    order = [m.launch.name for m in backward.members]
    assert [m.state_idx for m in backward.members] == sorted(m.state_idx for m in backward.members)
    nodes = list(backward.members[0].launch.graph.nodes)
    graph_order = sorted(backward.members, key=lambda m: nodes.index(m.launch))
    assert order == ["ag_bw_blocks_1_w0", "ag_bw_blocks_1_w1"]
    assert [m.launch.name for m in graph_order] == ["ag_bw_blocks_1_w1", "ag_bw_blocks_1_w0"]


def test_bucket_ids_and_order():
    case = two_block_case()
    result = plan(case)
    sig = graph_signature(build_module(case.graph).graph)
    assert result.signature == sig
    assert [b.bucket_id for b in result.buckets] == [f"{sig[:12]}:bucket_{i}" for i in range(len(result.buckets))]
    nodes = list(result.buckets[0].members[0].launch.graph.nodes)
    firsts = [min(nodes.index(m.launch) for m in b.members) for b in result.buckets]
    assert firsts == sorted(firsts)


def test_summary_fields():
    result = plan(two_block_case())
    assert result.summary == {
        "tagged_collectives": 12, "selected_parameters": 4, "selected_collectives": 12,
        "candidate_collectives": 12, "buckets": 6, "singletons": 0, "rs_rewrite_candidates": 2,
        "ag_rewrite_candidates": 4, "reason_counts": {"skip": {}, "split": {}, "singleton": {}},
        "unmatched_module_paths": []}
    planned = plan(two_block_case().with_args(module_bucket_plans=[["blocks.0"], ["nothing", "blocks.1"]]))
    assert planned.summary["unmatched_module_paths"] == ["nothing"]
    assert planned.summary["selected_parameters"] == 4
    empty = plan(two_block_case().with_args(module_bucket_plans=[]))
    assert empty.buckets == () and empty.summary["reason_counts"]["skip"] == {"outside_module_plan": 12}


def test_digest_is_rank_independent_but_layout_sensitive():
    case = two_block_case(device="cuda:0")
    p0, p1 = plan(case, 0), plan(case, 1)
    assert p0.signature != p1.signature  # cuda:0 vs cuda:1 enters the signature...
    assert p0.group_digest("fsdp") == p1.group_digest("fsdp")  # ...but never the digest
    assert p0.buckets[0].members[0].device == "cuda:0" and p1.buckets[0].members[0].device == "cuda:1"
    changed = Blueprint(blocks=((ParamDraw((2, 4), view="t"), ParamDraw((5,), view="flat")),
                                (ParamDraw((2, 2, 2), view="split"), ParamDraw((1, 6), view="chain"))))
    assert plan(Case(render(changed)), 0).group_digest("fsdp") != p0.group_digest("fsdp")
    reordered = plan(case.with_args(group_ranks={"fsdp": (1, 0)}))
    assert reordered.group_digest("fsdp") != p0.group_digest("fsdp")


def test_planning_is_pure_and_deterministic():
    case = two_block_case()
    module = build_module(case.graph)
    before = [(n.name, str(n.target), str(n.args), str(n.kwargs), copy.deepcopy(n.meta)) for n in module.graph.nodes]
    sig = graph_signature(module.graph)
    first = plan_fsdp_buckets(module, group_ranks={"fsdp": (0, 1)}).to_dict()
    second = plan_fsdp_buckets(module, group_ranks={"fsdp": (0, 1)}).to_dict()
    after = [(n.name, str(n.target), str(n.args), str(n.kwargs), n.meta) for n in module.graph.nodes]
    assert before == after and graph_signature(module.graph) == sig
    assert first == second


def test_to_dict_is_an_independent_copy():
    result = plan(two_block_case())
    snapshot = result.to_dict()
    snapshot["buckets"][0]["members"].clear()
    snapshot["summary"]["buckets"] = -1
    assert result.to_dict()["buckets"][0]["members"] and result.summary["buckets"] == 6


def test_cap_bounds_every_multi_member_bucket():
    case = two_block_case().with_args(policy={"cap_bytes": 100})
    for bucket in plan(case).buckets:
        if len(bucket.members) > 1:
            assert sum(m.size_bytes for m in bucket.members) <= 100
        assert all(m.size_bytes == math.prod(m.output_shape if m.kind != "fsdp_reduce_scatter" else m.input_shape)
                   * 4 for m in bucket.members)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(fsdp_graphs("tiny"), mutated_graphs("tiny")))
def test_the_oracle_model_is_the_reference_plan_field_for_field(case):
    # plan_model derives the whole to_dict() (digests included) without the planner: on every
    # valid planner input the two agree exactly, so any difference the checker reports is real.
    rank = case.graph.world()[0]
    module = build_world(case)[rank]
    try:
        got = ReferenceTarget().plan(case, module, rank).to_dict()
    except ValueError:
        return  # invalid planner arguments: judged by expected_argument_error
    args = case.plan_args
    norm = None if args.module_bucket_plans is None else tuple(
        (g,) if isinstance(g, str) else tuple(g) for g in args.module_bucket_plans)
    want = expected_report(module, case.group_ranks(rank), args, norm)
    assert json.loads(json.dumps(got, sort_keys=True, default=str)) == want


@pytest.mark.parametrize("rounds_applied", [0, 1])
@settings(max_examples=30, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(fsdp_graphs("tiny"), mutated_graphs("tiny")))
def test_shared_expectations_equal_each_ranks_own_derivation(rounds_applied, case):
    # The planner oracle derives the spec's plan once for graphs equal up to device indices (and,
    # after a round, up to the bucket ids planned on each rank's own graph, which embed its
    # signature) and re-signs it: on every rank that must be exactly what deriving the rank's own
    # graph gives.
    from fsdp_verify.checks.planner_oracle import Expectations, expected_argument_error
    from fsdp_verify.reference.driver import ROUNDS
    args = case.plan_args
    if expected_argument_error(args, case.group_ranks(min(case.graph.world()))) is not None:
        return  # invalid planner arguments: refused before any plan is derived
    norm = None if args.module_bucket_plans is None else tuple(
        (g,) if isinstance(g, str) else tuple(g) for g in args.module_bucket_plans)
    modules = build_world(case)
    try:
        for rank, module in modules.items():
            for apply in ROUNDS[:rounds_applied]:
                apply(module, ReferenceTarget().plan(case, module, rank))
        expectations = Expectations(args)
        for rank, module in modules.items():
            want = expected_report(module, case.group_ranks(rank), args, norm)
            assert expectations.report(module, case.group_ranks(rank)) == want
    except ValueError:
        return  # invalid planner arguments: judged by expected_argument_error


def test_device_canonical_equates_renamings_only():
    from fsdp_verify.checks.plan_model import signature_of, signature_records, signatures
    module = build_world(two_block_case())[0]
    records = signature_records(module)
    assert signatures(records)[0] == signature_of(module)  # one encoding gives both
    tagged = [i for i, r in enumerate(records) if "fsdp_bucket_spec" in r[4]]
    assert len(tagged) >= 2

    def with_devices(first, rest):
        out = list(records)
        for index, device in zip(tagged, [first] + [rest] * (len(tagged) - 1)):
            name, target, args, kwargs, meta = out[index]
            out[index] = (name, target, args, kwargs, {**meta, "fsdp_bucket_spec": {**meta["fsdp_bucket_spec"],
                                                                                   "device": device}})
        signature, canonical = signatures(out)
        assert signature == signature_of(module, out)
        return canonical

    assert with_devices("cuda:0", "cuda:1") == with_devices("cuda:3", "cuda:2")  # one-to-one
    assert with_devices("cuda:0", "cuda:1") != with_devices("cuda:0", "cuda:0")  # two devices merged
    assert with_devices("cuda:0", "cuda:0") != with_devices("cpu", "cpu")  # another type
    assert with_devices("cuda:0", "cuda:0") != with_devices("cuda:99999999999", "cuda:99999999999")  # invalid
    assert with_devices("cuda:0", "\x00cuda\x01cuda\x010\x00") is None  # a NUL: no sharing claimed

    def with_ids(first, rest, owner=None):
        out = list(records)
        for index, bucket_id in zip(tagged, [first] + [rest] * (len(tagged) - 1)):
            name, target, args, kwargs, meta = out[index]
            extra = {"fsdp_bucket_id": bucket_id}
            if owner is not None:
                extra["fsdp_reduce_scatter_prepare"] = owner
            out[index] = (name, target, args, kwargs, {**meta, **extra})
        signature, canonical = signatures(out)
        assert signature == signature_of(module, out)  # the renaming is undone exactly
        return canonical

    a, b, c = "0123456789ab", "fedcba987654", "00000000000f"
    assert with_ids(f"{a}:bucket_0", f"{b}:bucket_1") == with_ids(f"{c}:bucket_0", f"{a}:bucket_1")  # one-to-one
    assert with_ids(f"{a}:bucket_0", f"{b}:bucket_1") != with_ids(f"{a}:bucket_0", f"{a}:bucket_1")  # merged
    assert with_ids(f"{a}:bucket_0", f"{a}:bucket_0") != with_ids(f"{a}:bucket_0", f"{a}:bucket_1")  # suffix kept
    # an owner equal to the launch's id stays equal, one that differs stays different
    assert with_ids(f"{a}:bucket_0", f"{a}:bucket_0", f"{a}:bucket_0") == \
        with_ids(f"{b}:bucket_0", f"{b}:bucket_0", f"{b}:bucket_0")
    assert with_ids(f"{a}:bucket_0", f"{a}:bucket_0", f"{a}:bucket_0") != \
        with_ids(f"{b}:bucket_0", f"{b}:bucket_0", f"{a}:bucket_0")
    assert with_ids("foreign", "foreign") != with_ids("other", "other")  # not a signed id: not renamed


def test_a_symbolic_trace_s_index_of_a_gathered_parameter_is_a_consumer_not_a_view():
    """``w[0]`` in a symbolic trace is ``operator.getitem`` of a tensor: not getitem of a multi-output
    view op, so the spec's view chain stops there and it is the first use. A planner taking every getitem
    for a view reads a later first use and fuses past the dependency window."""
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.reference import predicates
    from fsdp_verify.strategies import mutations
    from fsdp_verify.targets import get_target
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), view="index"), ParamDraw((3, 2), view="index")),))))
    module = build_module(base.graph)
    index = next(n for n in module.graph.nodes if n.target is operator.getitem)
    assert not predicates.is_view(index)
    a, b = next(p for p in mutations.sibling_pairs(base.graph) if mutations.fits(mutations.late_source, base, p))
    case = mutations.late_source(base, a, b)
    assert check_all(get_target("reference"), case)[0] == []
    findings, _ = check_all(get_target("mutant:any_getitem_is_a_view"), case, only=("planner",))
    assert {f.rule for f in findings} == {"plan_buckets"}


def test_an_index_of_a_split_piece_is_a_consumer_to_the_reference_and_the_checkers_alike():
    """``split(w)[0][0]``: the first getitem picks a view (getitem of a multi-output view op), the second
    indexes a tensor. The checkers' view rule followed getitems recursively and took both for views,
    where the spec's rule (and the reference) stops at the second."""
    from fsdp_verify.checks.graph_facts import aliases_input, real_consumers
    from fsdp_verify.reference import predicates
    from fsdp_verify.reference.planner import consumers_of
    module = build_module(Case(render(Blueprint(blocks=((ParamDraw((4, 2), view="split"),),)))).graph)
    piece = next(n for n in module.graph.nodes if n.target is operator.getitem)
    with module.graph.inserting_after(piece):
        index = module.graph.call_function(operator.getitem, (piece, 0))
    piece.replace_all_uses_with(index, delete_user_cb=lambda user: user is not index)
    assert aliases_input(piece) and predicates.is_view(piece)
    assert not aliases_input(index) and not predicates.is_view(index)
    wait = piece.args[0].args[0]
    assert index in real_consumers(wait) and index in consumers_of(wait)
