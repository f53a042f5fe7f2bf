"""End to end on N real ranks: a drawn model on its own mesh (4 ranks for ``(4,)`` and ``(2, 2)``),
one gloo rank process per rank, DTensor parameters as SimpleFSDP holds them (uneven shards and
HSDP included), compiled by inductor under each configuration; every rank's output and gradient
shards are compared bit for bit with the unbucketed compile (the verdict) and with eager (reported).

The ranks are a ``RankPool`` with this module's handler, kept for a whole run (``RankSweeper``), and
forked from the warm path's fork server, which has imported torch, dynamo and ``compile_fx`` once:
a spawned rank paid those seconds itself, every rank at once. Each rank runs every configuration of
a model in one job.

A configuration drawn with a warm compile cache is compiled cold by those ranks into a cache folder
that all of them share, as the local ranks of one host share inductor's default folder; then a
fresh pool of ranks (fresh processes from the same server, ``warm.py`` says why they are as fresh as
a user's warm start: nothing a cold compile registered) loads it. Why shared: a cache key that
leaves out what differs between ranks (a DTensor's local shape) only shows when one rank can load
what another stored (F14). Why one fresh pool per configuration: a miss compiles,
and what that compile leaves behind would hide the next configuration's warm-path bug (F11).
"""

from __future__ import annotations

import math
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from fsdp_verify.execute.compiled import blas
from fsdp_verify.execute.compiled.builtin import plain, tensors
from fsdp_verify.execute.compiled.drawn import (OFF, SCALAR, BaselineFailed, Outputs, first_difference, GRAD,
                                                is_gradient, vector_bound, vector_order, within_ulps)
from fsdp_verify.execute.compiled.warm import (cache_counts, fork_server, held_passes, link_kernel_caches,
                                                not_fresh)
from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankContext, RankFailure, RankPool, ServerLost

START_TIMEOUT = 600.0  # the whole sweep of one model, every rank
WARM_NOT_LOADED = "the cold compile failed, so there was nothing to load"
COLLECTIVE_TIMEOUT = 120.0  # a rank waiting on peers that never join (one rank's compile failed) gives up


@dataclass
class SweepJob:
    """One model and the configurations each rank compiles it under; ``caches`` names, by the
    configuration's index, the cache folder every rank compiles a warm configuration into."""

    desc: dict
    configs: list
    seed: int
    caches: dict = field(default_factory=dict)
    scalar: bool = False  # a re-judgement: the baseline with scalar kernels too, and no eager step


@dataclass
class WarmJob:
    """One warm configuration, loaded by fresh ranks from the folder its cold compile filled."""

    desc: dict
    options: dict
    seed: int
    folder: str
    # The meshes the cold ranks had made, in order: the fresh ranks make them first, so each group
    # gets the name it had there (a compiled graph names its groups; a restarted job makes its
    # groups in its own order, the same each time, and the harness's pool is one such job).
    meshes: list = field(default_factory=list)


def _mesh(shape: tuple, ctx: RankContext) -> Any:
    """The device mesh of ``shape`` over the pool's world, made once per shape: every rank gets the
    same jobs in the same order, so the groups a new mesh creates are created in step."""
    from torch.distributed.device_mesh import init_device_mesh

    from fsdp_verify.capture.trace import mesh_dim_names
    key = ("device mesh", tuple(shape))
    if key not in ctx.cache:
        ctx.cache[key] = init_device_mesh("cpu", tuple(shape), mesh_dim_names=mesh_dim_names(tuple(shape)))
    return ctx.cache[key]


def _meshes(ctx: RankContext) -> list[list[int]]:
    """The mesh shapes this rank made, in the order it made them."""
    return [list(key[1]) for key in ctx.cache if isinstance(key, tuple) and key[0] == "device mesh"]


