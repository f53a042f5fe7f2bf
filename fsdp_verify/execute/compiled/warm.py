"""The warm path of inductor's FX graph cache: a configuration compiled again in a fresh process
that loads what the first compile stored.

Why a fresh process: a cache hit skips the post-grad passes (bucketing among them), so whatever
those passes leave behind at compile time (a custom op they register, a config they read) is
absent when a later job only loads the compiled graph. An in-process second compile would still
have it. Why a fresh cache folder per configuration: an entry from another run or another
configuration must not be the one loaded (the cold compile must store, the warm one must hit).

The process comes from a fork server that has imported torch, dynamo, inductor's ``compile_fx`` and
this harness and has probed the machine's vector instruction sets (``probed.py``), but never
compiled anything: each check pays a fork, not an interpreter's start, those imports and the probe
(three of the four seconds a check would take). Why that keeps the process fresh: a user's warm start
imports the same modules before it looks in the cache (``torch.compile`` is dynamo, the lookup is
in ``compile_fx``), and what only the post-grad passes import (the bucketing modules, which register
their custom ops on import: F11) is still absent. The child checks that before it compiles: a
server that holds a pass module gives no verdict. The child reads a JSON request and writes a JSON
reply (tensors as dtype, shape and base64 bytes, so the comparison stays bitwise).
"""

from __future__ import annotations

import atexit
import base64
import json
import multiprocessing
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from fsdp_verify.execute.compiled import blas
from fsdp_verify.execute.compiled.builtin import plain, tensors

WARM_TIMEOUT = 600.0  # seconds the fresh process may take (start, imports, load, one step)
_ENV = "TORCHINDUCTOR_CACHE_DIR"


@dataclass
class Warm:
    """What the warm compile gave: its outputs, its FX graph cache hits and misses, or its error."""

    outputs: dict[str, torch.Tensor] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0
    error: Optional[str] = None
    seconds: float = 0.0
    unjudged: Optional[str] = None  # the harness's own failure (no reply, a timeout): nothing said of torch
    blas: str = ""  # the fresh process's ``blas.Blas`` state ("" when it did not reply)

    @property
    def visited(self) -> bool:
        """Whether the warm path ran: every compiled graph came from the cache (no miss, a hit),
        whether or not what it loaded then ran (F11 fails after its hits)."""
        return self.hits > 0 and self.misses == 0

    def summary(self) -> dict[str, Any]:
        """The report's record of the warm compile."""
        found = {"hits": self.hits, "misses": self.misses, "visited": self.visited, "seconds": round(self.seconds, 1),
                 "blas": self.blas}
        return {**found, "unjudged": self.unjudged} if self.unjudged else found


_GRAPH_CACHES = ("fxgraph", "aotautograd", "dynamo")  # the folders of inductor's cache that hold compiled graphs


