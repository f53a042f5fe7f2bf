"""Captured graphs (issue 20): capture time per drawn model (torch.compile with an aot_autograd
backend on a fake process group, tagging and import; uncached) against reading it back from the
capture store, cases/s of the captured strategy with its cache, and examples/s of the end-to-end path (a drawn model compiled by inductor under one
configuration on a one-process gloo world, judged bitwise). Prints figures; keep runs short."""

from __future__ import annotations

import argparse
import statistics
import time

import hypothesis
from hypothesis import given, settings

from fsdp_verify.capture import capture
from fsdp_verify.capture import store
from fsdp_verify.capture.trace import _capture, capture_fresh
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.strategies import captured_graphs, model_descs


def _draw_models(count: int, seed: int) -> list:
    found = []

    @settings(max_examples=count, database=None, phases=[hypothesis.Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @hypothesis.seed(seed)
    @given(model_descs())
    def draw(desc):
        found.append(desc)
    draw()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", type=int, default=20, help="drawn models to capture")
    parser.add_argument("--e2e-models", type=int, default=2, help="drawn models for the end-to-end path")
    parser.add_argument("--configs", type=int, default=2, help="configurations per end-to-end model")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    capture(_draw_models(1, 99)[0])  # warm-up: imports, dynamo and the fake backend's first use
    descs = list(dict.fromkeys(_draw_models(args.models, args.seed)))
    times, loads, nodes = [], [], []
    for desc in descs:
        start = time.perf_counter()
        captured = capture_fresh(desc)
        times.append(time.perf_counter() - start)
        nodes.append(len(captured.forward.nodes) + len(captured.backward.nodes))
        store.save(desc.to_json(), captured.forward, captured.backward, captured.seconds)
        start = time.perf_counter()
        if store.load(desc.to_json()) is not None:
            loads.append(time.perf_counter() - start)
    print(f"capture, uncached: {len(descs)} distinct models, {statistics.mean(times):.3f} s mean, "
          f"{statistics.median(times):.3f} s median, {max(times):.3f} s max per model "
          f"({statistics.mean(nodes):.0f} nodes per forward+backward pair)")
    if loads:
        print(f"capture store ({store.folder()}): {statistics.mean(loads) * 1000:.1f} ms mean per model read back "
              f"({statistics.mean(times) / statistics.mean(loads):.0f}x faster than capturing)")
    else:
        print(f"capture store: off ({store.ENV}={store.OFF})")
    _capture.cache_clear()

    drawn = []

    @settings(max_examples=args.models, database=None, phases=[hypothesis.Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @hypothesis.seed(args.seed + 1)
    @given(captured_graphs())
    def draw(case):
        drawn.append(case)
    start = time.perf_counter()
    draw()
    elapsed = time.perf_counter() - start
    print(f"captured_graphs strategy (cache warm from the run above where models repeat): {len(drawn)} cases in "
          f"{elapsed:.1f} s, {len(drawn) / elapsed:.2f} cases/s")

    from fsdp_verify.execute.compiled import sweep as e2e
    outcome = e2e.run(args.e2e_models, args.configs, args.seed)
    print(f"end to end: {outcome.models} models x {len(e2e.planned_configurations(args.configs))} configurations, "
          f"{outcome.compiles} examples in {outcome.seconds:.1f} s: {outcome.per_second:.3f} examples/s "
          f"(each model also compiles once unbucketed and runs eagerly); {len(outcome.failures)} failures")


if __name__ == "__main__":
    main()
