"""Replay corpus cases on real ranks with PyTorch's own launcher, on one node or across nodes.

    torchrun --standalone --nproc-per-node 2 -m fsdp_verify.execute.ranks.torchrun corpus/ [--target reference]
    torchrun --nnodes 4 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        -m fsdp_verify.execute.ranks.torchrun corpus/            # cases with 32 ranks, more than one machine holds

This is the real mode of ``fsdp-verify replay --ranks real`` for cases with more ranks than one
machine runs: every process plans and rewrites only its own rank's graph, in its own environment
(its own ``PYTHONHASHSEED``: random per process unless the launch sets one), exchanges plan digests
over the real process group as the pass driver does (``execute/ranks/rank_side.py``), then runs its
original and rewritten graph with real collectives (NCCL when every local rank has a GPU; with
fewer GPUs CUDA compute with gloo collectives; gloo on CPU otherwise; printed). Each process also
simulates the world of the rank processes' own graphs and compares its real outputs with it.
Rank 0 prints one verdict per case (``ok``, ``FAIL`` with what each rank saw, ``skip`` with why);
cases whose world size differs from the launch are skipped and counted. Every case has a deadline
(``--case-deadline``): a process still in the case then prints every thread's traceback and exits
(code 1; the launcher ends its peers), so a pure-Python hang ends the run. Exit code 1 when any
case fails (rank-dependent planning, a rewritten graph that differs from its original, real
outputs that differ from the simulated world's), 2 when no case was judged (every one skipped or
of another world size: a run that checked nothing must not read as a pass; torchrun itself exits 1
when any process fails, and names the code), else 0.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import os
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist

from fsdp_verify.graph.values import nonfinite
from fsdp_verify.corpus import files as corpus
from fsdp_verify.checks.numerics import bit_difference
from fsdp_verify.execute.ranks.judge import HASH_STRIDE, gloo_unmovable, planning, unrunnable_collectives
from fsdp_verify.execute.ranks.pool import place, reduce_sources
from fsdp_verify.execute.inputs import exact_override
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.graph.builder import build_module
from fsdp_verify.graph.spec import graph_from_json
from fsdp_verify.execute.ranks.rank_side import RealJob, execute_on_rank, plan_on_rank


def _same(a: list, b: list) -> bool:
    """The same number of outputs, each bitwise equal (NaN payloads and the sign of zero count)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)) or bit_difference(x, y) is not None:
                return False
        elif x != y:
            return False
    return True


def _nonfinite(outputs: list) -> bool:
    return any(nonfinite(v) for v in outputs)


