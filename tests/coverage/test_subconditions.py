"""Every branch of every skip and split rule has a mutation that trips it (issue 13, item 5).

Each variant is applied to one fixed graph; the sub-condition classifier must name exactly the
branch the variant was written for, and the mutated graph must still run in the simulated world.
"""

from __future__ import annotations

import pytest

from fsdp_verify.coverage import SUBCONDITIONS, case_reach
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.strategies import mutations
from helpers.cases import two_block_case

M = mutations
EXPECTED = {  # variant -> the reason/sub-condition it exists for
    M.parallel_mode: "unsupported_parallel_mode/",  # pp_degree or dp_mode, by site (test below)
    M.already_bucketed: "unsupported_or_already_bucketed/already_bucketed",
    M.wrong_op_for_kind: "unsupported_or_already_bucketed/wrong_op_for_kind",
    M.tagged_placeholder: "unsupported_or_already_bucketed/wrong_op_for_kind",
    M.forward_gather_tagged_backward: "phase_mismatch/forward_gather_tagged_backward",
    M.backward_gather_untagged: "phase_mismatch/backward_gather_untagged",
    M.reduce_scatter_untagged: "phase_mismatch/reduce_scatter_untagged",
    M.kwargs_signature: "unsupported_signature/kwargs",
    M.extra_positional: "unsupported_signature/positional_count",
    M.unknown_group: "unknown_process_group/group_unknown",
    M.group_size_mismatch: "group_size_mismatch/degree_not_group_size",
    M.degree_bool: "group_size_mismatch/degree_not_int",
    M.degree_one: "group_size_mismatch/degree_at_most_1",
    M.degree_off_by_one: "group_size_mismatch/degree_not_group_size",
    M.degree_float: "group_size_mismatch/degree_not_int",
    M.group_meta_mismatch: "group_metadata_mismatch/comm_group_differs",
    M.group_meta_names_default_group: "group_metadata_mismatch/comm_group_differs",
    M.missing_identity: "missing_parameter_identity/state_idx_bool",
    M.no_param_name: "missing_parameter_identity/param_name_not_str",
    M.empty_param_name: "missing_parameter_identity/param_name_empty",
    M.no_state_idx: "missing_parameter_identity/state_idx_not_int",
    M.negative_state_idx: "missing_parameter_identity/state_idx_negative",
    M.dynamic_shape: "unknown_or_dynamic_shape/input_dim_not_int",
    M.missing_spec: "unknown_or_dynamic_shape/missing_spec",
    **{variant: f"unknown_or_dynamic_shape/{variant.__name__.split('_')[0]}_{branch}"
       for variant in M.BAD_SHAPES
       for how, branch in (("scalar", "not_a_sequence"), ("empty", "empty"), ("symbolic", "dim_not_int"),
                           ("zero", "dim_not_positive"), ("negative", "dim_not_positive"))
       if variant.__name__.endswith(how)},
    M.unsupported_dtype: "unsupported_dtype/not_bucketable",
    M.dtype_name: "unsupported_dtype/not_a_dtype",
    M.unknown_device: "unknown_device/device_rejected",
    M.device_object: "unknown_device/device_not_str",
    M.bad_dim0: "invalid_dim0_layout/dim0_not_degree_times_shard",
    M.dim0_too_large: "invalid_dim0_layout/dim0_not_degree_times_shard",
    M.double_wait: "unsupported_wait_users/several_users",
    M.launch_without_users: "unsupported_wait_users/no_users",
    M.unwaited_launch: "unsupported_wait_users/single_user_not_wait",
    M.wait_in_legacy_namespace: "unsupported_wait_users/wait_of_another_namespace",
    M.unused_gather: "no_consumer/wait_has_no_consumer",
    M.bad_reduce_op: "unsupported_reduce_op/reduce_op_not_sum_or_avg",
    M.rs_extra_consumer: "non_output_rs_consumer/consumer_not_output",
    M.rs_python_consumer: "non_output_rs_consumer/consumer_not_output",
    M.outside_plan: "outside_module_plan/no_plan_group_matches",
    M.repeated_state_idx: "repeated_parameter_instance/state_idx",
    M.repeated_param_name: "repeated_parameter_instance/param_name",
    M.capacity: "capacity/sum_over_cap",
    M.capacity_boundary: "capacity/sum_over_cap",
    M.input_distance: "input_distance/ready_spread_over_limit",
    M.consumer_distance: "consumer_distance/first_use_spread_over_limit",
    M.late_source: "dependency_conflict/consumer_not_after_latest_input",
    M.dependent_source: "dependency_conflict/consumer_not_after_latest_input",
    M.source_is_first_consumer: "dependency_conflict/consumer_not_after_latest_input",
    M.barrier_between: "effect_or_storage_release/barrier",
    M.foreign_free_between: "effect_or_storage_release/unowned_free",
    M.in_place_between: "effect_or_storage_release/writes_argument",
    M.out_variant_between: "effect_or_storage_release/writes_argument",
    M.collective_between: "intervening_collective/foreign_launch_in_span",
    M.phase_flip_between: "phase_boundary/other_phase_node_in_span",
    M.chain_of_an_earlier_bucket: "phase_boundary/unowned_chain_in_span",
    M.chain_of_a_later_bucket: "phase_boundary/unowned_chain_in_span",
    M.chain_source_tagged_forward: "phase_boundary/unowned_chain_in_span",
    M.oversized: "oversized/own_size_over_cap",
}
SKIPS = [v for variants in M.SKIP_MUTATIONS.values() for v in variants]
PAIRS = [v for table in (M.SPLIT_MUTATIONS, M.SINGLETON_MUTATIONS) for variants in table.values() for v in variants]


