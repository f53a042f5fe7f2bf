"""Reference rewriter + driver, and the simulated world (issue 3)."""

from __future__ import annotations

import pytest
import torch

from fsdp_verify.model.case import Case
from fsdp_verify.execute.simulated import Desync, ReadAfterFree
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.reference.driver import bucket_world
from fsdp_verify.reference.planner import BucketPolicy, graph_signature, plan_fsdp_buckets
from fsdp_verify.reference.predicates import rs_layout_preparation
from fsdp_verify.reference.rewrite import StalePlanError, apply_ag_buckets, apply_rs_buckets
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().reshape(-1).view(torch.uint8) if tensor.numel() else tensor


def assert_bitwise_equal(a, b):
    assert len(a) == len(b)
    for index, (x, y) in enumerate(zip(a, b)):
        assert x.dtype == y.dtype and x.shape == y.shape, index
        assert torch.equal(_bits(x.contiguous()), _bits(y.contiguous())), f"output {index} differs"


def _case(degree: int, dtype: str, reduce_op: str, expert: bool = False) -> Case:
    e = ParamDraw((1, 3), dtype, view="expand", reduce_op=reduce_op, expert=True)
    blocks = ((ParamDraw((2, 4), dtype, view="t", reduce_op=reduce_op),
               ParamDraw((3,), dtype, view="flat", reduce_op=reduce_op),
               ParamDraw((1, 2, 3), dtype, view="split", reduce_op=reduce_op), *((e, e) if expert else ())),
              (ParamDraw((2, 2), dtype, view="chain", reduce_op=reduce_op),
               ParamDraw((1, 5), dtype, view="slice", reduce_op=reduce_op, regather=False)))
    return Case(render(Blueprint(blocks=blocks, degree=degree, expert_degree=2 if expert else 0)), seed=degree)


def _rewrite(case: Case):
    run = run_target(get_target("reference"), case)
    assert run.error is None, run.error
    return run


@pytest.mark.parametrize("degree", [2, 4, 8])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("reduce_op", ["sum", "avg"])
def test_rewrite_is_bitwise_equal(degree, dtype, reduce_op):
    case = _case(degree, dtype, reduce_op, expert=degree >= 4)
    run = _rewrite(case)
    before, after = simulate(case, run.originals), simulate(case, run.rewritten)
    for rank in case.graph.world():
        assert_bitwise_equal(before.outputs[rank], after.outputs[rank])
    fused = [n for n in run.rewritten[0].graph.nodes if n.meta.get("fsdp_bucket_members")]
    kinds = {n.meta["comm_type"] for n in fused}
    assert kinds == {"fsdp_all_gather", "fsdp_all_gather_backward", "fsdp_reduce_scatter"}
    assert len(after.streams[0]) < len(before.streams[0])
    if degree >= 4:
        assert any(n.args[-1] == "fsdp_expert" for n in fused)


def test_fused_meta_replanning_and_rs_chain():
    case = _case(2, "float32", "avg")
    run = _rewrite(case)
    module = run.rewritten[0]
    plan = plan_fsdp_buckets(module, group_ranks=case.group_ranks(0))
    fused = [n for n in module.graph.nodes if n.meta.get("fsdp_bucket_members")]
    assert fused
    for launch in fused:
        assert {"comm_type", "comm_group", "autograd_backward", "fsdp_bucket_id"} <= set(launch.meta)
        decision = next(d for d in plan.decisions if d["node"] == launch.name)
        assert decision["reason"] == "unsupported_or_already_bucketed"
        if launch.meta["comm_type"] == "fsdp_reduce_scatter":
            chain = rs_layout_preparation(launch)
            tagged = [n for n in module.graph.nodes
                      if n.meta.get("fsdp_bucket_prepare") == launch.meta["fsdp_bucket_id"]]
            assert chain and set(chain) == set(tagged)
            assert {str(n.target) for n in chain} == {"aten.reshape.default", "aten.cat.default"}
    # re-applying the new plan changes nothing further
    code = module.code
    apply_ag_buckets(module, plan)
    apply_rs_buckets(module, plan_fsdp_buckets(module, group_ranks=case.group_ranks(0)))
    assert module.code == code


def test_singletons_and_skipped_collectives_are_untouched():
    case = Case(render(Blueprint(blocks=((ParamDraw(), ParamDraw((2, 4), "float16")),))))
    case = mutations.missing_identity(case, mutations.launches(case.graph)[0])
    run = _rewrite(case)
    original = {n.name: (str(n.target), str(n.args), dict(n.meta)) for n in run.originals[0].graph.nodes}
    rewritten = {n.name: (str(n.target), str(n.args), dict(n.meta)) for n in run.rewritten[0].graph.nodes}
    tagged = [name for name, (_, _, meta) in original.items() if meta.get("comm_type", "").startswith("fsdp_")]
    for name in tagged:  # mixed dtypes: every collective is a singleton or skipped
        assert rewritten[name] == original[name]


