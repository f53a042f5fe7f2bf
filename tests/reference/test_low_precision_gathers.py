"""Buckets whose members gather different dtypes: a cast of the parameter before its gather (bf16
mixed precision, float8, int8) beside full-precision gathers. The spec's dtype is the parameter's,
so the planner puts them in one bucket; the rewriter must hand every member its own dtype back."""

from __future__ import annotations

import pytest
import torch

from fsdp_verify.checks.identity import CODED_DTYPES, gather_codes, gather_counter, gather_period, INT_VIEW
from fsdp_verify.coverage.reasons import case_features
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.graph.compose import ALL_REDUCE
from fsdp_verify.graph.builder import build_module
from fsdp_verify.model.case import Case
from fsdp_verify.graph.values import DTYPES
from fsdp_verify.reference.rewrite import _holds, wire_dtype
from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets import get_target
from fsdp_verify.targets.mutants.catalogue import MUTANTS

AG = "_c10d_functional.all_gather_into_tensor"


def _case(first: str, second: str, **blueprint) -> Case:
    """One block of two float32 parameters whose gathers move ``first`` and ``second`` ("" = no cast);
    gathers up front, so that the forward pair buckets whatever the casts."""
    blocks = ((ParamDraw((2, 4), view="t", wire=first), ParamDraw((3,), view="flat", wire=second)),)
    return Case(render(Blueprint(blocks=blocks, reshard_after_forward=False, **blueprint)))


def _errors(target_name: str, case: Case):
    findings, ctx = check_all(get_target(target_name) if ":" not in target_name
                              else MUTANTS[target_name.split(":", 1)[1]], case)
    return [f for f in findings if f.severity == "error"], ctx


def _fused_moves(ctx) -> set:
    """The dtypes the rewrite's fused all-gathers move (rank 0's simulated stream)."""
    fused = {n.name for n in ctx.rewritten[0].graph.nodes if n.meta.get("fsdp_bucket_members")
             and "all_gather" in str(n.target)}
    return {r.dtype for r in ctx.rewritten_sim.streams[0] if r.node in fused}


@pytest.mark.parametrize("wires, wire", [(("bfloat16", ""), "torch.float32"), (("int8", ""), "torch.float32"),
                                         (("float8_e4m3fn", "bfloat16"), "torch.bfloat16"),
                                         (("float8_e5m2", "float8_e5m2"), "torch.float8_e5m2"),
                                         (("bfloat16", "bfloat16"), "torch.bfloat16")])
def test_the_reference_buckets_mixed_gathers_and_every_member_keeps_its_dtype(wires, wire):
    case = _case(*wires)
    assert case_features(case)["low_precision_gathers"] == 1
    assert case_features(case)["mixed_dtype_gathers"] == (wires[0] != wires[1])
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    assert _fused_moves(ctx) == {wire}, "each fused gather moves one dtype that holds every member exactly"
    assert ctx.metrics["layout"]["proved"]
    assert ctx.metrics["conformance"]["members_unverified"] == 0, "every member's codes found where it was sent"


def test_half_precision_members_packed_in_float32_are_sent_where_the_plan_says():
    """fp16 beside a bf16 cast of fp16 is packed in float32: conformance compares each member's
    codes as float32 holds them (it once compared fp16 codes with float32 bits: a false alarm)."""
    blocks = ((ParamDraw((2, 4), dtype="float16"), ParamDraw((3,), dtype="float16", wire="bfloat16")),)
    case = Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    assert "torch.float32" in _fused_moves(ctx)
    assert ctx.metrics["conformance"]["members_unverified"] == 0


def test_the_wire_holds_every_member_exactly():
    assert wire_dtype([torch.bfloat16, torch.float16], torch.bfloat16) == torch.float32
    assert wire_dtype([torch.float8_e4m3fn, torch.int8], torch.bfloat16) == torch.bfloat16
    assert wire_dtype([torch.float32, torch.bfloat16], torch.bfloat16) == torch.float32
    assert wire_dtype([torch.float8_e4m3fn] * 2, torch.float32) == torch.float8_e4m3fn


def test_the_wire_is_the_narrowest_that_holds_every_member():
    """A low-precision gather is there to save bytes: its bucket does not send more than it must."""
    assert wire_dtype([torch.float8_e4m3fn, torch.bfloat16], torch.float32) == torch.bfloat16
    assert wire_dtype([torch.int8, torch.bfloat16], torch.int8) == torch.bfloat16
    assert wire_dtype([torch.float8_e4m3fn, torch.float8_e5m2], torch.float32) in (torch.float16, torch.bfloat16)
    assert wire_dtype([torch.float16, torch.bfloat16], torch.float16) == torch.float32
    # AMD's two float8 formats: float16 holds both (not e5m2fnuz, whose finfo.eps says three mantissa bits)
    assert wire_dtype([torch.float8_e4m3fnuz, torch.float8_e5m2fnuz], torch.float32) == torch.float16
    # e4m3fn lacks e4m3fnuz's smallest steps (2**-10)
    assert wire_dtype([torch.float8_e4m3fnuz, torch.float8_e4m3fn], torch.float32) == torch.float16


