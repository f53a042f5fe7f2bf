"""Shrinking a failure as a user's campaign does: ``fsdp-verify fuzz`` with one worker, default
isolation, until the first failure is saved shrunk (``--max-failures 1``). Prints the shrink steps,
the seconds from the failure's first sighting to the end of the run, seconds and CPU-seconds per
step (the command and all its children), and the forks isolation paid.

Two sources, each against a configuration whose crash every matching graph shows: F7
(``custom_ops_multidtype`` reduce-scatters) on captured graphs (each step may capture a model) and on
the ``cases`` mix (each step runs inductor's passes on harness graphs). A crash retires its child,
so each step forks: what a fork costs is most of a step.

    python benchmarks/bench_shrink.py [--seed 0] [--budget 400] [--sources captured cases]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench_campaign import measured

TARGET = "torch-inductor:custom_ops_multidtype"


def run(source: str, seed: int, budget: int) -> dict:
    """One campaign in a fresh process, until its first failure is saved shrunk."""
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        command = [sys.executable, "-m", "fsdp_verify", "fuzz", "--target", TARGET, "--strategy", source,
                   "--budget", str(budget), "--seed", str(seed), "--max-failures", "1", "--no-repro",
                   "--corpus", str(Path(folder) / "found"), "--db", str(Path(folder) / "db"), "--json", str(summary)]
        wall, cpu = measured(command)
        doc = json.loads(summary.read_text())
    first = doc["failures"][0] if doc["failures"] else {}
    found = (first.get("found_at") or [0, 0.0])[1]
    return {"source": source, "examples": doc["examples"], "steps": doc["shrink_steps"], "seconds": doc["seconds"],
            "found": found, "wall": wall, "cpu": cpu, "forks": doc.get("isolation", {}).get("forks"),
            "signature": first.get("signature")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=400, help="examples at most (the run ends at its first failure)")
    parser.add_argument("--sources", nargs="+", default=["captured", "cases"])
    args = parser.parse_args()
    print("| source | examples | shrink steps | s from first sighting to end | s per step | command CPU-s | "
          "forks | signature |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for source in args.sources:
        got = run(source, args.seed, args.budget)
        shrinking = got["seconds"] - got["found"]
        per_step = shrinking / got["steps"] if got["steps"] else float("nan")
        print(f"| {source} | {got['examples']} | {got['steps']} | {shrinking:.1f} | {per_step:.2f} | "
              f"{got['cpu']:.1f} (wall {got['wall']:.1f}) | {got['forks']} | {got['signature']} |", flush=True)


if __name__ == "__main__":
    main()
