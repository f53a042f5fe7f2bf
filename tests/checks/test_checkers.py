"""Every checker catches a deliberately broken plan or rewrite, and names what is wrong."""

from __future__ import annotations


import pytest
import torch

from fsdp_verify.model.case import Case
from fsdp_verify.checks import registered
from fsdp_verify.checks.graph_facts import changed, fingerprint, snapshot
from fsdp_verify.checks.plan_model import signature_of
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets.mutants import MUTANTS, get_mutant
from fsdp_verify.execute.world import build_world
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import mutations
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from helpers.cases import two_block_case
from helpers import TESTS


def _mixed_dtype_case() -> Case:
    block = (ParamDraw((2, 4), "float32"), ParamDraw((2, 4), "bfloat16"), ParamDraw((3,), "float32"))
    return Case(render(Blueprint(blocks=(block,))))


def _barrier_case() -> Case:
    case = two_block_case()
    a, b = mutations.sibling_pairs(case.graph)[0]
    return mutations.barrier_between(case, a, b)


def _findings(target, case, checker):
    findings, _ = check_all(target, case, only=(checker,))
    return [f for f in findings if f.checker == checker]


def _expert_case() -> Case:
    """Two groups over the same two ranks: dense and expert parameters in each block."""
    blocks = ((ParamDraw((2, 4)), ParamDraw((2, 4), expert=True)), (ParamDraw((2, 2)), ParamDraw((3,), expert=True)))
    return Case(render(Blueprint(blocks=blocks, expert_degree=2, degree=2)))


CASES = {"two_block": two_block_case, "mixed_dtype": _mixed_dtype_case, "barrier": _barrier_case,
         "expert": _expert_case, "four_ranks": lambda: two_block_case(degree=4),
         "three_ranks": lambda: two_block_case(degree=3), "six_ranks": lambda: two_block_case(degree=6)}


@pytest.mark.parametrize("case_name", sorted(CASES))
def test_reference_passes_every_checker(case_name):
    findings, ctx = check_all(get_target("reference"), CASES[case_name]())
    assert findings == []
    assert set(ctx.metrics["memory"]) == {"original_peak_bytes", "rewritten_peak_bytes", "largest_bucket_bytes"}


PLANTED = [
    ("planner", "members_unsorted", "two_block", "should hold"),
    ("planner", "key_ignores_dtype", "mixed_dtype", "should hold"),
    ("planner", "cap_off_by_one", "two_block", "bucket"),
    ("planner", "size_from_shard_by_shift", "three_ranks", "bucket"),
    ("dependencies", "free_moved_early", "two_block", "after"),
    ("ordering", "barrier_ignored", "barrier", "no legal insertion point"),
    ("ordering", "free_moved_early", "two_block", "moved after effect"),
    ("ordering", "fused_launch_early", "two_block", "was hoisted above effect free_ag_blocks_0_w1_wait"),
    ("ordering", "fused_launch_hoisted", "two_block", "was hoisted above effect"),
    ("ordering", "owned_free_moved_later", "two_block", "sum_2 moved before effect free_ag_blocks_0_w0_wait"),
    ("ordering", "compute_across_barrier", "barrier", "effect barrier"),
    ("ordering", "rs_prep_untagged", "two_block", "not returned by rs_layout_preparation"),
    ("ordering", "rs_prep_shared", "two_block", "edge cat_default_5 -> sum_default"),
    ("ordering", "rank_dependent_group_order", "expert", "cycle of blocking waits across ranks [gloo model]"),
    ("ordering", "last_rank_free_moved_later", "four_ranks", "rank 3: sum_2 moved before effect"),
    ("numerics", "rank_dependent_group_order", "expert", "deadlock: rank 0 waits at"),
    ("layout", "swapped_copy_out", "two_block", "where the original delivers blocks.0.w0"),
    ("layout", "offsets_off_by_one", "two_block", "has offset"),
    ("numerics", "avg_twice", "two_block", "differs"),
    ("numerics", "copy_out_before_wait", "two_block", "fails in the simulated world"),
    ("numerics", "rank_dependent_packing", "two_block", "differs"),
    ("numerics", "rs_source_rescaled", "two_block", "differs before the collective"),
    ("consistency", "fused_meta_dropped", "two_block", "lacks the fused-node meta"),
    ("consistency", "stale_plan_accepted", "two_block", "stale plan"),
    ("consistency", "replanning_marks_fused_launches", "two_block", "re-planning the rewrite changed it"),
    ("consistency", "planning_marks_the_graph", "two_block", "re-planning the rewrite changed it"),
    ("consistency", "stale_plan_refused_after_writing", "two_block",
     "a stale plan was rejected but the graph was changed before the error (node 'all_gather_into_tensor_3' has other FSDP meta"),
    ("memory", "leaked_buffers", "two_block", "peak live bytes"),
    ("conformance", "rewrite_packs_reversed", "two_block", "is not sent at its plan offset"),
    ("conformance", "rewrite_leaves_last_member", "two_block", "no launch of the rewrite delivers exactly"),
    ("conformance", "gather_in_float64", "two_block", "dtype torch.float64 (plan: torch.float32)"),
    ("planner", "constant_group_digest", "two_block", "plan group_digests.fsdp is"),
    ("planner", "splits_before_skips", "barrier", "decision order"),
    ("exchange", "validator_ignores_missing_rank", "two_block", "last rank's report dropped"),
    ("exchange", "validator_ignores_extra_rank", "expert", "a rank outside the group"),
    ("exchange", "validator_ignores_rank_order", "four_ranks", "ranks reversed in one report"),
    ("exchange", "validator_ignores_digest", "two_block", "one rank's digest changed"),
    ("exchange", "exchange_skipped", "three_ranks", "yet the target rewrote the world"),
    ("exchange", "rewrite_then_exchange", "two_block", "were rewritten first"),
    ("module_plans", "explicit_scopes_unchecked", "two_block", "a scope the model lacks"),
    ("module_plans", "nested_blocks_kept", "two_block", "block types"),
    ("generators", "estimates_with_random_inputs", "two_block", "moved the global random generator(s) ['torch']"),
]