def _step(desc_json: dict, seed: int, ctx: RankContext, options: Optional[dict],
          folder: Optional[str] = None) -> tuple[Outputs, dict]:
    """One step of the model on this rank: eager (``options`` None) or compiled under ``options``,
    with inductor's cache in ``folder`` when given (off otherwise); its outputs and launches."""
    from torch import nn
    from torch.distributed.tensor import distribute_tensor

    from fsdp_verify.capture.model import SimpleFSDPModel, desc_from_json, dtensor_gather, example_input, param_shapes
    from fsdp_verify.capture.trace import placements
    from fsdp_verify.execute.compiled.drawn import inductor
    desc = desc_from_json(desc_json)
    mesh, where = _mesh(desc.mesh, ctx), placements(desc)
    gen = torch.Generator().manual_seed(seed)  # the same full values on every rank
    params = {fqn: nn.Parameter(distribute_tensor(torch.randn(shape, generator=gen), mesh, where[fqn]))
              for fqn, shape in param_shapes(desc).items()}
    built, launches = SimpleFSDPModel(desc, params, dtensor_gather(desc, where)), {}
    x = example_input(desc, seed + ctx.rank)  # each rank its own batch, as data parallelism has it
    if options is None:
        return _outputs(built, built(x)), launches
    with _cache_folder(folder), inductor(options, launches, cache=folder is not None):
        compiled = torch.compile(built, backend="inductor", fullgraph=True, dynamic=bool(options.get("dynamic")))
        return _outputs(built, compiled(x)), launches


def run_sweep_job(job: SweepJob, ctx: RankContext) -> dict:
    """The pool's handler: eager, the unbucketed compile and every configuration of ``job`` on this
    rank (``inductor`` resets dynamo before each compile, so no model sees another's cache); a warm
    configuration compiles cold into its shared folder, storing what the warm pool loads."""
    import torch.distributed as dist
    state = blas.pin().value  # before this rank's first product (its environment has ``blas.ENV``)
    eager = {} if job.scalar else plain(_step(job.desc, job.seed, ctx, None)[0])
    baseline = {**OFF, SCALAR: True} if job.scalar else OFF
    runs: dict[str, Any] = {"blas": state, "eager": eager,
                            "baseline": plain(_step(job.desc, job.seed, ctx, baseline)[0]), "configs": []}
    for index, options in enumerate(job.configs):
        try:
            outputs, launches = _step(job.desc, job.seed, ctx, options, job.caches.get(index))
            runs["configs"].append({"outputs": plain(outputs), "launches": launches, "error": None})
        except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile is a finding
            runs["configs"].append({"outputs": {}, "launches": {}, "error": _named(exc)})
        dist.barrier()
    runs["meshes"] = _meshes(ctx)
    return runs


def run_warm_job(job: WarmJob, ctx: RankContext) -> dict:
    """The warm pool's handler: one step of the configuration compiled with the cache in
    ``job.folder``, and this rank's cache hits and misses. A failure raises: the pool names the
    rank, and its peers, left in a collective, are the pool's to reap."""
    import torch.distributed as dist
    state = blas.pin().value
    held = held_passes(sys.modules)
    # The pass's ops registered: a load would find what a user's warm start lacks. Ranks agree first,
    # so a rank that holds one never leaves its peers loading into collectives it will not join.
    anywhere = torch.tensor([len(held)])
    ctx.record("all_reduce: held pass modules")
    dist.all_reduce(anywhere, op=dist.ReduceOp.MAX)
    if int(anywhere):
        return {"held_passes": held, "blas": state}
    for shape in job.meshes:
        _mesh(tuple(shape), ctx)
    outputs, _ = _step(job.desc, job.seed, ctx, job.options, job.folder)
    hits, misses = cache_counts()
    return {"outputs": plain(outputs), "hits": hits, "misses": misses, "blas": state}


def _said(exc: RankFailure) -> str:
    """Each failed rank's own last line (its peers only lost it), else the pool's message."""
    said = [f"rank {rank}: {(exc.errors[rank].strip().splitlines() or [''])[-1]}" for rank in sorted(exc.errors)]
    return "; ".join(said) or str(exc)


def _named(exc: BaseException) -> str:
    message = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {message[0] if message else ''}"


def _cache_folder(folder: Optional[str]) -> Any:
    """Inductor's cache in ``folder`` (its in-memory caches cleared on entry and exit), or as it is."""
    import contextlib

    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    return temporary_cache_dir(folder) if folder else contextlib.nullcontext()


def _outputs(model: Any, out: torch.Tensor) -> Outputs:
    out.sum().backward()
    found = {"output": out.detach().clone()}
    for fqn, key in model.names.items():
        grad = model.params[key].grad
        if grad is not None:
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            found[f"{GRAD}{fqn}"] = local.detach().clone()
    return found


