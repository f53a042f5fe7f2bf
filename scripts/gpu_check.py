"""Device check: the simulated world on a CUDA device gives bitwise-equal outputs for original and
rewritten graphs (generated and traced-model cases), and the real NCCL pool when 2+ GPUs exist.

    python scripts/gpu_check.py [--examples 20]
"""

from __future__ import annotations

import argparse
import time

import torch
from hypothesis import Phase, given, seed, settings

from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.execute.world import simulate
from fsdp_verify.orchestrate import run_target
from fsdp_verify.profiles import SLOW_OK
from fsdp_verify.targets import get_target
from fsdp_verify.strategies import cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=20)
    args = parser.parse_args()
    assert torch.cuda.is_available(), "no CUDA device"
    print("device:", torch.cuda.get_device_name(0), "torch", torch.__version__)
    stats = {"cases": 0, "equal": 0, "seconds": 0.0}

    @settings(max_examples=args.examples, database=None, phases=[Phase.generate], deadline=None,
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
        same = all(torch.equal(x, y) for r in before.outputs for x, y in zip(before.outputs[r], after.outputs[r])
                   if isinstance(x, torch.Tensor))
        assert all(x.is_cuda for x in before.outputs[0] if isinstance(x, torch.Tensor))
        stats["equal"] += same
        assert same, case.label

    check()
    print(f"cuda simulated world: {stats['equal']}/{stats['cases']} cases bitwise equal, "
          f"{stats['seconds']:.1f}s of simulation")


if __name__ == "__main__":
    main()
