"""Checker cost relative to the reference plan+rewrite, per graph size, and growth exponents.

    python benchmarks/bench_checkers.py [--sizes 1 10 100] [--repeat 1]

Graph size is set by the number of identical blocks (5 parameters each, ~19 nodes per
parameter). For each size it prints the node count, the CPU seconds (``time.process_time``) of
building the per-rank graphs, of the target's own plan+rewrite and of each checker with its ratio
to plan+rewrite, the wall seconds of the whole, and the growth exponent log(t2/t1)/log(n2/n1)
between consecutive sizes (1.0 = linear), beside that of a plain linear walk of the graph measured
in the same run (on a shared machine its exponent is above 1.0 too: read a checker's against it).
"""

from __future__ import annotations

import argparse
import math
import time

from fsdp_verify.model.case import Case
from fsdp_verify.engine import collector
from fsdp_verify.checks import CheckContext, default_checkers
from fsdp_verify.checks.graph_facts import fingerprint
from fsdp_verify.checks.planner_oracle import watch_rounds
from fsdp_verify.execute.world import build_world
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets import get_target
from fsdp_verify.targets.outcome import TargetRun
from fsdp_verify.targets.watch import watching

# One pass over the rewritten graph that builds a tuple of strings per node (what the checkers'
# fingerprints do): linear by construction, so its growth exponent is the machine's own (caches
# and allocation over a larger heap), the floor a checker's exponent is read against.
WALK = "linear walk"

BLOCK = (ParamDraw((2, 4), view="t"), ParamDraw((4,), view="flat"), ParamDraw((2, 2, 2), view="split"),
         ParamDraw((1, 6), view="chain"), ParamDraw((3, 2), view="slice"))


def measure(blocks: int, repeat: int) -> dict:
    """Best-of-``repeat`` CPU seconds per stage on a graph of ``blocks`` identical blocks."""
    case = Case(render(Blueprint(blocks=(BLOCK,) * blocks)))
    target = get_target("reference")
    best: dict[str, float] = {}

    def keep(name: str, since: float) -> None:
        best[name] = min(best.get(name, math.inf), time.process_time() - since)

    wall = time.perf_counter()
    for _ in range(repeat):
        start = time.process_time()
        run = TargetRun(case, build_world(case, shared=True))  # as orchestrate.run_target
        modules = build_world(case)
        keep("build", start)
        run.watched = watch_rounds(case, modules)  # as orchestrate.run_target
        start = time.process_time()
        with watching(target, run.watched):
            run.plans = target.rewrite(case, modules)
        run.rewritten = modules
        watched = run.watched.cpu  # the planner oracle's, derived during the target's run
        keep("plan+rewrite", start + watched)
        ctx = CheckContext(run, target)
        for name, checker in default_checkers().items():
            start = time.process_time()
            findings = checker.run(ctx)
            assert not findings, findings
            keep(name, start - (watched if name == "planner" else 0.0))
        for _ in range(5):  # the yardstick: a plain linear walk, to tell the machine's growth from a checker's
            start = time.process_time()
            fingerprint(modules[min(modules)])
            keep(WALK, start)
    return {"nodes": len(case.graph.nodes), "wall": (time.perf_counter() - wall) / repeat, **best}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100], help="block counts")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--gc", choices=("tuned", "default"), default="tuned",
                        help="the campaign's collector settings (fsdp_verify.engine.collector), or CPython's own")
    args = parser.parse_args()
    collector.settle(args.gc == "tuned")  # as the campaign does once its libraries are loaded
    rows = []
    for blocks in args.sizes:
        rows.append(measure(blocks, args.repeat))
        print(f"measured {rows[-1]['nodes']} nodes", flush=True)
    names = ["build", "plan+rewrite", *default_checkers()]
    print(f"{'nodes':>7} " + " ".join(f"{n:>14}" for n in names) + f" {'checks/plan':>11} {'wall all':>9}")
    for row in rows:
        base = row["plan+rewrite"]
        cells = [f"{row[n]:7.3f}s" + (f" {row[n] / base:4.1f}x" if n != "plan+rewrite" else "      ") for n in names]
        total = sum(row[n] for n in default_checkers()) / base
        print(f"{row['nodes']:>7} " + " ".join(f"{c:>14}" for c in cells) + f" {total:>10.1f}x {row['wall']:>8.1f}s")
    for row in rows:  # issue 17: a 100k-node graph fully checked in under 60 CPU seconds
        checks = sum(row[n] for n in default_checkers())
        print(f"{row['nodes']} nodes: checks {checks:.2f} cpu s, with the build {checks + row['build']:.2f} cpu s")
    for a, b in zip(rows, rows[1:]):
        growth = {n: math.log(b[n] / a[n]) / math.log(b["nodes"] / a["nodes"])
                  for n in (*names, WALK) if a[n] > 0 and b[n] > 0}
        print(f"growth {a['nodes']}->{b['nodes']} nodes: " + ", ".join(f"{n} {g:.2f}" for n, g in growth.items()))


if __name__ == "__main__":
    main()
