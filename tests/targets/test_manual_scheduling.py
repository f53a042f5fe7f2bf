"""The manual scheduler (``overlap_manual_scheduling.manual_overlap_bucketing``) as a configuration of
``torch-inductor``: plans from the graph's modules, bucketing per plan entry, the triage of what it
does by design, and the crash it has on parameters sharded on both dims of a 2-D mesh (F10)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from fsdp_verify.capture import Layer, ModelDesc, capture
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.engine.triage import CANDIDATE, MISMATCH, classify
from fsdp_verify.graph.builder import build_module
from fsdp_verify.model.case import Case
from fsdp_verify.targets import get_target
from fsdp_verify.targets.inductor import CONFIG_SPACE
from fsdp_verify.targets.post_grad import MANUAL, MANUAL_DEPS, MANUAL_MODE, module_bucket_plans

ONE_D = ModelDesc((Layer("linear", 8), Layer("linear", 4), Layer("linear", 6)), mesh=(4,))


@pytest.fixture(scope="module")
def captured():
    return capture(ONE_D)


def _launches(module) -> Counter:
    return Counter(str(n.target).split(".")[1] for n in module.graph.nodes
                   if n.op == "call_function" and "_c10d_functional" in str(n.target) and "wait" not in str(n.target))


def test_the_name_pins_the_manual_scheduler_with_inductors_own_bucketing_off():
    target = get_target("torch-inductor@manual")
    assert target.name == "torch-inductor@manual"
    assert target.config[MANUAL] == "blocks" and target.config["bucket_all_gathers_fx"] == "none"
    assert target.config["bucket_reduce_scatters_fx"] == "none"
    assert MANUAL not in target.options() and MANUAL_DEPS in target.options()
    assert get_target("torch-inductor:custom_ops_multidtype@manual").config[MANUAL_MODE] == "custom_ops_multidtype"
    assert CONFIG_SPACE[MANUAL][0] == "off"  # an unpinned campaign draws it, off by default


def test_plans_name_each_unit_in_graph_order_and_pairs_group_two(captured):
    target = get_target("torch-inductor@manual")
    forward = build_module(target.normalise(Case(captured.forward)).graph).graph
    backward = build_module(target.normalise(Case(captured.backward)).graph).graph
    assert module_bucket_plans(forward, "blocks") == ["layers.0", "layers.1", "layers.2"]
    assert module_bucket_plans(forward, "pairs") == [["layers.0", "layers.1"], "layers.2"]
    assert module_bucket_plans(backward, "blocks") == ["layers.2", "layers.1", "layers.0"]


@pytest.mark.parametrize("options", [{}, {MANUAL_DEPS: True}, {MANUAL: "pairs"}, {MANUAL_MODE: "default"}],
                         ids=["blocks", "deps", "pairs", "default_mode"])
@pytest.mark.parametrize("phase", ["forward", "backward"])
def test_each_unit_is_bucketed_and_every_checker_passes(captured, phase, options):
    # the unpinned target, configured as @manual pins it, so that ``pairs`` can be drawn
    options = {MANUAL: "blocks", "bucket_all_gathers_fx": "none", "bucket_reduce_scatters_fx": "none", **options}
    target = get_target("torch-inductor")
    case = target.normalise(Case(getattr(captured, phase)))
    case = replace(case, target_options=tuple(sorted(options.items())))
    findings, ctx = check_all(target.configure(options), case)
    assert [f for f in findings if f.severity == "error"] == []
    before, after = _launches(build_module(case.graph)), _launches(ctx.run.rewritten[0])
    units = 2 if options.get(MANUAL) == "pairs" else 3
    assert sum(before.values()) == 6 and sum(after.values()) == units  # weight and bias of each unit in one launch


def test_a_reorder_by_design_is_a_contract_mismatch_but_a_wrong_value_is_not():
    from fsdp_verify.checks.findings import Finding
    target = get_target("torch-inductor@manual")
    case = target.normalise(Case(capture(ONE_D).backward))
    reorder = Finding("ordering", "sinks below", rule="fused_window")
    assert classify(target, case, ("ordering",), [reorder])[0] == MISMATCH
    off = replace(case, target_options=((MANUAL, "off"),))
    assert classify(get_target("torch-inductor"), off, ("ordering",), [reorder])[0] == CANDIDATE
    wrong = Finding("numerics", "output differs", rule="output_differs")
    assert classify(target, case, ("numerics", "ordering"), [reorder, wrong])[0] == CANDIDATE


def test_a_parameter_sharded_on_both_mesh_dims_crashes_it_and_is_counted_apart():
    # F10: the outer gathers of two parameters of one module are bucketed right after the first
    # of them, before the inner bucket's wait that the second one's input comes from.
    target = get_target("torch-inductor@manual")
    desc = ModelDesc((Layer("linear", 4, placement="shard2d"),), mesh=(2, 2))
    case = target.normalise(Case(capture(desc).forward))
    findings, _ = check_all(target, case)
    assert [f.key for f in findings] == [("target", "raised")]
    assert "used before it has been defined" in findings[0].message
    kind, why = classify(target, case, ("target",), findings)
    assert kind == MISMATCH and "F10" in why[0]
    # the same crash on a 1-D graph is no such excuse
    flat = target.normalise(Case(capture(ONE_D).forward))
    assert classify(target, flat, ("target",), findings)[0] == CANDIDATE


def test_f10_on_the_backward_graph_chains_reduce_scatters_and_is_the_same_finding():
    # The 30-minute captured campaign met F10's crash on a 2-D backward graph (its shrunk case): the
    # gradient of a parameter sharded on both dims is reduce-scattered twice (chained), no gather is.
    from pathlib import Path

    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.signature import signature
    from fsdp_verify.targets.inductor import _chained
    found = Path(__file__).resolve().parents[2] / "corpus" / "found"
    backward, forward = (corpus.load(found / f"{key}.json") for key in ("9b914aae62adac5e3a6d", "7b7d5c7883ff987e96ad"))
    assert _chained(backward.case, "reduce_scatter") and not _chained(backward.case, "all_gather")
    target = get_target(backward.target).configure(dict(backward.case.target_options))
    findings, _ = check_all(target, backward.case)
    assert [f.key for f in findings] == [("target", "raised")], [f.message for f in findings]
    f10, _ = check_all(get_target(forward.target), forward.case)
    assert signature(findings) == signature(f10)  # one bug: the same origin in the manual scheduler
    kind, why = classify(target, backward.case, ("target",), findings)
    assert kind == MISMATCH and "F10" in why[0]


def on_cuda(case: Case) -> Case:
    """``case`` with its parameters on a CUDA device: what the overlap scheduler's memory budget counts."""
    return replace(case, graph=replace(case.graph, params=tuple(replace(p, device="cuda:0") for p in case.graph.params)))