def _every_value(dtype: torch.dtype) -> torch.Tensor:
    """Every value but NaN of a dtype of one or two bytes (signed zeros and infinities included)."""
    bits = torch.arange(1 << (8 * dtype.itemsize), dtype=torch.int32)
    values = bits.to(INT_VIEW[dtype.itemsize]).view(dtype) if dtype.is_floating_point else \
        torch.arange(torch.iinfo(dtype).min, torch.iinfo(dtype).max + 1).to(dtype)
    return values[~torch.isnan(values.to(torch.float64))] if dtype.is_floating_point else values


SMALL = [d for d in DTYPES.values() if d.itemsize <= 2 and d not in (torch.bool, torch.complex64)]


@pytest.mark.parametrize("narrow", SMALL, ids=str)
def test_a_dtype_holds_another_exactly_when_every_value_round_trips(narrow):
    """The wire's hold test against the ground truth: every value of each dtype of one or two bytes
    cast there and back, bit for bit (a -0.0 or an infinity too; the fnuz formats have neither).
    ``torch.finfo(float8_e5m2fnuz).eps`` is 0.125 where 1 + 0.125 rounds to 1: a hold test that trusts
    it takes e5m2fnuz for a holder of e4m3fnuz and rounds its gathers."""
    values = _every_value(narrow)
    bits = values.view(INT_VIEW[narrow.itemsize])
    for wide in DTYPES.values():
        if wide in (torch.bool, torch.complex64):
            continue
        back = values.to(wide).to(narrow)
        exact = bool((back.view(INT_VIEW[narrow.itemsize]) == bits).all())
        assert _holds(narrow, wide) == (exact and (wide.is_floating_point or narrow == wide)), (narrow, wide)


def test_a_wire_wider_than_needed_is_killed_by_conformance_alone():
    """fp16 beside bf16 in float64: every value exact (layout and numerics see nothing), twice the
    bytes of float32."""
    case = _case("float16", "bfloat16")
    assert not _errors("reference", case)[0]
    errors, _ = _errors("mutant:wire_wider_than_needed", case)
    assert errors and {(f.checker, f.rule) for f in errors} == {("conformance", "wire_wider_than_needed")}, errors


def test_a_copy_in_that_lets_torch_cat_promote_is_killed_by_layout():
    """What the reference did before: a bf16 member's consumers received float32."""
    errors, _ = _errors("mutant:promoted_copy_in", _case("bfloat16", ""))
    assert any(f.checker == "layout" and f.rule == "consumer_shape" for f in errors), errors


def test_packing_in_the_first_members_dtype_is_killed_by_layout():
    errors, _ = _errors("mutant:wire_of_first_member", _case("bfloat16", ""))
    assert any(f.checker == "layout" and f.rule == "element_misplaced" for f in errors), errors
    assert not _errors("mutant:wire_of_first_member", _case("", "bfloat16"))[0], "exact when the widest is first"


def test_sending_the_parameters_dtype_for_low_precision_gathers_is_killed_by_conformance_alone():
    errors, _ = _errors("mutant:wire_is_parameter_dtype", _case("bfloat16", "bfloat16"))
    assert errors and {f.checker for f in errors} == {"conformance"}, errors
    assert all(f.rule == "launch_stream" for f in errors)


@pytest.mark.parametrize("dtype", sorted(CODED_DTYPES, key=str))
def test_gather_codes_are_distinct_finite_and_decode_in_every_coded_dtype(dtype):
    count = min(gather_period(dtype), 1 << 16)  # a whole period of the 1- and 2-byte types
    codes = gather_codes(torch.arange(count), dtype)
    bits = codes.view(INT_VIEW[dtype.itemsize]).tolist()
    assert len(set(bits)) == count
    assert torch.isfinite(codes.double()).all()
    assert [gather_counter(b, dtype) for b in bits[:64]] == list(range(min(64, count)))


@pytest.mark.parametrize("dtype", ["int8", "float8_e4m3fn"])
def test_a_frozen_weight_stored_in_float8_or_int8_is_gathered_as_it_is_and_judged(dtype):
    """Without a cast: the weight itself is stored so (no gradient); the planner leaves it alone
    (spec 2.5 rule 9) and every checker still judges the case (float8 values included)."""
    blocks = ((ParamDraw((2, 4), view="t", dtype=dtype), ParamDraw((3,), view="flat")),)
    case = Case(render(Blueprint(blocks=blocks)))
    assert sum("reduce_scatter" in n.target for n in case.graph.nodes) == 1
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    skipped = [d for r in ctx.reports(0) for d in r["decisions"] if d["action"] == "skip"]
    assert skipped and {d["reason"] for d in skipped} == {"unsupported_dtype"}
    assert ctx.metrics["layout"]["proved"]


def test_a_float8_nan_is_seen_as_not_finite():
    from fsdp_verify.graph.values import nonfinite
    assert nonfinite(torch.tensor([1.0, float("nan")]).to(torch.float8_e4m3fn))
    assert not nonfinite(torch.tensor([1.0, -2.0]).to(torch.float8_e5m2))
    assert not nonfinite(torch.tensor([1, 2], dtype=torch.int8))


