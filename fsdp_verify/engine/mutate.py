"""Mutation testing of a target's source: how strong is the gate on a planner nobody tuned it for?

cosmic-ray enumerates and applies the mutations (one operator at one occurrence in one module);
this module runs each mutant through a short fuzz campaign of the named target and says which
checker killed it, how fast, or that it survived.

Each mutant runs in a child forked from this process after the heavy third-party modules (torch,
Hypothesis, z3) are imported once, so a mutant costs its campaign, not an interpreter start. The
mutated source never touches the disk: the child imports the project's modules afresh through a
finder that hands the mutated code to the one module it names. So workers run side by side on one
checkout, and a stopped run leaves no mutated file behind (cosmic-ray's own runner edits in place).
"""

from __future__ import annotations

import ast
import difflib
import enum
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import itertools
import json
import os
import random
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from fsdp_verify.engine import aim, hunts, probes
from fsdp_verify.model.names import strategy_name

# Imported once in the parent, so each forked mutant starts warm. None of them imports a module a
# mutant could change (the project's own modules are imported afresh in each child).
WARM = ("torch", "torch.fx", "torch.distributed", "hypothesis", "hypothesis.strategies", "z3", "numpy")


class Outcome(enum.Enum):
    """How one mutant fared."""

    KILLED = "killed"  # a saved failure on input the target accepts (a checker, or its crash or hang)
    SURVIVED = "survived"  # a blind spot: the campaign passed and no equivalence is claimed
    EQUIVALENT = "equivalent"  # survived, and the equivalence file says why no input can tell
    UNREACHED = "unreached"  # the campaign never imported the mutated module: nothing was tested
    INCOMPETENT = "incompetent"  # the mutant breaks the import itself, or the campaign could not run
    HARNESS_ERROR = "harness error"  # the harness failed on the mutant (it shares the module, or overran)

    @property
    def counted(self) -> bool:
        """In the mutation score's denominator: killed or a blind spot."""
        return self in (Outcome.KILLED, Outcome.SURVIVED)


@dataclass(frozen=True)
class Mutant:
    """One mutation: cosmic-ray's operator at one occurrence in one module file."""

    path: str  # the module file, as given (relative to the working folder when it is inside)
    module: str  # its dotted import name
    operator: str  # cosmic-ray's name, e.g. core/ReplaceComparisonOperator_Lt_LtE
    occurrence: int
    line: int
    definition: str = ""  # the enclosing function or class

    @property
    def ident(self) -> str:
        return f"{self.path}:{self.line}:{self.operator}#{self.occurrence}"


@dataclass(frozen=True)
class Equivalence:
    """A survivor explained: this change of this line cannot change what the target does."""

    path: str
    operator: str
    before: str
    after: str
    reason: str

    def matches(self, mutant: Mutant, before: str, after: str) -> bool:
        return (Path(self.path).as_posix() == Path(mutant.path).as_posix() and self.operator == mutant.operator
                and self.before.strip() == before.strip() and self.after.strip() == after.strip())


@dataclass
class MutantResult:
    """A mutant's run: its outcome, what killed it and when, and what it changed."""

    mutant: Mutant
    outcome: Outcome
    checkers: tuple[str, ...] = ()
    seconds_to_kill: Optional[float] = None  # from the campaign's start to the first failure
    examples_to_kill: Optional[int] = None
    examples: int = 0
    wall_seconds: float = 0.0  # the child's whole life, campaign and imports
    cpu_seconds: float = 0.0  # the child and its descendants (user + system)
    default_rate: Optional[float] = None  # share of the default phases' examples that ran its line
    # share of them in which it changed the result of ``level`` (the outermost function of its module
    # whose result it ever changed; None: not probed, ``probed`` says why, or no result ever changed)
    default_infected: Optional[float] = None
    level: str = ""
    probed: str = ""
    aimed: str = ""  # the phases added for it (``aim``), comma-joined: the planted shape that runs its line most
    aimed_by: str = ""  # what chose that phase: its line's reach, its function's result, a planted bug (aim.Basis)
    round: int = 1  # 2: a survivor run again, aimed by its probes (its times count both rounds)
    before: str = ""  # the changed lines, stripped: the equivalence file's key
    after: str = ""
    diff: str = ""
    reason: str = ""  # why equivalent, or what went wrong
    cases: str = ""  # the folder its killing case was saved in (``Settings.keep_cases``), else ""

    def to_json(self) -> dict:
        record = asdict(self)
        record["mutant"] = asdict(self.mutant) | {"ident": self.mutant.ident}
        record["outcome"] = self.outcome.value
        record["checkers"] = list(self.checkers)
        return record


@dataclass(frozen=True)
class Phase:
    """One part of a mutant's campaign: what to draw from and at what size, for a share of the budget."""

    strategy: str
    size: str


