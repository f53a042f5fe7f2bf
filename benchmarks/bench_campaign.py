"""The campaign as a user runs it: ``fsdp-verify fuzz`` on the reference, default isolation against
``--in-process``, in one sitting. Prints wall and CPU seconds (the command and all its children),
examples per CPU-second, CPU per node-rank (graph nodes times ranks, summed over the examples:
what the cost grows with, so runs whose draws differ in size still compare), what isolation costs
over in-process, and the campaign's CPU by stage
(from the summary's ``cpu_by_stage``, each stage measured in the process that ran it; what the
stages leave of the measured CPU is the interpreter's start and imports).

    python benchmarks/bench_campaign.py [--examples 200] [--seed 3] [--rounds 2] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measured(command: list[str]) -> tuple[float, float]:
    """Run ``command`` quietly; its wall seconds and the CPU seconds of it and all its children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def run(examples: int, seed: int, workers: int, in_process: bool) -> dict:
    """One campaign in a fresh process; its CPU time is read from the children's rusage."""
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        command = [sys.executable, "-m", "fsdp_verify", "fuzz", "--target", "reference", "--budget", str(examples),
                   "--seed", str(seed), "--workers", str(workers), "--corpus", str(Path(folder) / "found"),
                   "--no-repro", "--json", str(summary), *(["--in-process"] if in_process else [])]
        wall, cpu = measured(command)
        doc = json.loads(summary.read_text())
    return {"examples": doc["examples"], "wall": wall, "cpu": cpu, "forks": doc.get("isolation", {}).get("forks"),
            "stages": doc.get("cpu_by_stage", {}), "node_ranks": doc.get("node_ranks", 0)}


def stage_table(figures: dict[str, list[dict]]) -> None:
    """One row per stage, the mean CPU seconds of each mode's runs and its share of the command's CPU."""
    modes = list(figures)
    names = sorted({stage for runs in figures.values() for one in runs for stage in one["stages"]},
                   key=lambda stage: -sum(one["stages"].get(stage, 0) for one in figures[modes[0]]))
    mean = lambda runs, key: sum(key(one) for one in runs) / len(runs)  # noqa: E731
    print("\n| stage | " + " | ".join(f"{mode}, CPU s | share" for mode in modes) + " |")
    print("|---|" + "---:|---:|" * len(modes))
    rows = [(name, lambda one, name=name: one["stages"].get(name, 0.0)) for name in names]
    rows.append(("start-up and imports (the command's CPU the stages leave)",
                 lambda one: one["cpu"] - sum(one["stages"].values())))
    rows.append(("**the command (measured)**", lambda one: one["cpu"]))
    for name, key in rows:
        cells = []
        for mode in modes:
            runs = figures[mode]
            cells.append(f"{mean(runs, key):.2f} | {100 * mean(runs, key) / mean(runs, lambda one: one['cpu']):.0f}%")
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", type=int, default=200)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each mode (the machine is noisy)")
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    figures: dict[str, list[dict]] = {"isolated": [], "in-process": []}
    for _ in range(args.rounds):
        for mode in figures:
            figures[mode].append(run(args.examples, args.seed, args.workers, mode == "in-process"))
    for mode, runs in figures.items():
        for one in runs:
            print(f"{mode:<10} {one['examples']} examples: {one['wall']:.1f}s wall, {one['cpu']:.1f} CPU-s -> "
                  f"{one['examples'] / one['cpu']:.2f} examples per CPU-second"
                  + (f", {one['forks']} forks" if mode == "isolated" else "")
                  + (f"; {one['node_ranks'] / one['examples']:.0f} node-ranks per example, "
                     f"{1000 * one['cpu'] / one['node_ranks']:.3f} CPU-ms per node-rank" if one["node_ranks"] else ""))
    best = {mode: min(one["cpu"] for one in runs) for mode, runs in figures.items()}
    print(f"isolation costs {100 * (best['isolated'] / best['in-process'] - 1):+.1f}% CPU over in-process "
          f"(best of {args.rounds} each)")
    stage_table(figures)


if __name__ == "__main__":
    main()
