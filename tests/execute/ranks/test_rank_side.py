"""What a rank does with its collectives: staged through CPU where the backend needs it, with
the same bits."""

from __future__ import annotations

import torch

from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def test_collectives_staged_through_cpu_give_the_same_bits():
    # The path `--ranks real` takes with fewer GPUs than ranks (CUDA compute, gloo collectives on CPU
    # copies), run here on CPU tensors.
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.execute.ranks.collectives import check_collectives
    from fsdp_verify.execute.ranks.pool import RankPool
    from fsdp_verify.engine.run_case import run_target
    from helpers.rank_targets import staged_handler
    target = get_target("reference")
    with RankPool(2, backend="gloo", deadline=20, handler=staged_handler) as pool:
        assert check_collectives(CheckContext(run_target(target, two_block_case()), target), pool) == []


def test_coalesced_and_out_collectives_staged_through_cpu_give_the_same_bits():
    from fsdp_verify.execute.ranks.pool import RankPool
    from helpers.rank_targets import staged_variants_handler
    with RankPool(2, backend="gloo", deadline=20, handler=staged_variants_handler) as pool:
        results = pool.run({rank: "variants" for rank in range(2)})
    for rank in range(2):
        for direct, staged, out in results[rank]:
            direct, staged = (direct, staged) if isinstance(direct, list) else ([direct], [staged])
            assert len(direct) == len(staged) and all(torch.equal(a, b) for a, b in zip(direct, staged))
            if out is not None:
                assert torch.equal(out, direct[0])  # the caller's out= holds the result