@pytest.mark.parametrize("checker,mutant,case_name,expected", PLANTED)
def test_checker_catches_planted_bug(checker, mutant, case_name, expected):
    case = CASES[case_name]()
    if mutant in ("cap_off_by_one", "size_from_shard_by_shift"):  # a cap one byte below the first bucket's size
        case = case.with_args(policy={"cap_bytes": _first_bucket_bytes(case) - 1})
    findings = _findings(get_mutant(mutant), case, checker)
    assert findings, f"{checker} missed {mutant}"
    assert any(expected in f.message for f in findings), [f.message for f in findings]
    assert _findings(get_target("reference"), case, checker) == []



@pytest.mark.parametrize("case_name", ["two_block", "four_ranks"])
def test_a_size_computed_by_shift_is_right_on_powers_of_two(case_name):
    # Why the strategies draw 3, 5 and 6 ranks: on 2, 4 and 8 this planted bug is no bug at all.
    case = CASES[case_name]()
    case = case.with_args(policy={"cap_bytes": _first_bucket_bytes(case) - 1})
    findings, _ = check_all(get_target("mutant:size_from_shard_by_shift"), case)
    assert findings == []

def test_checkers_that_hand_the_rewrite_back_run_last():
    """Consistency gives the target its own rewrite (no copy): every checker that reads it runs first."""
    names = list(registered())
    handing = [name for name, checker in registered().items() if checker.hands_back]
    assert handing == ["consistency"] and names[-len(handing):] == handing


def test_consistency_leaves_a_pure_targets_rewrite_as_it_returned_it():
    case = two_block_case(degree=4)
    findings, ctx = check_all(get_target("reference"), case)
    fresh = build_world(case)
    get_target("reference").rewrite(case, fresh)
    assert findings == []
    assert {r: fingerprint(m) for r, m in ctx.rewritten.items()} == {r: fingerprint(m) for r, m in fresh.items()}
    assert {r: signature_of(m) for r, m in ctx.rewritten.items()} == {r: signature_of(m) for r, m in fresh.items()}


def _first_bucket_bytes(case) -> int:
    plan = get_target("reference").plan(case, build_world(case)[0], 0)
    return plan.to_dict()["buckets"][0]["size_bytes"]


def test_target_error_is_a_finding_with_the_traceback():
    findings, _ = check_all(get_mutant("device_index_grouping"), two_block_case())
    target = [f for f in findings if f.checker == "target"]
    assert target and "Bucket plans disagree for group fsdp" in target[0].message
    assert "Traceback" in target[0].details["traceback"]


def test_a_target_whose_plans_fail_when_read_is_a_finding_not_a_harness_crash(monkeypatch):
    """A mutant of ``group_digest`` indexing a bucket's second member raises on every bucket of one,
    in the target's exchange and again when the planner oracle reads the plans: the raise is the
    finding (the oracle's crash on the target's plan objects once made every case unjudgeable)."""
    from fsdp_verify.reference import planner
    original = planner.BucketPlan.group_digest

    def group_digest(self, group):
        assert all(len(b.members) > 1 for b in self.buckets if b.members[0].group == group), "a bucket of one"
        return original(self, group)
    monkeypatch.setattr(planner.BucketPlan, "group_digest", group_digest)
    case = Case(render(Blueprint(blocks=((ParamDraw((2, 4)),), (ParamDraw((2, 2)), ParamDraw((2, 2)))))))
    findings, _ = check_all(get_target("reference"), case)
    assert [(f.checker, f.rule) for f in findings] == [("target", "raised")]
    assert "a bucket of one" in findings[0].details["plans_unreadable"]  # said, not swallowed


