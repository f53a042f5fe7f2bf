"""Real-collective throughput: the persistent rank pool versus a fresh process group per case.

    python benchmarks/bench_pool.py [--cases 20] [--ranks 2]

Both run the same cases (original and rewritten graph on real gloo collectives); the spawn
baseline starts a new pool for every case, which is what a naive harness does.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

from fsdp_verify.checks import CheckContext
from fsdp_verify.execute.ranks.collectives import check_collectives
from fsdp_verify.execute.ranks.pool import RankPool
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.targets import get_target
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.model.case import Case


def contexts(count: int, ranks: int) -> list[CheckContext]:
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((1, 6), view="chain"), ParamDraw((2, 2), view="split")))
    target = get_target("reference")
    base = Case(render(Blueprint(blocks=blocks, degree=ranks)))
    return [CheckContext(run_target(target, replace(base, seed=seed)), target) for seed in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--spawn-cases", type=int, default=5, help="cases timed for the spawn baseline")
    args = parser.parse_args()
    ctxs = contexts(args.cases, args.ranks)
    start = time.perf_counter()
    with RankPool(args.ranks) as pool:
        started = time.perf_counter() - start
        begin = time.perf_counter()
        for ctx in ctxs:
            assert check_collectives(ctx, pool) == []
        pooled = time.perf_counter() - begin
    begin = time.perf_counter()
    for ctx in ctxs[:args.spawn_cases]:
        with RankPool(args.ranks) as pool:
            assert check_collectives(ctx, pool) == []
    spawned = (time.perf_counter() - begin) / args.spawn_cases
    pool_rate = args.cases / (started + pooled)
    print(f"ranks {args.ranks}, {args.cases} cases")
    print(f"pool start          {started:6.2f} s (once)")
    print(f"pool per case       {pooled / args.cases:6.3f} s  -> {pool_rate:6.2f} cases/s including start-up")
    print(f"spawn per case      {spawned:6.3f} s  -> {1 / spawned:6.2f} cases/s")
    print(f"speed-up            {pool_rate * spawned:6.1f}x over {args.cases} cases "
          f"({spawned / (pooled / args.cases):.0f}x per case once started)")


if __name__ == "__main__":
    main()
