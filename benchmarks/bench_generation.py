"""Generation throughput: graphs/s drawn by the strategies, per size preset (prints figures)."""

from __future__ import annotations

import argparse
import time

from hypothesis import Phase, given, settings

from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.strategies import fsdp_graphs, graphs_from_modules, mutated_graphs


def measure(strategy, examples: int) -> tuple[float, float]:
    """(graphs per second, mean nodes per graph) over ``examples`` draws."""
    nodes = []

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @given(strategy)
    def draw(case):
        nodes.append(len(case.graph.nodes))

    start = time.perf_counter()
    draw()
    elapsed = time.perf_counter() - start
    return len(nodes) / elapsed, sum(nodes) / max(1, len(nodes))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=200)
    args = parser.parse_args()
    print(f"{'strategy':<28} {'graphs/s':>9} {'nodes/graph':>12}")
    for name, strategy, count in (
            ("fsdp_graphs(tiny)", fsdp_graphs("tiny"), args.examples),
            ("fsdp_graphs(default)", fsdp_graphs("default"), args.examples),
            ("mutated_graphs(default)", mutated_graphs("default"), args.examples),
            ("fsdp_graphs(medium)", fsdp_graphs("medium"), args.examples),
            ("fsdp_graphs(large)", fsdp_graphs("large"), max(10, args.examples // 10)),
            ("fsdp_graphs(scale)", fsdp_graphs("scale"), 3),
            ("graphs_from_modules", graphs_from_modules(), max(10, args.examples // 10))):
        rate, nodes = measure(strategy, count)
        print(f"{name:<28} {rate:>9.1f} {nodes:>12.0f}")


if __name__ == "__main__":
    main()
