"""Real multi-process collectives: a persistent pool of rank processes (gloo on CPU, NCCL on GPUs).

Starting a process group costs seconds per rank (mostly importing torch), so ranks start once
and serve many cases. Each case is sent as JSON graph descriptions (original and rewritten, per
rank) plus an input seed; each rank creates and registers the case's process groups under
their names, runs both graphs with real ``_c10d_functional`` collectives and returns its
outputs. Every case has a deadline: a rank that raises, dies or waits in a collective its peers
never issue is reported with, per rank, the last collective it entered (a flight recorder), and
the pool is torn down (children killed and reaped) and restarted.
"""

from __future__ import annotations

import ctypes
import datetime
import multiprocessing
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Optional

ENTRY_BYTES = 400


class RankFailure(RuntimeError):
    """A case did not complete on every rank: a hang past the deadline, a crash, or an error."""

    def __init__(self, kind: str, message: str, last_collective: dict[int, str], errors: dict[int, str]):
        self.kind, self.last_collective, self.errors = kind, dict(last_collective), dict(errors)
        flight = "; ".join(f"rank {r}: {c or 'none'}" for r, c in sorted(last_collective.items()))
        super().__init__(f"{message} (last collective entered: {flight})")


@dataclass
class Job:
    """What one rank runs: its original and rewritten graph documents, the seed and input mode."""

    groups: dict
    original: dict
    rewritten: dict
    seed: int
    mode: str = "exact"
    exact_sources: tuple[str, ...] = ()  # nodes whose values become exact dyadics (RS inputs)


def _record(slot: Any, text: str) -> None:
    data = text.encode()[:ENTRY_BYTES - 1]
    slot.value = data


def _ensure_groups(groups: dict, rank: int, cache: dict) -> None:
    import torch.distributed as dist
    from torch._C._distributed_c10d import _register_process_group, _unregister_process_group
    for name in sorted(groups):
        parts = [tuple(p) for p in groups[name]]
        for part in parts:
            if part not in cache:
                cache[part] = dist.new_group(list(part))
        mine = next(part for part in parts if rank in part)
        try:
            _unregister_process_group(name)
        except Exception:  # noqa: BLE001 - nothing registered under that name yet
            pass
        _register_process_group(name, cache[mine])


def _run_graph(document: dict, job: Job, rank: int, device: str, slot: Any) -> list:
    import torch
    from torch import fx

    from ..graph.builder import build_module
    from ..graph.spec import graph_from_json
    from .inputs import exact_override, make_inputs

    spec = graph_from_json(document)
    module = build_module(spec)
    override = exact_override(job.exact_sources, job.seed)

    class Recorder(fx.Interpreter):
        def run_node(self, node):
            name = str(node.target)
            if name.startswith("_c10d_functional."):
                shapes = [list(a.shape) for a in self.fetch_args_kwargs_from_env(node)[0] if hasattr(a, "shape")]
                _record(slot, f"rank {rank} {name.split('.')[1]}({node.args[-1] if node.args else '?'}, {shapes}) "
                              f"at {node.name}")
            return override(rank, node, super().run_node(node))

    outputs = Recorder(module).run(*make_inputs(spec, rank, job.seed, job.mode, device))
    flat = torch.utils._pytree.tree_flatten(outputs)[0]
    return [t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t for t in flat]


def _worker(rank: int, world: int, store: str, conn: Any, slot: Any, backend: str, timeout: float) -> None:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    cache: dict = {}
    conn.send(("ready", rank))
    while True:
        job = conn.recv()
        if job is None:
            break
        try:
            _ensure_groups(job.groups, rank, cache)
            _record(slot, "")
            result = {kind: _run_graph(getattr(job, kind), job, rank, device, slot)
                      for kind in ("original", "rewritten")}
            _record(slot, "finished")
            conn.send(("ok", result))
        except Exception:  # noqa: BLE001 - reported to the parent as this rank's error
            conn.send(("error", traceback.format_exc()))
    dist.destroy_process_group()


