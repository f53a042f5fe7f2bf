"""Random ops in a simulated world draw from each rank's own generator: a rank's draws repeat in
every world that runs its random ops in the same order, whatever the lockstep interleaving, and
the run leaves torch's global generator as it found it."""

from __future__ import annotations

import torch
from torch import fx

from fsdp_verify.execute.simulated import draws, rank_seed, run_world

aten = torch.ops.aten


def _two_draws(swapped: bool = False, extra: int = 0) -> fx.GraphModule:
    """``rand([2]) * 2 + rand([2])``, the two draws in graph order or swapped; ``extra`` more
    ordinary nodes ahead of them (another interleaving of the ranks)."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    for _ in range(extra):
        x = graph.call_function(aten.neg.default, (x,))
    draws_ = [graph.call_function(aten.rand.default, ([2],), {"dtype": torch.float32}) for _ in range(2)]
    first, second = reversed(draws_) if swapped else draws_
    scaled = graph.call_function(aten.mul.Tensor, (first, 2.0))
    graph.output((graph.call_function(aten.add.Tensor, (scaled, second)), x))
    return fx.GraphModule(torch.nn.Module(), graph)


def _run(modules: dict[int, fx.GraphModule]) -> dict[int, list]:
    inputs = {rank: [torch.ones(2)] for rank in modules}
    return run_world(modules, inputs, lambda rank, group: (0, 1)).outputs


def test_draws_repeat_per_rank_whatever_the_interleaving():
    plain = _run({0: _two_draws(), 1: _two_draws()})
    staggered = _run({0: _two_draws(extra=3), 1: _two_draws()})
    for rank in (0, 1):
        assert torch.equal(plain[rank][0], staggered[rank][0])
    assert not torch.equal(plain[0][0], plain[1][0]), "each rank draws its own numbers"
    expected = torch.Generator().manual_seed(rank_seed(1))
    first, second = torch.rand(2, generator=expected), torch.rand(2, generator=expected)
    assert torch.equal(plain[1][0], first * 2 + second)


def test_a_rewrite_that_reorders_two_draws_changes_what_the_rank_computes():
    plain = _run({0: _two_draws(), 1: _two_draws()})
    swapped = _run({0: _two_draws(), 1: _two_draws(swapped=True)})
    assert torch.equal(plain[0][0], swapped[0][0])
    assert not torch.equal(plain[1][0], swapped[1][0])


def test_a_world_run_leaves_the_global_generator_as_it_found_it():
    torch.manual_seed(7)
    before = torch.get_rng_state()
    _run({0: _two_draws(), 1: _two_draws()})
    assert torch.equal(torch.get_rng_state(), before)


def test_random_ops_are_told_by_torch_s_tag():
    assert draws(aten.rand.default) and draws(aten.native_dropout.default) and draws(aten.bernoulli_)
    assert not draws(aten.mul.Tensor) and not draws(aten.empty.memory_format) and not draws(max)
