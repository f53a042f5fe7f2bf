"""Checker cost relative to the reference plan+rewrite, per graph size, and growth exponents.

    python benchmarks/bench_checkers.py [--sizes 1 10 100] [--repeat 1]

Graph size is set by the number of identical blocks (5 parameters each, ~19 nodes per
parameter). For each size it prints the node count, the plan+rewrite seconds, each checker's
seconds and its ratio to plan+rewrite, and the growth exponent log(t2/t1)/log(n2/n1) between
consecutive sizes (1.0 = linear).
"""

from __future__ import annotations

import argparse
import math
import time

from fsdp_verify.case import Case
from fsdp_verify.checks import CheckContext, default_checkers
from fsdp_verify.orchestrate import run_target
from fsdp_verify.targets import get_target
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render

BLOCK = (ParamDraw((2, 4), view="t"), ParamDraw((4,), view="flat"), ParamDraw((2, 2, 2), view="split"),
         ParamDraw((1, 6), view="chain"), ParamDraw((3, 2), view="slice"))


def measure(blocks: int, repeat: int) -> dict:
    case = Case(render(Blueprint(blocks=(BLOCK,) * blocks)))
    target = get_target("reference")
    best: dict[str, float] = {}
    for _ in range(repeat):
        start = time.perf_counter()
        run = run_target(target, case)
        best["plan+rewrite"] = min(best.get("plan+rewrite", math.inf), time.perf_counter() - start)
        ctx = CheckContext(run, target)
        for name, checker in default_checkers().items():
            start = time.perf_counter()
            findings = checker.run(ctx)
            assert not findings, findings
            best[name] = min(best.get(name, math.inf), time.perf_counter() - start)
    return {"nodes": len(case.graph.nodes), **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100], help="block counts")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    rows = [measure(blocks, args.repeat) for blocks in args.sizes]
    names = ["plan+rewrite", *default_checkers()]
    print(f"{'nodes':>7} " + " ".join(f"{n:>13}" for n in names) + f" {'all/plan':>9}")
    for row in rows:
        base = row["plan+rewrite"]
        cells = [f"{row[n]:7.3f}s" + (f" {row[n] / base:4.1f}x" if n != "plan+rewrite" else "      ") for n in names]
        total = sum(row[n] for n in default_checkers()) / base
        print(f"{row['nodes']:>7} " + " ".join(f"{c:>13}" for c in cells) + f" {total:>8.1f}x")
    for a, b in zip(rows, rows[1:]):
        growth = {n: math.log(b[n] / a[n]) / math.log(b["nodes"] / a["nodes"]) for n in names if a[n] > 0}
        print(f"growth {a['nodes']}->{b['nodes']} nodes: " + ", ".join(f"{n} {g:.2f}" for n, g in growth.items()))


if __name__ == "__main__":
    main()
