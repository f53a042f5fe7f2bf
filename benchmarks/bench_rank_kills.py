"""Real ranks under fire: a real-rank campaign while rank processes are SIGKILLed at random.

Runs ``fsdp-verify fuzz --ranks real:gloo --budget N`` (the real command) and, from outside, kills
a randomly chosen rank process every few seconds, the way the OOM killer or an operator would. It
prints what was killed, what the campaign said about it, and the goals' verdicts:

- every example judged or reported (the summary counts N examples; each death during a case is
  either the same on every rerun, a finding, or not, with the rerun's verdict);
- the pool restarted as often as needed (restarts at least the deaths the campaign saw);
- no false finding on the reference (a death the rerun does not show again is not the target's);
- no orphan: every rank process seen during the run is gone once the command returns.

    python benchmarks/bench_rank_kills.py [--cases 200] [--gap 2:6] [--seed 0] [--size tiny]

Issue: reliability (random rank SIGKILLs in a real-rank campaign).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench_soak import _family


def _ranks(root: int) -> list[int]:
    """Rank processes below ``root``: spawned children running multiprocessing's spawn_main
    (the resource tracker is spawned too, and is left alone)."""
    found = []
    for pid in _family(root):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "spawn_main" in cmdline and "resource_tracker" not in cmdline:
            found.append(pid)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--gap", default="2:6", help="seconds between kills, drawn uniformly from LOW:HIGH")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", default="tiny", help="graph size preset (tiny keeps pools at 2-4 ranks busy)")
    parser.add_argument("--target", default="reference")
    args = parser.parse_args()
    low, high = (float(x) for x in args.gap.split(":"))
    draw = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        command = [sys.executable, "-m", "fsdp_verify", "fuzz", "--target", args.target, "--ranks", "real:gloo",
                   "--budget", str(args.cases), "--seed", str(args.seed), "--size", args.size,
                   "--corpus", str(Path(folder) / "found"), "--db", str(Path(folder) / "db"), "--no-repro",
                   "--json", str(summary)]
        print("$", " ".join(command), flush=True)
        start, cpu0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        seen: set[int] = set()
        kills: list[tuple[float, int]] = []
        done = threading.Event()

        def killer() -> None:
            due = time.monotonic() + draw.uniform(low, high)
            while not done.is_set():
                ranks = _ranks(process.pid)
                seen.update(ranks)
                if ranks and time.monotonic() >= due:
                    victim = draw.choice(ranks)
                    try:
                        os.kill(victim, signal.SIGKILL)
                        kills.append((time.monotonic() - start, victim))
                    except ProcessLookupError:
                        pass
                    due = time.monotonic() + draw.uniform(low, high)
                done.wait(0.2)

        thread = threading.Thread(target=killer, daemon=True)
        thread.start()
        output = process.communicate()[0]
        done.set()
        thread.join()
        wall = time.monotonic() - start
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        time.sleep(2)  # a rank outliving the harness would still be here
        orphans = sorted(pid for pid in seen if _alive(pid))
        cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
        if not summary.exists():
            print(output[-4000:])
            sys.exit(f"no JSON summary written (exit {process.returncode})")
        result = json.loads(summary.read_text())
    ranks = result.get("ranks", {})
    deaths = ranks.get("rank_deaths", {})
    bugs = [f for f in result.get("failures", []) if f.get("class") not in ("contract mismatch", "invalid input")]
    rows = [("command exit code", process.returncode),
            ("wall / CPU (command and children)", f"{wall:.0f} s / {cpu:.0f} CPU-s"),
            ("examples judged (of asked)", f"{result.get('examples')} of {args.cases}"),
            ("rank processes seen", len(seen)),
            ("SIGKILLs sent", len(kills)),
            ("deaths during a case: the same on every rerun / not", f"{deaths.get('reproduced', 0)} / "
                                                                  f"{deaths.get('not_reproduced', 0)}"),
            ("ranks found dead between cases (healed)", ranks.get("dead_between_cases", 0)),
            ("pool restarts (in a case or between cases)", ranks.get("restarts", 0)),
            ("failed pool starts, tried again", sum("start attempt" in e for e in ranks.get("events", []))),
            ("cases planned / executed on real ranks", f"{ranks.get('cases', 0)} / {ranks.get('executed', 0)}"),
            ("not on real ranks (reasons)", json.dumps(ranks.get("not_run", {}))),
            ("failures saved (bugs)", f"{len(result.get('failures', []))} ({len(bugs)})"),
            ("harness errors", result.get("harness_errors", 0)),
            ("orphan rank processes after exit", len(orphans))]
    print("\n| figure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    lost = {why: n for why, n in ranks.get("not_run", {}).items() if "could start" in why}
    goals = {"every example judged": result.get("examples") == args.cases,
             "no case lost to a pool that could not start": not lost,
             "no finding on the reference": args.target != "reference" or not bugs,
             "restarts cover the deaths": ranks.get("restarts", 0) >= deaths.get("not_reproduced", 0),
             "no orphan": not orphans}
    print("\n" + "\n".join(f"{'PASS' if ok else 'FAIL'}  {goal}" for goal, ok in goals.items()))
    if not all(goals.values()):
        print(output[-3000:])
        sys.exit(1)


if __name__ == "__main__":
    main()
