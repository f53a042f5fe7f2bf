"""Where a fuzz example's time goes: the target's own plan+rewrite against the harness's checks,
per checker, in CPU seconds (``time.process_time``) beside wall seconds, on the default campaign
mix (the cases are drawn first, so generation is not counted).

    python benchmarks/bench_throughput.py [--examples 150] [--seed 0] [--profile out.prof]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator, Optional

from hypothesis import HealthCheck, Phase, given, seed, settings

from fsdp_verify.engine import collector
from fsdp_verify.checks import CheckContext, default_checkers
from fsdp_verify.checks.graph_facts import is_launch
from fsdp_verify.checks.planner_oracle import watch_rounds
from fsdp_verify.execute.world import build_world
from fsdp_verify.targets.outcome import TargetRun
from fsdp_verify.strategies import cases
from fsdp_verify.targets import get_target
from fsdp_verify.targets.watch import watching


def draw(count: int, at: int) -> list:
    """``count`` cases of the default campaign mix, reproducibly."""
    drawn: list = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @seed(at)
    @given(cases("default", modules=True))
    def collect(case) -> None:
        drawn.append(case)

    collect()
    return drawn[:count]


def source(case) -> str:
    """``traced`` (a graph traced from an nn.Module) or ``generated`` (blueprints, mutations, hazards)."""
    return "traced" if case.label.startswith("module") else "generated"


def kind(case) -> str:
    """The strategy that drew the case: ``module`` (traced), ``fsdp_graphs`` (a plain blueprint),
    ``hazards`` or a mutation kind (``skip``, ``split``, ``singleton``, ``fusion``, ``args``)."""
    return case.label.split(":")[0]


@contextlib.contextmanager
def timed_target(target, spent: list[float]) -> Iterator[None]:
    """Within the block, the CPU seconds of the target's own ``plan`` and rewriter calls (which
    checkers re-run: consistency's re-plan and stale plan, the planner oracle's purity and
    determinism plans, replays) add up in ``spent[0]``."""
    plan, rewriters = target.plan, target.rewriters

    def timed(call):
        def run(*args, **kwargs):
            start = time.process_time()
            try:
                return call(*args, **kwargs)
            finally:
                spent[0] += time.process_time() - start
        return run

    target.plan = timed(plan)
    target.rewriters = lambda: tuple(timed(rewriter) for rewriter in rewriters())
    try:
        yield
    finally:
        del target.plan, target.rewriters


def measure_case(case, target) -> Optional[tuple[dict[str, list[float]], int, int]]:
    """CPU and wall seconds of each stage of one case: building the graphs, the target's
    plan+rewrite and each checker (what ``orchestrate.run_target`` and ``check_run`` do, stage by
    stage), with the nodes of the rewrite and the launches fusion removed, summed over the ranks
    (the checked work a case's node count does not show); None when the target refuses the case
    (nothing to check)."""
    spent: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    c, w = time.process_time(), time.perf_counter()
    run = TargetRun(case, build_world(case, shared=True))
    modules = build_world(case)
    spent["build"] = [time.process_time() - c, time.perf_counter() - w]
    run.watched = watch_rounds(case, modules)
    c, w = time.process_time(), time.perf_counter()
    try:
        with watching(target, run.watched):
            run.plans = target.rewrite(case, modules)
    except Exception:  # noqa: BLE001 - a refused case has nothing to check
        return None
    finally:
        # what the planner oracle derived during the target's run is the harness's
        watched = run.watched.cpu if run.watched is not None else 0.0
        spent["target"] = [time.process_time() - c - watched, time.perf_counter() - w - watched]
        spent["planner"] = [watched, watched]
    run.rewritten = modules
    rewrite_nodes = sum(len(module.graph.nodes) for module in modules.values())
    fused_away = sum(1 for module in run.originals.values() for node in module.graph.nodes if is_launch(node)) - \
        sum(1 for module in modules.values() for node in module.graph.nodes if is_launch(node))
    ctx = CheckContext(run, target)
    rerun = [0.0]
    with timed_target(target, rerun):
        for name, checker in default_checkers().items():
            c, w = time.process_time(), time.perf_counter()
            if checker.skip_reason is None or checker.skip_reason(ctx) is None:
                checker.run(ctx)
            spent[name][0] += time.process_time() - c
            spent[name][1] += time.perf_counter() - w
    spent[RERUN] = [rerun[0], rerun[0]]
    return dict(spent), rewrite_nodes, fused_away


RERUN = "(of which target code)"  # not a stage: the part of the checkers' time spent in the target's code


@dataclass
class Tally:
    """What one group of cases cost the harness and what it checked, summed over its cases."""

    cases: int = 0
    harness: float = 0.0  # CPU seconds of the build and the checks
    target_code: float = 0.0  # of which the target's own code the checkers re-run
    nodes: int = 0  # of the case graphs
    node_ranks: int = 0  # nodes times ranks: every stage works rank by rank
    rewrite_nodes: int = 0  # over the ranks
    fused_away: int = 0  # launches fusion removed, over the ranks
    stages: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def add(self, case, stages: dict[str, list[float]], rewrite_nodes: int, fused_away: int) -> None:
        ranks = len(case.graph.world())
        self.cases += 1
        self.harness += sum(seconds for name, (seconds, _) in stages.items() if name not in ("target", RERUN))
        self.target_code += stages[RERUN][0]
        self.nodes += len(case.graph.nodes)
        self.node_ranks += len(case.graph.nodes) * ranks
        self.rewrite_nodes += rewrite_nodes
        self.fused_away += fused_away
        for name, (seconds, _) in stages.items():
            self.stages[name] += seconds

    def per_node_rank(self, seconds: float) -> float:
        """CPU microseconds per node and rank."""
        return 1e6 * seconds / max(self.node_ranks, 1)

    def per_node_checked(self, seconds: float) -> float:
        """CPU microseconds per node of the graphs the checkers read (original and rewrite, each rank)."""
        return 1e6 * seconds / max(self.node_ranks + self.rewrite_nodes, 1)

    def growth(self) -> float:
        """The rewrite's nodes per original node."""
        return self.rewrite_nodes / max(self.node_ranks, 1)

    def fused_per_100(self) -> float:
        """Launches fusion removed per 100 node-ranks."""
        return 100 * self.fused_away / max(self.node_ranks, 1)


def measure(drawn: list, groups: dict[str, dict[str, Tally]], repeat: int = 1) -> dict[str, list[float]]:
    """CPU and wall seconds of each stage summed over ``drawn``, each case's stage the least of
    ``repeat`` passes over all the cases (a shared machine's bursts inflate single runs, and last
    seconds: a case's runs are spread over the whole measurement); ``groups`` gets a ``Tally`` per
    source (traced or generated) under "source" and per strategy under "kind"."""
    target = get_target("reference")
    best: dict[int, tuple[dict[str, list[float]], int, int]] = {}
    for _ in range(repeat):
        for index, case in enumerate(drawn):
            measured = measure_case(case, target)
            if measured is None:
                continue
            if index not in best:
                best[index] = measured
                continue
            for name, (seconds, wall_seconds) in measured[0].items():
                least = best[index][0][name]
                best[index][0][name] = [min(least[0], seconds), min(least[1], wall_seconds)]
    cpu: dict[str, float] = defaultdict(float)
    wall: dict[str, float] = defaultdict(float)
    for index, (stages, rewrite_nodes, fused_away) in sorted(best.items()):
        case = drawn[index]
        for name, (seconds, wall_seconds) in stages.items():
            cpu[name] += seconds
            wall[name] += wall_seconds
        for group, label in (("source", source(case)), ("kind", kind(case))):
            groups.setdefault(group, {}).setdefault(label, Tally()).add(case, stages, rewrite_nodes, fused_away)
    return {name: [cpu[name], wall[name]] for name in cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="pass over the cases this many times and take each case's least CPU time per stage")
    parser.add_argument("--profile", help="write a cProfile of the measured part here")
    parser.add_argument("--gc", choices=("tuned", "default", "off"), default="tuned",
                        help="the campaign's collector settings (fsdp_verify.engine.collector), CPython's own, or "
                             "none: a collection is charged to whichever stage allocates past the threshold, "
                             "so a stage that allocates less shifts collections onto the others; 'off' shows "
                             "each stage's own cost")
    args = parser.parse_args()
    collector.settle(args.gc == "tuned")  # as the campaign does once its libraries are loaded
    if args.gc == "off":
        gc.disable()
    drawn = draw(args.examples, args.seed)
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    start = time.process_time()
    groups: dict[str, dict[str, Tally]] = {}
    figures = measure(drawn, groups, args.repeat)
    total_cpu = time.process_time() - start
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)
    report(drawn, figures, groups, args.repeat, total_cpu)