def test_invalid_arguments_must_be_refused_with_the_spec_message():
    case = two_block_case().with_args(policy={"cap_bytes": 0})
    findings, ctx = check_all(get_target("reference"), case)
    assert findings == [] and ctx.run.error_type == "ValueError"


# Checkers whose planted bugs need a resource this file does not start (real rank processes).
EXERCISED_ELSEWHERE = {"real_ranks": TESTS / "execute" / "ranks"}


def test_every_registered_checker_is_exercised_here():
    tested = {checker for checker, *_ in PLANTED}
    for checker, folder in EXERCISED_ELSEWHERE.items():
        text = "".join(path.read_text() for path in folder.glob("test_*.py"))
        mutants = [name for name, m in MUTANTS.items() if checker in m.kills]
        assert mutants and all(name in text for name in mutants), (checker, mutants)
        tested.add(checker)
    assert set(registered()) <= tested


def test_bit_difference_compares_bits_nan_payloads_and_zero_signs_included():
    import torch
    from fsdp_verify.checks.numerics import bit_difference
    a = torch.tensor([float("nan"), 1.0, -0.0], dtype=torch.bfloat16)
    assert bit_difference(a, a.clone()) is None
    b = a.clone()
    b.view(torch.int16)[0] = 0x7FC1  # a NaN with another payload than torch's 0x7FC0
    assert bit_difference(a, b)["first_index"] == 0
    c = a.clone()
    c[2] = 0.0  # +0.0 vs -0.0: equal as numbers, different bits
    assert bit_difference(a, c)["first_index"] == 2


def test_a_case_with_non_finite_outputs_is_invalid_never_a_pass():
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.graph.compose import Composer
    c = Composer({"fsdp": (0, 1)})
    x = c.input("x", (4,), "float32")
    blown = c.call("aten.div.Tensor", x, 0.0)  # inf and nan (0/0) on every rank
    case = Case(c.finish([blown]))
    findings, ctx = check_all(get_target("reference"), case)
    assert [(f.checker, f.severity) for f in findings] == [("numerics", "invalid")]
    assert "not finite" in findings[0].message
    assert ctx.metrics["numerics"]["judged_elements"] == 0
    assert corpus.Verdict.of(findings).status == corpus.INVALID


def test_a_collective_source_that_is_not_finite_makes_the_case_invalid():
    # The shared run replaces the source by codes, so the outputs are finite; the source's own
    # value is what the numerics checker compares, and a NaN there cannot be judged.
    from fsdp_verify.graph.compose import Composer
    c = Composer({"fsdp": (0, 1)})
    c.param("w", (2, 4), state_idx=0, device="cpu")
    x = c.input("x", (4, 4), "float32")
    grad = c.call("aten.div.Tensor", x, 0.0)  # inf and nan (0/0) on every rank
    _, wait = c.reduce_scatter(grad, "w")
    case = Case(c.finish([wait]))
    findings, ctx = check_all(get_target("reference"), case)
    assert [(f.checker, f.severity) for f in findings] == [("numerics", "invalid")]
    assert "source div" in findings[0].message and "not finite" in findings[0].message
    assert ctx.metrics["numerics"]["judged_elements"] == 0


def test_the_planner_oracle_names_an_impure_planner():
    findings, _ = check_all(get_mutant("planning_marks_the_graph"), two_block_case())
    assert any(f.checker == "planner" and "planning mutated the graph (purity)" in f.message for f in findings)


def test_the_planner_oracle_names_a_planner_that_plans_the_same_graph_two_ways():
    findings, _ = check_all(get_mutant("plans_alternate"), two_block_case())
    assert any(f.checker == "planner" and "(determinism)" in f.message for f in findings)


