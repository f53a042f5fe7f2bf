"""A target's run leaves the global random generators as it found them: a draw is the `generators`
finding, unless the target's real callers restore that generator (inductor's compile restores torch's)."""

from __future__ import annotations

import random
import sys

import pytest
import torch

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.graph.examples import mlp_graph
from fsdp_verify.model.case import Case
from fsdp_verify.report.tally import proofs_of
from fsdp_verify.targets import get_target
from fsdp_verify.targets.generators import Generator, drawn, snapshot
from helpers.cases import two_block_case


@pytest.mark.parametrize("draw,name", [(lambda: torch.rand(2), Generator.TORCH),
                                       (lambda: torch.manual_seed(7), Generator.TORCH),
                                       (lambda: random.random(), Generator.PYTHON),
                                       (lambda: random.seed(3), Generator.PYTHON)])
def test_a_draw_or_a_reseed_moves_its_generator_alone(draw, name):
    before = snapshot()
    assert drawn(before) == ()  # reading the states draws nothing
    state, py_state = torch.random.get_rng_state(), random.getstate()
    try:
        draw()
        assert drawn(before) == (name,)
    finally:
        torch.random.set_rng_state(state)
        random.setstate(py_state)
    assert drawn(before) == ()


def test_numpys_generator_is_watched_once_numpy_is_loaded():
    numpy = pytest.importorskip("numpy")
    assert "numpy" in sys.modules
    before = snapshot()
    state = numpy.random.get_state()
    try:
        numpy.random.random()
        assert drawn(before) == (Generator.NUMPY,)
    finally:
        numpy.random.set_state(state)


def test_a_planner_that_draws_is_found_and_the_reference_is_clean():
    case = two_block_case()
    assert check_all(get_target("reference"), case)[0] == []
    findings, ctx = check_all(get_target("mutant:estimates_with_random_inputs"), case)
    assert [f.key for f in findings] == [("generators", "global_generator_drawn")]
    assert findings[0].details == {"generators": ["torch"]} and ctx.run.generators_drawn == ("torch",)


def test_a_draw_the_targets_callers_restore_is_counted_not_found():
    """Inductor's post-grad passes run inside compile_fx's ``preserve_rng_state()``: torch's draw is no
    bug there, Python's is (no compile restores it)."""
    assert get_target("torch-inductor").restored_generators == ("torch", "torch.cuda")
    case = Case(mlp_graph(device="cpu"))
    findings, ctx = check_all(get_target("fx-pass:helpers.torch_passes:draws_from_torch"), case)
    assert findings == [] and ctx.run.generators_drawn == ("torch",)
    assert proofs_of(ctx.metrics)["generators_excused"] == 1
    findings, ctx = check_all(get_target("fx-pass:helpers.torch_passes:draws_from_python"), case)
    assert [f.key for f in findings] == [("generators", "global_generator_drawn")]
    assert findings[0].details == {"generators": ["random"]}
