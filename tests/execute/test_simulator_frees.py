"""The simulator never crashes on what a target does with storage: frees inserted anywhere, on
any rank, give a simulation error that names the rank, the free and the reader, or a clean run;
never a signal, never a read of freed memory."""

from __future__ import annotations


import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_verify.engine.run_case import check_all, run_target
from fsdp_verify.execute.simulated import FreedInFlight, ReadAfterFree, SimulationError
from fsdp_verify.execute.world import simulate
from fsdp_verify.graph import collectives
from fsdp_verify.graph.ops import _free_tensor_storage
from fsdp_verify.strategies import cases
from fsdp_verify.targets import get_target
from fsdp_verify.targets.mutants import MUTANTS
from helpers.cases import two_block_case

TRIED = {"frees": 0, "runs": 0, "errors": 0}


def _insert_frees(module: torch.fx.GraphModule, picks: list[float]) -> int:
    """A free of a tensor-producing node after each picked position (fractions of the graph)."""
    nodes = [n for n in module.graph.nodes if n.op in ("call_function", "placeholder")
             and not collectives.is_launch(n.target) and n.target is not _free_tensor_storage]
    inserted = 0
    for pick in picks:
        if not nodes:
            break
        target = nodes[int(pick * len(nodes)) % len(nodes)]
        later = [n for n in module.graph.nodes if n.op != "output"]
        anchor = later[min(len(later) - 1, later.index(target) + 1 + int(pick * 7) % 5)]
        with module.graph.inserting_after(anchor if anchor.op != "placeholder" else target):
            module.graph.call_function(_free_tensor_storage, (target,))
        inserted += 1
    module.graph.lint()
    module.recompile()
    return inserted


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(case=cases("tiny"), rewrite=st.booleans(), rank_pick=st.integers(0, 7),
       picks=st.lists(st.floats(0, 0.999), min_size=1, max_size=4))
def test_random_frees_give_simulation_errors_never_crashes(case, rewrite, rank_pick, picks):
    run = run_target(get_target("reference"), case)
    modules = run.rewritten if rewrite and run.error is None and run.rewritten else run.originals
    rank = sorted(modules)[rank_pick % len(modules)]
    modules = dict(modules)
    modules[rank] = torch.fx.GraphModule(modules[rank], modules[rank].graph.__deepcopy__())
    TRIED["frees"] += _insert_frees(modules[rank], picks)
    TRIED["runs"] += 1
    try:
        simulate(case, modules)
    except SimulationError as exc:  # the finding; anything else (or a signal) fails the test
        TRIED["errors"] += 1
        if isinstance(exc, ReadAfterFree):
            assert exc.rank == rank and f"rank {rank}" in str(exc)


def test_a_send_buffer_freed_before_the_peers_launch_is_named_not_read():
    """Rank 0 frees its fused all-gather's send buffer after the launch: the world must not
    concatenate the freed storage when rank 1 launches (it once read freed memory: SIGSEGV)."""
    case = two_block_case()
    target = MUTANTS["send_buffer_freed_early"]
    run = run_target(target, case)
    with pytest.raises(FreedInFlight) as caught:
        simulate(case, run.rewritten)
    assert caught.value.rank == 0 and "frees storage that collective" in str(caught.value)


@pytest.mark.parametrize("deadline", [None, 60.0], ids=["in-process", "forked child"])
def test_the_planted_early_free_is_a_numerics_finding_in_process_and_in_the_child(deadline):
    case = two_block_case()
    findings, _ = check_all(MUTANTS["send_buffer_freed_early"], case, deadline=deadline)
    assert any(f.key == ("numerics", "read_after_free") and "rank 0" in f.message for f in findings), findings
