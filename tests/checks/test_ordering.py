"""The ordering oracle: what it accepts (independent compute reordered inside an effect interval)
and the z3 schedule model on hand-built programs (both synchronisation models, cut segments)."""

from __future__ import annotations

from collections import Counter

from fsdp_verify.checks.graph_facts import aliases_input, has_effect, is_launch, is_wait
from fsdp_verify.checks.schedule import Event, find_deadlock, lockstep
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets.reference import ReferenceTarget
from helpers.cases import two_block_case


class ReorderingTarget(ReferenceTarget):
    """The reference rewrite, then a scheduler's legal move: two adjacent independent computations
    of one effect interval swap places."""

    name = "test:reordering"
    swapped: list = []

    def rewrite(self, case, modules):
        plans = super().rewrite(case, modules)
        for module in modules.values():
            nodes = list(module.graph.nodes)
            for a, b in zip(nodes, nodes[1:]):
                plain = all(n.op == "call_function" and not has_effect(n) and not aliases_input(n)
                            and not is_launch(n) and not is_wait(n) for n in (a, b))
                if plain and a not in b.all_input_nodes:
                    a.prepend(b)
                    self.swapped.append((a.name, b.name))
                    break
            module.graph.lint()
            module.recompile()
        return plans


def test_independent_compute_may_reorder_inside_an_effect_interval():
    target = ReorderingTarget()
    findings, _ = check_all(target, two_block_case())
    assert target.swapped, "the test graph has no independent neighbours to swap"
    assert findings == []


def _program(rank_events: list[tuple[str, str, bool]], ranks=(0, 1)) -> list[Event]:
    counters: dict[str, int] = {}
    events, slots = [], {}
    for node, group, wait in rank_events:
        if not wait:
            slots[node] = (group, ranks, counters.get(group, 0))
            counters[group] = slots[node][2] + 1
        events.append(Event(f"{node}{'_wait' if wait else ''}", slots[node], wait))
    return events


def test_agreeing_programs_have_a_schedule():
    same = [("a", "A", False), ("a", "A", True), ("b", "B", False), ("b", "B", True)]
    proofs = Counter()
    assert find_deadlock({0: _program(same), 1: _program(same)}, proofs) is None
    assert proofs == {"lockstep": 1}  # the witness: every rank in lockstep


def test_programs_that_differ_but_have_a_schedule_are_proved_by_z3():
    rank0 = [("a", "A", False), ("a", "A", True), ("b", "B", False), ("b", "B", True)]
    rank1 = [("a", "A", False), ("b", "B", False), ("a", "A", True), ("b", "B", True)]
    proofs = Counter()
    assert find_deadlock({0: _program(rank0), 1: _program(rank1)}, proofs) is None
    assert proofs == {"z3": 1}


def test_the_lockstep_witness_needs_every_slot_at_one_position_on_its_members():
    rank0 = [("a", "A", False), ("a", "A", True), ("b", "B", False), ("b", "B", True)]
    swapped_kind = [("a", "A", False), ("b", "B", False), ("a", "A", True), ("b", "B", True)]
    programs = {0: _program(rank0), 1: _program(swapped_kind)}
    assert not lockstep(programs, {0: 0, 1: 0}, {0: 4, 1: 4})
    assert not lockstep({0: _program(rank0), 1: _program(rank0[:2])}, {0: 0, 1: 0}, {0: 4, 1: 2})
    # ranks in disjoint subgroups of one group name are in lockstep with their own subgroup only
    sub = {0: _program(rank0, ranks=(0, 1)), 1: _program(rank0, ranks=(0, 1)), 2: _program(rank0, ranks=(2, 3)),
           3: _program(rank0, ranks=(2, 3))}
    assert lockstep(sub, dict.fromkeys(sub, 0), dict.fromkeys(sub, 4))


def test_a_cycle_of_blocking_waits_is_a_deadlock_under_gloo():
    rank0 = [("a", "A", False), ("a", "A", True), ("b", "B", False), ("b", "B", True)]
    rank1 = [("b", "B", False), ("b", "B", True), ("a", "A", False), ("a", "A", True)]
    found = find_deadlock({0: _program(rank0), 1: _program(rank1)})
    assert found is not None and found.model == "gloo" and found.ranks == (0, 1)
    assert "rank 0 waits at a_wait (A #0) until rank 1 launches a" in found.describe()