def test_every_variant_has_its_sub_condition_and_every_reachable_one_a_variant():
    assert set(EXPECTED) == set(SKIPS) | set(PAIRS)
    planted = (set(EXPECTED.values()) - {"unsupported_parallel_mode/"}
               | {"unsupported_parallel_mode/pp_degree", "unsupported_parallel_mode/dp_mode"})
    assert planted == {s.key for s in SUBCONDITIONS if not s.unreachable}


def _run(case) -> None:
    outputs = simulate(case, build_world(case)).outputs
    assert set(outputs) == set(case.graph.world())


@pytest.mark.parametrize("variant", SKIPS, ids=lambda v: v.__name__)
def test_skip_variant_trips_its_sub_condition(variant):
    base = two_block_case()
    launch = next(n for n in M.launches(base.graph) if M.fits(variant, base, n))
    case = variant(base, launch)
    reach = case_reach(case)
    assert any(key.startswith(EXPECTED[variant]) for key in reach.subconditions), dict(reach.subconditions)
    assert not reach.unexplained
    _run(case)


@pytest.mark.parametrize("variant", PAIRS, ids=lambda v: v.__name__)
def test_split_variant_trips_its_sub_condition(variant):
    base = two_block_case(reshard_after_forward=True)
    a, b = next(p for p in M.sibling_pairs(base.graph) if M.fits(variant, base, p))
    case = variant(base, a, b)
    reach = case_reach(case)
    assert EXPECTED[variant] in reach.subconditions, dict(reach.subconditions)
    assert not reach.unexplained
    _run(case)


def test_parallel_mode_plants_every_value_across_sites():
    bases = [two_block_case(), two_block_case(prep_chains=True)]
    cases = [M.parallel_mode(base, launch) for base in bases for launch in M.launches(base.graph)]
    assert {(c.plan_args.pp_degree, c.plan_args.dp_mode) for c in cases} == {
        (mode.get("pp_degree", 1), mode.get("dp_mode", "fsdp")) for mode in M.PARALLEL_MODES}
    reached = {key for c in cases for key in case_reach(c).subconditions}
    assert reached == {"unsupported_parallel_mode/pp_degree", "unsupported_parallel_mode/dp_mode"}