def _blas_env(rank: int) -> dict[str, str]:
    """Every rank's matrix products independent of alignment (``blas.py`` says why)."""
    return dict(blas.ENV)


class RankSweeper:
    """Rank pools for end-to-end sweeps, one per world size, kept until closed."""

    def __init__(self, timeout: float = START_TIMEOUT) -> None:
        self.timeout = timeout
        self.pools: dict[int, RankPool] = {}

    def __enter__(self) -> "RankSweeper":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop and reap every rank."""
        for pool in self.pools.values():
            pool.close()
        self.pools.clear()

    def pool(self, world: int) -> RankPool:
        """The started pool of ``world`` ranks."""
        # forked from the warm path's server: torch, dynamo and compile_fx imported once, not per rank.
        # Asked each time, so a server that died is restarted as ``fork_server`` starts it before the
        # pool restarts its ranks from it.
        context = fork_server()
        if world not in self.pools:
            pool = RankPool(world, backend="gloo", deadline=self.timeout, handler=run_sweep_job,
                            collective_timeout=COLLECTIVE_TIMEOUT, env=_blas_env, context=context)
            pool.start()
            self.pools[world] = pool
        return self.pools[world]

    def sweep(self, desc: Any, configs: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
        """One report per configuration (as ``endtoend.sweep``), judged on every rank of ``desc``'s
        mesh; a difference names the rank and the first differing tensor. A rank that dies, hangs or
        raises is the configuration's error (a finding, naming the ranks); when the eager step or
        the unbucketed compile is what fails, the model cannot be judged (``BaselineFailed``). A
        pool that cannot start is the harness's RuntimeError."""
        world = math.prod(desc.mesh)
        warm = [index for index, options in enumerate(configs) if options.get("compile_cache") == "warm"]
        with tempfile.TemporaryDirectory(prefix="fsdp-verify-rank-caches-") as root:
            caches = {index: _fresh_folder(root, index) for index in warm}
            try:
                results = self._run(world, SweepJob(desc.to_json(), list(configs), seed, caches))
            except RankFailure:  # the pool restarted itself; which configuration failed is found below
                for folder in caches.values():  # what the failed sweep stored would be loaded, not compiled
                    _renewed(folder)
                results = self._one_by_one(desc, configs, seed, caches, world)
            made = results[0].get("meshes", [])
            loads = {index: self._load(WarmJob(desc.to_json(), configs[index], seed, caches[index], made), world)
                     for index in warm if not any(results[r]["configs"][index]["error"] for r in range(world))}
        from fsdp_verify.capture.model import dtype
        order = OrderFreedom(dtype(desc.reduce_dtype), max(desc.mesh))
        compute = dtype(desc.param_dtype)
        differing = [index for index in range(len(configs)) if _cold_differs(results, index, world, order)
                     and _within_bound(results, index, world, order, compute)]
        rejudged = self._scalar(desc, configs, differing, seed, world) if differing else {}
        return _reports(results, configs, world, loads, order, Rejudged(rejudged, compute))

    def _scalar(self, desc: Any, configs: list[dict[str, Any]], indexes: list[int], seed: int,
                world: int) -> dict[int, Any]:
        """The configurations at ``indexes`` and the unbucketed compile again, with scalar kernels
        (``drawn.vector_order``), in one job: by index, each rank's baseline and run, or why the
        re-judgement failed (a string: the differences then stand)."""
        job = SweepJob(desc.to_json(), [{**configs[index], SCALAR: True, "compile_cache": "cold"} for index in indexes],
                       seed, scalar=True)
        try:
            results = self._run(world, job)
        except RankFailure as exc:
            return {index: f"failed: {exc.kind} on ranks {list(exc.ranks)}: {_said(exc)}" for index in indexes}
        return {index: {rank: {"baseline": results[rank]["baseline"], "run": results[rank]["configs"][position]}
                        for rank in range(world)} for position, index in enumerate(indexes)}

    def _run(self, world: int, job: SweepJob) -> dict[int, dict]:
        """``job`` on every rank. A fork server lost during the job says nothing of the job: it runs
        once more on a restarted server, and a second loss is the harness's RuntimeError."""
        try:
            return self._run_once(world, job)
        except ServerLost:
            # the lost attempt may have stored some configurations' compiles: a retry into the same
            # folders would load them where its cold compile must compile (and store) anew
            for folder in job.caches.values():
                _renewed(folder)
            try:
                return self._run_once(world, job)
            except ServerLost as exc:
                raise RuntimeError(f"the sweep's ranks lost their fork server twice: {exc}") from None

    def _run_once(self, world: int, job: SweepJob) -> dict[int, dict]:
        try:
            return self.pool(world).run({rank: job for rank in range(world)})
        except ServerLost:
            raise
        except PoolStartFailure as exc:
            raise RuntimeError(f"the sweep's ranks did not start: {exc}") from None

    def _one_by_one(self, desc: Any, configs: list[dict[str, Any]], seed: int, caches: dict[int, str],
                    world: int) -> dict[int, dict]:
        """After a sweep whose ranks failed: the eager step and the unbucketed compile alone, then
        each configuration in a job of its own, so the failure is pinned on what caused it. Only a
        failed sweep pays for this (each job repeats the eager and unbucketed steps)."""
        try:
            results = self._run(world, SweepJob(desc.to_json(), [], seed))
        except RankFailure as exc:
            raise BaselineFailed(f"model {desc.to_json()}: the eager step or the unbucketed compile failed on "
                                 f"real ranks, so no configuration can be judged: {_said(exc)}") from None
        for index, options in enumerate(configs):
            job = SweepJob(desc.to_json(), [options], seed, {0: caches[index]} if index in caches else {})
            try:
                alone = self._run(world, job)
                runs = {rank: alone[rank]["configs"][0] for rank in range(world)}
            except RankFailure as exc:  # a rank died, hung or raised past its own handler: a finding
                error = f"{exc.kind} on ranks {list(exc.ranks)}: {_said(exc)}"
                runs = {rank: {"outputs": {}, "launches": {}, "error": error} for rank in range(world)}
            for rank in range(world):
                results[rank]["configs"].append(runs[rank])
        return results

    def _load(self, job: WarmJob, world: int) -> "WarmLoad":
        """``job`` on a pool of fresh ranks, closed after it. The ranks fork from the warm path's
        server (``warm.py`` says why its processes are as fresh as a user's warm start), and each
        checks, before it loads, that it holds no bucketing pass."""
        pool = RankPool(world, backend="gloo", deadline=self.timeout, handler=run_warm_job,
                        collective_timeout=COLLECTIVE_TIMEOUT, env=_blas_env, context=fork_server())
        try:
            pool.start()
        except PoolStartFailure as exc:  # the harness's failure: nothing said of torch
            return WarmLoad(unjudged=f"the warm ranks did not start: {exc}")
        try:
            loaded = pool.run({rank: job for rank in range(world)})
            held = sorted({name for run in loaded.values() for name in run.get("held_passes", ())})
            if held:
                return WarmLoad(unjudged=not_fresh(held))
            return WarmLoad(ranks=loaded)
        except ServerLost as exc:  # the ranks' exit status is unknown: nothing said of torch
            return WarmLoad(unjudged=f"the warm ranks lost their fork server: {exc}")
        except RankFailure as exc:
            return WarmLoad(failure=_said(exc))
        finally:
            pool.close()


