"""Every skip reason, every reachable split reason and ``oversized``, each on a small graph."""

from __future__ import annotations

import pytest

from fsdp_verify.model import spec_params
from fsdp_verify.reference.planner import SKIP_REASONS, SPLIT_REASONS
from fsdp_verify.strategies import mutations
from helpers.cases import decision_for, plan, two_block_case

GLOBAL_SKIPS = {"unsupported_parallel_mode", "outside_module_plan", "unknown_process_group"}


def _skip_params():
    for reason, variants in mutations.SKIP_MUTATIONS.items():
        for variant in variants:
            yield pytest.param(reason, variant, id=f"{reason}-{variant.__name__}")


def test_catalogue_covers_every_skip_reason():
    assert set(mutations.SKIP_MUTATIONS) == set(SKIP_REASONS)
    assert set(mutations.SPLIT_MUTATIONS) == set(SPLIT_REASONS) - {"incompatible_key"}


@pytest.mark.parametrize("reason,mutate", list(_skip_params()))
def test_skip_reason(reason, mutate):
    case = two_block_case()
    launch = next(name for name in mutations.launches(case.graph) if mutations.fits(mutate, case, name))
    mutated = mutate(case, launch)
    assert mutated is not None
    added = {mutations.unused_gather: mutations.unused_name, mutations.unwaited_launch: mutations.unwaited_name,
             mutations.launch_without_users: mutations.unread_name,
             mutations.tagged_placeholder: lambda name: case.graph.node(name).args[0].name}
    target = added[mutate](launch) if mutate in added else launch
    result = plan(mutated)
    decision = decision_for(result, target, "skip")
    assert decision == {"node": target, "action": "skip", "reason": reason}
    if reason in GLOBAL_SKIPS:
        assert {d["reason"] for d in result.decisions} == {reason}
        assert result.buckets == ()
    else:
        assert all(d["node"] == target for d in result.decisions if d["action"] == "skip")
        assert all(target != m.launch.name for b in result.buckets for m in b.members)


def _pair(case, kind="fsdp_all_gather"):
    return next((a, b) for a, b in mutations.sibling_pairs(case.graph)
                if case.graph.node(a).meta["comm_type"] == kind)


@pytest.mark.parametrize("reason,mutate", [
    pytest.param(reason, variant, id=f"{reason}-{variant.__name__}")
    for reason, variants in mutations.SPLIT_MUTATIONS.items() for variant in variants])
def test_split_reason(reason, mutate):
    case = two_block_case(reshard_after_forward=True)
    a, b = _pair(case, "fsdp_reduce_scatter" if getattr(mutate, "acts_on", ()) == {"fsdp_reduce_scatter"}
                 else "fsdp_all_gather")
    mutated = mutate(case, a, b)
    result = plan(mutated)
    decision = decision_for(result, b, "split")
    assert decision == {"node": b, "previous_node": a, "action": "split", "reason": reason}, result.decisions


@pytest.mark.parametrize("kind", ["fsdp_all_gather_backward", "fsdp_reduce_scatter"])
def test_span_reasons_in_backward_and_rs(kind):
    case = two_block_case()
    a, b = _pair(case, kind)
    for reason, mutate in (("intervening_collective", mutations.collective_between),
                           ("effect_or_storage_release", mutations.barrier_between),
                           ("phase_boundary", mutations.phase_flip_between)):
        decision = decision_for(plan(mutate(case, a, b)), b, "split")
        assert decision and decision["reason"] == reason


def test_oversized_is_recorded_after_the_split_and_stays_alone():
    case = two_block_case()
    a, b = _pair(case)
    result = plan(mutations.oversized(case, a, b))
    singleton = decision_for(result, b, "singleton")
    assert singleton == {"node": b, "action": "singleton", "reason": "oversized"}
    actions = [d["action"] for d in result.decisions if d["node"] == b]
    assert actions.index("singleton") > actions.index("split")
    bucket = next(bk for bk in result.buckets if any(m.launch.name == b for m in bk.members))
    assert len(bucket.members) == 1


def test_prep_chain_nodes_are_crossable_only_when_recognised():

    case = two_block_case(prep_chains=True)
    a, b = _pair(case, "fsdp_reduce_scatter")
    assert decision_for(plan(case), b, "split") is None
    with spec_params.use(spec_params.SpecParams(rs_owner_is_bucket_id=False)):
        assert decision_for(plan(case), b, "split") is None
    # A launch whose bucket id is not the chain owner no longer owns its chain: the untagged
    # (forward-phase) chain node inside the span is then a phase boundary.
    from dataclasses import replace
    from fsdp_verify.graph import edit
    broken = replace(case, graph=edit.update_node(case.graph, b, meta={"fsdp_bucket_id": "someone_else"}))
    assert decision_for(plan(broken), b, "split")["reason"] == "phase_boundary"


def test_a_chain_in_two_pieces_is_the_launchs_preparation_whole():
    """Spec 4.3's chain shape of one member (halves reshaped, concatenated, made contiguous): every
    tagged node is returned, though the walk meets an input outside the chain (a slice) before
    the other half, and the pair still fuses; the harness passes the rewrite."""
    from fsdp_verify.checks.graph_facts import by_name
    from fsdp_verify.graph.builder import build_module, localize
    from fsdp_verify.reference.predicates import rs_layout_preparation
    from fsdp_verify.targets import get_target
    from fsdp_verify.engine.run_case import check_all

    case = two_block_case()
    a, b = _pair(case, "fsdp_reduce_scatter")
    mutated = mutations.chain_in_two_pieces(case, a, b)
    module = build_module(localize(mutated.graph, 0))
    chain = rs_layout_preparation(by_name(module)[b])
    assert sorted(node.name for node in chain) == sorted(
        n.name for n in mutated.graph.nodes if n.meta.get("fsdp_bucket_prepare")), chain
    assert len(chain) == 4
    assert decision_for(plan(mutated), b, "split") is None
    findings, _ = check_all(get_target("reference"), mutated)
    assert not [f for f in findings if f.severity == "error"], findings


@pytest.mark.parametrize("kind", ["fsdp_all_gather", "fsdp_reduce_scatter"])
def test_a_legacy_namespace_wait_is_the_kind_s_own_only_where_that_namespace_is_accepted(kind):
    """``c10d_functional.wait_tensor`` on a launch of today's packet: under the default reading the
    launch is a skip (the case records no other setting); under the [I] setting that counts the
    legacy packet's ops as the kind's own the pair is one bucket and the harness passes the rewrite,
    and a planner whose is_op reads the packet's own namespace only is killed by the planner oracle."""
    from dataclasses import replace

    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.targets import get_target
    from fsdp_verify.targets.mutants import MUTANTS

    case = two_block_case()
    a, b = _pair(case, kind)
    planted = mutations.wait_in_legacy_namespace(case, a)
    assert planted.spec == spec_params.SpecParams()
    assert decision_for(plan(planted), a, "skip")["reason"] == "unsupported_wait_users"
    assert not [f for f in check_all(get_target("reference"), planted)[0] if f.severity == "error"]
    accepted = replace(planted, spec=spec_params.SpecParams(launch_namespaces=spec_params.NAMESPACES))
    with spec_params.use(accepted.spec):
        assert any({a, b} <= {m.launch.name for m in bucket.members} for bucket in plan(accepted).buckets)
    findings, _ = check_all(get_target("reference"), accepted)
    assert not [f for f in findings if f.severity == "error"], findings
    findings, _ = check_all(MUTANTS["other_namespaces_unread"], accepted)
    assert "planner" in {f.checker for f in findings if f.severity == "error"}
