"""Real multi-process collectives: a persistent pool of rank processes (gloo on CPU, NCCL on GPUs).

Starting a process group costs seconds per rank (mostly importing torch), so ranks start once
and serve many cases. Each case is sent as JSON graph descriptions (original and rewritten, per
rank) plus an input seed; each rank creates and registers the case's process groups under
their names, runs both graphs with real ``_c10d_functional`` collectives and returns its
outputs. Every case has a deadline: a rank that raises, dies or waits in a collective its peers
never issue is reported with, per rank, the last collective it entered (a flight recorder), and
the pool is torn down (children killed and reaped) and restarted. A rank that died between cases
(killed, out of memory) is found before the next case is sent: the pool restarts, records why in
``events``, and runs the case.

A pool may be given a ``handler`` (a module-level function, so a higher layer can give the ranks
other work without this module importing it; a rank gets its ``module:qualname`` and imports it
only once its death signal is armed) and a per-rank environment (``env``), set before
each rank starts: real mode gives every rank its own ``PYTHONHASHSEED``. ``place`` decides the
backend and device from what is asked and the GPUs present, and says why: never a silent fallback.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime
import multiprocessing
import os
import shutil
import signal
import tempfile
import time
import traceback
import warnings
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable, Optional

from fsdp_verify.execute.isolation import die_with_parent, unshared_bar_lock
from fsdp_verify.graph import collectives

ENTRY_BYTES = 400
BACKENDS = ("auto", "gloo", "nccl")


@dataclass(frozen=True)
class Placement:
    """Where the ranks run: the collective backend, the compute device, and why (``note``)."""

    backend: str  # gloo or nccl
    device: str  # cpu or cuda
    world: int
    gpus: int
    note: str = ""

    def describe(self) -> str:
        """``nccl on cuda, 2 ranks`` (with the note, when the request could not be met as asked)."""
        return f"{self.backend} on {self.device}, {self.world} ranks" + (f" ({self.note})" if self.note else "")


def place(requested: Optional[str], world: int, gpus: Optional[int] = None) -> Placement:
    """The backend and device for ``world`` ranks: ``nccl`` with CUDA tensors when there are at least
    as many GPUs as ranks; with fewer (but some), CUDA compute with gloo collectives; ``gloo`` on CPU
    when asked or when there is no GPU. Raises ValueError when NCCL is asked for without any GPU."""
    if gpus is None:
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    requested = requested or "auto"
    if requested not in BACKENDS:
        raise ValueError(f"unknown backend {requested!r}; expected one of {', '.join(BACKENDS)}")
    if requested == "gloo":
        return Placement("gloo", "cpu", world, gpus)
    if gpus >= world:
        return Placement("nccl", "cuda", world, gpus)
    if gpus:
        return Placement("gloo", "cuda", world, gpus,
                         f"{gpus} GPU(s) for {world} ranks: NCCL needs one GPU per rank, so collectives run on "
                         f"gloo (staged through CPU) while compute runs on CUDA")
    if requested == "nccl":
        raise ValueError(f"NCCL was asked for {world} ranks, but this machine has no CUDA device")
    return Placement("gloo", "cpu", world, 0, "no CUDA device: gloo on CPU")


def exit_reason(code: Optional[int]) -> str:
    """``killed by signal SIGKILL`` or ``exit code 3``."""
    if code is not None and code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class RankFailure(RuntimeError):
    """A case did not complete on every rank: a hang past the deadline, a crash, or an error."""

    def __init__(self, kind: str, message: str, last_collective: dict[int, str], errors: dict[int, str],
                 ranks: tuple[int, ...] = ()):
        self.kind, self.last_collective, self.errors = kind, dict(last_collective), dict(errors)
        self.ranks = tuple(ranks) or tuple(sorted(errors))  # the ranks that failed (died, raised or hung)
        flight = "; ".join(f"rank {r}: {c or 'none'}" for r, c in sorted(last_collective.items()))
        super().__init__(f"{message} (last collective entered: {flight})")


class PoolStartFailure(RankFailure):
    """The pool's ranks could not be started (or restarted): the harness's resource failed, not a
    case's target. Its spawned ranks are killed and reaped before it is raised."""