def link_kernel_caches(folder: str | Path) -> None:
    """Fill a fresh cache folder with links to everything of the shared cache but its compiled
    graphs. Only the FX graph and AOTAutograd entries decide the warm path; compiling every C++
    kernel again would only cost time."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    shared = Path(cache_dir())
    shared.mkdir(parents=True, exist_ok=True)
    for entry in shared.iterdir():
        if entry.name not in _GRAPH_CACHES:
            (Path(folder) / entry.name).symlink_to(entry)


def cache_counts() -> tuple[int, int]:
    """Hits and misses of the compiled-graph caches so far in this process. AOTAutograd's cache
    sits above inductor's and, on a hit, loads inductor's entries itself."""
    from torch._dynamo.utils import counters
    return (counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
            counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"])


def _encode(outputs: dict[str, torch.Tensor]) -> dict[str, list]:
    """``plain`` tensors with their bytes in base64, for a JSON reply."""
    return {name: [dtype, shape, base64.b64encode(data).decode()] for name, (dtype, shape, data) in plain(outputs).items()}


def _decode(doc: dict[str, list]) -> dict[str, torch.Tensor]:
    return tensors({name: (dtype, shape, base64.b64decode(data)) for name, (dtype, shape, data) in doc.items()})


# Caches keyed by a job, not by the cache folder, would load another run's graphs: the server starts
# without these (torch reads them at import, so a child could not drop them).
_SHARED_STATE = ("TORCH_COMPILE_JOB_ID", "TORCH_CACHING_PRECOMPILE")
_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "torch._inductor.compile_fx", "fsdp_verify.capture.model",
            "fsdp_verify.execute.compiled.builtin", "fsdp_verify.execute.compiled.probed"]
# The modules of inductor's passes that bucket collectives: only running a pass imports them, and a
# cache hit runs none, so a process that holds one at its start is not the fresh process a warm
# start is.
PASS_MODULES = tuple(f"torch._inductor.fx_passes.{name}" for name in (
    "bucketing", "fsdp", "overlap_scheduling", "overlap_preserving_bucketer", "overlap_manual_scheduling"))
_server: Optional[Any] = None


def fork_server() -> Any:
    """The fork server's context, its server running (or to be started by the next process start,
    which then says why it cannot), with torch and the harness imported."""
    global _server
    if _server is None:
        _server = multiprocessing.get_context("forkserver")
        _server.set_forkserver_preload(_PRELOAD)
        atexit.register(_stop_server)
    _start_without_shared_state()
    return _server


def _start_without_shared_state() -> None:
    """Start the server unless it runs (a dead one is started again), in an environment without
    ``_SHARED_STATE``: torch reads those variables when the server imports it, before any child
    could drop them."""
    from multiprocessing import forkserver
    saved = {name: os.environ.pop(name) for name in _SHARED_STATE if name in os.environ}
    try:
        forkserver.ensure_running()
    except OSError:  # the next process start tries again and, failing, is reported by its caller
        pass
    finally:
        os.environ.update(saved)


def _stop_server() -> None:
    """Stop the fork server and wait for it: its CPU and its children's then count in this process's
    (a benchmark's figure), and no server outlives the run."""
    from multiprocessing import forkserver
    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except OSError:  # already gone
            pass


def held_passes(modules: Any) -> list[str]:
    """The bucketing pass modules among ``modules`` (``sys.modules``)."""
    return [name for name in PASS_MODULES if name in modules]


def not_fresh(held: list[str]) -> str:
    """Why a warm process (or rank) that held ``held`` judged nothing."""
    return f"the warm process was not fresh: it held {', '.join(held)} before loading (a warm start imports no pass)"


def _child(request: str, reply: str, folder: str, log: str) -> None:
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(descriptor, 1)
    os.dup2(descriptor, 2)
    os.environ[_ENV] = folder  # read by inductor at each use: this process's whole cache is the folder
    os.environ.update(blas.ENV)  # read by MKL at its first use, which is this process's (blas.py)
    sys.exit(main([request, reply]))


def warm_outputs(desc_json: dict, options: dict[str, Any], seed: int, folder: str | Path,
                 timeout: float = WARM_TIMEOUT) -> Warm:
    """Run the configuration once more in a fresh process on the cache in ``folder``."""
    folder = Path(folder)
    request, reply, log = folder / "warm-request.json", folder / "warm-reply.json", folder / "warm-output.log"
    request.write_text(json.dumps({"desc": desc_json, "options": options, "seed": seed}))
    started = time.monotonic()
    try:
        process = fork_server().Process(target=_child, args=(str(request), str(reply), str(folder), str(log)),
                                        daemon=True)
        process.start()
    except OSError as exc:  # no process to load in: the harness's failure, nothing said of torch
        return Warm(unjudged=f"the warm compile's process did not start: {exc}", seconds=time.monotonic() - started)
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join(5)
        return Warm(unjudged=f"the warm compile did not finish in {timeout:.0f} s", seconds=time.monotonic() - started)
    seconds = time.monotonic() - started
    try:
        doc = json.loads(reply.read_text())
    except (OSError, ValueError):
        try:
            tail = (log.read_text(errors="replace").strip().splitlines() or [""])[-1]
        except OSError:
            tail = ""
        return Warm(unjudged=f"the warm compile's process exited {process.exitcode} without a reply: {tail}",
                    seconds=seconds)
    return read_reply(doc, seconds)


def read_reply(doc: dict[str, Any], seconds: float) -> Warm:
    """The warm process's reply as a ``Warm``: a process that was not fresh judged nothing."""
    state = str(doc.get("blas", ""))
    if doc.get("held_passes"):
        return Warm(unjudged=not_fresh(doc["held_passes"]), seconds=seconds, blas=state)
    if doc.get("error"):
        return Warm(hits=int(doc.get("hits", 0)), misses=int(doc.get("misses", 0)), error=str(doc["error"]),
                    seconds=seconds, blas=state)
    return Warm(_decode(doc["outputs"]), int(doc["hits"]), int(doc["misses"]), None, seconds, blas=state)


def main(argv: list[str]) -> int:
    """The child: compile and step the requested configuration with the FX graph cache on."""
    request, reply = Path(argv[0]), Path(argv[1])
    doc = json.loads(request.read_text())
    from torch._dynamo.utils import counters

    from fsdp_verify.capture.model import desc_from_json
    from fsdp_verify.execute.compiled.drawn import compiled_outputs
    answer: dict[str, Any] = {"blas": blas.pin().value}
    held = held_passes(sys.modules)
    if held:  # its ops registered: a cache hit would find what a user's warm start lacks
        reply.write_text(json.dumps({**answer, "held_passes": held}))
        return 0
    try:
        outputs, _ = compiled_outputs(desc_from_json(doc["desc"]), doc["options"], doc["seed"], cache=True)
        answer["outputs"] = _encode(outputs)
    except Exception as exc:  # noqa: BLE001 - the warm path failing is what this process reports
        message = (str(exc).strip().splitlines() or [""])[0]
        answer["error"] = f"{type(exc).__name__}: {message}"
    answer["hits"], answer["misses"] = cache_counts()
    answer["counters"] = {f"{group}.{name}": count for group in ("inductor", "aot_autograd")
                          for name, count in counters[group].items() if "cache" in name}
    reply.write_text(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