def test_a_fusion_mutation_on_a_cast_member_moves_the_cast_and_keeps_the_graph_valid():
    """``source_after_view`` copies B's source after A's view; a low-precision B's source is its
    cast, right before B: the cast moves up (it reads only the parameter) rather than the copy
    reading a later node (an invalid graph once blamed on the target)."""
    from fsdp_verify.graph import edit
    from fsdp_verify.graph.spec import validate
    from fsdp_verify.strategies import mutations
    blocks = ((ParamDraw((2, 4), view="flat"), ParamDraw((3,), view="flat", wire="bfloat16")),)
    case = Case(render(Blueprint(blocks=blocks)))
    found = 0
    for a, b in mutations.sibling_pairs(case.graph):
        for variant in (mutations.source_after_view, mutations.anchor_on_foreign_wait, mutations.dependent_source):
            mutated = variant(case, a, b) if mutations.fits(variant, case, (a, b)) else None
            if mutated is not None:
                assert edit.in_order(mutated.graph)
                validate(mutated.graph)
                found += variant is mutations.source_after_view
    assert found
    errors, _ = _errors("reference", mutated)
    assert not errors, errors


def test_the_reference_follows_a_copied_cast_back_to_its_dtype():
    """A source computed from a cast (a copy of it) moves the cast's dtype, not the parameter's."""
    from torch import fx
    from fsdp_verify.reference.rewrite import moved_dtype
    graph = fx.Graph()
    p = graph.placeholder("p")
    cast = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.bfloat16))
    copy = graph.call_function(torch.ops.aten.clone.default, (cast,))
    assert moved_dtype(copy, torch.float32) == torch.bfloat16
    assert moved_dtype(p, torch.float32) == torch.float32


def _dependent_bf16_case() -> Case:
    """B's gather moves a bf16 cast of its shard plus the 0-dim sum of what A gathered: torch keeps
    bf16 (a 0-dim float32 does not widen a dimensioned bf16); B and C then share a bucket."""
    from fsdp_verify.strategies import mutations
    blocks = ((ParamDraw((3,), view="flat"), ParamDraw((2, 4), view="t", wire="bfloat16"), ParamDraw((2, 2), view="flat")),)
    case = Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))
    return mutations.dependent_source(case, "ag_blocks_0_w0", "ag_blocks_0_w1")


def test_a_member_dtype_through_arithmetic_follows_torchs_promotion_rules():
    # found by the 60-minute soak of 2026-12-04 on hazard graphs: the reference took B for float32
    case = _dependent_bf16_case()
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}  # B (bf16) beside C (float32): packed in float32, handed back bf16


def test_promotion_by_type_alone_is_killed_by_layout_and_numerics():
    errors, _ = _errors("mutant:promotion_ignores_rank", _dependent_bf16_case())
    assert any(f.key == ("layout", "consumer_shape") for f in errors), errors
    assert any(f.checker == "numerics" for f in errors), errors


def test_a_cast_far_up_the_source_chain_is_still_the_dtype_moved():
    """A bf16 cast 40 copies before its gather, bucketed with a float32 gather: the walk follows any
    chain (a walk capped at 32 steps once fell back to the spec dtype and handed float32 back)."""
    from dataclasses import replace
    from fsdp_verify.graph import edit
    from fsdp_verify.graph.values import NodeRef
    case = _case("bfloat16", "")
    graph = case.graph
    launch = next(n for n in graph.nodes if n.target.startswith(AG) and isinstance(n.args[0], NodeRef)
                  and graph.node(n.args[0].name).target == "prims.convert_element_type.default")
    previous, chain = launch.args[0].name, []
    for index in range(40):
        name = edit.fresh_name(graph, f"far_{index}")
        chain.append(edit.call(name, "aten.clone.default", NodeRef(previous)))
        previous = name
    graph = edit.insert_after(graph, launch.args[0].name, chain)
    graph = edit.update_node(graph, launch.name, args=(NodeRef(previous), *launch.args[1:]))
    far = replace(case, graph=graph)
    errors, ctx = _errors("reference", far)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}


def _drawn_shape_kills(base: Case, variant, feature: str, mutant: str) -> None:
    """``variant`` plants its shape on a pair of ``base``, coverage counts it, the reference is right
    on it and the planted bug of its class is killed by layout or numerics."""
    pair = next(p for p in mutations.sibling_pairs(base.graph) if variant(base, *p))
    planted = variant(base, *pair)
    assert case_features(planted)[feature] == 1 and not case_features(base)[feature]
    assert not _errors("reference", planted)[0]
    errors, _ = _errors(f"mutant:{mutant}", planted)
    assert {"layout", "numerics"} & {f.checker for f in errors}


def test_the_far_cast_draw_is_counted_and_kills_a_capped_walk():
    _drawn_shape_kills(_case("bfloat16", ""), mutations.cast_far_up_the_chain, "far_casts", "walk_capped")


