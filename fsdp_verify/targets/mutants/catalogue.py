"""The catalogue of planted bugs, each with the checker(s) whose rule it breaks."""

from __future__ import annotations

from fsdp_verify.reference import planner, predicates, rewrite
from fsdp_verify.reference import driver
from fsdp_verify.targets.mutants import exchange_bugs, order_bugs, rewrite_bugs
from fsdp_verify.targets.mutants.base import Mutant
from fsdp_verify.targets.mutants.planner_bugs import (
    _cap_off_by_one,
    _ConstantDigestPlan,
    _describe_patched,
    _device_dependent,
    _fqns_flattened,
    _graph_order_members,
    _hash_order_members,
    _key_without,
    _LayoutOnlyDigestPlan,
    _marks,
    _OffByOnePlan,
    barrier_without_writes,
    cap_exclusive,
    cap_zero_accepted,
    input_distance_floor_lowered,
    degree_rule_weakened,
    group_meta_compared_by_order,
    fqn_trailing_space_accepted,
    fqn_type_unchecked,
    kinds_by_identity,
    dim0_layout_by_order,
    negative_dims_accepted,
    debug_log_reads_second_member,
    estimates_with_random_inputs,
    unread_launch_without_consumer,
    _shapes_swapped,
    _suppress,
    alternating_plans,
    last_member_left_out,
    members_reversed,
    misreported_skip,
    module_plans_built,
    module_prefix_without_dot,
    other_namespaces_unread,
    prep_owner_by_identity,
    prep_owner_by_prefix,
    prep_forward_source_accepted,
    prep_walk_stops_at_boundary,
    reduce_op_as_node,
    window_exclusive,
    input_distance_exclusive,
    rs_prep_not_excluded,
    schemaless_calls_are_views,
    any_getitem_is_a_view,
    parameters_counted_per_collective,
    skip_listed_twice,
    size_from_shard_by_shift,
    splits_before_skips,
)

