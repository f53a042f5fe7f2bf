"""Replay corpus cases on real ranks with PyTorch's own launcher, on one node or across nodes.

    torchrun --standalone --nproc-per-node 2 -m fsdp_verify.torchrun_replay corpus/ [--target reference]
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        -m fsdp_verify.torchrun_replay corpus/            # cases with 32 ranks, more than one machine holds

This is the real mode of ``fsdp-verify replay --ranks real`` for cases with more ranks than one
machine runs: every process plans and rewrites only its own rank's graph, in its own environment
(its own ``PYTHONHASHSEED``: random per process unless the launch sets one), exchanges plan digests
over the real process group as the pass driver does (``targets/rank_side.py``), then runs its
original and rewritten graph with real collectives (NCCL when every local rank has a GPU; with
fewer GPUs CUDA compute with gloo collectives; gloo on CPU otherwise; printed). Each process also
simulates the world of the rank processes' own graphs and compares its real outputs with it.
Rank 0 prints one verdict per case (``ok``, ``FAIL`` with what each rank saw, ``skip`` with why);
cases whose world size differs from the launch are skipped and counted. Exit code 1 when any
case fails (rank-dependent planning, a rewritten graph that differs from its original, real
outputs that differ from the simulated world's).
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
from .checks.real_ranks import HASH_STRIDE, unrunnable_collectives
from .execute.distributed import place, reduce_sources
from .execute.inputs import exact_override
from .execute.world import build_world, simulate
from .graph.builder import build_module
from .graph.spec import graph_from_json
from .targets.rank_side import RealJob, execute_on_rank, plan_on_rank


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b))


def replay_case(case_doc: dict, case, target: str, rank: int, world: int, device: str, staged: bool,
                cache: dict) -> str:
    """This rank's verdict on one case: ``ok``, ``skip: why`` or what failed. Every rank makes the
    same collective calls whatever happens, so no rank is left waiting."""
    slot = SimpleNamespace(value=b"")
    state: dict = {}
    planned = plan_on_rank(target, case_doc, rank, world, state=state, cache=cache)
    statuses = {peer["rank"]: peer["status"] for peer in planned["peers"]}
    if "disagree" in statuses.values():
        first = next(p for p in planned["peers"] if p["status"] == "disagree")
        seeds = {p["rank"]: p.get("hashseed") for p in planned["peers"]}
        return f"rank-dependent planning: {first['message']} (PYTHONHASHSEED per rank {seeds})"
    raised = sorted(r for r, s in statuses.items() if s == "target_error")
    if raised and len(raised) < world:
        return f"rank-dependent planning: the target raised on ranks {raised} only"
    if raised:
        return f"skip: the target raised on every rank ({planned.get('error_type')}: {planned.get('message')})"
    docs: list = [None] * world
    dist.all_gather_object(docs, planned["rewritten"])
    specs = {peer: graph_from_json(doc) for peer, doc in enumerate(docs)}
    unrunnable = unrunnable_collectives(case, {peer: case.graph for peer in range(world)})
    if unrunnable:
        return f"skip: the original graphs hold collectives no real group can run ({unrunnable[0]})"
    unrunnable = unrunnable_collectives(case, specs)
    if unrunnable:
        return f"the ranks' rewritten graphs hold collectives no real group can run: {unrunnable[0]}"
    exact = reduce_sources(case)
    override = exact_override(exact, case.seed)
    try:
        original = simulate(case, build_world(case), override=override)
        rewritten = simulate(case, {peer: build_module(spec) for peer, spec in specs.items()}, override=override)
    except Exception as exc:  # noqa: BLE001 - the same on every rank: nobody enters a collective
        return f"skip: not executed, the graphs do not run in the simulated world ({type(exc).__name__}: {exc})"
    ran = execute_on_rank(RealJob("execute", seed=case.seed, exact_sources=exact), state, rank, device, slot, cache,
                          staged)
    problems = []
    if not _same(ran["original"], ran["rewritten"]):
        problems.append("rewritten vs original (real) differ")
    if not _same(original.outputs[rank], ran["original"]):
        problems.append("real vs simulated (original) differ")
    if not _same(rewritten.outputs[rank], ran["rewritten"]):
        problems.append("real vs simulated (rewritten) differ")
    return "; ".join(problems) or "ok"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=["corpus"])
    parser.add_argument("--target", default="reference", help="target name the ranks resolve (default reference)")
    parser.add_argument("--backend", default="auto", choices=("auto", "gloo", "nccl"))
    parser.add_argument("--hash-seed", type=int, default=None, metavar="BASE",
                        help=f"give rank r PYTHONHASHSEED = BASE + r x {HASH_STRIDE} (the process restarts itself "
                             f"with it; default: whatever the launch gives, random per process when unset)")
    args = parser.parse_args(argv)
    if args.hash_seed is not None:
        wanted = str(args.hash_seed + int(os.environ.get("RANK", "0")) * HASH_STRIDE)
        if os.environ.get("PYTHONHASHSEED") != wanted:  # the seed is read at interpreter start: re-exec
            os.environ["PYTHONHASHSEED"] = wanted
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-m", "fsdp_verify.torchrun_replay",
                                      *(argv if argv is not None else sys.argv[1:])])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    placement = place(args.backend, local_world)  # per node: NCCL needs a GPU per local rank
    device = "cpu"
    if placement.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
    dist.init_process_group(placement.backend, timeout=datetime.timedelta(seconds=300))
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"ranks: real, {placement.backend} on {placement.device}, {world} ranks "
              f"({local_world} per node){'; ' + placement.note if placement.note else ''}", flush=True)
    cache: dict = {}
    failures = skipped = other_world = 0
    for path in corpus.discover(args.paths):
        try:
            entry = corpus.load(path)
        except corpus.CorpusError as exc:
            if rank == 0:
                print(f"skip {exc}")
            continue
        case = entry.case
        if sorted(case.graph.world()) != list(range(world)):
            other_world += 1
            continue
        try:
            verdict = replay_case(entry.case.to_json(), case, args.target, rank, world, device,
                                  placement.backend == "gloo" and placement.device == "cuda", cache)
        except Exception as exc:  # noqa: BLE001 - a real failure on this rank (peers may hang until the timeout)
            verdict = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        verdicts: list = [None] * world
        dist.all_gather_object(verdicts, verdict)
        bad = {r: v for r, v in enumerate(verdicts) if v != "ok" and not v.startswith("skip")}
        skip = not bad and any(v.startswith("skip") for v in verdicts)
        failures += bool(bad)
        skipped += skip
        if rank == 0:
            label = "FAIL" if bad else "skip" if skip else "ok  "
            detail = f": {bad}" if bad else f": {verdicts[0][6:]}" if skip else ""
            print(f"{label} {path}{detail}", flush=True)
    if rank == 0:
        print(f"{failures} failed, {skipped} skipped; {other_world} cases need another world size than {world} ranks")
    dist.destroy_process_group()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