def test_a_cast_scaled_twice_keeps_its_dtype_and_kills_a_flipped_rank():
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16", scaled=True),
                                          ParamDraw((3,), view="flat")),), reshard_after_forward=False)))
    _drawn_shape_kills(base, mutations.cast_scaled_twice, "twice_scaled_casts", "promoted_rank_flipped")


def test_a_cast_naming_its_dtype_by_keyword_is_the_dtype_moved():
    """``convert_element_type(x, dtype=bf16)``: the same cast (a walk that read only the positional
    form fell back to the spec dtype and handed float32 back)."""
    _drawn_shape_kills(_case("bfloat16", ""), mutations.cast_dtype_by_keyword, "keyword_casts",
                       "cast_keyword_ignored")


def test_a_cast_beside_an_op_the_walk_does_not_know_is_promoted_as_torch_does():
    """fp16 parameter: relu(p) + bf16(p) is float32 (torch promotes fp16 with bf16). The walk runs the
    op on stand-ins; taking relu for a 0-dim reduction would keep bf16."""
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), dtype="float16", view="t", wire="bfloat16"),
                                          ParamDraw((3,), dtype="float16", view="flat")),),
                                 reshard_after_forward=False)))
    _drawn_shape_kills(base, mutations.cast_beside_opaque_op, "casts_beside_opaque_ops",
                       "opaque_op_taken_for_reduction")


def test_the_walk_runs_unknown_ops_on_stand_ins_and_gives_up_where_they_do_not_fit():
    from torch import fx
    from fsdp_verify.reference.rewrite import moved_dtype
    graph = fx.Graph()
    p = graph.placeholder("p")
    p.meta["val"] = torch.empty(2, dtype=torch.float16, device="meta")
    cast = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.bfloat16))
    relu = graph.call_function(torch.ops.aten.relu.default, (cast,))
    assert moved_dtype(relu, torch.float32) == torch.bfloat16  # once the spec dtype: an unknown op
    beside = graph.call_function(torch.ops.aten.add.Tensor, (graph.call_function(torch.ops.aten.relu.default, (p,)), cast))
    assert moved_dtype(beside, torch.float16) == torch.float32  # fp16 + bf16
    # 0-dim on the one-element stand-in and dimensioned on the probe: the rank is open there, and
    # the real shape decides (p's traced value: one dim, so the sum is 0-dim and keeps bf16)
    summed = graph.call_function(torch.ops.aten.sum.dim_IntList, (cast, [0]))
    scaled = graph.call_function(torch.ops.aten.mul.Tensor, (cast, summed))
    assert moved_dtype(summed, torch.float32) == torch.bfloat16
    assert moved_dtype(scaled, torch.float32) == torch.bfloat16
    untraced = graph.placeholder("untraced")  # no traced value, no gather naming its shape: unknown
    other = graph.call_function(torch.ops.prims.convert_element_type.default, (untraced, torch.bfloat16))
    open_rank = graph.call_function(torch.ops.aten.sum.dim_IntList, (other, [0]))
    assert moved_dtype(open_rank, torch.float32) == torch.float32, "a stand-in's rank is not the real one: unknown"
    padded = graph.call_function(torch.ops.aten.constant_pad_nd.default, (relu, [0, 1]))
    assert moved_dtype(padded, torch.float32) == torch.bfloat16


def test_full_reductions_are_read_as_torch_computes_them():
    """A reduction over every dim is 0-dim whatever its keywords; a sum of integers widens to int64;
    prims name their dims ``dims``, which is no full reduction (the real shape, traced, says so)."""
    from torch import fx
    from fsdp_verify.reference.rewrite import DtypeWalk, _traced
    graph = fx.Graph()
    p = graph.placeholder("p")
    p.meta["val"] = torch.empty(2, 3, dtype=torch.float32, device="meta")
    q = graph.placeholder("q")
    q.meta["val"] = torch.empty(4, dtype=torch.uint8, device="meta")
    walk = DtypeWalk({})
    assert _traced(graph.call_function(torch.ops.aten.sum.default, (p,), {"dtype": torch.bfloat16}), walk) \
        == (torch.bfloat16, True)
    assert _traced(graph.call_function(torch.ops.aten.sum.dim_IntList, (p,), {"dim": []}), walk) == (torch.float32, True)
    assert _traced(graph.call_function(torch.ops.aten.sum.default, (q,)), walk) == (torch.int64, True)
    assert _traced(graph.call_function(torch.ops.aten.amax.default, (p, [], True)), walk) == (torch.float32, False)
    assert _traced(graph.call_function(torch.ops.prims.sum.default, (p,), {"dims": [0]}), walk) == (torch.float32, False)


def test_an_int8_gather_beside_a_float32_one_packs_in_float32():
    """int8 is the narrowest candidate wire, and holds only itself: a rule that lets an integer dtype
    hold floats packs the float32 member in int8. (The planner never buckets integer parameters:
    unsupported_dtype.)"""
    base = _case("int8", "")
    errors, ctx = _errors("reference", base)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}
    errors, _ = _errors("mutant:integer_holds_floats", base)
    assert {"layout", "numerics"} & {f.checker for f in errors}, errors