# Tiny graphs with several hazards find planner bugs fastest (the self-test's configuration);
# the default mix at the default size then reaches what hazards never draw (traced modules aside).
DEFAULT_PHASES = (Phase("hazards", "tiny"), Phase("cases", "default"))


@dataclass(frozen=True)
class Settings:
    """One mutation run."""

    target: str = "reference"
    seconds: float = 30.0  # campaign budget per mutant, both rounds together (``round_budgets``)
    phases: tuple[Phase, ...] = DEFAULT_PHASES
    workers: int = 1
    seed: int = 0
    case_deadline: float = 10.0  # seconds the target may take on one case: a hang is a kill, soon
    aim: bool = True  # add a planted shape's phase for a mutant whose line the phases seldom run
    grace: float = 60.0  # wall seconds past the budget before a child is the harness's overrun
    # a folder: each mutant's campaign keeps its corpus under it (``case_folder``), so the case that
    # killed a mutant can be replayed, shown or shrunk; empty: a temporary folder, then gone
    keep_cases: str = ""
    # the share of ``seconds`` held back for round two where it can run (aimed runs): a mutant's time
    # to kill is then within its budget whichever round kills it, as a gate of N s per mutant needs
    again: float = 1 / 3

    def round_budgets(self) -> tuple[float, float]:
        """Round one's and round two's campaign seconds; without aim there is no round two."""
        if not self.aim:
            return self.seconds, 0.0
        again = self.seconds * self.again
        return self.seconds - again, again


class BadInput(ValueError):
    """A mutate argument or equivalence file that cannot be used (exit 2)."""


# --- which mutants -------------------------------------------------------------------------------


def module_files(paths: Sequence[str]) -> list[Path]:
    """The Python files named, folders expanded (sorted, so a sample is the same on every machine)."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
        elif path.suffix == ".py" and path.is_file():
            found.append(path)
        else:
            raise BadInput(f"{text}: not a Python file or a folder of them")
    return found


def module_name(path: Path) -> str:
    """The dotted name ``path`` imports under: its package folders (each with ``__init__.py``)."""
    path = path.resolve()
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        folder = folder.parent
    if not parts:
        raise BadInput(f"{path}: not inside a package or importable folder")
    name = ".".join(parts)
    spec = _find_spec(name)
    if spec is not None and spec.origin and Path(spec.origin).resolve() == path:
        return name
    # A folder installed under another name (strategies/ is fsdp_verify.strategies): the package
    # already imported whose search path holds the file names it.
    for package, module in list(sys.modules.items()):
        where = getattr(module, "__path__", None) or ()
        if any(Path(entry).resolve() == path.parent for entry in where):
            return package if path.name == "__init__.py" else f"{package}.{path.stem}"
    return name


def _find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def enumerate_mutants(paths: Sequence[str], operators: Optional[str] = None) -> list[Mutant]:
    """Every mutation cosmic-ray's operators make in the named modules (operators that need
    arguments, the variable replacers, are left out); ``operators`` is a regular expression on
    the operator's name."""
    import cosmic_ray.plugins
    from cosmic_ray.ast import ast_nodes, get_ast_from_path
    from cosmic_ray.ast.ast_query import ASTQuery

    pattern = re.compile(operators) if operators else None
    mutants: list[Mutant] = []
    for path in module_files(paths):
        module = module_name(path)
        tree = get_ast_from_path(path)
        for name in cosmic_ray.plugins.operator_names():
            kind = cosmic_ray.plugins.get_operator(name)
            if kind.arguments() or (pattern and not pattern.search(name)):
                continue
            operator = kind()
            positions = [(node, start) for node in ast_nodes(tree) for start, _ in operator.mutation_positions(node)]
            for occurrence, (node, start) in enumerate(positions):
                mutants.append(Mutant(_shown(path), module, name, occurrence, start[0],
                                      ASTQuery(node).get_definition_name() or ""))
    return mutants


def sample(mutants: list[Mutant], count: Optional[int], seed: int) -> list[Mutant]:
    """A uniform sample (all of them when ``count`` is None or not smaller), in enumeration order."""
    if count is None or count >= len(mutants):
        return list(mutants)
    chosen = set(random.Random(seed).sample(range(len(mutants)), count))
    return [m for i, m in enumerate(mutants) if i in chosen]