@dataclass
class WarmLoad:
    """What fresh ranks gave when they loaded a warm configuration: each rank's outputs and cache
    hits and misses, or how the load failed (a finding), or why it could not be run (unjudged)."""

    ranks: dict = field(default_factory=dict)
    failure: Optional[str] = None
    unjudged: Optional[str] = None

    def summary(self, world: int) -> dict[str, Any]:
        """The report's record: whether every rank loaded every graph from the cache."""
        if self.unjudged:
            return {"visited": False, "unjudged": self.unjudged}
        if self.failure:
            return {"visited": False, "failure": self.failure, "ranks": world}
        hits = sum(run["hits"] for run in self.ranks.values())
        misses = sum(run["misses"] for run in self.ranks.values())
        visited = misses == 0 and all(run["hits"] > 0 for run in self.ranks.values())
        return {"hits": hits, "misses": misses, "visited": visited, "ranks": world, "shared_by_ranks": True}


def _renewed(folder: str) -> None:
    """``folder`` made (again, emptied, if it was) as a configuration's cache: the cold compile must
    store, the warm load must hit, and the shared kernel code is linked in."""
    shutil.rmtree(folder, ignore_errors=True)
    Path(folder).mkdir()
    link_kernel_caches(folder)


def _fresh_folder(root: str, index: int) -> str:
    """A cache folder of its own for one configuration."""
    folder = str(Path(root) / f"config{index}")
    _renewed(folder)
    return folder