def test_an_fp16_member_of_a_bf16_bucket_is_not_rounded_to_bf16():
    blocks = ((ParamDraw((2, 4), dtype="bfloat16", wire="float16"), ParamDraw((3,), dtype="bfloat16")),)
    base = Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))
    errors, ctx = _errors("reference", base)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}
    errors, _ = _errors("mutant:precision_ignored", base)
    # a few codes fit bf16's mantissa (they fill its top bits first), so the values may survive: the
    # wire's dtype does not
    assert any(f.key == ("conformance", "launch_stream") for f in errors), errors


def test_relu_of_a_cast_keeps_the_casts_dtype():
    _drawn_shape_kills(_case("bfloat16", ""), mutations.cast_through_opaque_op, "casts_beside_opaque_ops",
                       "opaque_ops_fall_back")


def test_a_gain_through_relu_is_still_0_dim():
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16", scaled=True),
                                          ParamDraw((3,), view="flat")),), reshard_after_forward=False)))
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.gain_through_opaque_op(base, *p))
    planted = mutations.gain_through_opaque_op(base, *pair)
    errors, ctx = _errors("reference", planted)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}  # the bf16 member beside float32, handed back bf16
    assert {"layout", "numerics"} & {f.checker for f in _errors("mutant:opaque_ops_fall_back", planted)[0]}


def test_a_cast_scaled_by_its_gain_squared_keeps_its_dtype():
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16", scaled=True),
                                          ParamDraw((3,), view="flat")),), reshard_after_forward=False)))
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.cast_scaled_by_product(base, *p))
    planted = mutations.cast_scaled_by_product(base, *pair)
    assert not _errors("reference", planted)[0]
    errors, _ = _errors("mutant:products_taken_dimensioned", planted)
    assert {"layout", "numerics"} & {f.checker for f in errors}, errors


def test_a_cast_written_as_to_copy_is_the_dtype_moved():
    base = _case("bfloat16", "")
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.cast_as_to_copy(base, *p))
    planted = mutations.cast_as_to_copy(base, *pair)
    assert case_features(planted)["keyword_casts"] == 1
    errors, ctx = _errors("reference", planted)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}


def test_the_walk_runs_packets_device_moves_and_device_less_factories_on_meta():
    """A factory a pass wrote with no device keyword runs on meta too: the right dtype, with no real
    memory and no draw from the global generator (a random one would move every later draw)."""
    from torch import fx
    from fsdp_verify.reference.rewrite import moved_dtype
    graph = fx.Graph()
    p = graph.placeholder("p")
    p.meta["val"] = torch.empty(2, device="meta")
    cast = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.bfloat16))
    assert moved_dtype(graph.call_function(torch.ops.aten.relu, (cast,)), torch.float32) == torch.bfloat16
    zeros = graph.call_function(torch.ops.aten.zeros.default, ([3],), {"dtype": torch.bfloat16})
    assert moved_dtype(zeros, torch.float32) == torch.bfloat16, "no device named: run on meta"
    drawn = graph.call_function(torch.ops.aten.randint.low, (1, 9, []), {"dtype": torch.float16})
    before = torch.get_rng_state()
    assert moved_dtype(drawn, torch.float32) == torch.float16
    assert torch.equal(torch.get_rng_state(), before), "a random factory run on meta draws nothing"
    moved = graph.call_function(torch.ops.aten._to_copy.default, (cast,), {"device": torch.device("cpu")})
    assert moved_dtype(moved, torch.float32) == torch.bfloat16, "a traced .to(device): run on meta, the cast's dtype"
    by_position = graph.call_function(torch.ops.aten.to.device, (cast, torch.device("cpu"), torch.bfloat16))
    assert moved_dtype(by_position, torch.float32) == torch.float32, "a device by position: not run"


def test_an_elementwise_max_reads_both_inputs_whatever_was_walked_before():
    """``max(a, b)`` shares a name with the full reduction: the walk must read its second input too, or
    its answer would depend on which member's walk visited that input first."""
    from torch import fx
    from fsdp_verify.reference.rewrite import DtypeWalk, moved_dtype
    graph = fx.Graph()
    p = graph.placeholder("p")
    p.meta["val"] = torch.empty(2, device="meta")
    cast = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.bfloat16))
    half = graph.call_function(torch.ops.prims.convert_element_type.default, (p, torch.float16))
    both = graph.call_function(torch.ops.aten.maximum.default, (cast, half))
    largest = graph.call_function(torch.ops.aten.max.other, (cast, half))
    assert moved_dtype(largest, torch.float32, DtypeWalk({})) == torch.float32  # bf16 with fp16
    assert moved_dtype(both, torch.float32, DtypeWalk({})) == torch.float32


def test_a_cast_by_keyword_is_a_pure_cast_for_the_identity_codes():
    from torch import fx
    from fsdp_verify.checks.identity import _pure_cast
    graph = fx.Graph()
    p = graph.placeholder("p")
    p.meta["val"] = torch.empty(2, device="meta")
    by_keyword = graph.call_function(torch.ops.prims.convert_element_type.default, (p,), {"dtype": torch.bfloat16})
    assert _pure_cast(by_keyword) == torch.bfloat16


