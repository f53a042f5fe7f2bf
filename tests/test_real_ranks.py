

def test_collectives_staged_through_cpu_give_the_same_bits():
    # The path `--ranks real` takes with fewer GPUs than ranks (CUDA compute, gloo collectives on CPU
    # copies), run here on CPU tensors.
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.checks.collectives import check_collectives
    from fsdp_verify.execute.distributed import RankPool
    from fsdp_verify.orchestrate import run_target
    from real_targets import staged_handler
    target = get_target("reference")
    with RankPool(2, backend="gloo", deadline=20, handler=staged_handler) as pool:
        assert check_collectives(CheckContext(run_target(target, two_block_case()), target), pool) == []