def test_stale_plan_is_rejected_and_graph_unchanged():
    case = _case(2, "float32", "avg")
    module = build_module(case.graph)
    plan = plan_fsdp_buckets(module, group_ranks=case.group_ranks(0))
    apply_ag_buckets(module, plan)
    code, sig = module.code, graph_signature(module.graph)
    with pytest.raises(StalePlanError, match="Stale bucket plan"):
        apply_rs_buckets(module, plan)
    assert module.code == code and graph_signature(module.graph) == sig


def test_driver_digest_mismatch_raises_before_any_rewrite():
    case = _case(2, "float32", "avg")
    modules = build_world(case)
    signatures = {r: graph_signature(m.graph) for r, m in modules.items()}

    def plan_for(rank, module):  # rank 1 plans with a cap: its buckets differ
        policy = BucketPolicy(cap_bytes=40) if rank == 1 else None
        return plan_fsdp_buckets(module, group_ranks=case.group_ranks(rank), policy=policy)

    with pytest.raises(ValueError, match="^Bucket plans disagree for group fsdp$"):
        bucket_world(modules, plan_for)
    assert {r: graph_signature(m.graph) for r, m in modules.items()} == signatures


def test_driver_runs_two_rounds_on_current_graphs():
    case = _case(2, "float32", "avg")
    run = _rewrite(case)
    first, second = run.plans[0]
    assert first.summary["ag_rewrite_candidates"] > 0
    assert second.summary["reason_counts"]["skip"]["unsupported_or_already_bucketed"] == \
        first.summary["ag_rewrite_candidates"]
    assert second.signature != first.signature


def test_read_after_free_is_caught_with_the_reader():
    case = Case(render(Blueprint(blocks=((ParamDraw(view="flat"),),))))
    graph = case.graph
    free = next(n for n in graph.nodes if n.meta.get("comm_type") == "fsdp_reshard_free")
    reader = next(n for n in graph.nodes if n.target == "aten.mul.Tensor")
    moved = [n for n in graph.nodes if n.name != free.name]
    moved.insert([n.name for n in moved].index(reader.name), free)
    broken = Case(graph.with_nodes(moved))
    with pytest.raises(ReadAfterFree) as info:
        simulate(broken, build_world(broken))
    assert info.value.reader == reader.name


def test_freeing_the_fused_buffer_early_is_a_read_after_free():
    case = _case(2, "float32", "avg")
    run = _rewrite(case)
    module = run.rewritten[0]
    launch = next(n for n in module.graph.nodes if n.meta.get("comm_type") == "fsdp_all_gather"
                  and n.meta.get("fsdp_bucket_members"))
    wait = next(iter(launch.users))
    first_clone = next(n for n in module.graph.nodes if str(n.target) == "aten.clone.default")
    from fsdp_verify.graph.ops import _free_tensor_storage
    with module.graph.inserting_after(first_clone):
        module.graph.call_function(_free_tensor_storage, (wait,))
    module.recompile()
    with pytest.raises(ReadAfterFree):
        simulate(case, run.rewritten)


def test_desync_mismatched_streams_is_reported_not_hung():
    case = _case(2, "float32", "avg")
    run = _rewrite(case)
    mixed = {0: run.originals[0], 1: run.rewritten[1]}
    with pytest.raises(Desync) as info:
        simulate(case, mixed)
    assert info.value.group == "fsdp" and info.value.position == 0
    assert set(info.value.per_rank) == {0, 1}
    assert "all_gather_into_tensor" in str(info.value)


def test_desync_rank_skips_a_collective():
    case = _case(2, "float32", "avg")
    a, b = mutations.sibling_pairs(case.graph)[0]
    extra = mutations.collective_between(case, a, b)
    modules = {0: build_module(localize(case.graph, 0)), 1: build_module(localize(extra.graph, 1))}
    with pytest.raises(Desync) as info:
        simulate(case, modules)
    assert "all_reduce" in str(info.value)
    trailing = mutations.collective_between(case, *mutations.sibling_pairs(case.graph)[-1])
    modules = {0: build_module(case.graph), 1: build_module(trailing.graph)}
    with pytest.raises(Desync):
        simulate(case, modules)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_simulated_world_on_cuda():
    from fsdp_verify.execute.inputs import make_inputs
    case = _case(2, "float32", "avg")
    run = _rewrite(case)
    cpu = simulate(case, run.originals)
    inputs = {r: make_inputs(case.graph, r, case.seed, device="cuda") for r in run.rewritten}
    gpu = simulate(case, run.rewritten, inputs=inputs)
    for rank in cpu.outputs:
        assert_bitwise_equal(cpu.outputs[rank], [t.cpu() for t in gpu.outputs[rank]])