def test_a_partly_traced_scaled_cast_reads_each_traced_rank():
    """A graph a pass edited after tracing: the cast and its 0-dim gain carry ``meta["val"]``, their
    product none. The walk takes the traced values' dtype and rank; misreading the rank widens the
    member to float32."""
    base = Case(render(Blueprint(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16", scaled=True),
                                          ParamDraw((3,), view="flat")),), reshard_after_forward=False)))
    _drawn_shape_kills(base, mutations.scaled_cast_partly_traced, "partly_traced_sources", "traced_rank_flipped")
    planted = mutations.scaled_cast_partly_traced(base, *next(
        p for p in mutations.sibling_pairs(base.graph) if mutations.scaled_cast_partly_traced(base, *p)))
    module = build_module(planted.graph)
    traced = {n.name: n.meta["val"] for n in module.graph.nodes if "val" in n.meta}
    assert sorted((v.dim() > 0, str(v.dtype)) for v in traced.values()) == [(False, "torch.float32"), (True, "torch.bfloat16")]
    assert all(v.device.type == "meta" for v in traced.values())


@pytest.mark.parametrize("traced, reason", [({"dtype": "bfloat16"}, "exactly"), ({"dtype": "half", "shape": []}, "dtype"),
                                            ({"dtype": "float32", "shape": [-1]}, "non-negative"), ([1], "exactly"),
                                            ({"dtype": [1], "shape": []}, "dtype name")])
def test_a_traced_value_that_is_not_one_is_refused(traced, reason):
    from fsdp_verify.graph.spec import graph_from_json as from_json
    from fsdp_verify.graph.values import SpecError
    doc = _case("bfloat16", "").graph.to_json()
    doc["nodes"][3].setdefault("meta", {})["traced"] = traced
    with pytest.raises(SpecError) as error:
        from_json(doc)
    assert "meta.traced" in error.value.path and reason in str(error.value)


_SCALED = dict(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16", scaled=True), ParamDraw((3,), view="flat")),),
               reshard_after_forward=False)
_PLAIN = dict(blocks=((ParamDraw((2, 4), view="t", wire="bfloat16"), ParamDraw((3,), view="flat")),),
              reshard_after_forward=False)


@pytest.mark.parametrize("variant, blueprint, bug", [
    (mutations.gain_summed_with_dtype, _SCALED, "reduction_keywords_unknown"),
    (mutations.gain_summed_with_dtype, _SCALED, "dtype_keyword_read_as_cast"),
    (mutations.gain_by_bare_reduction, _SCALED, "bare_reductions_unknown"),
    (mutations.gain_by_keyword_reduction, _SCALED, "standins_empty"),
    (mutations.gain_by_positional_keepdim, _SCALED, "full_reductions_by_table"),
    (mutations.gain_by_mean, _SCALED, "full_reductions_by_table"),
    (mutations.gain_of_python_negation, _SCALED, "full_reductions_need_real_shapes"),
    (mutations.gain_summed_with_every_keyword, _SCALED, "reduction_keywords_unknown"),
    (mutations.gain_per_channel, _SCALED, "probe_skipped"),
    (mutations.cast_before_opaque_op, _PLAIN, "first_operand_decides"),
    (mutations.cast_scaled_by_python_operator, _SCALED, "python_operators_unknown"),
    (mutations.cast_through_opaque_packet, _PLAIN, "packets_not_evaluated"),
    (mutations.cast_of_unfollowable_value, _PLAIN, "casts_of_unknown_values_unknown"),
    (mutations.gain_all_reduced, _SCALED, "collectives_not_followed"),
    (mutations.gain_all_reduced, _SCALED, "unrunnable_inputs_unread"),
    (mutations.opaque_op_of_unfollowable_cast, _PLAIN, "real_shapes_asked_of_every_result"),
    (mutations.cast_moved_by_device_object, _PLAIN, "device_objects_refused"),
    (mutations.gain_as_constant, _SCALED, "factories_unevaluated"),
])
def test_each_form_of_a_cast_the_walk_follows_keeps_its_dtype(variant, blueprint, bug):
    """The forms a scaled or plain cast takes in other tracers' graphs: the reference hands the bf16
    member back as bf16, and the planted bug of each form's class is killed by layout or numerics."""
    base = Case(render(Blueprint(**blueprint)))
    pair = next(p for p in mutations.sibling_pairs(base.graph) if variant(base, *p))
    planted = variant(base, *pair)
    errors, ctx = _errors("reference", planted)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float32"}  # the bf16 member beside float32, handed back bf16
    if blueprint is _SCALED:
        assert case_features(planted)["scaled_casts"] == 1, "every scaled form is counted, operator.mul too"
    killed = {f.checker for f in _errors(f"mutant:{bug}", planted)[0]}
    assert {"layout", "numerics"} & killed, killed


def test_uint8_beside_bf16_is_packed_in_bf16():
    """A packed 4-bit weight (uint8, 0..255) and a bf16 gather: bf16 holds all 256 values exactly
    (8 significant bits), so the wire is bf16; a bound of 1/eps (128) packs float32, too wide."""
    case = _case("uint8", "bfloat16")
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.bfloat16"}
    assert "conformance" in {f.checker for f in _errors("mutant:uint8_exceeds_bf16", case)[0]}