def test_excuses_compose_but_never_cover_what_none_of_them_names():
    from fsdp_verify.checks.findings import Finding
    target = get_target("torch-inductor")
    # its gathers give the prefetch room; on a CUDA device, the overlap scheduler's budget sees them
    case = on_cuda(target.normalise(Case(capture(ONE_D).forward)))
    manual = replace(case, target_options=((MANUAL, "blocks"),))
    overlap = replace(case, target_options=(("aten_distributed_optimizations.enable_overlap_scheduling", True),))
    bounded = replace(case, target_options=(("aten_distributed_optimizations.enable_overlap_scheduling", True),
                                            ("aten_distributed_optimizations.max_memory_increase_gb", 0.0),
                                            ("aten_distributed_optimizations.max_memory_increase_ratio", 0.0)))
    from fsdp_verify.targets.inductor import _collective_bytes
    room = _collective_bytes(case)
    assert room > 0
    peak = Finding("memory", "peak live bytes exceed", rule="peak_memory",
                   details={"original_peak_bytes": 100, "rewritten_peak_bytes": 100 + room})
    leak = Finding("memory", "peak live bytes exceed", rule="peak_memory",
                   details={"original_peak_bytes": 100, "rewritten_peak_bytes": 101 + room})
    both = replace(manual, target_options=((MANUAL, "blocks"), *bounded.target_options))
    reorder = Finding("ordering", "issues b before a", rule="group_order")
    wrong = Finding("numerics", "output differs", rule="output_differs")
    assert classify(target, manual, ("memory",), [peak])[0] == MISMATCH  # prefetch by design, no limit
    assert classify(target, overlap, ("memory", "ordering"), [reorder, peak])[0] == MISMATCH  # two excuses
    assert classify(target, bounded, ("memory",), [peak])[0] == CANDIDATE  # both at 0 promised no increase
    assert classify(target, case, ("memory",), [peak])[0] == CANDIDATE  # no scheduler: the bound holds
    assert classify(target, overlap, ("memory", "numerics", "ordering"), [reorder, peak, wrong])[0] == CANDIDATE
    assert classify(target, manual, ("memory",), [leak])[0] == CANDIDATE  # more than every gather's buffers
    # the manual scheduler's prefetch has no limit; the overlap scheduler's 0 bounds only its own additions
    assert classify(target, both, ("memory",), [peak])[0] == MISMATCH
    assert classify(target, both, ("memory",), [leak])[0] == CANDIDATE


