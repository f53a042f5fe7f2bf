"""graphs_from_modules: real nn.Modules traced, FSDP-tagged, bucketed and run (issue 4.3)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from fsdp_verify.execute.world import simulate
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import MODELS, fsdp_module_graph, graphs_from_modules


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("degree", [2, 8])
def test_module_graph_is_tagged_fused_and_equal(kind, degree):
    case = fsdp_module_graph(kind, degree=degree)
    kinds = {n.meta.get("comm_type") for n in case.graph.nodes}
    assert {"fsdp_all_gather", "fsdp_all_gather_backward", "fsdp_reduce_scatter", "fsdp_reshard_free",
            "fsdp_reshard_free_backward"} <= kinds
    run = run_target(get_target("reference"), case)
    assert run.error is None, run.error
    ag_round, rs_round = run.plans[0]
    assert ag_round.summary["ag_rewrite_candidates"] >= 1 and rs_round.summary["rs_rewrite_candidates"] >= 1
    before, after = simulate(case, run.originals), simulate(case, run.rewritten)
    for rank in before.outputs:
        for x, y in zip(before.outputs[rank], after.outputs[rank]):
            assert torch.equal(x, y)


def test_tied_weights_are_one_parameter_gathered_once_per_phase():
    case = fsdp_module_graph("tied_lm")
    gathers = [n for n in case.graph.nodes if n.meta.get("param_name") == "embed.weight"
               and n.meta.get("comm_type", "").startswith("fsdp_all_gather")]
    assert sorted(n.meta["comm_type"] for n in gathers) == ["fsdp_all_gather", "fsdp_all_gather_backward"]
    assert "head.weight" not in {p.fqn for p in case.graph.params}


@settings(max_examples=8, deadline=None, suppress_health_check=SLOW_OK)
@given(graphs_from_modules())
def test_graphs_from_modules_run_in_the_simulated_world(case):
    run = simulate(case, {r: m for r, m in run_target(get_target("reference"), case).originals.items()})
    assert set(run.outputs) == set(case.graph.world())
