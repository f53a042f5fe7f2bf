"""Soak: a long campaign with two workers, watched from outside. Per window it prints examples/s
(from the campaign's own progress lines), each process's resident memory and open descriptors
(the main process, its workers and their isolation children, read from /proc), and the size of
the corpus and example database folders. A table for benchmarks/README.md comes at the end.

    python benchmarks/bench_soak.py [--minutes 60] [--window 5] [--workers 2] [--target reference]

The growth line by process follows the main process and each worker by pid (they live the whole
run) and the whole family's sum; the ranked line mixes processes (a child re-forked at one window
ranks where a grown one did at another).

Goals (issue: reliability): RSS growth under 10% between the second and the last window, no
descriptor growth, examples/s within noise of the first windows. Each window also gives examples
per CPU-second of the campaign's processes and the cores they and everything else used: on a
shared machine, a drop in examples/s with examples per CPU-s unchanged is a neighbour, not a slowdown.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PROGRESS = re.compile(r"progress fuzz: (\d+)")


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            tree.setdefault(parent, []).append(int(entry.name))
    return tree


def _family(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """utime+stime of ``pid`` and of its children it has reaped (a retired isolation child's time
    moves to its worker's cutime, so a family's sum over live processes is continuous)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def _machine_busy_seconds() -> float:
    """CPU seconds every process on the machine used (from /proc/stat), to tell our share apart
    from what else ran: examples/s falls when a neighbour takes a core, examples per CPU-s does not."""
    fields = [int(f) for f in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / TICK


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6 if folder.exists() else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--window", type=float, default=5, help="minutes per window")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--target", default="reference")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        corpus, db = Path(folder) / "found", Path(folder) / "db"
        command = [sys.executable, "-m", "fsdp_verify", "fuzz", "--target", args.target, "--workers",
                   str(args.workers), "--budget", f"{int(args.minutes * 60)}s", "--corpus", str(corpus),
                   "--db", str(db), "--no-repro"]
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        examples = [0]

        def read() -> None:
            for line in process.stdout:
                match = PROGRESS.search(line)
                if match:
                    examples[0] = int(match.group(1))
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        rows, began, last = [], time.monotonic(), (0.0, 0)
        spent = (0.0, _machine_busy_seconds())  # (our CPU-s, the machine's busy CPU-s) at the last window
        window, total = args.window * 60, args.minutes * 60
        for end in [window * k for k in range(1, int(total // window) + 1)]:
            try:
                process.wait(timeout=max(0.0, end - (time.monotonic() - began)))
                break  # the campaign ended early
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic() - began
            family = [pid for pid in _family(process.pid)]
            rss = sorted((round(_rss_mb(pid)) for pid in family), reverse=True)
            # by process, for growth: the main process and each worker keep their pid for the whole
            # run; isolation children are forked from their worker and replaced (every 1,000 cases),
            # so their size at a window is their worker's at the fork, not a growth of their own
            workers = {pid: round(_rss_mb(pid)) for pid in _children().get(process.pid, [])}
            by_pid = {"main": round(_rss_mb(process.pid)), **{f"worker {pid}": mb for pid, mb in workers.items()},
                      "total": round(sum(_rss_mb(pid) for pid in family))}
            fds = sorted((_fds(pid) for pid in family), reverse=True)
            rate = (examples[0] - last[1]) / (now - last[0]) if now > last[0] else 0.0
            ours, busy = sum(_cpu_seconds(pid) for pid in family), _machine_busy_seconds()
            ours_window, others = ours - spent[0], max(0.0, (busy - spent[1]) - (ours - spent[0]))
            per_cpu = (examples[0] - last[1]) / ours_window if ours_window > 0 else 0.0
            cores, other_cores = ours_window / (now - last[0]), others / (now - last[0])
            last, spent = (now, examples[0]), (ours, busy)
            row = (f"{now / 60:6.1f} min | {rate:6.2f} ex/s | {per_cpu:5.2f} ex/CPU-s | cores ours {cores:.2f}, "
                   f"others {other_cores:.2f} | processes {len(family)} | RSS MB {rss} | "
                   f"fds {fds} | corpus {_size_mb(corpus):.2f} MB | db {_size_mb(db):.2f} MB")
            rows.append((now, rate, rss, fds, per_cpu, by_pid))
            print(row, flush=True)
        reader.join(5)
        print(f"campaign exit code {process.wait()}, {examples[0]} examples")
    if len(rows) >= 3:
        second, final = rows[1], rows[-1]
        growth = [100 * (b / a - 1) for a, b in zip(second[2][:len(final[2])], final[2]) if a]
        print(f"RSS growth, second to last window, per process (largest first): "
              f"{', '.join(f'{g:+.1f}%' for g in growth)}; fds {second[3]} -> {final[3]}; "
              f"examples/s {rows[0][1]:.2f} (first) {final[1]:.2f} (last); examples per CPU-s "
              f"{rows[0][4]:.2f} (first) {final[4]:.2f} (last)")
        same = [(name, second[5][name], final[5][name]) for name in second[5] if name in final[5] and second[5][name]]
        print("RSS growth, second to last window, by process: " +
              ", ".join(f"{name} {a} -> {b} MB ({100 * (b / a - 1):+.1f}%)" for name, a, b in same))


if __name__ == "__main__":
    main()
