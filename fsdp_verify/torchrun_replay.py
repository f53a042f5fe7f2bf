"""Replay corpus cases on a real cluster with PyTorch's own launcher.

    torchrun --nproc-per-node 8 -m fsdp_verify.torchrun_replay corpus/ [--target reference]

Every process plans and rewrites the case's graphs for all ranks (the target's simulated
driver is deterministic), keeps its own rank's pair, registers the case's process groups and
runs both with real collectives (NCCL on GPUs, gloo otherwise) on exact inputs. Rank 0 prints
one verdict per case; cases whose world size differs from the launch are skipped. Exit code 1
when any rewritten graph disagrees with its original.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from . import corpus
from .orchestrate import run_target
from .targets import get_target
from .execute.distributed import _ensure_groups, _run_graph, jobs_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=["corpus"])
    parser.add_argument("--target", default="reference")
    args = parser.parse_args(argv)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        device = f"cuda:{torch.cuda.current_device()}"
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    target = get_target(args.target)
    cache: dict = {}
    slot = SimpleNamespace(value=b"")
    failures = 0
    for path in corpus.discover(args.paths):
        try:
            entry = corpus.load(path)
        except corpus.CorpusError as exc:
            if rank == 0:
                print(f"skip {exc}")
            continue
        case = entry.case
        if len(case.graph.world()) != world:
            continue
        run = run_target(target, case)
        if run.error:
            verdict = f"target error: {run.error_type}: {run.error_message}"
        else:
            job = jobs_for(case, run.rewritten, originals=run.originals)[rank]
            _ensure_groups(job.groups, rank, cache)
            original = _run_graph(job.original, job, rank, device, slot)
            rewritten = _run_graph(job.rewritten, job, rank, device, slot)
            same = len(original) == len(rewritten) and all(
                torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(original, rewritten))
            verdict = "ok" if same else "MISMATCH"
        verdicts = [None] * world
        dist.all_gather_object(verdicts, verdict)
        bad = [r for r, v in enumerate(verdicts) if v != "ok"]
        failures += bool(bad)
        if rank == 0:
            print(f"{'ok  ' if not bad else 'FAIL'} {path}" + (f": {dict((r, verdicts[r]) for r in bad)}" if bad else ""))
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