def test_a_memory_limit_of_0_drawn_alone_leaves_the_other_options_default():
    """The overlap scheduler allows the larger of its two caps, each at its default (1 GB, 5% of the
    peak) where the config leaves it unset: a gb of 0 alone still allows 5%, a ratio of 0 alone 1 GB.
    Three findings of the captured campaign were peak rises under one option at 0."""
    from fsdp_verify.checks.findings import Finding
    from fsdp_verify.targets.inductor import _collective_bytes, _overlap_memory_allowance
    target = get_target("torch-inductor")
    case = on_cuda(target.normalise(Case(capture(ONE_D).forward)))
    room = _collective_bytes(case)
    overlap = (("aten_distributed_optimizations.enable_overlap_scheduling", True),)
    gb = "aten_distributed_optimizations.max_memory_increase_gb"
    ratio = "aten_distributed_optimizations.max_memory_increase_ratio"
    assert _overlap_memory_allowance({gb: 0.0}, 2000) == 100
    assert _overlap_memory_allowance({ratio: 0.0}, 2000) == 1024 ** 3
    assert _overlap_memory_allowance({gb: 0.0, ratio: 0.0}, 2000) == 0

    def peak(before: int, rise: int) -> Finding:
        return Finding("memory", "peak live bytes exceed", rule="peak_memory",
                       details={"original_peak_bytes": before, "rewritten_peak_bytes": before + rise})
    gb_only = replace(case, target_options=(*overlap, (gb, 0.0)))
    ratio_only = replace(case, target_options=(*overlap, (ratio, 0.0)))
    assert classify(target, gb_only, ("memory",), [peak(20 * room, room)])[0] == MISMATCH  # within 5%
    assert classify(target, gb_only, ("memory",), [peak(10 * room, room)])[0] == CANDIDATE  # past 5%
    assert classify(target, ratio_only, ("memory",), [peak(100, room)])[0] == MISMATCH  # within 1 GB
    assert classify(target, ratio_only, ("memory",), [peak(100, room + 1)])[0] == CANDIDATE  # past every gather


def test_every_collective_gives_a_scheduler_room_not_only_gathers():
    """A backward graph holds no gather, but the overlap scheduler moves its reduce-scatters and
    HSDP's all-reduces too: a peak rise within their buffers is its design (a captured campaign's
    false alarm: +48 bytes from two reordered all-reduces, room 0 when only gathers counted)."""
    from fsdp_verify.checks.findings import Finding
    from fsdp_verify.targets.inductor import _collective_bytes
    target = get_target("torch-inductor")
    backward = target.normalise(Case(capture(ONE_D).backward))
    assert not any("all_gather" in n.target for n in backward.graph.nodes)
    room = _collective_bytes(backward)
    assert room > 0
    overlap = replace(backward, target_options=(("aten_distributed_optimizations.enable_overlap_scheduling", True),))
    rise = Finding("memory", "peak live bytes exceed", rule="peak_memory",
                   details={"original_peak_bytes": 256, "rewritten_peak_bytes": 256 + room})
    assert classify(target, overlap, ("memory",), [rise])[0] == MISMATCH


def test_dedup_of_a_tied_weights_reduce_scatters_is_a_contract_mismatch_a_wrong_value_is_not():
    # Issue 32's "reduce-scatter sending fewer elements beside a vanished add": a tied weight's two
    # gradients are reduce-scattered and summed; dedup_reduce_scatters scatters their sum instead.
    from fsdp_verify.checks.findings import Finding
    target = get_target("torch-inductor")
    options = {"dedup_reduce_scatters": True, "bucket_reduce_scatters_fx": "none", "bucket_all_gathers_fx": "none"}
    case = replace(target.normalise(Case(capture(ModelDesc((Layer("linear", 8), Layer("linear", 8, tie=0)))).backward)),
                   target_options=tuple(sorted(options.items())))
    findings, _ = check_all(target.configure(options), case)
    errors = [f for f in findings if f.severity == "error"]
    assert {f.key for f in errors} == {("dependencies", "node_lost"), ("consistency", "volume_changed")}
    assert classify(target, case, ("consistency", "dependencies"), errors)[0] == MISMATCH
    wrong = Finding("numerics", "output differs", rule="output_differs")
    assert classify(target, case, ("consistency", "dependencies", "numerics"), [*errors, wrong])[0] == CANDIDATE
    off = replace(case, target_options=(("dedup_reduce_scatters", False),))
    assert classify(target, off, ("consistency", "dependencies"), errors)[0] == CANDIDATE