def _read_json(path: str) -> Any:
    """A JSON file the user named, or BadInput naming the file and what is wrong."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise BadInput(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def survivor_idents(path: str) -> list[str]:
    """The mutants a results file says survived: ``--json`` output (``results`` with an outcome) or
    a benchmark list (``survivors`` of ``{"ident"}``), so a run can judge only last night's survivors."""
    data = _read_json(path)
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        rows = [r for r in data["results"] if isinstance(r, dict) and r.get("outcome") == Outcome.SURVIVED.value]
        idents = [r.get("mutant", {}).get("ident") if isinstance(r.get("mutant"), dict) else None for r in rows]
        field_name = "results[].mutant.ident"
    elif isinstance(data, dict) and isinstance(data.get("survivors"), list):
        idents = [r.get("ident") if isinstance(r, dict) else None for r in data["survivors"]]
        field_name = "survivors[].ident"
    else:
        raise BadInput(f"{path}: expected a 'results' list (mutate --json) or a 'survivors' list")
    for index, ident in enumerate(idents):
        if not isinstance(ident, str) or not ident:
            raise BadInput(f"{path}: {field_name} [{index}]: expected a non-empty string")
    return idents


def select(mutants: list[Mutant], idents: Sequence[str], source: str) -> list[Mutant]:
    """The mutants named, in enumeration order; a name that matches none is bad input (the source
    changed since the file was written, so its line numbers no longer hold)."""
    known = {m.ident for m in mutants}
    missing = [ident for ident in idents if ident not in known]
    if missing:
        raise BadInput(f"{source}: {len(missing)} mutant(s) not among this source's mutants "
                       f"(first: {missing[0]}); the source has changed since")
    wanted = set(idents)
    return [m for m in mutants if m.ident in wanted]


def mutated_source(mutant: Mutant) -> tuple[str, Optional[str]]:
    """The module's source and the mutant's (None when the operator finds no such occurrence)."""
    import cosmic_ray.plugins
    from cosmic_ray.mutating import mutate_code

    source = Path(mutant.path).read_text(encoding="utf-8")
    return source, mutate_code(source, cosmic_ray.plugins.get_operator(mutant.operator)(), mutant.occurrence)


def changed_lines(source: str, mutated: str) -> tuple[str, str, str]:
    """The removed and added lines (stripped, joined) and a unified diff with one line of context."""
    old, new = source.splitlines(), mutated.splitlines()
    diff = list(difflib.unified_diff(old, new, lineterm="", n=1))
    removed = " / ".join(line[1:].strip() for line in diff if line.startswith("-") and not line.startswith("---"))
    added = " / ".join(line[1:].strip() for line in diff if line.startswith("+") and not line.startswith("+++"))
    return removed, added, "\n".join(diff[2:])


_ANNOTATION_READERS = ("get_type_hints", "__annotations__", "ClassVar", "InitVar", "inspect.signature")


def _erase_annotations(tree: ast.AST) -> str:
    """``tree`` dumped with every annotation replaced by one constant (the annotated names kept)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        elif isinstance(node, ast.arg):
            node.annotation = None
        elif isinstance(node, ast.AnnAssign):
            node.annotation = ast.Constant(None)
    return ast.dump(tree)


def annotation_only(source: str, mutated: str) -> bool:
    """Whether the mutant changes only annotations of a module that never evaluates them.

    Under ``from __future__ import annotations`` (PEP 563) an annotation is kept as a string that
    nothing reads unless the module asks for it; a module that names a reader of annotations (or
    a dataclass marker that is read from them) is run like any other."""
    try:
        before, after = ast.parse(source), ast.parse(mutated)
    except SyntaxError:
        return False
    future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__"
                 and any(alias.name == "annotations" for alias in node.names) for node in before.body)
    if not future or any(reader in source or reader in mutated for reader in _ANNOTATION_READERS):
        return False
    return _erase_annotations(before) == _erase_annotations(after)


def load_equivalences(path: str) -> list[Equivalence]:
    """The equivalence file: ``{"equivalent": [{"path", "operator", "before", "after", "reason"}]}``,
    one entry per survivor claimed equivalent, each with the reason a reader can check."""
    data = _read_json(path)
    entries = data.get("equivalent") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise BadInput(f"{path}: field 'equivalent': expected a list of entries")
    found = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise BadInput(f"{path}: equivalent[{index}]: expected an object")
        for key in ("path", "operator", "before", "after", "reason"):
            if not isinstance(entry.get(key), str) or (key == "reason" and not entry[key].strip()):
                raise BadInput(f"{path}: equivalent[{index}].{key}: expected a non-empty string")
        found.append(Equivalence(*(entry[k] for k in ("path", "operator", "before", "after", "reason"))))
    return found


# --- one mutant, in a forked child ---------------------------------------------------------------


class _MutantFinder(importlib.abc.MetaPathFinder):
    """Hands the mutated source to the one module it names; every other import is untouched."""

    def __init__(self, module: str, path: str, source: str) -> None:
        self.module, self.path, self.source, self.loaded = module, str(Path(path).resolve()), source, False

    def find_spec(self, name, path=None, target=None):
        if name != self.module:
            return None
        loader = _MutantLoader(name, self.path, self)
        folder = [str(Path(self.path).parent)] if Path(self.path).name == "__init__.py" else None
        return importlib.util.spec_from_file_location(name, self.path, loader=loader,
                                                      submodule_search_locations=folder)


class _MutantLoader(importlib.machinery.SourceFileLoader):
    """Compiles the mutant from memory: no cached bytecode is read or written."""

    def __init__(self, name: str, path: str, finder: _MutantFinder) -> None:
        super().__init__(name, path)
        self.finder = finder

    def get_code(self, fullname):
        self.finder.loaded = True
        return compile(self.finder.source, self.path, "exec", dont_inherit=True)


def _fresh_modules(module: str) -> None:
    """Forget the mutated module's package and the harness's own, so every module that imports the
    mutant imports it, and no registry holds a target resolved from the original."""
    tops = {module.split(".")[0], __name__.split(".")[0]}
    for name in [n for n in sys.modules if n.split(".")[0] in tops]:
        del sys.modules[name]


def _campaign(settings: Settings, corpus: str) -> dict:
    """The mutant's campaign: each phase in turn until a failure on accepted input is saved."""
    from fsdp_verify.engine import campaign
    from fsdp_verify.model import classes

    share = settings.seconds / len(settings.phases)
    report = {"examples": 0, "checkers": [], "first_failure": None, "harness_errors": 0, "excused": 0}
    start = time.monotonic()
    for index, phase in enumerate(settings.phases):
        drawn = strategy_name(phase.strategy)
        config = campaign.Config(target=settings.target, budget=campaign.Budget(seconds=share),
                                 seed=settings.seed + index, profile="ci", corpus_dir=corpus, size=phase.size,
                                 modules=False, max_failures=1, strategy=drawn.strategy, shrink=False,
                                 deadline=settings.case_deadline, draw_spec=drawn.draw_spec,
                                 rediscover=True)  # a kill is what this run finds, whatever the folder holds
        elapsed = time.monotonic() - start
        result = campaign.run(config)
        report["harness_errors"] += result.harness_errors
        bugs = [f for f in result.failures if classes.of(f).is_bug]
        report["excused"] += len(result.failures) - len(bugs)
        if bugs:
            examples, seconds = result.first_failure or (result.examples, result.seconds)
            report["checkers"] = sorted(set(bugs[0]["checkers"]))
            report["first_failure"] = [report["examples"] + examples, round(elapsed + seconds, 3)]
            report["examples"] += result.examples
            return report
        report["examples"] += result.examples
    return report