MUTANTS: dict[str, Mutant] = {m.name.split(":", 1)[1]: m for m in (
    # -- planner rules
    Mutant("key_ignores_dtype", "bucket key ignores dtype", ("planner",), lambda: _key_without(5)),
    Mutant("key_ignores_reduce_op", "bucket key ignores the reduce op", ("planner",), lambda: _key_without(7)),
    Mutant("key_ignores_group", "bucket key ignores the process group (name and ranks)", ("planner",),
           lambda: _key_without(3, 4)),
    # Dropping only the phase flag would be an equivalent mutant: the kind already implies it.
    Mutant("key_ignores_kind_and_phase", "bucket key ignores the collective kind and the phase", ("planner",),
           lambda: _key_without(0, 1)),
    Mutant("barrier_ignored", "barriers and untagged effects inside a span are ignored", ("planner", "ordering"),
           lambda: [(predicates, "is_barrier", lambda node: False)], hunt="rule:effect_or_storage_release"),
    # Killed only where an in-place or out= op writes a member's source inside the span.
    Mutant("mutating_ops_crossable", "in-place and out= ops inside a span are crossed (only FX side effects "
           "and frees count as barriers)", ("planner", "ordering", "numerics"), barrier_without_writes,
           hunt="rule:effect_or_storage_release"),
    Mutant("schemaless_calls_are_views", "a call with no operator schema (a Python operator) is taken for a view, "
           "so a reduce-scatter read by one looks read by the output only", ("planner",),
           schemaless_calls_are_views, hunt="skip:non_output_rs_consumer"),
    Mutant("any_getitem_is_a_view", "every getitem of a node is taken for a view, so a symbolic trace's w[0] of "
           "a gathered parameter is no consumer and the dependency window reads a later first use", ("planner",),
           any_getitem_is_a_view),
    Mutant("foreign_collective_ignored", "a foreign collective inside a span is ignored", ("planner", "ordering"),
           lambda: _suppress("intervening_collective"), hunt="rule:intervening_collective"),
    Mutant("foreign_free_ignored", "a free of a non-member inside a span is ignored", ("planner", "ordering"),
           lambda: [(planner, "_owned_free", lambda node, candidate, combined: True)],
           hunt="rule:effect_or_storage_release/foreign_free_between"),
    Mutant("phase_flip_ignored", "a phase flip inside a span is ignored", ("planner", "ordering"),
           lambda: _suppress("phase_boundary")),
    Mutant("rs_prep_not_excluded", "an RS bucket's own preparation chains are judged as span nodes", ("planner",),
           rs_prep_not_excluded),
    Mutant("prep_owner_by_identity", "the RS preparation walk compares chain tags by identity, so on graphs "
           "whose tags are new string objects the chain is judged as span nodes", ("planner",),
           prep_owner_by_identity),
    Mutant("prep_owner_by_prefix", "the RS preparation walk takes a chain of another bucket of the same round "
           "(its owner shares the launch's signature prefix) for the launch's own", ("planner",),
           prep_owner_by_prefix, hunt="rule:phase_boundary"),
    Mutant("prep_forward_source_accepted", "the RS preparation walk refuses a source tagged forward only "
           "where it has other users too", ("planner",), prep_forward_source_accepted,
           hunt="rule:phase_boundary/chain_source_tagged_forward"),
    Mutant("prep_walk_stops_at_boundary", "the RS preparation walk stops at the first node outside the chain, "
           "losing a second branch", ("planner",), prep_walk_stops_at_boundary, hunt="rule:rs_chain_in_two_pieces"),
    Mutant("dependency_conflict_ignored", "a consumer before the latest input is ignored", ("planner",),
           lambda: _suppress("dependency_conflict")),
    Mutant("device_index_grouping", "grouping depends on the rank's device index", ("planner",),
           rank_patches=_device_dependent),
    Mutant("members_unsorted", "bucket members kept in graph order, not (state_idx, name)", ("planner",),
           _graph_order_members, hunt="backward_gathers"),
    # Every simulated rank shares the harness's hash seed, so only real rank processes disagree.
    Mutant("members_follow_hash_seed", "bucket members in the iteration order of a set of their names "
           "(PYTHONHASHSEED decides it: ranks disagree)", ("real_ranks",), _hash_order_members, needs="real"),
    # Harmless in the harness's process (no RANK there): only a rank process with an odd RANK damages
    # its rewrite, while every digest agrees.
    Mutant("packing_follows_rank_env", "the rewriter packs by the process's RANK: odd rank processes pack "
           "an AG bucket's members in another order (real rewritten vs original)", ("real_ranks",),
           damage=rewrite_bugs.packing_follows_rank_env, needs="real"),
    Mutant("bucket_padded_by_rank_env", "odd rank processes (by RANK) gather a longer first AG buffer: the "
           "ranks' own rewrites do not run together", ("real_ranks",),
           damage=rewrite_bugs.bucket_padded_by_rank_env, needs="real"),
    Mutant("offsets_off_by_one", "plan offsets of later members are off by one", ("layout",), plan_type=_OffByOnePlan),
    Mutant("cap_off_by_one", "the byte cap admits one byte too many", ("planner",), _cap_off_by_one,
           hunt="rule:capacity/capacity_boundary"),
    Mutant("cap_exclusive", "a bucket exactly at the byte cap is split", ("planner",), cap_exclusive,
           hunt="rule:capacity_exact"),
    # Killed only on groups of 3, 5 or 6 ranks: every power of two gives the right size.
    Mutant("size_from_shard_by_shift", "the full buffer's size is the shard's shifted by log2 of the degree",
           ("planner",), size_from_shard_by_shift, hunt="rule:capacity"),
    Mutant("root_taken_for_block", "module plans take the model itself for a block where its type is a block "
           "type, and refuse the empty FQN", ("module_plans",), lambda: module_plans_built(root_skipped=False)),
    # Killed only where the legacy packet's ops count as the kind's own: a setting its hunt draws.
    Mutant("other_namespaces_unread", "is_op reads only the packet's own namespace, so a launch awaited by the "
           "legacy c10d_functional wait_tensor is refused where that namespace is accepted", ("planner",),
           other_namespaces_unread, hunt="skip:unsupported_wait_users/wait_in_legacy_namespace+spec"),
    # Killed only where one block's FQN is a prefix of another's (blocks.1, blocks.10).
    Mutant("module_prefix_without_dot", "a module plan matches parameters by a prefix without a dot boundary",
           ("planner",), module_prefix_without_dot, hunt="prefix_scopes"),
    # Killed only on groups of 3 or more ranks (a degree between 1 and the size): the degree rule's
    # hunt plants one (degree_off_by_one) in one case in five.
    Mutant("degree_checked_above_only", "a degree below its group's size passes (only too large a one is "
           "skipped)", ("planner",), lambda: degree_rule_weakened(
               lambda degree, size: isinstance(degree, int) and 1 < degree < size), hunt="skip:group_size_mismatch"),
    # Killed only where the meta names a group that sorts before the launch's (the default group's "0").
    Mutant("group_meta_compared_by_order", "the group-meta rule compares names by order, so a meta naming the "
           "default group (\"0\") passes", ("planner",), group_meta_compared_by_order,
           hunt="skip:group_metadata_mismatch/group_meta_names_default_group"),
    Mutant("unread_launch_without_consumer", "a launch nothing reads, not even a wait, passes the wait-users "
           "rule and is skipped as no_consumer", ("planner",), unread_launch_without_consumer,
           hunt="skip:unsupported_wait_users"),
    Mutant("dim0_layout_by_order", "rule 11 compares shapes by order, so a larger shape whose dim 0 is too large "
           "passes", ("planner",), dim0_layout_by_order, hunt="skip:invalid_dim0_layout"),
    # Killed only where a spec names a negative dim (a zero one is refused by ``!= 0`` too).
    Mutant("debug_log_reads_second_member", "the planner's per-bucket DEBUG line reads a bucket's second member, so "
           "a bucket of one raises, only with the planner's logger at DEBUG", ("target",),
           debug_log_reads_second_member, hunt="cases"),
    Mutant("estimates_with_random_inputs", "the planner times each bucket's copy on random inputs, drawing from "
           "torch's global generator: right buckets, shifted dropout masks", ("generators",),
           estimates_with_random_inputs, hunt="cases"),
    Mutant("negative_dims_accepted", "rule 8 refuses a zero dim but passes a negative one", ("planner",),
           negative_dims_accepted, hunt="skip:unknown_or_dynamic_shape"),
    Mutant("one_rank_group_accepted", "a degree of 1 on a group of one rank passes rule 5 (only a degree that "
           "differs from its group's size is skipped)", ("planner",),
           lambda: degree_rule_weakened(lambda degree, size: degree == size == 1)),
    Mutant("float_degree_accepted", "a float degree equal to the group's size passes", ("planner",),
           lambda: degree_rule_weakened(lambda degree, size: isinstance(degree, float) and degree == size),
           hunt="skip:group_size_mismatch"),
    # Killed only because built graphs hold their tags as new string objects (graph/builder.py).
    Mutant("kinds_by_identity", "tagged launches are recognised by identity (is) with the planner's own "
           "constants", ("planner",), kinds_by_identity),
    Mutant("pp_degree_defaults_to_two", "plan_fsdp_buckets defaults pp_degree to 2 (every launch skipped as "
           "an unsupported mode unless the caller passes 1)", ("planner",),
           lambda: [(planner.plan_fsdp_buckets, "__kwdefaults__",
                     {**planner.plan_fsdp_buckets.__kwdefaults__, "pp_degree": 2})]),
    # -- argument validation (spec 2.1-2.3): the planner oracle probes every case with broken arguments
    Mutant("cap_zero_accepted", "the policy admits a byte cap of 0", ("planner",), cap_zero_accepted),
    Mutant("input_distance_floor_lowered", "the policy admits an input distance of -1", ("planner",),
           input_distance_floor_lowered),
    Mutant("fqn_type_unchecked", "an explicit module FQN that is no string raises TypeError", ("planner",),
           fqn_type_unchecked),
    Mutant("fqn_trailing_space_accepted", "an explicit module FQN with trailing whitespace is accepted",
           ("planner",), fqn_trailing_space_accepted),
    # -- module plans from a model (spec 2.2): the module_plans checker asks on the case's own names
    Mutant("nested_blocks_kept", "module plans keep blocks nested inside other blocks", ("module_plans",),
           lambda: module_plans_built(outermost=False)),
    Mutant("explicit_scopes_unchecked", "module plans never look explicit scopes up in the model",
           ("module_plans",), lambda: module_plans_built(scopes_checked=False)),
    Mutant("block_types_any_sequence", "module plans take block types from a list as from a tuple",
           ("module_plans",), lambda: module_plans_built(tuple_required=False)),
    Mutant("explicit_groups_first", "module plans put the explicit groups before the blocks", ("module_plans",),
           lambda: module_plans_built(explicit_first=True)),
    # Killed only where one block's FQN is a prefix of another's (blocks.1, blocks.10).
    Mutant("nested_blocks_by_prefix", "module plans drop a block whose FQN merely starts with an earlier "
           "block's", ("module_plans",), lambda: module_plans_built(dot_boundary=False)),
    Mutant("repeated_parameter_accepted", "a repeated parameter may join a bucket", ("planner",),
           lambda: _suppress("repeated_parameter_instance"), hunt="rule:repeated_parameter_instance"),
    # -- plan content: the grouping is right, what the plan reports is not
    Mutant("constant_group_digest", "every group digest is one constant", ("planner",),
           plan_type=_ConstantDigestPlan),
    Mutant("digest_without_wire_records", "group digests leave out the wire records", ("planner",),
           plan_type=_LayoutOnlyDigestPlan),
    Mutant("describe_fqns_flattened", "describe() reports module_fqns as one dotted string", ("planner",),
           plan_edit=_describe_patched(_fqns_flattened)),
    Mutant("describe_shapes_swapped", "describe() swaps input_shape and output_shape", ("planner",),
           plan_edit=_describe_patched(_shapes_swapped)),
    Mutant("splits_before_skips", "split decisions are listed before the skips", ("planner",),
           plan_edit=splits_before_skips),
    Mutant("skip_listed_twice", "the first skip decision is listed twice", ("planner",), plan_edit=skip_listed_twice),
    Mutant("planning_marks_the_graph", "planning writes an FSDP meta key into the graph (impure)",
           ("planner", "consistency"), lambda: _marks("fsdp_classified")),
    Mutant("replanning_marks_fused_launches", "planning writes an FSDP meta key on fused launches (impure in "
           "later rounds only)", ("planner", "consistency"), lambda: _marks("fsdp_replanned", fused_only=True)),
    Mutant("plans_alternate", "every other plan lists its buckets reversed (nondeterministic)", ("planner",),
           plan_edit=alternating_plans()),
    Mutant("parameters_counted_per_collective", "summary counts selected collectives as parameters", ("planner",),
           plan_edit=parameters_counted_per_collective),
    # -- plan exchange: every simulated rank plans alike, so only the exchange checker's edits show these
    Mutant("validator_ignores_missing_rank", "the report validator compares only the ranks that reported",
           ("exchange",), lambda: exchange_bugs.validator(exchange_bugs.ignores_missing_rank)),
    Mutant("validator_ignores_extra_rank", "the report validator drops reports from ranks outside the group",
           ("exchange",), lambda: exchange_bugs.validator(exchange_bugs.ignores_extra_rank)),
    Mutant("validator_ignores_rank_order", "the report validator compares the group's ranks as a set",
           ("exchange",), lambda: exchange_bugs.validator(exchange_bugs.ignores_rank_order)),
    Mutant("validator_ranks_by_zip", "the report validator compares the group's ranks pairwise (zip), so a "
           "report naming a prefix of them passes", ("exchange",),
           lambda: exchange_bugs.validator(exchange_bugs.ranks_compared_pairwise)),
    Mutant("validator_ignores_digest", "the report validator compares ranks, never digests", ("exchange",),
           lambda: exchange_bugs.validator(exchange_bugs.ignores_digest)),
    Mutant("exchange_skipped", "the driver never exchanges plans: each rank rewrites with its own",
           ("exchange",), lambda: [(driver, "exchange_and_validate", exchange_bugs.exchange_skipped)]),
    # Killed only where the exchange's edited report is in a later group or subgroup (expert groups).
    Mutant("exchange_first_group_only", "the driver validates only its first group and subgroup", ("exchange",),
           lambda: [(driver, "exchange_and_validate", exchange_bugs.first_group_only)], hunt="expert_groups"),
    Mutant("rewrite_then_exchange", "the driver rewrites every rank, then validates the round's plans",
           ("exchange",), lambda: [(driver, "bucket_world", exchange_bugs.rewrite_then_exchange)], hunt="uneven"),
    # Killed where ranks' graphs differ so that their plans do (uneven shards), or on the exchange's
    # own disagreeing worlds (one case in four).
    Mutant("disagreement_unbucketed", "a round whose ranks disagree is left out on every rank instead of raising",
           ("planner", "exchange"), lambda: [(driver, "bucket_world", exchange_bugs.disagreement_unbucketed)],
           hunt="uneven"),
    # Killed only where a short rank pads a cast of a 2-D shard before a fused gather (SimpleFSDP's
    # order: the walk meets the pad first), or a scaled cast reads a padded 2-D shard.
    Mutant("pad_unknown_to_the_walk", "the dtype walk does not follow a pad: a short rank's member falls back to "
           "the spec dtype (its wire dtype differs from the other ranks')", ("layout", "numerics"),
           lambda: [(rewrite, "_SAME_DTYPE", rewrite._SAME_DTYPE - {"constant_pad_nd"})], hunt="uneven"),
    # -- rewriter contract
    Mutant("stale_plan_accepted", "the rewriter applies plans made for another graph", ("consistency",),
           lambda: [(rewrite, "check_fresh", lambda module, plan: None)]),
    Mutant("stale_plan_refused_after_writing", "the rewriter refuses a stale plan, but only after writing to the "
           "graph", ("consistency",), lambda: [(rewrite, "check_fresh", rewrite_bugs.refused_after_writing(
               rewrite.check_fresh))]),
    Mutant("swapped_copy_out", "AG copy-out reads the wrong member's columns", ("layout", "numerics"),
           damage=rewrite_bugs.swap_copy_out_offsets),
    Mutant("free_moved_early", "a member free is moved before the member's consumers", ("dependencies", "ordering"),
           damage=rewrite_bugs.free_moved_early),
    Mutant("send_buffer_freed_early", "rank 0 frees a fused all-gather's send buffer before its wait",
           ("numerics",), damage=rewrite_bugs.send_buffer_freed_early),
    Mutant("rs_packed_member_major", "a fused reduce-scatter packs its members member-major, not rank-major",
           ("layout", "numerics"), damage=rewrite_bugs.rs_packed_member_major),
    # Killed only on a non-contiguous all-gather source in a fused bucket (every contiguous one packs
    # the same): a fusion shape's blueprints with every multi-dim source strided (5 examples, not 60).
    Mutant("packs_storage_order", "a fused all-gather's copy-in flattens each member's storage, not its "
           "elements", ("layout", "numerics"), damage=rewrite_bugs.packs_storage_order,
           hunt="rule:input_distance_exact@strided_sources"),
    # Killed only where reduce-scatter codes wrap (a bfloat16 row longer than its exact span).
    Mutant("rs_swaps_at_code_span", "a fused reduce-scatter's copy-in swaps elements one code span apart",
           ("layout",), damage=rewrite_bugs.rs_swaps_at_code_span, hunt="wide"),
    # A consumer reading one result in two arguments: runs that recorded inputs once per node read
    # held one input fewer there, and layout compared only the inputs both held.
    Mutant("output_reads_one_member_twice", "the graph's output reads a fused reduce-scatter's first member in "
           "its second one's place", ("layout",), damage=rewrite_bugs.output_reads_one_member_twice),
    # A consumer whose inputs number otherwise than in the original: compared slot by slot, only the
    # inputs both held were judged.
    Mutant("output_drops_a_member", "the graph's output leaves out a fused reduce-scatter's last member",
           ("layout",), damage=rewrite_bugs.output_drops_a_member),
    Mutant("copy_out_before_wait", "AG copy-out reads the launch before its wait", ("dependencies",),
           damage=rewrite_bugs.copy_out_reads_launch),
    Mutant("avg_twice", "the fused RS divides by the degree twice", ("numerics", "layout"),
           damage=rewrite_bugs.avg_twice),
    Mutant("rs_source_rescaled", "a fused RS member's source is computed from a halved input", ("numerics",),
           damage=rewrite_bugs.rs_source_rescaled),
    Mutant("wrong_group_name", "the fused launch names the wrong process group", ("consistency", "numerics"),
           damage=rewrite_bugs.wrong_group),
    Mutant("fused_meta_dropped", "fused launches lack fsdp_bucket_members", ("consistency",),
           damage=rewrite_bugs.drop_fused_meta),
    Mutant("rank_dependent_packing", "odd ranks pack bucket members in another order", ("layout", "numerics"),
           damage=rewrite_bugs.rank_dependent_packing),
    Mutant("leaked_buffers", "fused AG buffers are copied and kept alive to the end", ("memory",),
           damage=rewrite_bugs.leak_fused_buffers),
    Mutant("fuses_earliest_first", "the rewriter fuses the earliest bucket first and does not lint: a later "
           "bucket inserts before a member wait an earlier fusion erased", ("dependencies",),
           rewrite_bugs.fuses_earliest_first, hunt="rule:anchor_on_foreign_wait"),
    Mutant("views_left_behind", "the all-gather fusion moves no view of a member's result past the fused launch "
           "and does not lint: a view before the insertion point reads the copy-out defined after it",
           ("dependencies",), rewrite_bugs.views_left_behind, hunt="rule:view_moved_past_source"),
    Mutant("anchor_one_late", "the fused all-gather goes one node after the latest input + 1, so a consumer "
           "right after B's source reads A's copy-out before it is defined (no lint)", ("dependencies",),
           rewrite_bugs.anchor_one_late, hunt="rule:view_moved_past_source"),
    Mutant("rs_views_left_behind", "the reduce-scatter fusion moves no view of a member's result past the fused "
           "launch and does not lint: a short rank's narrowing view reads the copy-out defined after it",
           ("dependencies",), rewrite_bugs.rs_views_left_behind, hunt="uneven"),
    # -- plan conformance (values unchanged: the rewrite does other than the plan it reported)
    Mutant("rewrite_packs_reversed", "the rewriter packs bucket members in reverse plan order", ("conformance",),
           apply_edit=members_reversed),
    Mutant("rewrite_leaves_last_member", "the rewriter leaves each bucket's last member unfused", ("conformance",),
           apply_edit=last_member_left_out),
    # Buckets whose members gather different dtypes (low-precision all-gathers beside others).
    Mutant("promoted_copy_in", "a fused all-gather packs members of different dtypes as torch.cat promotes "
           "them and hands each the promoted dtype", ("layout", "numerics"), damage=rewrite_bugs.promoted_copy_in,
           hunt="cases"),
    Mutant("promotion_ignores_rank", "a member's dtype through arithmetic is promoted by type alone, so a bf16 "
           "cast times a 0-dim float32 gain is packed and handed back as float32", ("layout", "numerics"),
           lambda: [(rewrite, "_promoted", rewrite_bugs._promoted_by_type)], hunt="rule:cast_scaled_twice"),
    Mutant("walk_capped", "a member's dtype is followed back at most 32 steps, so a cast further up its source "
           "chain is lost and the member is handed back in its parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.walk_capped, hunt="rule:cast_far_up_the_chain"),
    Mutant("promoted_rank_flipped", "arithmetic's result is taken as 0-dim where it is dimensioned, so a scaled "
           "cast scaled again is packed and handed back as float32", ("layout", "numerics"),
           rewrite_bugs.promoted_rank_flipped, hunt="rule:cast_scaled_twice"),
    Mutant("integer_holds_floats", "an integer dtype is taken to hold floats, so an int8 gather beside a float32 "
           "one packs both in int8", ("layout", "numerics", "conformance"), rewrite_bugs.integer_holds_floats,
           hunt="mutations"),
    Mutant("finfo_eps_trusted", "the wire's hold test trusts torch.finfo's float8_e5m2fnuz epsilon (0.125, half "
           "the format's), so AMD's e4m3fnuz beside e5m2fnuz packs in e5m2fnuz and rounds", ("layout", "numerics"),
           rewrite_bugs.finfo_eps_trusted, hunt="rule:every_member_cast/amd_float8_formats"),
    Mutant("subnormal_bound_ignored", "the wire's hold test reads precision and range but not the smallest "
           "subnormal, so AMD's e4m3fnuz beside the OCP e4m3fn packs in e4m3fn and rounds the fnuz member's "
           "smallest steps", ("layout", "numerics"), rewrite_bugs.subnormal_bound_ignored,
           hunt="rule:every_member_cast/two_vendors_float8"),
    Mutant("integer_bound_ignored", "every integer dtype is taken to fit every float one, so an int32 gather "
           "(packed 4-bit weights) beside a bf16 one is packed in bf16 and rounded", ("layout", "numerics", "conformance"),
           rewrite_bugs.integer_bound_ignored, hunt="rule:every_member_cast/wide_integer_beside_half"),
    Mutant("precision_ignored", "whether a float dtype holds another is judged by range alone, so an fp16 "
           "member of a bf16 bucket packs in bf16", ("layout", "numerics", "conformance"),
           rewrite_bugs.precision_ignored, hunt="rule:cast_dtype_by_keyword"),
    Mutant("to_copy_read_as_0dim", "a _to_copy naming its dtype is taken for 0-dim, so a cast written that way "
           "times a scalar gain is packed in float32", ("layout", "numerics"), rewrite_bugs.to_copy_read_as_0dim,
           hunt="rule:cast_dtype_by_keyword/scaled_cast_as_to_copy"),
    Mutant("cast_keyword_ignored", "a cast naming its dtype by keyword is not followed, so its member is packed "
           "and handed back in the parameter's dtype", ("layout", "numerics"), rewrite_bugs.cast_keyword_ignored,
           hunt="rule:cast_dtype_by_keyword/cast_dtype_by_keyword"),
    Mutant("opaque_op_taken_for_reduction", "an op the dtype walk does not know is taken for a 0-dim reduction, "
           "so relu of a parameter plus its bf16 cast is packed as bf16", ("layout", "numerics"),
           rewrite_bugs.opaque_op_taken_for_reduction, hunt="rule:cast_beside_opaque_op/cast_beside_opaque_op"),
    Mutant("opaque_ops_fall_back", "an op outside the dtype walk's tables is unknown, so relu of a bf16 cast is "
           "packed and handed back in the parameter's dtype", ("layout", "numerics"), rewrite_bugs.opaque_ops_fall_back,
           hunt="rule:cast_beside_opaque_op"),
    Mutant("products_taken_dimensioned", "arithmetic's result is always taken as dimensioned, so a bf16 cast "
           "scaled by its gain squared is packed as float32", ("layout", "numerics"),
           rewrite_bugs.products_taken_dimensioned, hunt="rule:cast_scaled_twice"),
    Mutant("traced_rank_flipped", "a traced value's rank is read the wrong way round, so a bf16 cast times its "
           "traced 0-dim gain is packed as float32", ("layout", "numerics"), rewrite_bugs.traced_rank_flipped,
           hunt="rule:scaled_cast_partly_traced"),
    Mutant("reduction_keywords_unknown", "a full reduction with a keyword (sum(x, dtype=float32)) is unknown to "
           "the dtype walk, so the scaled cast it gains is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.reduction_keywords_unknown, hunt="rule:scaled_cast_forms/gain_by_keyword_reduction"),
    Mutant("dtype_keyword_read_as_cast", "any op with a dtype keyword is read as a cast keeping its input's rank, "
           "so a bf16 cast times a gain summed with dtype=float32 is packed as float32", ("layout", "numerics"),
           rewrite_bugs.dtype_keyword_read_as_cast, hunt="rule:scaled_cast_forms/gain_summed_with_dtype"),
    Mutant("python_operators_unknown", "operator.mul (a symbolic trace's cast * gain) is not followed, so the "
           "scaled cast is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.python_operators_unknown, hunt="rule:scaled_cast_forms/cast_scaled_by_python_operator"),
    Mutant("bare_reductions_unknown", "amax(x) with its dims left to their default is unknown to the dtype walk, "
           "so the scaled cast it gains is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.bare_reductions_unknown, hunt="rule:scaled_cast_forms/gain_by_bare_reduction"),
    Mutant("standins_empty", "the dtype walk's stand-ins hold no element, so amax(x, dim=[]) fails on them and "
           "the scaled cast it gains is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.standins_empty, hunt="rule:scaled_cast_forms"),
    Mutant("full_reductions_by_table", "a 0-dim result from a dimensioned input is unknown unless a table names "
           "the reduction, so a gain of mean(abs(p)) or amax(x, [], False) leaves its scaled cast in the "
           "parameter's dtype", ("layout", "numerics"), rewrite_bugs.full_reductions_by_table,
           hunt="rule:scaled_cast_forms"),
    Mutant("full_reductions_need_real_shapes", "a reduction the stand-ins show full is unknown unless the walk "
           "can run it on the real shapes, so a gain reducing a Python negation leaves its scaled cast in the "
           "parameter's dtype", ("layout", "numerics"), rewrite_bugs.full_reductions_need_real_shapes,
           hunt="rule:scaled_cast_forms/gain_of_python_negation"),
    Mutant("probe_skipped", "a reduction's 0-dim result on one-dim stand-ins is taken for a reduction over every "
           "dim, so a cast times a per-column gain is packed in half precision, not float32", ("layout", "numerics"),
           rewrite_bugs.probe_skipped, hunt="rule:per_row_gains/gain_per_channel"),
    Mutant("window_exclusive", "the dependency window splits only where a source comes after a first consumer, "
           "so a member whose source is another member's first consumer joins it", ("planner",), window_exclusive,
           hunt="rule:dependency_conflict/source_is_first_consumer"),
    Mutant("input_distance_exclusive", "a pair whose sources are exactly the input distance limit apart splits, "
           "where the limit is inclusive", ("planner",), input_distance_exclusive, hunt="rule:input_distance_exact"),
    Mutant("reduce_op_as_node", "a reduce-scatter member's reduce op is its source node, not the op's name: "
           "the plan holds a graph node, which an isolated case's report cannot pickle", ("planner",),
           plan_edit=reduce_op_as_node, hunt="rule:capacity"),
    Mutant("probe_of_ones", "the second stand-ins hold one element per dim, so a squeezed per-column gain is "
           "taken for 0-dim and its float32 product is packed in half precision", ("layout", "numerics"),
           rewrite_bugs.probe_of_ones, hunt="rule:per_row_gains/gain_squeezed_per_channel"),
    Mutant("real_rank_read_as_dimensioned", "the walk runs an op on the real shapes where the stand-ins leave "
           "its rank open, but takes the result for dimensioned, so a cast times a gain squeezed to a scalar is "
           "packed in float32", ("layout", "numerics"), rewrite_bugs.real_rank_read_as_dimensioned,
           hunt="rule:per_row_gains/gain_squeezed_to_a_scalar"),
    Mutant("real_shapes_ignored", "the dtype walk never runs an op on the real shard shapes, so a cast times a "
           "gain squeezed to a scalar is packed in float32", ("layout", "numerics"), rewrite_bugs.real_shapes_ignored,
           hunt="rule:per_row_gains/gain_squeezed_to_a_scalar"),
    Mutant("real_shape_of_any_known_parameter", "the real-shape walk takes a parameter known by dtype for one "
           "known by shard shape too, so a gain reading a neighbour gathered with a symbolic shape raises and the "
           "rewrite with it", ("target",), rewrite_bugs.real_shape_of_any_known_parameter,
           hunt="rule:per_row_gains/gain_of_a_dynamic_neighbour"),
    Mutant("shard_shapes_unread", "the shard shapes are never read from the gathers' specs, so a cast times a "
           "gain squeezed to a scalar is packed in float32", ("layout", "numerics"), rewrite_bugs.shard_shapes_unread,
           hunt="rule:per_row_gains/gain_squeezed_to_a_scalar"),
    Mutant("device_key_by_identity", "the dtype walk finds the device keyword by identity, so on a graph whose "
           "keyword names are new strings a copy of a bf16 cast to the device is packed in the parameter's dtype",
           ("layout", "numerics"), rewrite_bugs.device_key_by_identity,
           hunt="rule:cast_beside_opaque_op/cast_copied_to_device"),
    Mutant("collectives_not_followed", "the dtype walk does not follow a collective or its wait, so a bf16 cast "
           "scaled by an all-reduced gain is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.collectives_not_followed, hunt="rule:gain_all_reduced"),
    Mutant("real_shapes_asked_of_every_result", "the dtype walk asks the real shapes of every result with a "
           "dimensioned input, so relu of a bf16 cast of cat([p]) (no real shapes) is packed in the parameter's dtype",
           ("layout", "numerics"), rewrite_bugs.real_shapes_asked_of_every_result,
           hunt="rule:cast_beside_opaque_op/opaque_op_of_unfollowable_cast"),
    Mutant("unrunnable_inputs_unread", "the dtype walk reads a same-dtype op's input only where it could run the "
           "op, so a collective's wait answers before its input is walked and a bf16 cast scaled by an all-reduced "
           "gain is packed in the parameter's dtype", ("layout", "numerics"), rewrite_bugs.unrunnable_inputs_unread,
           hunt="rule:gain_all_reduced"),
    Mutant("arithmetic_read_as_any_op", "the dtype walk reads arithmetic's operands only where it could run the op, "
           "so operator.mul of a bf16 cast and its gain is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.arithmetic_read_as_any_op, hunt="rule:scaled_cast_forms/cast_scaled_by_python_operator"),
    Mutant("param_dtypes_unread", "the dtype walk never takes a parameter's dtype from its gathers' specs, so a bf16 "
           "cast scaled by its parameter's amax is packed in float32", ("layout", "numerics"),
           rewrite_bugs.param_dtypes_unread, hunt="rule:scaled_cast_forms"),
    Mutant("device_objects_refused", "the dtype walk runs no op with a device object among its keywords, so a "
           "traced graph's move of a bf16 cast to the device is packed in the parameter's dtype",
           ("layout", "numerics"), rewrite_bugs.device_objects_refused,
           hunt="rule:cast_beside_opaque_op/cast_moved_by_device_object"),
    Mutant("device_less_factories_unknown", "the dtype walk runs a factory only where the node names its device, "
           "so a bf16 cast scaled by a random gain a pass wrote without one is packed and handed back in the "
           "parameter's dtype", ("layout", "numerics"), rewrite_bugs.device_less_factories_unknown,
           hunt="rule:scaled_cast_forms/gain_drawn_without_device"),
    Mutant("device_less_factories_run_for_real", "the dtype walk makes a factory's device meta only where the node "
           "names one, so a random gain a pass wrote without a device keyword draws from torch's global generator "
           "during the rewrite", ("generators",), rewrite_bugs.device_less_factories_run_for_real,
           hunt="rule:scaled_cast_forms/gain_drawn_without_device"),
    Mutant("python_indexing_unknown", "the dtype walk runs no Python function, so a gain indexed by Python "
           "(amax(abs(p), [0], True)[0] of a 1-D shard, 0-dim) is taken for dimensioned and its bf16 product is "
           "packed in float32", ("layout", "numerics"), rewrite_bugs.python_indexing_unknown,
           hunt="rule:scaled_cast_forms/gain_indexed_by_python"),
    Mutant("every_keyword_made_meta", "the dtype walk makes every keyword of an op it runs meta, so a gain of "
           "std(abs(p), correction=0) is unknown and its bf16 product is packed in float32", ("layout", "numerics"),
           rewrite_bugs.every_keyword_made_meta, hunt="rule:scaled_cast_forms/gain_by_standard_deviation"),
    Mutant("every_op_given_a_device", "the dtype walk gives every op it runs a meta device, whether it takes one "
           "or not, so a gain of std(abs(p), correction=0) is unknown and its bf16 product is packed in float32",
           ("layout", "numerics"), rewrite_bugs.every_op_given_a_device,
           hunt="rule:scaled_cast_forms/gain_by_standard_deviation"),
    Mutant("random_factory_hoisted", "the rewrite hoists the last random factory to the top of the graph, so it "
           "draws before the one that came first and each rank's numbers go to the other gain (and it crosses the "
           "frees between)", ("numerics", "ordering"),
           damage=rewrite_bugs.random_factory_hoisted, hunt="rule:scaled_cast_forms/gains_drawn_in_both_phases"),
    Mutant("factories_unevaluated", "the dtype walk runs only ops with a tensor input, so a bf16 cast scaled by a "
           "constant gain (scalar_tensor) is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.factories_unevaluated,
           hunt="rule:scaled_cast_forms/gain_as_constant"),
    Mutant("first_operand_decides", "arithmetic takes its first operand's dtype, so a bf16 cast plus relu of its "
           "float32 parameter is packed as bf16", ("layout", "numerics"), rewrite_bugs.first_operand_decides,
           hunt="rule:cast_beside_opaque_op/cast_before_opaque_op"),
    Mutant("packets_not_evaluated", "an op called as its packet (aten.relu) is not run on stand-ins, so relu of a "
           "bf16 cast is packed in the parameter's dtype", ("layout", "numerics"), rewrite_bugs.packets_not_evaluated,
           hunt="rule:cast_beside_opaque_op/cast_through_opaque_packet"),
    Mutant("casts_of_unknown_values_unknown", "a cast of a value the dtype walk cannot follow (cat([p])) is unknown "
           "too, so its member is packed in the parameter's dtype", ("layout", "numerics"),
           rewrite_bugs.casts_of_unknown_values_unknown,
           hunt="rule:cast_beside_opaque_op/cast_of_unfollowable_value"),
    Mutant("uint8_exceeds_bf16", "an integer is taken to fit a float only below 1/eps, so a uint8 gather beside a "
           "bf16 one is packed in float32", ("conformance",), rewrite_bugs.uint8_exceeds_bf16,
           hunt="rule:every_member_cast/every_member_cast@full_precision"),
    Mutant("wire_of_first_member", "a fused all-gather packs in its first member's dtype, rounding wider members",
           ("layout", "numerics", "conformance"), lambda: [(rewrite, "wire_dtype", rewrite_bugs._wire_of_first_member)],
           hunt="cases"),
    Mutant("wire_is_parameter_dtype", "a fused all-gather of low-precision gathers sends the parameters' dtype",
           ("conformance",), lambda: [(rewrite, "wire_dtype", rewrite_bugs._wire_is_parameter_dtype)],
           hunt="rule:every_member_cast/every_member_cast@full_precision"),
    Mutant("wire_wider_than_needed", "a fused all-gather of members that move several dtypes packs in float64, "
           "exact but wider than the narrowest dtype that holds each", ("conformance",),
           lambda: [(rewrite, "wire_dtype", rewrite_bugs._wire_in_float64)], hunt="cases"),
    Mutant("gather_in_float64", "fused all-gathers send float64 instead of the members' dtype", ("conformance",),
           damage=rewrite_bugs.gather_in_float64),
    Mutant("fused_spec_from_shard", "a fused all-gather's fsdp_bucket_spec says it outputs its input shape",
           ("conformance",), damage=rewrite_bugs.fused_spec_from_shard),
    Mutant("copy_out_tagged_forward", "a backward all-gather bucket's copy-out nodes lose their phase flag",
           ("conformance",), damage=rewrite_bugs.copy_out_tagged_forward, hunt="backward_gathers"),
    # -- order (values unchanged: only the ordering oracle can tell)
    Mutant("fused_launch_early", "a fused all-gather is placed one step early, across an effect", ("ordering",),
           damage=order_bugs.fused_launch_early, hunt="rule:effect_or_storage_release"),
    Mutant("fused_launch_hoisted", "a fused all-gather is hoisted to the top of the graph", ("ordering",),
           damage=order_bugs.fused_launch_hoisted),
    Mutant("owned_free_moved_later", "a member free is moved later, past a computation", ("ordering",),
           damage=order_bugs.owned_free_moved_later),
    Mutant("compute_across_barrier", "a computation is moved across a barrier next to it", ("ordering",),
           damage=order_bugs.compute_across_effect, hunt="rule:effect_or_storage_release"),
    Mutant("rs_prep_untagged", "a fused reduce-scatter's preparation chain is left untagged", ("ordering",),
           damage=order_bugs.rs_prep_untagged),
    Mutant("rs_prep_shared", "a fused reduce-scatter's preparation chain is read outside the bucket",
           ("ordering",), damage=order_bugs.rs_prep_shared),
    Mutant("rank_dependent_group_order", "odd ranks issue two groups' collectives in the other order (deadlock)",
           ("ordering",), damage=order_bugs.rank_dependent_group_order),
    Mutant("last_rank_free_moved_later", "only the highest rank moves a member free later", ("ordering",),
           damage=order_bugs.owned_free_moved_later, last_rank_only=True),
    # -- each skip rule of spec 2.5: its skips reported under another rule's name
    *(Mutant(f"skip_{reason}_misreported", f"skips for {reason} are reported as the next rule", ("planner",),
             plan_edit=misreported_skip(reason), hunt=f"skip:{reason}")
      for reason in planner.SKIP_REASONS),
)}


def get_mutant(name: str) -> Mutant:
    """The mutant called ``name``."""
    return MUTANTS[name]