class ServerLost(PoolStartFailure):
    """The fork server the ranks started from died during a case or a start. A fork server's child
    reports its exit status through the server, so every rank then reads as exit code 255 whatever
    it did: the harness's resource failed, and nothing is known of the case. The ranks die with
    their parent, the server (``die_with_parent``), and the pool forgets them; the next run starts
    new ones (the server first, by whoever gave the context: it may start it in an environment of
    its own)."""


def lost_server(context: Any) -> Optional[int]:
    """The pid of the fork server ``context`` starts processes from, when that server has died (a
    zombie: the server is this process's child, reaped only when the next start restarts it);
    None for any other context, a live server, or where ``/proc`` cannot tell."""
    if context is None or context.get_start_method() != "forkserver":
        return None
    from multiprocessing import forkserver
    pid = getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", None)
    if not isinstance(pid, int):
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[-1].split()[0]  # the name, in parentheses, may hold spaces
    except FileNotFoundError:
        return pid
    except (OSError, IndexError):
        return None
    return pid if state in ("Z", "X") else None


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


def _run_graph(document: dict, job: Job, rank: int, device: str, slot: Any, staged: bool = False) -> list:
    """Run one graph document with real collectives; ``staged``: collectives on CPU copies (gloo
    with CUDA compute), each launch completed at once and its result moved back to ``device``."""
    import torch
    from torch import fx

    from fsdp_verify.graph.builder import build_module
    from fsdp_verify.graph.spec import graph_from_json
    from fsdp_verify.execute.inputs import exact_override, make_inputs
    from fsdp_verify.execute.simulated import rank_seed

    spec = graph_from_json(document)
    module = build_module(spec)
    override = exact_override(job.exact_sources, job.seed)

    class Recorder(fx.Interpreter):
        def run_node(self, node):
            name = str(node.target)
            if collectives.op_name(name, (collectives.NAMESPACE,)):
                shapes = [list(a.shape) for a in self.fetch_args_kwargs_from_env(node)[0] if hasattr(a, "shape")]
                _record(slot, f"rank {rank} {name.split('.')[1]}({node.args[-1] if node.args else '?'}, {shapes}) "
                              f"at {node.name}")
                if staged and not collectives.is_wait(name):
                    return override(rank, node, _staged_collective(self, node))
            return override(rank, node, super().run_node(node))

    # random ops draw what the simulated world's rank draws (its generator starts from the same seed
    # in each run); the process's own generators come back as they were
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(rank_seed(rank))
        outputs = Recorder(module).run(*make_inputs(spec, rank, job.seed, job.mode, device))
    flat = torch.utils._pytree.tree_flatten(outputs)[0]
    return [t.detach().cpu().clone() if isinstance(t, torch.Tensor) else t for t in flat]


