"""Targets for the real-mode tests, loaded by ``module:callable`` inside the rank processes."""

from __future__ import annotations

import os
import time

from fsdp_verify.targets.reference import ReferenceTarget


class Slow(ReferenceTarget):
    """The reference target, three seconds late on every rank (time to kill a rank mid-case)."""

    name = "slow"

    def rewrite(self, case, modules):
        time.sleep(3)
        return super().rewrite(case, modules)


class OddRankRaises(ReferenceTarget):
    """Raises on odd rank processes only (``RANK`` from the environment): a rank-dependent outcome."""

    name = "odd_rank_raises"

    def rewrite(self, case, modules):
        if int(os.environ.get("RANK", "0")) % 2:
            raise RuntimeError("this rank's environment breaks the planner")
        return super().rewrite(case, modules)


class OddRankExits(ReferenceTarget):
    """Kills its own process on odd ranks (a native crash inside a rank)."""

    name = "odd_rank_exits"

    def rewrite(self, case, modules):
        if int(os.environ.get("RANK", "0")) % 2:
            os._exit(3)
        return super().rewrite(case, modules)


def staged_handler(job, ctx):
    """The pool's default job with collectives staged through CPU copies, as gloo with CUDA compute
    runs them (so that path is tested on a machine without a GPU)."""
    from fsdp_verify.execute.ranks.pool import _default_handler
    ctx.staged = True
    return _default_handler(job, ctx)


class EvenRankExtraRound(ReferenceTarget):
    """Even rank processes enter one more digest-exchange round after planning (their peers have
    left for the final exchange): the ranks run different numbers of rounds."""

    name = "even_rank_extra_round"

    def rewrite(self, case, modules):
        plans = super().rewrite(case, modules)
        if int(os.environ.get("RANK", "0")) % 2 == 0:
            from fsdp_verify.reference import driver
            driver.exchange_and_validate({})
        return plans


class OddRankExtraPlan(ReferenceTarget):
    """Odd rank processes return their last plan twice: the ranks return different numbers of plans."""

    name = "odd_rank_extra_plan"

    def rewrite(self, case, modules):
        plans = super().rewrite(case, modules)
        if int(os.environ.get("RANK", "0")) % 2:
            plans = {rank: [*found, *found[-1:]] for rank, found in plans.items()}
        return plans


class NoDigests(ReferenceTarget):
    """The reference rewrite, returning plans that carry no ``to_dict()`` (as torch-inductor's do)."""

    name = "no_digests"

    def rewrite(self, case, modules):
        return {rank: [object() for _ in found] for rank, found in super().rewrite(case, modules).items()}


def staged_variants_handler(job, ctx):
    """The ``*_coalesced`` and ``*_out`` launches, each run directly and staged through CPU copies
    (as gloo with CUDA compute runs them), on this rank: both results, for the test to compare."""
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from fsdp_verify.execute.ranks.pool import _ensure_groups, _staged_collective
    c10d = torch.ops._c10d_functional
    _ensure_groups({"pair": [[0, 1]]}, ctx.rank, ctx.cache)
    x = torch.arange(6, dtype=torch.float32) + 10 * ctx.rank
    launches = [(c10d.all_gather_into_tensor_coalesced.default, ([x, x[:2]], 2, "pair"), {}),
                (c10d.reduce_scatter_tensor_coalesced.default, ([x, x[:4]], "sum", 2, "pair"), {}),
                (c10d.all_reduce_coalesced.default, ([x, x[:3]], "sum", "pair"), {}),
                (c10d.all_gather_into_tensor_out.default, (x, 2, "pair"), {"out": torch.zeros(12)})]
    results = []
    for target, args, kwargs in launches:
        direct_kwargs = {k: v.clone() for k, v in kwargs.items()}
        direct = target(*args, **direct_kwargs)
        direct = [c10d.wait_tensor(t) for t in direct] if isinstance(direct, list) else c10d.wait_tensor(direct)
        node = SimpleNamespace(target=target)
        staged = _staged_collective(SimpleNamespace(fetch_args_kwargs_from_env=lambda n: (args, kwargs)), node)
        results.append((direct, staged, kwargs.get("out")))
    dist.barrier()
    return results


def environment_handler(job, ctx):
    """A rank's value of the environment variable ``job`` and its parent's pid."""
    import os
    return os.environ.get(job), os.getppid()


def tqdm_lock_handler(job, ctx):
    """The class of the lock tqdm uses in this rank."""
    from tqdm import tqdm
    return type(tqdm.get_lock()).__module__


def sleeping_handler(job, ctx):
    """Sleeps ``job`` seconds, then returns this rank's pid."""
    import os
    import time
    time.sleep(job)
    return os.getpid()


def held_on_rank_one_handler(job, ctx):
    """The warm pool's handler, with a stand-in for inductor's bucketing pass module loaded on rank 1
    only (planted: a rank that is not fresh beside one that is)."""
    import sys
    import types

    from fsdp_verify.execute.compiled.drawn_ranks import run_warm_job
    if ctx.rank == 1:
        sys.modules["torch._inductor.fx_passes.bucketing"] = types.ModuleType("stand-in")
    try:
        return run_warm_job(job, ctx)
    finally:
        if ctx.rank == 1:
            del sys.modules["torch._inductor.fx_passes.bucketing"]


def server_killing_handler(job, ctx):
    """Rank 0 kills its parent (a forked rank's is the fork server), then every rank sleeps ``job``
    seconds and returns its pid (planted: the server lost during a case)."""
    import os
    import signal
    import time
    if job and ctx.rank == 0:
        os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(job)
    return os.getpid()
