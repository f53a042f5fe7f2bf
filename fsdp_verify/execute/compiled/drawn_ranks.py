"""End to end on N real ranks: a drawn model on its own mesh (4 ranks for ``(4,)`` and ``(2, 2)``),
one spawned gloo process per rank, DTensor parameters as SimpleFSDP holds them (uneven shards and
HSDP included), compiled by inductor under each configuration; every rank's output and gradient
shards are compared bit for bit with the unbucketed compile (the verdict) and with eager (reported).

Processes are spawned per call (torch imports dominate: seconds per rank), and each rank runs every
configuration of the call, so one call amortises the start-up over the configurations.
"""

from __future__ import annotations

import datetime
import math
import multiprocessing
import os
import tempfile
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Optional

import torch

from fsdp_verify.execute.ranks.pool import exit_reason
from fsdp_verify.execute.compiled.drawn import OFF, Outputs, first_difference

START_TIMEOUT = 600.0  # the whole sweep of one model, every rank
COLLECTIVE_TIMEOUT = 120.0  # a rank waiting on peers that never join (one rank's compile failed) gives up


def _rank_main(rank: int, world: int, store: str, desc_doc: dict, configs: list, seed: int, conn: Any) -> None:
    try:
        conn.send(("ok", _rank_runs(rank, world, store, desc_doc, configs, seed)))
    except BaseException:  # noqa: BLE001 - the parent reports which rank failed and why
        conn.send(("error", traceback.format_exc()[-2000:]))


def _rank_runs(rank: int, world: int, store: str, desc_doc: dict, configs: list, seed: int) -> dict:
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    from fsdp_verify.capture.model import SimpleFSDPModel, desc_from_json, dtensor_gather, example_input, param_shapes
    from fsdp_verify.capture.trace import mesh_dim_names, placements
    from fsdp_verify.execute.compiled.drawn import inductor
    desc = desc_from_json(desc_doc)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT))
    try:
        mesh = init_device_mesh("cpu", desc.mesh, mesh_dim_names=mesh_dim_names(desc.mesh))
        where = placements(desc)

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
                compiled = torch.compile(built, backend="inductor", fullgraph=True, dynamic=False)
                return _outputs(built, compiled(x)), launches

        runs: dict[str, Any] = {"eager": _plain(step(None)[0]), "baseline": _plain(step(OFF)[0]), "configs": []}
        for options in configs:
            try:
                outputs, launches = step(options)
                runs["configs"].append({"outputs": _plain(outputs), "launches": launches, "error": None})
            except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile is a finding
                message = str(exc).strip().splitlines()
                runs["configs"].append({"outputs": {}, "launches": {},
                                        "error": f"{type(exc).__name__}: {message[0] if message else ''}"})
            dist.barrier()
        return runs
    finally:
        dist.destroy_process_group()


def _plain(outputs: Outputs) -> dict[str, tuple[str, list[int], bytes]]:
    """Tensors as (dtype, shape, bytes): what crosses the pipe is plain data, no shared storage."""
    return {name: (str(t.dtype).removeprefix("torch."), list(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes())
            for name, t in outputs.items()}


def _tensors(plain: dict[str, tuple[str, list[int], bytes]]) -> Outputs:
    return {name: torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)
            if data else torch.empty(shape, dtype=getattr(torch, dtype)) for name, (dtype, shape, data) in plain.items()}


def _outputs(model: Any, out: torch.Tensor) -> Outputs:
    out.sum().backward()
    found = {"output": out.detach().clone()}
    for fqn, key in model.names.items():
        grad = model.params[key].grad
        if grad is not None:
            local = grad.to_local() if hasattr(grad, "to_local") else grad
            found[f"grad {fqn}"] = local.detach().clone()
    return found


def sweep_ranks(desc: Any, configs: list[dict[str, Any]], seed: int = 0,
                timeout: float = START_TIMEOUT) -> list[dict[str, Any]]:
    """One report per configuration (as ``endtoend.sweep``), judged on every rank of ``desc``'s mesh;
    a difference names the rank and the first differing tensor."""
    world = math.prod(desc.mesh)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as folder:
        store = os.path.join(folder, "store")
        pipes, processes = [], []
        for rank in range(world):
            parent, child = context.Pipe(duplex=False)
            process = context.Process(target=_rank_main, args=(rank, world, store, desc.to_json(), configs, seed, child))
            process.start()
            pipes.append(parent)
            processes.append(process)
        try:
            results = {}
            deadline = time.monotonic() + timeout  # one deadline for all ranks, not one per rank
            waiting = dict(enumerate(pipes))
            while waiting:
                ready = wait(list(waiting.values()), timeout=max(0.0, deadline - time.monotonic()))
                if not ready:
                    raise RuntimeError(f"ranks {sorted(waiting)} gave no result within {timeout:.0f} s")
                for rank in [r for r, pipe in waiting.items() if pipe in ready]:
                    try:
                        kind, body = waiting.pop(rank).recv()
                    except EOFError:
                        raise RuntimeError(f"rank {rank} died ({exit_reason(processes[rank].exitcode)})") from None
                    if kind != "ok":
                        raise RuntimeError(f"rank {rank} failed: {body}")
                    results[rank] = body
        finally:
            for process in processes:
                if process.is_alive():
                    process.kill()
                process.join(5)
    reports = []
    for index, options in enumerate(configs):
        report: dict[str, Any] = {"options": dict(options), "difference": None, "eager_difference": None,
                                  "launches": results[0]["configs"][index]["launches"], "error": None, "ranks": world}
        for rank in range(world):
            run = results[rank]["configs"][index]
            if run["error"] and not report["error"]:
                report["error"] = f"rank {rank}: {run['error']}"
            if run["error"]:
                continue
            outputs = _tensors(run["outputs"])
            diff = first_difference(_tensors(results[rank]["baseline"]), outputs)
            if diff and not report["difference"]:
                report["difference"] = f"rank {rank}: {diff}"
            diff = first_difference(_tensors(results[rank]["eager"]), outputs)
            if diff and not report["eager_difference"]:
                report["eager_difference"] = f"rank {rank}: {diff}"
        reports.append(report)
    return reports


__all__ = ["sweep_ranks"]
