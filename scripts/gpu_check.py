"""Device check on a GPU machine; prints what ran on what.

    python scripts/gpu_check.py [--examples 20] [--ranks 2]

1. The simulated world (one process, collectives emulated: no NCCL) on CUDA tensors: original and
   rewritten graphs bitwise equal (generated and traced-model cases).
2. Real mode on real rank processes: each rank plans with its own PYTHONHASHSEED, digests cross the
   real process group, original and rewritten graphs run with real collectives, compared bitwise
   with each other and with the simulated world. NCCL with CUDA tensors when there is a GPU per
   rank; with fewer GPUs, CUDA compute with gloo collectives (said so); the hash-seed planted bug
   must be found as rank-dependent planning.

Exit code 1 when a check fails, 2 when there is no CUDA device (nothing was checked).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch
from hypothesis import Phase, given, seed, settings

from fsdp_verify.execute.ranks.judge import RealRanks
from fsdp_verify.execute.ranks.pool import place
from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.execute.world import simulate
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.strategies import cases
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.model.case import Case
from fsdp_verify.targets import get_target


def simulated_on_cuda(examples: int) -> bool:
    stats = {"cases": 0, "equal": 0, "seconds": 0.0}

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @seed(0)
    @given(cases("default", modules=True))
    def check(case):
        run = run_target(get_target("reference"), case)
        if run.error:
            return
        inputs = {r: make_inputs(case.graph, r, case.seed, device="cuda") for r in case.graph.world()}
        start = time.perf_counter()
        before = simulate(case, run.originals, inputs=inputs)
        inputs = {r: make_inputs(case.graph, r, case.seed, device="cuda") for r in case.graph.world()}
        after = simulate(case, run.rewritten, inputs=inputs)
        torch.cuda.synchronize()
        stats["seconds"] += time.perf_counter() - start
        stats["cases"] += 1
        assert all(x.is_cuda for x in before.outputs[0] if isinstance(x, torch.Tensor))
        same = all(torch.equal(x, y) for r in before.outputs for x, y in zip(before.outputs[r], after.outputs[r])
                   if isinstance(x, torch.Tensor))
        stats["equal"] += same
        assert same, case.label

    try:
        check()
    except AssertionError as exc:
        print(f"FAIL simulated world on CUDA tensors: {exc}")
        return False
    print(f"ok   simulated world (one process, emulated collectives, no NCCL) on CUDA tensors: "
          f"{stats['equal']}/{stats['cases']} cases bitwise equal, {stats['seconds']:.1f}s of simulation")
    return True


def real_ranks(world: int, examples: int) -> bool:
    placement = place("auto", world)
    print(f"real ranks: {placement.describe()}")
    if placement.backend != "nccl":
        print(f"     NCCL NOT RUN: it needs {world} GPUs for {world} ranks, this machine has {placement.gpus}; "
              f"collectives ran on gloo (CUDA compute)")
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((1, 6), view="chain"), ParamDraw((2, 2), view="split")))
    base = Case(render(Blueprint(blocks=blocks, degree=world)))
    ok = True
    with RealRanks(backend="auto", deadline=120) as session:
        start = time.perf_counter()
        for case_seed in range(examples):
            case = Case(base.graph, base.plan_args, case_seed)
            findings, why = session.check(case, "reference")
            if findings or why:
                ok = False
                print(f"FAIL real reference case seed {case_seed}: {why or findings[0].message}")
        seconds = time.perf_counter() - start
        findings, _ = session.check(base, "mutant:members_follow_hash_seed")
        killed = any(f.details.get("kind") == "rank_dependent_planning" for f in findings)
        ok = ok and killed
        report = session.report()
    print(f"{'ok  ' if ok else 'FAIL'} real ranks ({report['backend']} collectives, {report['device']} tensors, "
          f"{world} ranks): {report['executed']} cases run with real collectives, bitwise equal to each other and to "
          f"the simulated world ({seconds:.1f}s incl. pool start); hash-seed planner "
          f"{'found as rank-dependent planning' if killed else 'NOT FOUND'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=2, help="ranks of the real-mode check (default 2)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: nothing checked (run `pytest tests/execute/ranks` for gloo on CPU)")
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    ok = simulated_on_cuda(args.examples)
    ok = real_ranks(args.ranks, max(2, args.examples // 4)) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
