"""End-to-end fuzz throughput (examples/s) on default-size graphs, one worker and two workers,
per wall second and per CPU second (this process and its workers: the machine is shared).

    python benchmarks/bench_fuzz.py [--seconds 60]
"""

from __future__ import annotations

import argparse
import os
import tempfile

from fsdp_verify.engine import campaign


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--size", default="default")
    args = parser.parse_args()
    for workers in (1, 2):
        before = os.times()
        with tempfile.TemporaryDirectory() as folder:
            config = campaign.Config(budget=campaign.Budget(seconds=args.seconds), size=args.size,
                                     corpus_dir=folder, profile="dev")
            result = campaign.run_parallel(config, workers)
        after = os.times()
        cpu = sum(after[i] - before[i] for i in range(4))  # user + system, self + children
        rate = result.examples / result.seconds
        print(f"workers {workers}: {result.examples} examples in {result.seconds:.1f}s -> {rate:.2f} examples/s "
              f"({rate / workers:.2f} per worker), {cpu:.1f} cpu s -> {result.examples / cpu:.2f} examples per "
              f"cpu-second, failures {len(result.failures)}")


if __name__ == "__main__":
    main()
