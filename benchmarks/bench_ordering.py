"""The ordering oracle's cost from 1k to 100k nodes: its CPU time, its share of all checkers, the
z3 segments it solves, and its growth exponent (goal: at most 1.1).

    .venv/bin/python benchmarks/bench_ordering.py --blocks 10 100 1000

Identical blocks of 5 parameters, reference target, 2 ranks. CPU time (``time.process_time``) is
printed beside wall time because the machines are shared.
"""

from __future__ import annotations

import argparse
import math
import time

from fsdp_verify.model.case import Case
from fsdp_verify.checks import CheckContext, default_checkers
from fsdp_verify.checks import schedule
from fsdp_verify.engine.run_case import run_target
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets import get_target

BLOCK = (ParamDraw((2, 4), view="t"), ParamDraw((4,), view="flat"), ParamDraw((2, 2, 2), view="split"),
         ParamDraw((1, 6), view="chain"), ParamDraw((3, 2), view="slice"))


def measure(blocks: int, everything: bool) -> dict:
    case = Case(render(Blueprint(blocks=(BLOCK,) * blocks)))
    target = get_target("reference")
    cpu, wall = time.process_time(), time.perf_counter()
    run = run_target(target, case)
    row = {"nodes": len(case.graph.nodes), "plan+rewrite": time.process_time() - cpu,
           "plan+rewrite wall": time.perf_counter() - wall}
    ctx = CheckContext(run, target)
    solved = []
    original_solve = schedule._solve

    def counting(*args, **kwargs):
        solved.append(1)
        return original_solve(*args, **kwargs)

    schedule._solve = counting
    try:
        for name, checker in default_checkers().items():
            if name != "ordering" and not everything:
                continue
            cpu, wall = time.process_time(), time.perf_counter()
            findings = checker.run(ctx)
            assert not findings, findings
            row[name], row[f"{name} wall"] = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        schedule._solve = original_solve
    row["segments"] = len(solved)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--all-up-to", type=int, default=100, help="also time every checker up to this many blocks")
    args = parser.parse_args()
    rows = [measure(b, b <= args.all_up_to) for b in args.blocks]
    print(f"{'nodes':>7} {'plan+rewrite cpu':>17} {'ordering cpu':>13} {'ordering wall':>14} {'z3 segments':>12} "
          f"{'ordering share of checkers':>27}")
    for row in rows:
        checkers = [n for n in default_checkers() if n in row]
        share = row["ordering"] / sum(row[n] for n in checkers) if len(checkers) > 1 else float("nan")
        print(f"{row['nodes']:>7} {row['plan+rewrite']:>16.2f}s {row['ordering']:>12.2f}s "
              f"{row['ordering wall']:>13.2f}s {row['segments']:>12} {share:>27.0%}")
    for a, b in zip(rows, rows[1:]):
        growth = math.log(b["ordering"] / a["ordering"]) / math.log(b["nodes"] / a["nodes"])
        print(f"ordering growth exponent {a['nodes']} -> {b['nodes']} nodes: {growth:.2f}")
    first, last = rows[0], rows[-1]
    print(f"ordering growth exponent {first['nodes']} -> {last['nodes']} nodes: "
          f"{math.log(last['ordering'] / first['ordering']) / math.log(last['nodes'] / first['nodes']):.2f}")


if __name__ == "__main__":
    main()