def test_an_order_without_a_wait_cycle_breaks_only_the_nccl_rule():
    rank0 = [("a", "A", False), ("b", "B", False), ("a", "A", True), ("b", "B", True)]
    rank1 = [("b", "B", False), ("a", "A", False), ("a", "A", True), ("b", "B", True)]
    found = find_deadlock({0: _program(rank0), 1: _program(rank1)})
    assert found is not None and found.model == "nccl"
    assert "together with" in found.describe()


def test_a_late_cycle_in_a_long_program_is_found_across_segment_cuts():
    prefix = [(f"x{i}", "A", w) for i in range(300) for w in (False, True)]
    rank0 = prefix + [("a", "A", False), ("a", "A", True), ("b", "B", False), ("b", "B", True)]
    rank1 = prefix + [("b", "B", False), ("b", "B", True), ("a", "A", False), ("a", "A", True)]
    found = find_deadlock({0: _program(rank0), 1: _program(rank1)})
    assert found is not None and found.model == "gloo"
    assert set(found.nodes) <= {"a", "a_wait", "b", "b_wait"}


def test_the_identity_rewrite_maps_every_node_to_itself():
    from fsdp_verify.checks.refinement import refine
    from fsdp_verify.execute.world import build_world
    module = build_world(two_block_case())[0]
    ref = refine(module, module)
    assert ref.unmapped == [] and ref.members == {}
    assert ref.image == {n.name: i for i, n in enumerate(module.graph.nodes)}


def test_the_rank_fingerprint_covers_every_meta_key_the_rules_read():
    # Ranks with equal fingerprints share one verdict: a rule reading a meta key the fingerprint
    # leaves out would judge one rank for another.
    import re
    from pathlib import Path

    from fsdp_verify.checks import ordering
    checks = Path(ordering.__file__).parent
    read = set()
    for name in ("ordering.py", "refinement.py", "graph_facts.py", "schedule.py"):
        read |= set(re.findall(r"meta(?:\.get\(|\[)\"([A-Za-z_]+)\"", (checks / name).read_text()))
    assert read and read <= set(ordering.READ_META) | set(ordering.INTERNED_META), read


def test_cuda_ranks_share_a_fingerprint_but_a_renamed_bucket_tag_does_not():
    from fsdp_verify.checks.ordering import _fingerprint
    from fsdp_verify.execute.world import build_world
    case = two_block_case()
    modules = build_world(case)
    ReferenceTarget().rewrite(case, modules)
    first, second = (modules[rank] for rank in sorted(modules)[:2])
    assert any("cuda:1" in str(n.meta.get("fsdp_bucket_spec")) for n in second.graph.nodes)
    assert _fingerprint(first) == _fingerprint(second)  # device and signature-bearing ids aside
    tagged = next(n for n in second.graph.nodes if n.meta.get("fsdp_reduce_scatter_prepare"))
    tagged.meta["fsdp_reduce_scatter_prepare"] = "another bucket"  # no longer its launch's id
    assert _fingerprint(first) != _fingerprint(second)


def test_a_window_across_a_collective_is_named_so_where_a_node_of_the_other_phase_lies_nearer():
    # A post-grad pass is excused a window across the phase boundary (it never receives a joint
    # graph); rule 3 named only the first blocker in the span, so a window that crossed a backward
    # node and then a reduce-scatter read as the phase boundary alone, and was excused.
    from fsdp_verify.checks.findings import Finding
    from fsdp_verify.checks.ordering import _Blocking, _about_phases
    from fsdp_verify.checks.refinement import Skeleton
    from fsdp_verify.execute.world import build_world
    from fsdp_verify.graph.compose import Composer
    from fsdp_verify.model.case import Case
    c = Composer({"fsdp": (0, 1)}, overload="default")
    for i in range(2):
        c.param(f"w{i}", (4,), state_idx=i, device="cpu")
    _, first = c.all_gather("w0")
    late = c.call("aten.mul.Tensor", first, 2.0, backward=True)  # the other phase, nearer
    _, scattered = c.reduce_scatter(late, "w0")  # then a collective
    _, second = c.all_gather("w1")
    module = build_world(Case(c.finish([scattered, c.call("aten.add.Tensor", first, second)])))[0]
    nodes = {n.name: n for n in module.graph.nodes}
    members = [nodes[n] for n in nodes if n.startswith("ag_")]
    blocking = _Blocking(Skeleton.of(module))
    assert _Blocking.kind(blocking.window(members, False)[2]) == "other-phase node"
    assert _Blocking.kind(blocking.window(members, False, hard=True)[2]) == "collective"
    assert _about_phases(Finding("ordering", "", rule="fused_window", details={"blocker": "other-phase node"}))
    assert not _about_phases(Finding("ordering", "", rule="fused_window", details={"blocker": "collective"}))