def test_int32_beside_bf16_is_packed_in_float64_and_a_bound_left_unread_is_killed_by_layout():
    """Packed 4-bit weights in int32 beside a bf16 gather: float32 holds integers up to 2**24 only,
    so the wire is float64. The int32 codes are coded at the cast (the float32 parameter cannot
    hold them), so a bf16 wire rounds them where layout and numerics see it, not conformance alone."""
    case = _case("int32", "bfloat16")
    errors, ctx = _errors("reference", case)
    assert not errors, errors
    assert _fused_moves(ctx) == {"torch.float64"}
    assert ctx.identity_codes.dtypes.get("convert_element_type") == torch.int32
    killed = {f.checker for f in _errors("mutant:integer_bound_ignored", case)[0]}
    assert {"layout", "numerics", "conformance"} <= killed, killed


def test_a_gain_all_reduced_over_the_group_is_counted():
    base = Case(render(Blueprint(**_SCALED)))
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.gain_all_reduced(base, *p))
    planted = mutations.gain_all_reduced(base, *pair)
    assert case_features(planted)["synced_gains"] == 1
    assert not case_features(base)["synced_gains"]
    synced = [n for n in planted.graph.nodes if n.target == ALL_REDUCE]
    assert len(synced) == 1 and synced[0].args[1] == "max"


def test_every_device_an_aten_or_prims_schema_takes_by_keyword_is_named_device():
    """The dtype walk runs an op on meta stand-ins with its ``device`` keyword made meta, and refuses
    only devices by position: sound while no other keyword of an op it may run carries a device."""
    other = {(schema.name, schema.overload_name) for schema in torch._C._jit_get_all_schemas()
             if schema.name.split("::")[0] in ("aten", "prims")
             for arg in schema.arguments if "Device" in str(arg.type) and arg.name != "device"}
    assert other <= {("aten::eq", "device"), ("aten::ne", "device")}, other  # compare two devices, no tensor


def test_a_gain_squeezed_from_rows_of_one_element_keeps_the_cast_dtype():
    """``squeeze_copy(amax(abs(p), [0], True))`` is 0-dim exactly when the shard's rows hold one
    element each: stand-ins cannot tell, so the walk runs the chain on the shard's real shape (its
    gathers' input shape). A half-precision cast times that scalar stays half precision, and the
    rewrite hands the consumer that dtype; rows of three elements keep a dimension (float32)."""
    from fsdp_verify.graph.builder import build_module, localize
    from fsdp_verify.reference.rewrite import moved_dtype
    from fsdp_verify.checks.graph_facts import by_name
    from fsdp_verify.strategies import mutations as M
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.model.case import Case

    for shape, variant, moved in (((4, 1), M.gain_squeezed_to_a_scalar, torch.bfloat16),
                                  ((4, 3), M.gain_squeezed_per_channel, torch.float32)):
        blocks = ((ParamDraw(shape, wire="bfloat16", scaled=True), ParamDraw((3,))),)
        case = Case(render(Blueprint(blocks=blocks)))
        a, b = next((a, b) for a, b in M.sibling_pairs(case.graph)
                    if case.graph.node(a).meta["comm_type"] == "fsdp_all_gather")
        mutated = variant(case, a, b)
        launch = by_name(build_module(localize(mutated.graph, 0)))[a]
        assert moved_dtype(launch.args[0], torch.float32) == moved
        assert not _errors("reference", mutated)[0]


def test_a_source_copied_from_a_cast_gather_holds_what_its_own_gather_moved():
    """The dependency window's boundary shape (B gathers a copy of what A gathered) where A gathers a
    bf16 cast and B its float32 parameter: the copy is cast to float32, so B moves and reduces what it
    did; a copy left in bf16 made B's gradient bf16 under a float32 spec (seed 8 of the default mix
    drew one, and every checker but planner failed the reference on it)."""
    blocks = ((ParamDraw((4,), view="flat", wire="bfloat16"), ParamDraw((4,), view="flat")),)
    base = Case(render(Blueprint(blocks=blocks, reshard_after_forward=False)))
    pair = next(p for p in mutations.sibling_pairs(base.graph) if mutations.source_is_first_consumer(base, *p)
                and mutations._moved(base, p[0]) != mutations._moved(base, p[1]))
    assert (mutations._moved(base, pair[0]), mutations._moved(base, pair[1])) == (torch.bfloat16, torch.float32)
    planted = mutations.source_is_first_consumer(base, *pair)
    copied = planted.graph.node(planted.graph.node(pair[1]).args[0].name)
    assert copied.target == mutations.CAST and copied.args[1] == torch.float32
    errors, _ = _errors("reference", planted)
    assert not errors, errors


