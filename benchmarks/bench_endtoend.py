"""The compile path as a user runs it: ``fsdp-verify endtoend`` (drawn models, each compiled by inductor
under configurations of its option space and judged bit for bit). Prints wall and CPU seconds of
the command and every process it started (the warm path's fork server and its children included:
this process adopts orphans and waits for them), judged examples per second and per CPU-second,
and the warm checks' seconds.

``--cold`` gives each run a fresh inductor cache folder (a fresh machine: every C++ kernel compiles);
without it runs share one folder made for this benchmark, warmed by a first run that is not counted
(a nightly job on a kept machine).

    python benchmarks/bench_endtoend.py [--models 2] [--configs 4] [--seed 1] [--rounds 2] [--cold] [--ranks real]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_PR_SET_CHILD_SUBREAPER = 36


def _adopt_orphans() -> None:
    """Become the subreaper of what the command starts: a process it leaves behind (a fork server)
    is then this process's to wait for, and its CPU counts."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        print("could not adopt orphans: a process the command leaves behind is not counted", file=sys.stderr)


def _reap() -> None:
    """Wait for every adopted process (each exits once the command's pipes close)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def run(models: int, configs: int, seed: int, cache: str, ranks: str = "one") -> dict:
    """One ``endtoend`` in a fresh process on the inductor cache folder ``cache``."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [sys.executable, "-m", "fsdp_verify", "endtoend", "--models", str(models), "--configs", str(configs),
                   "--seed", str(seed), "--ranks", ranks, "--json", str(report)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache})
        _reap()
        wall = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        doc = json.loads(report.read_text())
    warm = [r["warm"]["seconds"] for r in doc["reports"] if r.get("warm", {}).get("seconds") is not None]
    return {"examples": doc["compiles"], "wall": wall, "judging": doc["seconds"], "warm": warm,
            "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=int, default=2)
    parser.add_argument("--configs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cold", action="store_true", help="a fresh inductor cache folder for every run")
    parser.add_argument("--ranks", choices=("one", "real"), default="one", help="endtoend's --ranks")
    args = parser.parse_args()
    _adopt_orphans()
    with tempfile.TemporaryDirectory(prefix="bench-endtoend-cache-") as shared:
        if not args.cold:
            run(args.models, args.configs, args.seed, shared, args.ranks)  # fills the kept folder: not counted
        runs = []
        for _ in range(args.rounds):
            with tempfile.TemporaryDirectory(prefix="bench-endtoend-cold-") as fresh:
                runs.append(run(args.models, args.configs, args.seed, fresh if args.cold else shared, args.ranks))
    print(f"endtoend --models {args.models} --configs {args.configs} --seed {args.seed} --ranks {args.ranks}, "
          f"{'a fresh' if args.cold else 'a kept (warmed)'} inductor cache folder per run, {args.rounds} runs")
    print("| run | examples | wall s | CPU s (all processes) | examples/s (command's wall) | examples per CPU-s | "
          "the command's own examples/s | warm checks, s |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    for index, one in enumerate(runs, 1):
        print(f"| {index} | {one['examples']} | {one['wall']:.1f} | {one['cpu']:.1f} | "
              f"{one['examples'] / one['wall']:.3f} | {one['examples'] / one['cpu']:.3f} | {one['examples'] / one['judging']:.3f} | "
              f"{', '.join(f'{s:.1f}' for s in one['warm']) or '-'} |")
    print(f"median examples/s {statistics.median(r['examples'] / r['wall'] for r in runs):.3f}, "
          f"median examples per CPU-s {statistics.median(r['examples'] / r['cpu'] for r in runs):.3f}")


if __name__ == "__main__":
    main()
