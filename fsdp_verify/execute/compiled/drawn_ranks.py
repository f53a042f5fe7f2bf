"""End to end on N real ranks: a drawn model on its own mesh (4 ranks for ``(4,)`` and ``(2, 2)``),
one gloo rank process per rank, DTensor parameters as SimpleFSDP holds them (uneven shards and
HSDP included), compiled by inductor under each configuration; every rank's output and gradient
shards are compared bit for bit with the unbucketed compile (the verdict) and with eager (reported).

The ranks are a ``RankPool`` with this module's handler, kept for a whole run (``RankSweeper``):
torch imports cost seconds a rank, so they are paid once per world size, not once per model. Each
rank runs every configuration of a model in one job.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

import torch

from fsdp_verify.execute.compiled.builtin import plain, tensors
from fsdp_verify.execute.compiled.drawn import OFF, Outputs, first_difference
from fsdp_verify.execute.ranks.pool import RankContext, RankFailure, RankPool

START_TIMEOUT = 600.0  # the whole sweep of one model, every rank
WARM_NOT_ON_RANKS = "on real ranks each configuration compiles cold; the warm path is judged in one-process mode"
COLLECTIVE_TIMEOUT = 120.0  # a rank waiting on peers that never join (one rank's compile failed) gives up


@dataclass
class SweepJob:
    """One model and the configurations each rank compiles it under."""

    desc: dict
    configs: list
    seed: int


def _mesh(desc: Any, ctx: RankContext) -> Any:
    """The model's device mesh over the pool's world, made once per mesh shape: every rank gets the
    same jobs in the same order, so the groups a new mesh creates are created in step."""
    from torch.distributed.device_mesh import init_device_mesh

    from fsdp_verify.capture.trace import mesh_dim_names
    key = ("device mesh", tuple(desc.mesh))
    if key not in ctx.cache:
        ctx.cache[key] = init_device_mesh("cpu", desc.mesh, mesh_dim_names=mesh_dim_names(desc.mesh))
    return ctx.cache[key]


def run_sweep_job(job: SweepJob, ctx: RankContext) -> dict:
    """The pool's handler: eager, the unbucketed compile and every configuration of ``job`` on this
    rank (``inductor`` resets dynamo before each compile, so no model sees another's cache)."""
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.tensor import distribute_tensor

    from fsdp_verify.capture.model import SimpleFSDPModel, desc_from_json, dtensor_gather, example_input, param_shapes
    from fsdp_verify.capture.trace import placements
    from fsdp_verify.execute.compiled.drawn import inductor
    desc, rank, seed = desc_from_json(job.desc), ctx.rank, job.seed
    mesh, where = _mesh(desc, ctx), placements(desc)

    def model() -> SimpleFSDPModel:
        gen = torch.Generator().manual_seed(seed)  # the same full values on every rank
        params = {fqn: nn.Parameter(distribute_tensor(torch.randn(shape, generator=gen), mesh, where[fqn]))
                  for fqn, shape in param_shapes(desc).items()}
        return SimpleFSDPModel(desc, params, dtensor_gather(desc, where))

    def step(options: Optional[dict]) -> tuple[Outputs, dict]:
        built, launches = model(), {}
        x = example_input(desc, seed + rank)  # each rank its own batch, as data parallelism has it
        if options is None:
            return _outputs(built, built(x)), launches
        with inductor(options, launches):
            compiled = torch.compile(built, backend="inductor", fullgraph=True, dynamic=bool(options.get("dynamic")))
            return _outputs(built, compiled(x)), launches

    runs: dict[str, Any] = {"eager": plain(step(None)[0]), "baseline": plain(step(OFF)[0]), "configs": []}
    for options in job.configs:
        try:
            outputs, launches = step(options)
            runs["configs"].append({"outputs": plain(outputs), "launches": launches, "error": None})
        except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile is a finding
            message = str(exc).strip().splitlines()
            runs["configs"].append({"outputs": {}, "launches": {},
                                    "error": f"{type(exc).__name__}: {message[0] if message else ''}"})
        dist.barrier()
    return runs


def _outputs(model: Any, out: torch.Tensor) -> Outputs:
    out.sum().backward()
    found = {"output": out.detach().clone()}
    for fqn, key in model.names.items():
        grad = model.params[key].grad
        if grad is not None:
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            found[f"grad {fqn}"] = local.detach().clone()
    return found


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
        if world not in self.pools:
            pool = RankPool(world, backend="gloo", deadline=self.timeout, handler=run_sweep_job,
                            collective_timeout=COLLECTIVE_TIMEOUT)
            pool.start()
            self.pools[world] = pool
        return self.pools[world]

    def sweep(self, desc: Any, configs: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
        """One report per configuration (as ``endtoend.sweep``), judged on every rank of ``desc``'s
        mesh; a difference names the rank and the first differing tensor. A rank that dies, hangs
        or raises is the harness's RuntimeError, naming the rank (the pool restarts for the next)."""
        world = math.prod(desc.mesh)
        job = SweepJob(desc.to_json(), list(configs), seed)
        try:
            results = self.pool(world).run({rank: job for rank in range(world)})
        except RankFailure as exc:
            raise RuntimeError(f"the sweep's ranks failed: {exc}") from None
        return _reports(results, configs, world)


def sweep_ranks(desc: Any, configs: list[dict[str, Any]], seed: int = 0,
                timeout: float = START_TIMEOUT) -> list[dict[str, Any]]:
    """``RankSweeper.sweep`` on ranks started for this one call."""
    with RankSweeper(timeout) as sweeper:
        return sweeper.sweep(desc, configs, seed)


def _reports(results: dict[int, dict], configs: list[dict[str, Any]], world: int) -> list[dict[str, Any]]:
    """Each configuration's report: the first rank whose run differs (or failed) names it."""
    reports = []
    for index, options in enumerate(configs):
        report: dict[str, Any] = {"options": dict(options), "difference": None, "eager_difference": None,
                                  "launches": results[0]["configs"][index]["launches"], "error": None, "ranks": world}
        if options.get("compile_cache") == "warm":  # said, never passed off as judged warm
            report["warm"] = {"visited": False, "why": WARM_NOT_ON_RANKS}
        for rank in range(world):
            run = results[rank]["configs"][index]
            if run["error"] and not report["error"]:
                report["error"] = f"rank {rank}: {run['error']}"
            if run["error"]:
                continue
            outputs = tensors(run["outputs"])
            diff = first_difference(tensors(results[rank]["baseline"]), outputs)
            if diff and not report["difference"]:
                report["difference"] = f"rank {rank}: {diff}"
            diff = first_difference(tensors(results[rank]["eager"]), outputs)
            if diff and not report["eager_difference"]:
                report["eager_difference"] = f"rank {rank}: {diff}"
        reports.append(report)
    return reports


__all__ = ["RankSweeper", "SweepJob", "run_sweep_job", "sweep_ranks"]
