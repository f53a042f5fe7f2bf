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

from fsdp_verify.model import spec_params
from fsdp_verify.model.case import Case
from fsdp_verify.execute.world import build_world
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.reference import planner
from fsdp_verify.targets import get_target

REFERENCE = Path(planner.__file__).resolve().parent


@dataclass(frozen=True)
class Justified:
    """Missed branches that generation cannot take, and why: those leaving the line ``line`` (its
    source text, stripped) of ``function``, or, with no line, every branch of a function that is
    not on the plan/rewrite path at all."""

    file: str
    function: str
    line: str
    reason: str


_SAME_WORLD = ("every rank plans the same graph (only device indices differ, and digests drop them) "
               "with the same deterministic planner, and the driver builds each group's reports from "
               "the ranks that planned, so no case's own plan and rewrite takes it; the exchange checker "
               "takes it on edited reports and a disagreeing world (checks/exchange.py): ")
JUSTIFIED: tuple[Justified, ...] = (
    Justified("planner.py", "build_module_bucket_plans", "",
              "takes the nn.Module a caller holds; a case is a graph and planner arguments, and "
              "neither the planner nor the driver calls it (tests/reference/test_planner_inputs.py does)"),
    Justified("planner.py", "validate_group_plans", "if not plans_by_rank:",
              _SAME_WORLD + "a group with no reporting rank means group_ranks naming only ranks outside "
                            "the world, which has no process to run them"),
    Justified("planner.py", "validate_group_plans",
              "if expected is None or set(plans_by_rank) != set(expected):",
              _SAME_WORLD + "a missing report means a rank outside the world (see above)"),
    Justified("planner.py", "validate_group_plans",
              'if (tuple(report["group_ranks"].get(group, ())) != tuple(expected)',
              _SAME_WORLD + "so reports never disagree"),
    Justified("planner.py", "_membership_reason", "if current[-1].key != candidate.key:",
              "incompatible_key: plan_fsdp_buckets groups candidates by key before the greedy pass "
              "(spec 2.7)"),
    Justified("planner.py", "_physical_buckets", "if current:",
              "every key group holds a candidate and the loop appends each one, so current is never "
              "empty after it"),
    Justified("predicates.py", "is_barrier", 'if node.op in ("call_module", "call_method"):',
              "a graph description has only placeholder, call_function and output nodes"),
    Justified("predicates.py", "rs_layout_preparation", "if len(inputs) != 1:",
              "it runs on candidates only, and a candidate RS passed rules 3-4: four positional "
              "arguments of which only the first is a node"),
    Justified("rewrite.py", "check_fresh", "if plan.signature != signature:",
              "the driver plans each round on the graph as it stands, so its plans are never stale "
              "(tests/execute/test_rewrite_world.py applies stale plans)"),
)


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
    level, propagate, handlers = log.level, log.propagate, list(log.handlers)
    log.setLevel(logging.DEBUG)
    log.propagate, log.handlers = False, [logging.NullHandler()]
    try:
        yield
    finally:
        log.setLevel(level)  # setLevel, not assignment: it clears the loggers' isEnabledFor cache
        log.propagate, log.handlers = propagate, handlers


def exercise(case: Case, target_name: str = "reference") -> None:
    """Plan ``case`` on its first rank and rewrite it on every rank; refused arguments end it."""
    target = get_target(target_name)
    modules = build_world(case)
    rank = min(modules)
    try:
        with spec_params.use(case.spec):  # as a campaign plans it
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


def _justification(name: str, start: int) -> Justified | None:
    path = REFERENCE / name
    function, text = _function_at(path, start), path.read_text().splitlines()[start - 1].strip()
    return next((j for j in JUSTIFIED if j.file == name and j.function == function and j.line in ("", text)), None)


def _report(data: dict) -> BranchReport:
    report = BranchReport()
    for filename, doc in sorted(data["files"].items()):
        name = Path(filename).name
        summary = doc["summary"]
        report.files[name] = (summary["covered_branches"], summary["num_branches"])
        for start, end in doc["missing_branches"]:
            arc = (name, start, end)
            report.missed.append(arc)
            entry = _justification(name, start)
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
    for entry in dict.fromkeys(report.justified.values()):
        arcs = [_arc(start, end) for (_, start, end), e in sorted(report.justified.items()) if e is entry]
        lines.append(f"  unreachable {entry.file} {entry.function} {', '.join(arcs)}: {entry.reason}")
    return "\n".join(lines)