def sweep_ranks(desc: Any, configs: list[dict[str, Any]], seed: int = 0,
                timeout: float = START_TIMEOUT) -> list[dict[str, Any]]:
    """``RankSweeper.sweep`` on ranks started for this one call."""
    with RankSweeper(timeout) as sweeper:
        return sweeper.sweep(desc, configs, seed)


@dataclass(frozen=True)
class OrderFreedom:
    """How far a gradient may move with the order of its reduction. A reduce-scatter over a group
    of three or more ranks may sum in any order (gloo's ring chunks a bucket's buffer otherwise
    than each tensor alone; so does NCCL), and floating-point sums round by their order: a bucketed
    reduce-scatter may then differ from the unbucketed one by rounding alone. Each reduction step
    rounds once, so ``group - 1`` units in the last place of the reduce dtype bound what the order
    changes, at the magnitude of the largest partial sum. The ranks' terms are not seen here, so
    the tensor's largest element stands for it: an element whose terms cancel (a small sum of large
    terms) moves by units of its terms, not of itself, which a bound at its own magnitude called a
    difference (seen on a 4-rank model). What this lets through: an error of an element under
    ``group - 1`` units at the tensor's largest magnitude. Groups of two are exact in any order
    (a + b == b + a), so there nothing is tolerated."""

    reduce: torch.dtype
    group: int

    def tolerates(self, base: torch.Tensor, other: torch.Tensor) -> bool:
        """Whether ``other`` is ``base`` up to the reduction's order, element by element."""
        return self.group >= 3 and within_ulps(base, other, self.group - 1, self.reduce)


def _tolerance(order: Optional[OrderFreedom]) -> Any:
    """The verdict's one freedom as a ``drawn.Tolerance``: a gradient up to its reduction's order."""
    def tolerate(name: str, a: torch.Tensor, b: torch.Tensor) -> bool:
        return order is not None and is_gradient(name) and order.tolerates(a, b)
    return tolerate


def _verdict(base: Outputs, other: Outputs, order: Optional[OrderFreedom]) -> tuple[Optional[str], list[str]]:
    """The first tensor that differs beyond what the reduction's order explains (the output is
    judged bit for bit: no reduction over ranks makes it), and the gradients equal only up to
    that order."""
    tolerated: list[str] = []
    return first_difference(base, other, _tolerance(order), tolerated), tolerated


@dataclass
class Rejudged:
    """Scalar-kernel re-runs of the configurations whose cold runs differed (``RankSweeper._scalar``)
    and the model's compute dtype (the bound of ``drawn.vector_order``)."""

    runs: dict = field(default_factory=dict)
    compute: torch.dtype = torch.float32


def _cold_differs(results: dict[int, dict], index: int, world: int, order: Optional[OrderFreedom]) -> bool:
    """Whether some rank's cold run of configuration ``index`` ran and differs from its baseline."""
    return any(not results[rank]["configs"][index]["error"]
               and _verdict(tensors(results[rank]["baseline"]), tensors(results[rank]["configs"][index]["outputs"]),
                            order)[0] for rank in range(world))


def _within_bound(results: dict[int, dict], index: int, world: int, order: Optional[OrderFreedom],
                  compute: torch.dtype) -> bool:
    """Whether every rank's cold run of configuration ``index`` is within ``drawn.vector_bound`` of
    its baseline: beyond it no scalar re-judgement can explain the difference, so none is run."""
    tolerate = _tolerance(order)
    return all(results[rank]["configs"][index]["error"]
               or vector_bound(tensors(results[rank]["baseline"]), tensors(results[rank]["configs"][index]["outputs"]),
                               compute, tolerate) for rank in range(world))


