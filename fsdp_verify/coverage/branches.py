"""Branch coverage of ``fsdp_verify/reference`` reached by generated cases (coverage.py's API).

Each case is planned on its first rank (with the planner's debug log on, into a null handler, so
its logging branches run too; the driver's plans run with it off) and rewritten on every rank by the reference target's two-round
driver, exactly as a campaign runs it; the plan's ``to_dict`` runs as the harness's reports do.
Branches that no generated case can take are listed in ``JUSTIFIED`` with the reason; only the
other missed branches fail ``fsdp-verify coverage``.

Measured (2000 cases of ``cases("tiny")``, seed 0): see docs/architecture.md, "Coverage".
"""

from __future__ import annotations

import ast
import contextlib
import json
import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import coverage as coveragepy  # the measurement tool (this package is fsdp_verify.coverage)
import hypothesis
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from ..case import Case
from ..execute.world import build_world
from ..profiles import SLOW_OK
from ..reference import planner
from ..targets import get_target

REFERENCE = Path(planner.__file__).resolve().parent


@dataclass(frozen=True)
class Justified:
    """Missed branches of one function that generation cannot take, and why."""

    file: str
    function: str
    reason: str


JUSTIFIED: tuple[Justified, ...] = ()


@dataclass
class BranchReport:
    """Per file: (branches taken, branches); the missed ones as (file, from line, to line)."""

    files: dict[str, tuple[int, int]] = field(default_factory=dict)
    missed: list[tuple[str, int, int]] = field(default_factory=list)
    justified: dict[tuple[str, int, int], Justified] = field(default_factory=dict)

    @property
    def percent(self) -> float:
        """Branches taken over all branches, in percent."""
        taken, total = (sum(v[i] for v in self.files.values()) for i in (0, 1))
        return 100.0 * taken / total if total else 100.0

    @property
    def unjustified(self) -> list[tuple[str, int, int]]:
        """Missed branches no entry of ``JUSTIFIED`` explains."""
        return [arc for arc in self.missed if arc not in self.justified]


@contextlib.contextmanager
def _planner_debug_log() -> Iterator[None]:
    log = logging.getLogger(planner.__name__)
    saved = (log.level, log.propagate, list(log.handlers))
    log.setLevel(logging.DEBUG)
    log.propagate = False
    log.handlers = [logging.NullHandler()]
    try:
        yield
    finally:
        log.level, log.propagate, log.handlers = saved[0], saved[1], saved[2]


def exercise(case: Case, target_name: str = "reference") -> None:
    """Plan ``case`` on its first rank and rewrite it on every rank; refused arguments end it."""
    target = get_target(target_name)
    modules = build_world(case)
    rank = min(modules)
    try:
        with _planner_debug_log():
            target.plan(case, modules[rank], rank).to_dict()
        target.rewrite(case, modules)
    except ValueError:
        return


def _functions(path: Path) -> list[tuple[int, int, str]]:
    """(first line, last line, name) of every function of a source file."""
    tree = ast.parse(path.read_text())
    return [(n.lineno, n.end_lineno or n.lineno, n.name) for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _function_at(path: Path, line: int) -> str:
    spans = [(end - start, name) for start, end, name in _functions(path) if start <= line <= end]
    return min(spans)[1] if spans else "<module>"


def _report(data: dict) -> BranchReport:
    report = BranchReport()
    for filename, doc in sorted(data["files"].items()):
        path = Path(filename)
        name = path.name
        summary = doc["summary"]
        report.files[name] = (summary["covered_branches"], summary["num_branches"])
        for start, end in doc["missing_branches"]:
            arc = (name, start, end)
            report.missed.append(arc)
            function = _function_at(path if path.is_absolute() else REFERENCE / name, start)
            entry = next((j for j in JUSTIFIED if j.file == name and j.function == function), None)
            if entry is not None:
                report.justified[arc] = entry
    return report


def measure_branches(strategy: st.SearchStrategy[Case], examples: int = 2000, seed: int = 0,
                     target_name: str = "reference") -> BranchReport:
    """Branch coverage of the reference package over ``examples`` draws of ``strategy``."""
    cov = coveragepy.Coverage(branch=True, source=[str(REFERENCE)], data_file=None)

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @hypothesis.seed(seed)
    @given(strategy)
    def run(case: Case) -> None:
        exercise(case, target_name)

    cov.start()
    try:
        run()
    finally:
        cov.stop()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "branches.json"
        cov.json_report(outfile=str(out), include=[str(REFERENCE / "*.py")])
        data = json.loads(out.read_text())
    return _report(data)


def _arc(start: int, end: int) -> str:
    return f"{start}->{end}" if end > 0 else f"{start}->exit"


def format_branches(report: BranchReport) -> str:
    """Branch coverage per file, the missed branches (file:line->line) and the justified ones."""
    lines = [f"branch coverage of fsdp_verify/reference: {report.percent:.1f}%"]
    for name, (taken, total) in report.files.items():
        share = 100.0 * taken / total if total else 100.0
        lines.append(f"  {name:<16} {taken:>4}/{total:<4} {share:5.1f}%")
    for file, start, end in report.unjustified:
        lines.append(f"  missed {file}:{_arc(start, end)}")
    for (file, start, end), entry in sorted(report.justified.items()):
        lines.append(f"  unreachable {file}:{_arc(start, end)} ({entry.function}): {entry.reason}")
    return "\n".join(lines)