def case_folder(keep: str, mutant: Mutant, round_: int) -> Path:
    """Where a kept campaign of ``mutant`` saves its cases: one folder per mutant and round, named by
    its ident (path, line, operator, occurrence) with what a file name cannot hold replaced."""
    return Path(keep) / f"{re.sub(r'[^A-Za-z0-9_.#-]+', '_', mutant.ident)}.round{round_}"


def _child(mutant: Mutant, source: str, settings: Settings, out: Path, log: Path, round_: int = 1) -> None:
    """In the forked child: import the mutant, run its campaign, write what happened; never returns."""
    code = 0
    try:
        os.setpgid(0, 0)  # its own group: an overrun kills the isolation children with it
        descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops its children itself
        _fresh_modules(mutant.module)
        finder = _MutantFinder(mutant.module, mutant.path, source)
        sys.meta_path.insert(0, finder)
        try:
            importlib.import_module("fsdp_verify.targets").get_target(settings.target)
        except BaseException:  # noqa: BLE001 - the target cannot even be made
            key = "incompetent" if finder.loaded else "harness_error"
            out.write_text(json.dumps({key: traceback.format_exc(limit=4)}))
            os._exit(0)
        if settings.keep_cases:
            kept = case_folder(settings.keep_cases, mutant, round_)
            shutil.rmtree(kept, ignore_errors=True)  # this run's cases only
            kept.mkdir(parents=True)
            report = _campaign(settings, str(kept))
        else:
            with tempfile.TemporaryDirectory(prefix="fsdp-verify-mutant-") as corpus:
                report = _campaign(settings, corpus)
        report["loaded"] = finder.loaded
        out.write_text(json.dumps(report))
    except BaseException:  # noqa: BLE001 - whatever happens, the parent reads a verdict
        try:
            out.write_text(json.dumps({"harness_error": traceback.format_exc(limit=6)}))
        except OSError:
            code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _verdict(mutant: Mutant, report: Optional[dict], log: Path, overran: bool) -> tuple[Outcome, dict]:
    """The outcome from the child's report (or its absence)."""
    if overran:
        return Outcome.HARNESS_ERROR, {"reason": "the mutant's campaign overran its wall limit"}
    if report is None:
        tail = log.read_text(errors="replace")[-600:] if log.exists() else ""
        return Outcome.HARNESS_ERROR, {"reason": f"the mutant's process died without a verdict: {tail}"}
    if "incompetent" in report:
        return Outcome.INCOMPETENT, {"reason": report["incompetent"].strip().splitlines()[-1]}
    if "harness_error" in report:
        return Outcome.HARNESS_ERROR, {"reason": report["harness_error"].strip().splitlines()[-1]}
    facts = {"examples": report["examples"]}
    if report["checkers"]:
        examples, seconds = report["first_failure"]
        return Outcome.KILLED, facts | {"checkers": tuple(report["checkers"]), "seconds_to_kill": seconds,
                                        "examples_to_kill": examples}
    if report["harness_errors"]:
        return Outcome.HARNESS_ERROR, facts | {"reason": f"{report['harness_errors']} harness errors in its campaign"}
    if not report.get("loaded"):
        return Outcome.UNREACHED, facts | {"reason": f"the campaign never imported {mutant.module}"}
    return Outcome.SURVIVED, facts