def _explain(report: dict[str, Any], index: int, results: dict[int, dict], rejudged: Rejudged, world: int,
             order: Optional[OrderFreedom]) -> None:
    """Move the cold difference of ``report`` to ``vector_order`` when every rank's scalar re-run
    agrees and every vectorized difference is within the bound; else say what the re-run found."""
    entry = rejudged.runs.get(index)
    if entry is None:
        return
    if isinstance(entry, str):
        report["scalar_rejudge"] = entry
        return
    tolerate = _tolerance(order)
    for rank in range(world):
        run = entry[rank]["run"]
        if run["error"]:
            report["scalar_rejudge"] = f"failed: rank {rank}: {run['error']}"
            return
        cold = results[rank]["configs"][index]["outputs"]
        if not vector_order(tensors(results[rank]["baseline"]), tensors(cold), tensors(entry[rank]["baseline"]),
                            tensors(run["outputs"]), rejudged.compute, tolerate):
            scalar = first_difference(tensors(entry[rank]["baseline"]), tensors(run["outputs"]), tolerate)
            report["scalar_difference"] = f"rank {rank}: {scalar}" if scalar else None
            return
    report["vector_order"], report["difference"] = report["difference"], None


def _reports(results: dict[int, dict], configs: list[dict[str, Any]], world: int,
             loads: Optional[dict[int, WarmLoad]] = None,
             order: Optional[OrderFreedom] = None, rejudged: Optional[Rejudged] = None) -> list[dict[str, Any]]:
    """Each configuration's report: the first rank whose run differs (or failed) names it; a warm
    configuration's loaded runs are judged against the same unbucketed compile. ``order``: the
    gradients of groups of three or more ranks are judged up to their reduction's order, and the
    report lists each one equal only so (``order_tolerated``), never silently."""
    reports, loads = [], loads or {}
    for index, options in enumerate(configs):
        report: dict[str, Any] = {"options": dict(options), "difference": None, "eager_difference": None,
                                  "launches": results[0]["configs"][index]["launches"], "error": None, "ranks": world,
                                  "blas": blas.worst(results[rank].get("blas") for rank in range(world))}
        if options.get("compile_cache") == "warm":  # never passed off as judged warm when it was not
            load = loads.get(index)
            report["warm"] = load.summary(world) if load else {"visited": False, "why": WARM_NOT_LOADED}
        for rank in range(world):
            run = results[rank]["configs"][index]
            if run["error"] and not report["error"]:
                report["error"] = f"rank {rank}: {run['error']}"
            if run["error"]:
                continue
            outputs = tensors(run["outputs"])
            diff, tolerated = _verdict(tensors(results[rank]["baseline"]), outputs, order)
            if diff and not report["difference"]:
                report["difference"] = f"rank {rank}: {diff}"
            if tolerated:
                report.setdefault("order_tolerated", []).extend(f"rank {rank}: {name}" for name in tolerated)
            diff = first_difference(tensors(results[rank]["eager"]), outputs)
            if diff and not report["eager_difference"]:
                report["eager_difference"] = f"rank {rank}: {diff}"
        if report["difference"] and rejudged is not None:
            _explain(report, index, results, rejudged, world, order)
        load = loads.get(index)
        if load is not None and load.ranks:
            report["blas"] = blas.worst([report["blas"], *(run.get("blas") for run in load.ranks.values())])
        if load is not None and not report["error"] and not report["difference"]:
            _judge_warm(report, load, results, index, order)
        reports.append(report)
    return reports


def _judge_warm(report: dict[str, Any], load: WarmLoad, results: dict[int, dict], index: int,
                order: Optional[OrderFreedom] = None) -> None:
    """The warm load's verdict in ``report``: its failure is the configuration's error, and each
    rank's loaded run must equal that rank's cold run of the same configuration bit for bit (the
    loaded graph is the one the cold compile stored; the cold run was judged against the
    unbucketed compile already)."""
    if load.failure:
        report["error"] = f"the warm load (fresh ranks on the cache all ranks share) failed: {load.failure}"
        return
    for rank in sorted(load.ranks):
        cold = results[rank]["configs"][index]["outputs"]
        diff, tolerated = _verdict(tensors(cold), tensors(load.ranks[rank]["outputs"]), order)
        if tolerated:
            report.setdefault("order_tolerated", []).extend(f"rank {rank}: {name} (warm load)" for name in tolerated)
        if diff:
            report["difference"] = f"rank {rank}: {diff} (warm load, from the cache all ranks share)"
            return


__all__ = ["OrderFreedom", "Rejudged", "RankSweeper", "SweepJob", "WarmJob", "WarmLoad", "run_sweep_job", "run_warm_job", "sweep_ranks"]