def report(drawn: list, figures: dict[str, list[float]], groups: dict[str, dict[str, Tally]], repeat: int,
           total_cpu: float) -> None:
    """The stage table, the harness against the target, and the cost by source and by kind."""
    target_cpu = figures["target"][0]
    rerun = figures.pop(RERUN, [0.0, 0.0])
    harness_cpu = sum(v[0] for k, v in figures.items() if k != "target")
    stage_cpu, stage_wall = sum(v[0] for v in figures.values()), sum(v[1] for v in figures.values())
    traced = sum(1 for case in drawn if source(case) == "traced")
    print(f"{len(drawn)} cases ({traced} traced), {sum(len(c.graph.nodes) for c in drawn)} nodes")
    print(f"{'stage':<14}{'cpu s':>9}{'wall s':>9}{'x target':>10}")
    for name, (cpu, wall) in sorted(figures.items(), key=lambda item: -item[1][0]):
        print(f"{name:<14}{cpu:>9.2f}{wall:>9.2f}{cpu / target_cpu:>10.2f}")
    print(f"harness (build + checks) / target (cpu): {harness_cpu / target_cpu:.2f}x;  examples per cpu-second: "
          f"{len(drawn) / stage_cpu:.2f} (wall {len(drawn) / stage_wall:.2f}/s; with the loop's own work "
          f"{len(drawn) * repeat / total_cpu:.2f})")
    print(f"of the checks, the target's own plan and rewriter calls they re-run: {rerun[0]:.2f} cpu s "
          f"({rerun[0] / target_cpu:.2f}x target)")
    by_source = groups.get("source", {})
    for name, tally in sorted(by_source.items()):
        print(f"{name} cases: harness {1000 * tally.harness / max(tally.nodes, 1):.2f} cpu ms per graph node "
              f"({tally.nodes} nodes), {1000 * tally.harness / max(tally.node_ranks, 1):.3f} per node and rank "
              f"({tally.node_ranks / max(tally.nodes, 1):.1f} ranks on average: every stage works rank by rank); "
              f"rewrite {tally.growth():.2f}x the original, {tally.fused_per_100():.2f} launches fused per 100 "
              f"node-ranks")
    sources = sorted(by_source)
    print("cpu microseconds per node and rank, by stage and source:")
    print(f"{'stage':<26}" + "".join(f"{name:>12}" for name in sources) + (f"{'ratio':>8}" if len(sources) == 2 else ""))
    rows = {name: [by_source[src].per_node_rank(by_source[src].stages.get(name, 0.0)) for src in sources]
            for name in [*sorted(figures, key=lambda stage: -figures[stage][0]), RERUN]}
    rows["harness"] = [by_source[src].per_node_rank(by_source[src].harness) for src in sources]
    rows["harness less target code"] = [h - r for h, r in zip(rows["harness"], rows[RERUN])]
    for name, row in rows.items():
        ratio = f"{row[1] / row[0]:>8.2f}" if len(row) == 2 and row[0] else ""
        print(f"{name:<26}" + "".join(f"{value:>12.2f}" for value in row) + ratio)
    print("by kind of case (what the per-node cost follows: the rewrite's size and the launches fused per node):")
    print(f"{'kind':<13}{'cases':>6}{'us/node-rank':>14}{'less target code':>18}{'us/node checked':>17}"
          f"{'rewrite/orig':>14}{'fused/100 node-ranks':>22}")
    for name, tally in sorted(groups.get("kind", {}).items(), key=lambda item: -item[1].per_node_rank(item[1].harness)):
        print(f"{name:<13}{tally.cases:>6}{tally.per_node_rank(tally.harness):>14.1f}"
              f"{tally.per_node_rank(tally.harness - tally.target_code):>18.1f}"
              f"{tally.per_node_checked(tally.harness):>17.1f}{tally.growth():>14.2f}{tally.fused_per_100():>22.2f}")


if __name__ == "__main__":
    main()
