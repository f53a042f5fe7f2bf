"""End-to-end fuzz throughput: two workers against one, per wall second and per CPU second (this
process and its workers: the machine is shared), on the same example streams.

    python benchmarks/bench_fuzz.py [--seconds 45] [--seeds 3 5 7]

A two-worker campaign runs two seed streams (worker 0's is the one-worker campaign's), and streams
differ in what their cases cost: compared with worker 0's stream alone, the ratio measures the
second stream as much as the scaling (seed 3's second stream drew larger cases: 1.62x). So each
seed runs three campaigns: worker 0's stream alone, worker 1's stream alone, then both at once;
the scaling is the two-worker rate against the mean of the two streams' one-worker rates (examples,
and node-ranks: every stage's work grows with nodes times ranks). Isolation is the default (a
persistent child per worker).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from dataclasses import dataclass

from fsdp_verify.engine import campaign


@dataclass
class Run:
    """One campaign's figures."""

    examples: int
    node_ranks: int
    seconds: float
    cpu: float
    failures: int = 0  # a failure's shrinking spends CPU on no new example: said beside the rate
    shrink_steps: int = 0

    @property
    def rate(self) -> float:
        return self.examples / self.seconds

    @property
    def node_rate(self) -> float:
        return self.node_ranks / self.seconds

    @property
    def node_text(self) -> str:
        """Node-ranks per second, or n/a for a result that does not count them (an older commit)."""
        return f"{self.node_rate:.0f} node-ranks/s" if self.node_ranks else "node-ranks n/a"


def campaign_run(seconds: float, size: str, seed: int, workers: int, stream: int = 0) -> Run:
    """A ``workers``-worker campaign of ``seconds`` (one worker: the stream of worker ``stream``)."""
    before = os.times()
    with tempfile.TemporaryDirectory() as folder:
        config = campaign.Config(budget=campaign.Budget(seconds=seconds), size=size, corpus_dir=folder,
                                 profile="dev", seed=seed, worker=stream)
        result = campaign.run_parallel(config, workers)
    after = os.times()
    cpu = sum(after[i] - before[i] for i in range(4))  # user + system, self + children
    # an older commit's result has no node-ranks (benchmarked through PYTHONPATH): 0, said as n/a
    return Run(result.examples, getattr(result, "node_ranks", 0), result.seconds, cpu, len(result.failures),
               result.shrink_steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=45)
    parser.add_argument("--size", default="default")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    ratios, node_ratios, literal = [], [], []
    for seed in args.seeds:
        alone = [campaign_run(args.seconds, args.size, seed, 1, stream) for stream in (0, 1)]
        both = campaign_run(args.seconds, args.size, seed, 2)
        for stream, run in enumerate(alone):
            print(f"seed {seed}, stream {stream} alone: {run.examples} examples in {run.seconds:.1f}s -> "
                  f"{run.rate:.2f} examples/s, {run.node_text}, {run.cpu:.1f} cpu s -> "
                  f"{run.examples / run.cpu:.2f} examples per cpu-second; {run.failures} failures, "
                  f"{run.shrink_steps} shrink steps")
        mean = statistics.mean(run.rate for run in alone)
        node_mean = statistics.mean(run.node_rate for run in alone)
        ratios.append(both.rate / mean)
        if node_mean:
            node_ratios.append(both.node_rate / node_mean)
        literal.append(both.rate / alone[0].rate)
        print(f"seed {seed}, two workers: {both.examples} examples in {both.seconds:.1f}s -> {both.rate:.2f} "
              f"examples/s, {both.node_text}, {both.cpu:.1f} cpu s, {both.failures} failures, "
              f"{both.shrink_steps} shrink steps; against the two streams' "
              f"mean rate alone: {ratios[-1]:.2f}x examples"
              + (f", {node_ratios[-1]:.2f}x node-ranks" if node_mean else "") + "; against "
              f"stream 0 alone (the one-worker campaign): {literal[-1]:.2f}x")
    nodes = f", {statistics.median(node_ratios):.2f}x node-ranks" if node_ratios else ""
    print(f"median over seeds {args.seeds}: {statistics.median(ratios):.2f}x examples{nodes} against the same "
          f"streams alone; "
          f"{statistics.median(literal):.2f}x against the one-worker campaign")


if __name__ == "__main__":
    main()