class RankPool:
    """N rank processes sharing one process group; reused across cases, restarted after failures."""

    def __init__(self, world_size: int, backend: Optional[str] = None, deadline: float = 30.0,
                 start_timeout: float = 120.0):
        import torch
        self.world_size = world_size
        self.backend = backend or ("nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size
                                   else "gloo")
        self.deadline, self.start_timeout = deadline, start_timeout
        self.processes: list = []
        self.restarts = 0

    def __enter__(self) -> "RankPool":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawn the ranks and wait until every one has joined the process group."""
        context = multiprocessing.get_context("spawn")
        self.folder = tempfile.mkdtemp(prefix="fsdp-verify-pg-")
        store = os.path.join(self.folder, "store")
        self.slots = [context.Array(ctypes.c_char, ENTRY_BYTES, lock=False) for _ in range(self.world_size)]
        self.conns, self.processes = [], []
        for rank in range(self.world_size):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, daemon=True, name=f"fsdp-verify-rank{rank}",
                                      args=(rank, self.world_size, store, child, self.slots[rank], self.backend,
                                            max(self.deadline * 4, 60)))
            process.start()
            self.conns.append(parent)
            self.processes.append(process)
        self._collect({rank: None for rank in range(self.world_size)}, self.start_timeout, expect="ready")

    def close(self) -> None:
        """Stop every rank, killing any that does not exit promptly, and reap them all."""
        for conn in getattr(self, "conns", []):
            try:
                conn.send(None)
            except (BrokenPipeError, OSError):
                pass
        for process in self.processes:
            process.join(timeout=5)
        self._kill()
        shutil.rmtree(getattr(self, "folder", ""), ignore_errors=True)

    def _kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(timeout=10)
        self.processes = [p for p in self.processes if p.is_alive()]

    def restart(self) -> None:
        """Tear down (kill and reap) and start afresh."""
        self._kill()
        shutil.rmtree(getattr(self, "folder", ""), ignore_errors=True)
        self.restarts += 1
        self.start()

    def flight_record(self) -> dict[int, str]:
        """The last collective each rank entered."""
        return {rank: slot.value.decode(errors="replace") for rank, slot in enumerate(self.slots)}

    def _collect(self, pending: dict[int, Any], timeout: float, expect: str = "ok") -> dict[int, Any]:
        results, errors = {}, {}
        end = time.monotonic() + timeout
        waiting = {self.conns[rank]: rank for rank in pending}
        while waiting:
            ready = wait(list(waiting), timeout=max(0.0, end - time.monotonic()))
            if not ready:
                break
            for conn in ready:
                rank = waiting.pop(conn)
                try:
                    status, payload = conn.recv()
                except (EOFError, OSError):
                    errors[rank] = f"rank {rank} died (exit code {self.processes[rank].exitcode})"
                    continue
                if status == expect:
                    results[rank] = payload
                else:
                    errors[rank] = payload
            if errors:
                end = min(end, time.monotonic() + 2.0)  # peers of a failed rank usually hang: short grace
        if errors or waiting:
            record = self.flight_record()
            kind = "error" if errors else "hang"
            hung = sorted(waiting.values())
            message = (f"ranks {sorted(errors)} failed" if errors else "") + \
                      (f"{'; ' if errors else ''}ranks {hung} did not finish within {timeout:.0f}s" if hung else "")
            self.restart()
            raise RankFailure(kind, message, record, errors)
        return results

    def run(self, jobs: dict[int, Job]) -> dict[int, dict]:
        """Run one case on every rank; raises RankFailure (after restarting the pool) on failure."""
        if sorted(jobs) != list(range(self.world_size)):
            raise ValueError(f"a job per rank 0..{self.world_size - 1} is required, got ranks {sorted(jobs)}")
        for rank, job in jobs.items():
            self.conns[rank].send(job)
        return self._collect(dict(jobs), self.deadline)


def reduce_sources(case) -> tuple[str, ...]:
    """Names of the nodes feeding reduce-scatters and all-reduces: made exact in ``exact`` mode."""
    names = []
    for node in case.graph.nodes:
        op = node.target.split(".")[1] if node.target.startswith("_c10d_functional.") else ""
        if op in ("reduce_scatter_tensor", "all_reduce") and node.args and hasattr(node.args[0], "name"):
            names.append(node.args[0].name)
    return tuple(names)


def jobs_for(case, rewritten: dict, seed: Optional[int] = None, mode: str = "exact",
             originals: Optional[dict] = None) -> dict[int, Job]:
    """One Job per rank from a case and its rewritten modules (described with the importer)."""
    from ..graph.builder import localize
    from ..graph.importer import import_module
    groups = {name: [list(p) for p in parts] for name, parts in case.graph.groups.items()}
    seed = case.seed if seed is None else seed
    exact = reduce_sources(case) if mode == "exact" else ()
    jobs = {}
    for rank in case.graph.world():
        original = import_module(originals[rank]).to_json() if originals else localize(case.graph, rank).to_json()
        jobs[rank] = Job(groups, original, import_module(rewritten[rank]).to_json(), seed, mode, exact)
    return jobs