def replay_case(case_doc: dict, case, target: str, rank: int, world: int, device: str, staged: bool,
                cache: dict) -> str:
    """This rank's verdict on one case: ``ok``, ``skip: why`` or what failed. Every rank makes the
    same collective calls whatever happens, so no rank is left waiting."""
    slot = SimpleNamespace(value=b"")
    state: dict = {}
    planned: dict = {}
    try:
        planned = plan_on_rank(target, case_doc, rank, world, state=state, cache=cache)
        mine = (planned["status"], planned.get("rewritten"), planned.get("message", ""))
    except Exception as exc:  # noqa: BLE001 - this rank's harness failed: its peers still reach the gather
        mine = ("error", None, f"{type(exc).__name__}: {str(exc)[:300]}")
    # One exchange, whatever happened: every rank learns every rank's final status (an importer that
    # failed after the ``finish`` exchange included) and its rewritten graph, and decides the same.
    gathered: list = [None] * world
    dist.all_gather_object(gathered, mine)
    errors = {peer: message for peer, (status, _, message) in enumerate(gathered) if status == "error"}
    if errors:
        return f"error: the harness failed on ranks {sorted(errors)} ({next(iter(errors.values()))})"
    peers = {peer["rank"]: peer if gathered[peer["rank"]][0] == peer["status"] else  # failed after ``finish``
             dict(peer, status=gathered[peer["rank"]][0], message=gathered[peer["rank"]][2])
             for peer in planned["peers"]}
    findings = planning(case, peers, {})
    if findings:
        return findings[0].message
    if any(status != "ok" for status, _, _ in gathered):
        return f"skip: the target raised on every rank ({gathered[0][2]})"
    specs = {peer: graph_from_json(doc) for peer, (_, doc, _) in enumerate(gathered)}
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
    if any(map(_nonfinite, original.outputs.values())) or _nonfinite(ran["original"]):
        return "skip: the original outputs are not finite, so the case cannot be judged"
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
    parser.add_argument("--case-deadline", type=float, default=600.0, metavar="SECONDS",
                        help="a process still in one case after this long prints every thread's traceback and "
                             "exits 1, ending the run (default 600; collectives time out after 300 s on their own)")
    args = parser.parse_args(argv)
    if args.hash_seed is not None:
        wanted = str(args.hash_seed + int(os.environ.get("RANK", "0")) * HASH_STRIDE)
        if os.environ.get("PYTHONHASHSEED") != wanted:  # the seed is read at interpreter start: re-exec
            os.environ["PYTHONHASHSEED"] = wanted
            sys.stdout.flush()
            os.execv(sys.executable, [sys.executable, "-m", "fsdp_verify.execute.ranks.torchrun",
                                      *(argv if argv is not None else sys.argv[1:])])
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    placement = place(args.backend, local_world)  # per node: NCCL needs a GPU per local rank
    device = "cpu"
    if placement.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
        device = f"cuda:{torch.cuda.current_device()}"
    try:
        dist.init_process_group(placement.backend, timeout=datetime.timedelta(seconds=300))
    except RuntimeError as exc:  # a peer that died while the mesh formed: nothing to judge, no traceback
        print(f"rank {os.environ.get('RANK', '?')}: the process group did not form ({exc}); "
              "no case was judged (exit 2)", flush=True)
        return 2
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"ranks: real, {placement.backend} on {placement.device}, {world} ranks "
              f"({local_world} per node){'; ' + placement.note if placement.note else ''}", flush=True)
    cache: dict = {}
    failures = skipped = other_world = judged = 0
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
        unmovable = gloo_unmovable(case) if placement.backend == "gloo" else None
        if unmovable:  # decided on the case alone, so every rank skips it alike
            if rank == 0:
                print(f"skip {path}: gloo cannot move {unmovable}")
            skipped += 1
            continue
        if rank == 0:
            print(f"case {path}", flush=True)  # named before it runs: a hang's tracebacks follow it
        # A hang in Python (a target looping, a peer that never reaches a gather) is no collective
        # timeout: the watchdog dumps every thread and exits, and the launcher stops the peers.
        faulthandler.dump_traceback_later(args.case_deadline, exit=True)
        try:
            verdict = replay_case(entry.case.to_json(), case, args.target, rank, world, device,
                                  placement.backend == "gloo" and placement.device == "cuda", cache)
        except Exception as exc:  # noqa: BLE001 - a real failure on this rank (peers may hang until the timeout)
            verdict = f"error: {type(exc).__name__}: {str(exc)[:300]}"
        verdicts: list = [None] * world
        dist.all_gather_object(verdicts, verdict)
        faulthandler.cancel_dump_traceback_later()
        bad = {r: v for r, v in enumerate(verdicts) if v != "ok" and not v.startswith("skip")}
        skip = not bad and any(v.startswith("skip") for v in verdicts)
        failures += bool(bad)
        skipped += skip
        judged += not skip
        if rank == 0:
            label = "FAIL" if bad else "skip" if skip else "ok  "
            detail = f": {bad}" if bad else f": {verdicts[0][6:]}" if skip else ""
            print(f"{label} {path}{detail}", flush=True)
    if rank == 0:
        print(f"{failures} failed, {skipped} skipped; {other_world} cases need another world size than {world} ranks"
              + ("; no case was judged (exit 2)" if not judged else ""))
    dist.destroy_process_group()
    return 1 if failures else 0 if judged else 2


if __name__ == "__main__":
    sys.exit(main())
