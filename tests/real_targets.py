

def staged_handler(job, ctx):
    """The pool's default job with collectives staged through CPU copies, as gloo with CUDA compute
    runs them (so that path is tested on a machine without a GPU)."""
    from fsdp_verify.execute.distributed import _default_handler
    ctx.staged = True
    return _default_handler(job, ctx)