def test_excuses_of_lost_nodes_compose_a_folded_cast_beside_a_deduplicated_add():
    # A captured campaign's false alarm: with all-gather bucketing (mixed precision) and dedup on, a
    # tied weight's backward graph loses its pre-gather casts (folded) and its gradients' add
    # (dedup). Each excuse names its own lost nodes; the cast fold once refused to excuse anything
    # beside a lost node it did not own, so the case stayed a candidate.
    target = get_target("torch-inductor")
    options = {"dedup_reduce_scatters": True, "bucket_all_gathers_fx": "all"}
    model = ModelDesc((Layer("linear", 8, checkpoint=True), Layer("linear", 8, tie=0, checkpoint=True)),
                      param_dtype="bfloat16")
    case = replace(target.normalise(Case(capture(model).backward)), target_options=tuple(sorted(options.items())))
    findings, _ = check_all(target.configure(options), case)
    errors = [f for f in findings if f.severity == "error"]
    lost = {name for f in errors if f.key == ("dependencies", "node_lost") for name in f.nodes}
    casts = {name for name in lost if name.startswith("_to_copy")}
    assert casts and lost - casts == {"add"}
    checkers = tuple(sorted({f.checker for f in errors}))
    assert classify(target, case, checkers, errors)[0] == MISMATCH
    # without dedup nothing names the lost add: the folded casts alone do not excuse it
    off = replace(case, target_options=(("bucket_all_gathers_fx", "all"), ("dedup_reduce_scatters", False)))
    assert classify(target, off, checkers, errors)[0] == CANDIDATE


def test_on_cpu_tensors_the_overlap_schedulers_memory_limit_bounds_nothing_the_room_still_does():
    """The pass keeps its memory allowance in its own estimate, which counts non-CPU storages only:
    on a CPU graph it sees a peak of 0 bytes (a captured campaign's false alarm: +616 bytes with
    ``_gb = 0`` alone, allowance 29). There a rise within every collective's buffers is its design;
    past them it stays a candidate."""
    from torch._dynamo.utils import counters
    from fsdp_verify.checks.findings import Finding
    from fsdp_verify.targets.inductor import _collective_bytes
    target = get_target("torch-inductor")
    case = target.normalise(Case(capture(ONE_D).forward))
    options = {"aten_distributed_optimizations.enable_overlap_scheduling": True,
               "aten_distributed_optimizations.max_memory_increase_gb": 0.0,
               "aten_distributed_optimizations.max_memory_increase_ratio": 0.0}
    bounded = replace(case, target_options=tuple(sorted(options.items())))
    counters["inductor"].pop("overlap_original_mem", None)
    check_all(target.configure(options), bounded)
    assert counters["inductor"]["overlap_original_mem"] == 0  # the premise: the pass counts no CPU storage
    room = _collective_bytes(case)

    def rise(by: int) -> Finding:
        return Finding("memory", "peak live bytes exceed", rule="peak_memory",
                       details={"original_peak_bytes": 1000, "rewritten_peak_bytes": 1000 + by})
    assert classify(target, bounded, ("memory",), [rise(room)])[0] == MISMATCH
    assert classify(target, bounded, ("memory",), [rise(room + 1)])[0] == CANDIDATE
    assert classify(target, on_cuda(bounded), ("memory",), [rise(1)])[0] == CANDIDATE  # counted there: no increase


def test_dedup_of_a_weight_used_three_times_sums_a_chain_and_is_one_contract_mismatch():
    # A captured campaign's false alarm: three gradients summed as add(add(rs, rs), rs) collapse into
    # one reduce-scatter; the excuse read only adds of two reduce-scatters, so the outer add was left.
    target = get_target("torch-inductor")
    options = {"dedup_reduce_scatters": True, "bucket_reduce_scatters_fx": "none", "bucket_all_gathers_fx": "none"}
    model = ModelDesc((Layer("linear", 8), Layer("linear", 8, tie=0), Layer("linear", 8, tie=0)))
    case = replace(target.normalise(Case(capture(model).backward)), target_options=tuple(sorted(options.items())))
    findings, _ = check_all(target.configure(options), case)
    errors = [f for f in findings if f.severity == "error"]
    lost = {name for f in errors if f.key == ("dependencies", "node_lost") for name in f.nodes}
    assert len(lost) == 2  # both adds of the chain
    assert classify(target, case, tuple(sorted({f.checker for f in errors})), errors)[0] == MISMATCH