def test_snapshot_sees_every_change_a_target_could_make_and_nothing_else():
    case = two_block_case()
    module = build_world(case)[0]
    before = snapshot(module)
    assert changed(module, before) is None
    launch = next(n for n in module.graph.nodes if n.meta.get("fsdp_bucket_spec"))
    launch.args = tuple(launch.args)  # FX makes new containers: equal arguments are no change
    assert changed(module, before) is None
    launch.meta["fsdp_bucket_spec"]["dtype"] = "torch.float64"  # nested, in place
    assert "other FSDP meta" in changed(module, before) and repr(launch.name) in changed(module, before)
    module = build_world(case)[0]
    before = snapshot(module)
    user = next(n for n in module.graph.nodes if n.op == "call_function" and len(n.args) > 1)
    user.args = (user.args[1], user.args[0], *user.args[2:])
    assert "has other arguments" in changed(module, before)
    module = build_world(case)[0]
    before = snapshot(module)
    with module.graph.inserting_after(next(iter(module.graph.nodes))):
        module.graph.call_function(torch.ops.aten.sum.default, (next(iter(module.graph.nodes)),))
    assert "nodes instead of" in changed(module, before)
    module = build_world(case)[0]
    before = snapshot(module)
    next(n for n in module.graph.nodes if n.op == "call_function").name = "renamed"
    assert "replaced, renamed or retargeted" in changed(module, before)
    module = build_world(case)[0]  # meta JSON cannot encode (tuple keys) is compared all the same
    launch = next(n for n in module.graph.nodes if n.meta.get("fsdp_bucket_spec"))
    launch.meta["fsdp_layout"] = {(0, 1): "a", "b": 2}
    before = snapshot(module)
    assert changed(module, before) is None
    launch.meta["fsdp_layout"][(0, 1)] = "c"
    assert changed(module, before) == "a node's FSDP meta changed"


@pytest.mark.parametrize("keep", [True, False])
def test_a_kept_rewrite_is_what_the_target_returned_even_when_it_then_writes(keep):
    # ``show`` draws the rewrite after the checks: consistency hands the target a copy of it then.
    mutant = get_mutant("stale_plan_refused_after_writing")
    case = two_block_case()
    findings, ctx = check_all(mutant, case, keep_rewrite=keep)
    fresh = build_world(case)
    get_target("reference").rewrite(case, fresh)
    assert any(f.checker == "consistency" and "rejected but the graph was changed" in f.message for f in findings)
    assert (signature_of(ctx.rewritten[0]) == signature_of(fresh[0])) is keep


def test_an_element_of_a_coalesced_launch_is_read_through_its_wait():
    # inductor's coalesced mode: reduce_scatter_tensor_coalesced returns one tensor per member,
    # indexed by getitem and each element waited; only an element read without a wait is a finding
    import operator

    import torch
    from torch import fx

    from fsdp_verify.checks.dependencies import _unwaited_reads
    c10d = torch.ops._c10d_functional

    def graph(waited: bool) -> fx.GraphModule:
        g = fx.Graph()
        a, b = g.placeholder("a"), g.placeholder("b")
        launch = g.call_function(c10d.reduce_scatter_tensor_coalesced.default, ([a, b], "sum", 2, "fsdp"))
        first = g.call_function(operator.getitem, (launch, 0))
        read = g.call_function(c10d.wait_tensor.default, (first,)) if waited else first
        g.output(g.call_function(torch.ops.aten.add.Tensor, (read, 1)))
        return fx.GraphModule(torch.nn.Module(), g)

    empty = fx.GraphModule(torch.nn.Module(), fx.Graph())
    assert _unwaited_reads(graph(True), empty) == []
    found = _unwaited_reads(graph(False), empty)
    assert [f.rule for f in found] == ["read_without_wait"] and found[0].nodes[1].startswith("add")


def test_a_run_time_view_without_an_alias_in_its_schema_is_one_buffer_not_two():
    # inductor's bucketing copies members out as ``_unsafe_view(clone(x))``: the schema of
    # _unsafe_view declares no alias, yet its result shares the clone's storage. Counted as a
    # buffer of its own it doubled every copy-out (a captured campaign's memory false alarm).
    import torch
    from torch import fx
    from fsdp_verify.checks.memory import _sizes, peak_live_bytes
    from fsdp_verify.execute.simulated import WorldRun
    graph = fx.Graph()
    x = graph.placeholder("x")
    copy = graph.call_function(torch.ops.aten.clone.default, (x,))
    view = graph.call_function(torch.ops.aten._unsafe_view.default, (copy, [4]))
    graph.output(graph.call_function(torch.ops.aten.neg.default, (view,)))
    module = fx.GraphModule(torch.nn.Module(), graph)
    # sizes as a run would record them (the view's result has the clone's bytes)
    run = WorldRun({}, {}, {0: {"x": 4, "clone_default": 16, "_unsafe_view_default": 16, "neg_default": 4}})
    sizes = _sizes(run, module, 0)
    assert "_unsafe_view_default" not in sizes
    # the clone lives through its view until neg reads it; counted apart, clone and view made 32
    assert peak_live_bytes(module, sizes) == 20