def _staged_collective(interpreter: Any, node: Any) -> Any:
    """A collective launch on CPU copies of its tensor arguments (lists too: the ``*_coalesced``
    launches), completed at once (every result tensor waited), its results on the arguments'
    device; an ``out=`` launch writes a CPU copy, copied back into the caller's ``out``
    (gloo collectives with CUDA compute)."""
    import torch
    from torch.utils._pytree import tree_flatten, tree_map
    args, kwargs = interpreter.fetch_args_kwargs_from_env(node)
    tensors = [v for v in tree_flatten((args, kwargs))[0] if isinstance(v, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    cpu = lambda v: v.cpu() if isinstance(v, torch.Tensor) else v  # noqa: E731
    staged_kwargs = tree_map(cpu, kwargs)
    out = node.target(*tree_map(cpu, args), **staged_kwargs)
    out = tree_map(lambda v: torch.ops._c10d_functional.wait_tensor(v) if isinstance(v, torch.Tensor) else v, out)
    if "out" in kwargs:  # the launch wrote the CPU copy of ``out``: the caller's tensor gets its bits
        for mine, staged in zip(tree_flatten(kwargs["out"])[0], tree_flatten(staged_kwargs["out"])[0]):
            mine.copy_(staged)
        return kwargs["out"]
    return tree_map(lambda v: v.to(device) if isinstance(v, torch.Tensor) else v, out)


@dataclass
class RankContext:
    """What a handler gets in a rank process: its rank, the world, its device, and the pool's state."""

    rank: int
    world: int
    device: str
    slot: Any  # the flight-recorder slot (``record`` writes it)
    cache: dict  # process groups made so far, by ranks
    staged: bool  # collectives staged through CPU (gloo with CUDA compute)
    state: dict  # anything a handler keeps between the jobs of one case

    def record(self, text: str) -> None:
        _record(self.slot, text)


def _default_handler(job: Job, ctx: RankContext) -> dict:
    _ensure_groups(job.groups, ctx.rank, ctx.cache)
    return {kind: _run_graph(getattr(job, kind), job, ctx.rank, ctx.device, ctx.slot, ctx.staged)
            for kind in ("original", "rewritten")}


def _worker(rank: int, world: int, store: str, conn: Any, slot: Any, backend: str, timeout: float,
            device_kind: str = "cpu", handler: Optional[str] = None, parent: Optional[int] = None,
            env: Optional[dict[str, str]] = None) -> None:
    die_with_parent(parent=parent)  # before the seconds importing torch (and the handler's module) takes
    os.environ.update(env or {})  # a rank forked by a server did not start with this process's environment
    import importlib

    import torch
    import torch.distributed as dist
    run_job: Callable = _default_handler
    if handler is not None:  # "module:qualname", resolved only now (unpickling a function imports its module)
        module, _, name = handler.partition(":")
        run_job = getattr(importlib.import_module(module), name)
    torch.set_num_threads(1)
    unshared_bar_lock()  # a rank killed after a failed case leaves no semaphore behind
    device = "cpu"
    if device_kind == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    ctx = RankContext(rank, world, device, slot, {}, backend == "gloo" and device_kind == "cuda", {})
    conn.send(("ready", rank))
    while True:
        job = conn.recv()
        if job is None:
            break
        try:
            _record(slot, "")
            result = run_job(job, ctx)
            _record(slot, "finished")
            conn.send(("ok", result))
        except Exception:  # noqa: BLE001 - reported to the parent as this rank's error
            conn.send(("error", traceback.format_exc()))
    dist.destroy_process_group()


# Environment variables Python reads once, when its interpreter starts.
READ_AT_START = ("PYTHONHASHSEED", "PYTHONPATH", "PYTHONOPTIMIZE", "PYTHONDONTWRITEBYTECODE")


class RankPool:
    """N rank processes sharing one process group; reused across cases, restarted after failures."""

    def __init__(self, world_size: int, backend: Optional[str] = None, deadline: float = 30.0,
                 start_timeout: float = 120.0, handler: Optional[Callable] = None,
                 env: Optional[Callable[[int], dict[str, str]]] = None, placement: Optional[Placement] = None,
                 collective_timeout: Optional[float] = None, context: Any = None):
        """``context``: where the ranks start from, a fresh interpreter (``spawn``, the default) or a
        fork server's context (``execute/compiled/warm.py``: torch already imported, so a rank starts
        in a fraction of a second). A forked rank sets ``env`` itself when it starts, so only what is
        read after that (MKL's settings, inductor's folders) takes effect, and it dies with the
        server, which dies with this process."""
        self.world_size = world_size
        self.context = context
        self.placement = placement or place(backend, world_size)  # ValueError: NCCL asked for without GPUs
        if backend and backend != "auto" and self.placement.backend != backend:
            warnings.warn(f"RankPool: {backend} was asked for; running {self.placement.describe()}", stacklevel=2)
        self.backend, self.device = self.placement.backend, self.placement.device
        self.deadline, self.start_timeout = deadline, start_timeout
        # How long a rank waits in a collective for peers that never join (one rank's job failed):
        # by default well past the run's deadline, so the parent's deadline decides first.
        self.collective_timeout = collective_timeout or max(deadline * 4, 60)
        self.handler, self.env = handler, env
        self.processes: list = []
        self.restarts = 0
        self.dead_between_cases = 0  # ranks heal() found dead before a case was sent
        self.fresh = ""  # why the last run's jobs went to ranks restarted for it ("": they did not)
        self.events: list[str] = []  # restarts and why (a rank that died between cases, a failed case)

    def __enter__(self) -> "RankPool":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Spawn the ranks and wait until every one has joined the process group; on failure the
        ranks spawned so far are killed and reaped, and PoolStartFailure says why."""
        try:
            self._start()
        except BaseException as exc:
            self._kill()
            shutil.rmtree(getattr(self, "folder", ""), ignore_errors=True)
            if isinstance(exc, PoolStartFailure) or not isinstance(exc, Exception):
                raise
            raise PoolStartFailure("error", f"the pool did not start: {type(exc).__name__}: {exc}", {}, {}) from exc

    def _start(self) -> None:
        context = self.context or multiprocessing.get_context("spawn")
        spawned = context.get_start_method() == "spawn"
        envs = [self.env(rank) if self.env else {} for rank in range(self.world_size)]
        unset = [] if spawned else sorted({name for env in envs for name in env if name in READ_AT_START})
        if unset:  # a forked rank's interpreter has started: these would silently keep the server's values
            raise PoolStartFailure("error", f"the pool did not start: {', '.join(unset)} is read when an "
                                   f"interpreter starts, so forked ranks cannot take it (spawn them)", {}, {})
        self.folder = tempfile.mkdtemp(prefix="fsdp-verify-pg-")
        store = os.path.join(self.folder, "store")
        self.slots = [context.Array(ctypes.c_char, ENTRY_BYTES, lock=False) for _ in range(self.world_size)]
        self.conns, self.processes = [], []
        handler = f"{self.handler.__module__}:{self.handler.__qualname__}" if self.handler else None
        for rank in range(self.world_size):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, daemon=True, name=f"fsdp-verify-rank{rank}",
                                      args=(rank, self.world_size, store, child, self.slots[rank], self.backend,
                                            self.collective_timeout, self.device, handler,
                                            os.getpid() if spawned else None, envs[rank]))
            with _environment(envs[rank]):  # a spawned child reads it at start
                process.start()
            child.close()
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
        end = time.monotonic() + 3
        for process in self.processes:
            process.join(timeout=max(0.0, end - time.monotonic()))
        self._kill()
        shutil.rmtree(getattr(self, "folder", ""), ignore_errors=True)

    def _kill(self) -> None:
        for process in self.processes:
            if process.is_alive():
                process.kill()
        for process in self.processes:
            process.join(timeout=10)
        self.processes = [p for p in self.processes if p.is_alive()]

    def restart(self, why: str = "") -> None:
        """Tear down (kill and reap) and start afresh."""
        if why:
            self.events.append(why)
        self._kill()
        shutil.rmtree(getattr(self, "folder", ""), ignore_errors=True)
        self.restarts += 1
        self.start()

    def flight_record(self) -> dict[int, str]:
        """The last collective each rank entered."""
        return {rank: slot.value.decode(errors="replace") for rank, slot in enumerate(self.slots)}

    def _collect(self, pending: dict[int, Any], timeout: float, expect: str = "ok") -> dict[int, Any]:
        results, errors, died = {}, {}, set()
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
                    self.processes[rank].join(2)
                    errors[rank] = f"rank {rank} died ({exit_reason(self.processes[rank].exitcode)})"
                    died.add(rank)
                    continue
                if status == expect:
                    results[rank] = payload
                else:
                    errors[rank] = payload
            if errors:
                end = min(end, time.monotonic() + 2.0)  # peers of a failed rank usually hang: short grace
        if errors or waiting:
            record = self.flight_record()
            kind = "died" if died else "error" if errors else "hang"
            hung = sorted(waiting.values())
            failed = sorted(died) or sorted(errors) or hung
            message = "; ".join([*(errors[r].strip().splitlines()[-1] for r in sorted(died)),
                                 *([f"ranks {sorted(set(errors) - died)} failed"] if set(errors) - died else []),
                                 *([f"ranks {hung} did not finish within {timeout:.0f}s"] if hung else [])])
            server = lost_server(self.context) if died else None
            if server is not None:  # the caller restarts the server as it started it; the next run heals
                when = "start" if expect == "ready" else "case"
                message = (f"the fork server the ranks started from (pid {server}) died during the {when}, so "
                           f"ranks {sorted(died)} read as exit code 255 whatever they did")
                self.events.append(f"stopped after a lost {when}: {message}")
                self._kill()  # their exit status is the dead server's: only the pool's record of them goes
                raise ServerLost("lost", message, record, errors, tuple(failed))
            if expect == "ready":
                raise PoolStartFailure(kind, f"the pool did not start: {message}", record, errors, tuple(failed))
            try:
                self.restart(f"restarted after a failed case: {message}")
            except PoolStartFailure as exc:  # the case's failure is still what is reported; the next run heals
                self.events.append(f"the restart after that case failed: {exc}")
            raise RankFailure(kind, message, record, errors, tuple(failed))
        return results

    def heal(self) -> None:
        """Restart the pool when a rank died (or its pipe broke) since the last case, naming it."""
        dead = [rank for rank, process in enumerate(self.processes) if not process.is_alive()]
        if dead or len(self.processes) != self.world_size:
            self.dead_between_cases += len(dead)
            record = self.flight_record() if getattr(self, "slots", None) else {}
            why = "; ".join(f"rank {rank} died between cases ({exit_reason(self.processes[rank].exitcode)}; "
                            f"last collective: {record.get(rank) or 'none'})" for rank in dead)
            server = lost_server(self.context) if dead else None
            if server is not None:
                why = f"{why} (the fork server they started from, pid {server}, had died)"
            self.restart(why or "restarted: ranks missing")

    def run(self, jobs: dict[int, Job]) -> dict[int, dict]:
        """Run one case on every rank; raises RankFailure (after restarting the pool) on failure,
        PoolStartFailure when the ranks cannot be (re)started before the case is sent, and ServerLost
        (the pool stopped, not restarted) when the fork server the ranks came from died."""
        if sorted(jobs) != list(range(self.world_size)):
            raise ValueError(f"a job per rank 0..{self.world_size - 1} is required, got ranks {sorted(jobs)}")
        restarts = self.restarts
        self.heal()
        try:
            for rank, job in jobs.items():
                self.conns[rank].send(job)
        except (BrokenPipeError, ConnectionError, OSError) as exc:
            time.sleep(0.2)  # a rank died while the case was sent: let it be reaped, heal, send once more
            for process in self.processes:
                process.join(0.1)
            dead = "; ".join(f"rank {r} {exit_reason(p.exitcode)}" for r, p in enumerate(self.processes)
                             if p.exitcode is not None)
            self.restart(f"restarted: a rank's pipe broke while a case was sent ({type(exc).__name__}"
                         f"{': ' + dead if dead else ''})")
            for rank, job in jobs.items():
                self.conns[rank].send(job)
        # Ranks started for this call hold nothing a handler kept from earlier calls (``ctx.state``):
        # a caller whose phases share state checks this (the restart's reason; empty: not fresh).
        restarted = self.restarts != restarts
        self.fresh = (self.events[-1] if self.events else "restarted") if restarted else ""
        return self._collect(dict(jobs), self.deadline)


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """``os.environ`` with ``values`` set, restored afterwards."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def reduce_sources(case) -> tuple[str, ...]:
    """Names of the nodes feeding reduce-scatters and all-reduces: made exact in ``exact`` mode."""
    return collectives.reduce_sources(case.graph)


def jobs_for(case, rewritten: dict, seed: Optional[int] = None, mode: str = "exact",
             originals: Optional[dict] = None) -> dict[int, Job]:
    """One Job per rank from a case and its rewritten modules (described with the importer)."""
    from fsdp_verify.graph.builder import localize
    from fsdp_verify.graph.importer import import_module
    groups = {name: [list(p) for p in parts] for name, parts in case.graph.groups.items()}
    seed = case.seed if seed is None else seed
    exact = reduce_sources(case) if mode == "exact" else ()
    jobs = {}
    for rank in case.graph.world():
        original = import_module(originals[rank]).to_json() if originals else localize(case.graph, rank).to_json()
        jobs[rank] = Job(groups, original, import_module(rewritten[rank]).to_json(), seed, mode, exact)
    return jobs