def test_a_gather_rule_8_refuses_says_nothing_of_its_parameter_s_shard_shape():
    """A parameter gathered in the forward and again in the backward, where the backward gather's
    spec names a dim of 0 (rule 8 skips it): counted, its shape made the shard's ambiguous, the walk
    could not tell that the gain squeezed to a scalar is 0-dim, and the forward's bf16 cast member
    fell back to its float32 spec. The forward gather's shape alone is the shard's."""
    from fsdp_verify.graph.builder import build_module, localize
    from fsdp_verify.reference.rewrite import moved_dtype, param_shapes
    from fsdp_verify.checks.graph_facts import by_name
    from fsdp_verify.strategies import mutations as M
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.model.case import Case

    blocks = ((ParamDraw((4, 1), wire="bfloat16", scaled=True), ParamDraw((3,))),)
    case = Case(render(Blueprint(blocks=blocks, reshard_after_forward=True)))
    a, b = next((a, b) for a, b in M.sibling_pairs(case.graph)
                if case.graph.node(a).meta["comm_type"] == "fsdp_all_gather")
    squeezed = M.gain_squeezed_to_a_scalar(case, a, b)
    param = squeezed.graph.node(a).meta["param_node"]
    again = [n.name for n in squeezed.graph.nodes if n.name != a and n.meta.get("param_node") == param
             and n.meta.get("comm_type") == "fsdp_all_gather_backward"]
    assert again, "the backward gathers the parameter again"
    zero = next(m for m in M.BAD_SHAPES if m.__name__ == "input_shape_zero")
    mutated = zero(squeezed, again[0])
    module = build_module(localize(mutated.graph, 0))
    forward = tuple(mutated.graph.node(a).meta["fsdp_bucket_spec"]["input_shape"])
    assert param_shapes(module.graph.nodes)[param] == forward
    assert moved_dtype(by_name(module)[a].args[0], torch.float32) == torch.bfloat16
    errors, _ = _errors("reference", mutated)
    assert not errors, errors


def test_a_gain_of_a_neighbour_known_by_dtype_alone_is_walked_without_its_shape():
    """A's gain squeezes an amax of B's parameter, whose gathers name a symbolic shard shape: the walk
    knows B's dtype (its spec) but not its shape, so the squeeze's rank stays open and is taken for
    dimensioned, which B's rows of two elements make true: A moves float32. Known by dtype is not
    known by shape: a walk that reads the shape of any parameter whose dtype it knows raises here."""
    from fsdp_verify.graph.builder import build_module, localize
    from fsdp_verify.reference.rewrite import moved_dtype, param_dtypes, param_shapes
    from fsdp_verify.checks.graph_facts import by_name
    from fsdp_verify.strategies import mutations as M
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.model.case import Case

    blocks = ((ParamDraw((4, 3), wire="bfloat16", scaled=True), ParamDraw((3, 2))),)
    case = Case(render(Blueprint(blocks=blocks)))
    a, b = next((a, b) for a, b in M.sibling_pairs(case.graph)
                if case.graph.node(a).meta["comm_type"] == "fsdp_all_gather")
    mutated = M.gain_of_a_dynamic_neighbour(case, a, b)
    neighbour = mutated.graph.node(b).meta["param_node"]
    nodes = build_module(localize(mutated.graph, 0)).graph.nodes
    assert neighbour in param_dtypes(nodes) and neighbour not in param_shapes(nodes)
    launch = by_name(build_module(localize(mutated.graph, 0)))[a]
    assert moved_dtype(launch.args[0], torch.float32) == torch.float32
    assert not _errors("reference", mutated)[0]


def test_a_gain_indexed_by_python_is_walked_as_torch_indexes_it():
    """``amax(abs(p), [0], True)[0]`` with Python's indexing: 0-dim for a 1-D shard (the bf16 product
    stays bf16), dimensioned for a wider one (float32). The walk runs the index on stand-ins and on
    the real shard shape as any op; left unknown, the cast after it took it for dimensioned and a 1-D
    shard's member was packed and handed back in float32. Checked against a run of the graph."""
    from fsdp_verify.graph.builder import build_module, localize
    from fsdp_verify.reference.rewrite import moved_dtype
    from fsdp_verify.checks.graph_facts import by_name
    from fsdp_verify.execute.world import simulate
    from fsdp_verify.strategies import mutations as M
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.model.case import Case

    for shape, moved in (((4,), torch.bfloat16), ((4, 3), torch.float32), ((4, 1), torch.float32)):
        blocks = ((ParamDraw(shape, wire="bfloat16", scaled=True), ParamDraw((3,))),)
        case = Case(render(Blueprint(blocks=blocks)))
        a, b = next((a, b) for a, b in M.sibling_pairs(case.graph)
                    if case.graph.node(a).meta["comm_type"] == "fsdp_all_gather")
        mutated = M.gain_indexed_by_python(case, a, b)
        source = by_name(build_module(localize(mutated.graph, 0)))[a].args[0]
        ran = {}
        simulate(mutated, {r: build_module(localize(mutated.graph, r)) for r in mutated.graph.world()},
                 observe=lambda rank, node, inputs, value: ran.setdefault(node.name, value))
        assert moved_dtype(source, torch.float32) == ran[source.name].dtype == moved, shape
        assert not _errors("reference", mutated)[0]