@dataclass
class _Running:
    mutant: Mutant
    pid: int
    started: float
    out: Path
    log: Path
    before: str
    after: str
    diff: str
    aimed: Optional[aim.Aim] = None
    cases: str = ""  # its kept campaign's folder (``case_folder``), or ""


def warm_up() -> None:
    """Import the heavy third-party modules once, for every child to inherit."""
    for name in WARM:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


@dataclass
class Run:
    """A mutation run's results, in the sample's order, and whether it was stopped early."""

    results: list[MutantResult] = field(default_factory=list)
    interrupted: bool = False
    total: int = 0  # mutants enumerated before sampling
    reach: Optional[aim.Reach] = None  # which phases ran which lines (None: phases not aimed)
    probes: Optional[aim.Reach] = None  # the second round's map, survivors probed (None: no second round)

    def counts(self) -> dict[str, int]:
        return {o.value: sum(r.outcome is o for r in self.results) for o in Outcome}

    @property
    def score(self) -> Optional[float]:
        """Killed over killed plus blind spots (equivalent, unreached, incompetent and harness
        errors are counted apart)."""
        counted = [r for r in self.results if r.outcome.counted]
        return sum(r.outcome is Outcome.KILLED for r in counted) / len(counted) if counted else None

    @property
    def median_seconds_to_kill(self) -> Optional[float]:
        times = sorted(r.seconds_to_kill for r in self.results if r.outcome is Outcome.KILLED)
        return times[len(times) // 2] if times else None

    def to_json(self) -> dict:
        return {"total_mutants": self.total, "run": len(self.results), "interrupted": self.interrupted,
                "aim": None if self.reach is None else {"seconds": self.reach.seconds, "error": self.reach.error,
                                                        "examples": self.reach.examples},
                "probes": None if self.probes is None else {
                    "seconds": self.probes.seconds, "error": self.probes.error, "probed": self.probes.probed,
                    "levels": self.probes.levels,
                    "changed": {ident: {phase: round(self.probes.infection(phase, ident), 3)
                                        for phase in self.probes.examples if self.probes.infection(phase, ident)}
                                for ident in self.probes.probed if self.probes.telling_level(ident) is not None}},
                "counts": self.counts(), "score": self.score, "median_seconds_to_kill": self.median_seconds_to_kill,
                "results": [r.to_json() for r in self.results]}


def run(mutants: Sequence[Mutant], settings: Settings, equivalences: Iterable[Equivalence] = (),
        progress: Optional[Callable[[MutantResult], None]] = None, total: int = 0) -> Run:
    """Run every mutant, ``settings.workers`` at a time; Ctrl-C stops them and keeps what finished.

    Two rounds: every mutant, aimed by its line (``aim``); then each survivor whose probes show a
    planted shape changing what its module's functions return more often than the default phases
    do, again, that shape first (``probes``), and each survivor no probe saw change a result, or
    whose result the default phases changed often to no effect, whose function a planted bug
    replaces, again, that bug's hunts alone. The budget is each mutant's whole: round one has
    ``Settings.round_budgets``'s first part, round two the rest. Probing is for survivors only: a
    copy of each level runs beside the original on every call, so probing every mutant of a module
    would run its planner a hundred times per call."""
    equivalences = list(equivalences)
    warm_up()
    sources: dict[str, tuple[str, Optional[str]]] = {}
    try:
        reach = _reach(mutants, settings)
    except KeyboardInterrupt:  # stopped while measuring: nothing ran, and the run says so
        return Run([], True, total or len(mutants))
    done: dict[str, MutantResult] = {}
    one, two = settings.round_budgets()
    if reach is None or reach.error:  # no map, no round two: round one has the whole budget
        one, two = settings.seconds, 0.0
    first = replace(settings, seconds=one)
    interrupted = _judge([(m, _aimed(reach, m, first)) for m in mutants], first, equivalences, progress,
                         sources, done)
    survivors = [m for m in mutants if m.ident in done and done[m.ident].outcome is Outcome.SURVIVED]
    probed: Optional[aim.Reach] = None
    if two > 0 and survivors and not interrupted:
        try:
            probed = _probed(survivors, settings, sources)
            later = replace(settings, seconds=two)
            second = {m.ident: _aimed(probed, m, later) for m in survivors}
            again = [(m, second[m.ident]) for m in survivors if second[m.ident].found is not None
                     and second[m.ident].found.basis in _AGAIN
                     and second[m.ident].found.phase]
            for mutant in survivors:  # what the probes said, kept on the survivor whether or not it runs again
                _note_probe(done[mutant.ident], second[mutant.ident].found, probed)
            firsts = {m.ident: done[m.ident] for m, _ in again}
            interrupted = _judge(again, later, equivalences, None, sources, done, round_=2)
            for mutant, _ in again:
                done[mutant.ident] = _second_round(firsts[mutant.ident], done.get(mutant.ident), first)
                _tell(progress, done[mutant.ident])
        except KeyboardInterrupt:
            interrupted = True
    results = [done[m.ident] for m in mutants if m.ident in done]
    return Run(results, interrupted, total or len(mutants), reach, probed)


# The second round's bases: a shape changes the survivor's result more than the defaults do, or the
# hunts of its function's planted bugs where no probe saw a change or the defaults' changes told nothing.
_AGAIN = (aim.Basis.RESULT, aim.Basis.UNSEEN, aim.Basis.HARMLESS)


def _judge(items: Sequence[tuple[Mutant, "Aimed"]], settings: Settings, equivalences: list[Equivalence],
           progress: Optional[Callable[[MutantResult], None]], sources: dict[str, tuple[str, Optional[str]]],
           done: dict[str, MutantResult], round_: int = 1) -> bool:
    """Run each mutant's campaign in a forked child, ``settings.workers`` at a time, into ``done``;
    whether Ctrl-C stopped them. ``round_`` names a kept campaign's folder (``case_folder``)."""
    running: dict[int, _Running] = {}
    queue = list(items)
    numbers = itertools.count()  # each child its own report and log file: two at once never share one
    limit = settings.seconds + settings.grace
    with tempfile.TemporaryDirectory(prefix="fsdp-verify-mutate-") as scratch:
        try:
            while queue or running:
                while queue and len(running) < settings.workers:
                    mutant, aimed = queue.pop(0)
                    source, mutated = _source(mutant, sources)
                    if mutated is None:
                        done[mutant.ident] = MutantResult(mutant, Outcome.INCOMPETENT,
                                                          reason="cosmic-ray made no mutation at this occurrence")
                        continue
                    before, after, diff = changed_lines(source, mutated)
                    if annotation_only(source, mutated):
                        done[mutant.ident] = MutantResult(
                            mutant, Outcome.EQUIVALENT, before=before, after=after, diff=diff,
                            reason="changes only annotations, which PEP 563 keeps as strings nothing reads")
                        _tell(progress, done[mutant.ident])
                        continue
                    number = next(numbers)
                    out, log = Path(scratch, f"{number}.json"), Path(scratch, f"{number}.log")
                    sys.stdout.flush()
                    sys.stderr.flush()
                    pid = os.fork()
                    if pid == 0:
                        try:
                            _child(mutant, mutated, aimed.settings, out, log, round_)
                        finally:  # a forked child never returns into the parent's code, whatever it raised
                            os._exit(3)
                    kept = str(case_folder(settings.keep_cases, mutant, round_)) if settings.keep_cases else ""
                    running[pid] = _Running(mutant, pid, time.monotonic(), out, log, before, after, diff, aimed.found,
                                            kept)
                pid, status, usage = os.wait4(-1, os.WNOHANG)
                if pid == 0:
                    for job in list(running.values()):
                        if time.monotonic() - job.started > limit:
                            _kill_group(job.pid)
                            _, _, usage = os.wait4(job.pid, 0)
                            done[job.mutant.ident] = _finish(job, usage, True, equivalences)
                            del running[job.pid]
                            _tell(progress, done[job.mutant.ident])
                    time.sleep(0.05)
                    continue
                job = running.pop(pid)
                _kill_group(pid)  # isolation children a dead child left behind
                done[job.mutant.ident] = _finish(job, usage, False, equivalences)
                _tell(progress, done[job.mutant.ident])
        except KeyboardInterrupt:
            for pid in list(running):
                _kill_group(pid)
                os.waitpid(pid, 0)
            return True
    return False


def _source(mutant: Mutant, sources: dict[str, tuple[str, Optional[str]]]) -> tuple[str, Optional[str]]:
    """The module's source and the mutant's, made once per run (cosmic-ray takes about 50 ms)."""
    if mutant.ident not in sources:
        sources[mutant.ident] = mutated_source(mutant)
    return sources[mutant.ident]


def _reach(mutants: Sequence[Mutant], settings: Settings) -> Optional[aim.Reach]:
    """The map of which phases run which lines of the mutated files (None: not aimed)."""
    if not settings.aim or not mutants:
        return None
    files = sorted({m.path for m in mutants})
    return aim.measure(files, settings.target, [(p.strategy, p.size) for p in settings.phases], settings.seed,
                       settings.workers)


def _probed(survivors: Sequence[Mutant], settings: Settings,
            sources: dict[str, tuple[str, Optional[str]]]) -> aim.Reach:
    """The map again, with each survivor probed: in which examples it changes what its module's
    functions return."""
    probed: list = []
    for mutant in survivors:
        source, mutated = _source(mutant, sources)
        if mutated is not None:
            probed.append(probes.probe_for(mutant.ident, mutant.module, mutant.line, source, mutated))
    return aim.measure(sorted({m.path for m in survivors}), settings.target,
                       [(p.strategy, p.size) for p in settings.phases], settings.seed, settings.workers, probed=probed)


def _note_probe(result: MutantResult, found: Optional[aim.Aim], reach: aim.Reach) -> None:
    """Keep on a survivor what its probes said (or why it was not probed)."""
    result.probed = reach.error or reach.probed.get(result.mutant.ident, "not probed")
    if found is not None:
        result.default_infected = None if found.default_infected is None else round(found.default_infected, 3)
        result.level = found.level


def _second_round(first: MutantResult, second: Optional[MutantResult], settings: Settings) -> MutantResult:
    """A survivor's verdict after its aimed second campaign: a kill counts the first round's whole
    budget (``settings``: round one's) in its time and examples (the honest time to kill of a run
    that needed both)."""
    if second is None:
        return first
    merged = replace(second, wall_seconds=round(first.wall_seconds + second.wall_seconds, 3),
                     cpu_seconds=round(first.cpu_seconds + second.cpu_seconds, 3),
                     examples=first.examples + second.examples, round=2,
                     default_rate=first.default_rate, probed=first.probed,
                     default_infected=first.default_infected, level=first.level)
    if second.outcome is Outcome.KILLED:
        merged.seconds_to_kill = round(settings.seconds + (second.seconds_to_kill or 0.0), 3)
        merged.examples_to_kill = first.examples + (second.examples_to_kill or 0)
    return merged


@dataclass(frozen=True)
class Aimed:
    """One mutant's settings and what the reach map said of its line (None: no map)."""

    settings: Settings
    found: Optional[aim.Aim] = None


def _aimed(reach: Optional[aim.Reach], mutant: Mutant, settings: Settings) -> Aimed:
    """The mutant's settings: the aimed phase first (it runs the mutant's line most), then the
    others; the budget is split over all of them. A survivor aimed by every hunt of its function's
    planted bugs (``Aim.more``) runs those alone."""
    if reach is None or reach.error:  # no map: nothing is said of the mutant's line
        return Aimed(settings)
    found = aim.aim(reach, mutant.path, mutant.line, [aim.phase_name(p.strategy, p.size) for p in settings.phases],
                    mutant.ident, _hunts(mutant) if settings.target == "reference" else ())
    if found.phase is None:
        return Aimed(settings, found)
    aimed = tuple(Phase(*name.rsplit(":", 1)) for name in (found.phase, *found.more))
    if found.more:  # every hunt, and only hunts: round one gave the default phases their share
        return Aimed(replace(settings, phases=aimed), found)
    return Aimed(replace(settings, phases=(*aimed, *settings.phases)), found)


def _hunts(mutant: Mutant) -> tuple[str, ...]:
    """The hunts of the catalogue's planted bugs that replace what holds the mutant's line: they are
    bugs of the reference, so only a run on the reference aims by them."""
    try:
        source = Path(mutant.path).read_text()
    except OSError:
        return ()
    return hunts.hunts_for(mutant.module, source, mutant.line)


def _tell(progress, result: MutantResult) -> None:
    if progress is not None:
        progress(result)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _finish(job: _Running, usage: resource.struct_rusage, overran: bool,
            equivalences: list[Equivalence]) -> MutantResult:
    try:
        report = json.loads(job.out.read_text()) if job.out.exists() else None
    except (OSError, json.JSONDecodeError):
        report = None
    outcome, facts = _verdict(job.mutant, report, job.log, overran)
    if outcome is Outcome.KILLED and job.cases:
        facts["cases"] = job.cases
    if outcome is Outcome.SURVIVED:
        claim = next((e for e in equivalences if e.matches(job.mutant, job.before, job.after)), None)
        if claim is not None:
            outcome, facts = Outcome.EQUIVALENT, facts | {"reason": claim.reason}
    aimed = {} if job.aimed is None else {
        "default_rate": round(job.aimed.default_rate, 3), "aimed": ", ".join(filter(None, (job.aimed.phase, *job.aimed.more))),
        "aimed_by": job.aimed.basis.value if job.aimed.phase else ""}
    return MutantResult(job.mutant, outcome, wall_seconds=round(time.monotonic() - job.started, 3),
                        cpu_seconds=round(usage.ru_utime + usage.ru_stime, 3), before=job.before,
                        after=job.after, diff=job.diff, **aimed, **facts)


# --- the report ----------------------------------------------------------------------------------


def _aim_line(outcome: Run) -> str:
    """What the reach map did: how many mutants got an aimed phase, or why none did."""
    reach = outcome.reach
    if reach is None:
        return "aimed phases: off (every mutant ran the given phases only)"
    if reach.error:
        return f"aimed phases: none, the reach map failed: {reach.error}"
    by_line = sum(r.aimed_by == aim.Basis.LINE.value and r.round == 1 for r in outcome.results)
    by_hunt = sum(r.aimed_by == aim.Basis.CATALOGUE.value and r.round == 1 for r in outcome.results)
    again = [r for r in outcome.results if r.round == 2]
    by_result = [r for r in again if r.aimed_by == aim.Basis.RESULT.value]
    harmless = [r for r in again if r.aimed_by == aim.Basis.HARMLESS.value]
    probed = [r for r in outcome.results if r.round == 2 or (r.outcome is Outcome.SURVIVED and not r.probed)]
    return (f"aimed phases: {by_line} of {len(outcome.results)} mutants by their line, {by_hunt} by the hunt of a "
            f"planted bug that replaces their function or constant (run in under "
            f"{100 * aim.AIM_BELOW:.0f}% of the default phases' examples); reach map {reach.seconds:.0f} s, "
            f"{sum(reach.examples.values())} examples over {len(reach.examples)} phases. Second round: "
            f"{len(probed)} survivors probed, {len(by_result)} run again aimed by what their module's functions "
            f"return (changed in under {100 * aim.AIM_BELOW:.0f}% of the default phases' examples), "
            f"{len(again) - len(by_result) - len(harmless)} by the hunts of a planted bug that replaces their "
            f"function where no probe saw a change, {len(harmless)} where the default phases' changes told nothing; "
            f"{sum(r.outcome is Outcome.KILLED for r in again)} of them killed")


def format_table(outcome: Run) -> str:
    """Counts by module and outcome, the score, the median time to kill, and every survivor's diff."""
    modules = sorted({r.mutant.path for r in outcome.results})
    names = [o for o in Outcome]
    width = max([len("module")] + [len(m) for m in modules])
    lines = [f"{'module':<{width}} " + " ".join(f"{o.value:>13}" for o in names)]
    for module in modules + ["all"]:
        rows = [r for r in outcome.results if module in ("all", r.mutant.path)]
        lines.append(f"{module:<{width}} " + " ".join(f"{sum(r.outcome is o for r in rows):>13}" for o in names))
    killers: dict[str, int] = {}
    for r in outcome.results:
        if r.outcome is Outcome.KILLED:
            for checker in r.checkers:
                killers[checker] = killers.get(checker, 0) + 1
    score, median = outcome.score, outcome.median_seconds_to_kill
    lines.append(f"mutants: {outcome.total} enumerated, {len(outcome.results)} run"
                 f"{' (stopped early)' if outcome.interrupted else ''}; mutation score "
                 f"{'n/a' if score is None else f'{100 * score:.1f}%'} (killed / killed + survived); "
                 f"median time to kill {'n/a' if median is None else f'{median:.1f} s'}")
    lines.append("killed by: " + (", ".join(f"{c} {n}" for c, n in sorted(killers.items(), key=lambda x: -x[1]))
                                  or "-"))
    lines.append(_aim_line(outcome))
    for r in outcome.results:
        if r.outcome in (Outcome.SURVIVED, Outcome.UNREACHED, Outcome.INCOMPETENT, Outcome.HARNESS_ERROR):
            lines.append(f"\n{r.outcome.value}: {r.mutant.ident} (in {r.mutant.definition or 'module'})"
                         f"{': ' + r.reason if r.reason else ''}")
            if r.outcome is Outcome.SURVIVED and r.default_rate is not None:
                result = (f"; it changed what {r.level} returns in {100 * r.default_infected:.0f}% of them"
                          if r.default_infected is not None else f"; not probed: {r.probed}" if r.probed else
                          "; in no example of the map did it change what a function of its module returns")
                lines.append(f"    its line ran in {100 * r.default_rate:.0f}% of the default phases' examples{result}"
                             + (f"; aimed phase{'s' * (',' in r.aimed)} {r.aimed} (by its {r.aimed_by})" if r.aimed else
                                "; no planted shape runs it more often" if r.default_rate < aim.AIM_BELOW else ""))
            lines.extend("    " + line for line in r.diff.splitlines())
    return "\n".join(lines)
