"""Which draws run each line of the modules a mutation run changes, so that a mutant on a line the
default phases seldom run gets a phase of the draws that run it most.

A mutant survives a short campaign for one of two reasons: no checker sees what it breaks, or no
example ran its line often enough. Only the first is a blind spot of the checkers. The default mix
draws each planted shape (``rule:REASON``) in about one example in a hundred, so a mutant that only
one shape reaches can outlive 60 s of it and die in 2 s of that shape's hunt. The map is measured
once per run on the unmutated source, with coverage.py and one dynamic context per example (the way
mutmut and cosmic-ray run only the tests that cover a mutant's line).
"""

from __future__ import annotations

import contextlib
import enum
import importlib
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional, Sequence

from fsdp_verify.engine import probes
from fsdp_verify.model.names import DRAWN_SPEC, strategy_name

#: A line the default phases run in fewer than this share of their examples gets an aimed phase
#: (when some planted shape runs it more often).
AIM_BELOW = 0.1
#: Examples measured per default phase and per planted shape: enough to tell "most examples" from
#: "one in ten" from "never"; rarer than one in DEFAULT_EXAMPLES counts as never. A shape's hunt
#: plants its shape in a share of its examples only (a variant that fits no pair plants nothing).
DEFAULT_EXAMPLES = 40
SHAPE_EXAMPLES = 40
SHAPE_SIZE = "tiny"  # the self-test's hunts draw tiny graphs: a planted shape is most of each
MEASURE_LIMIT = 900.0  # wall seconds the whole measurement may take; a share still running is killed


@dataclass(frozen=True)
class Reach:
    """Per phase (``strategy:size``): examples measured, and per file and statement line the examples
    that ran it; each file's statement lines (a mutant's line is read as the statement holding it)."""

    examples: dict[str, int] = field(default_factory=dict)
    hits: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    statements: dict[str, list[int]] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""  # the measurement failed: no phase is aimed, and the run says why
    # per phase, per probed mutant and level (0: its own function; then its callers, ``probes``), the
    # examples in which it changed that level's result
    infected: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)
    probed: dict[str, str] = field(default_factory=dict)  # per mutant: "" probed, else why not
    levels: dict[str, list[str]] = field(default_factory=dict)  # per probed mutant: its levels' functions

    def rate(self, phase: str, path: str, line: int) -> float:
        """The share of ``phase``'s examples that ran the statement holding ``line`` of ``path``."""
        if not self.examples.get(phase):
            return 0.0
        return self.hits.get(phase, {}).get(_key(path), {}).get(self.statement(path, line), 0) / self.examples[phase]

    def telling_level(self, ident: str) -> Optional[int]:
        """The outermost level whose result mutant ``ident`` ever changed (None: none ever changed):
        the nearest the map sees to the change reaching what the module hands its caller."""
        levels = [level for by in self.infected.values() for level, n in by.get(ident, {}).items() if n]
        return max(levels) if levels else None

    def infection(self, phase: str, ident: str) -> float:
        """The share of ``phase``'s examples in which mutant ``ident`` changed its telling level's result."""
        level = self.telling_level(ident)
        if not self.examples.get(phase) or level is None:
            return 0.0
        return self.infected.get(phase, {}).get(ident, {}).get(level, 0) / self.examples[phase]

    def statement(self, path: str, line: int) -> int:
        """The statement line that holds ``line`` (cosmic-ray names the mutated node's line, which
        may be a continuation line of a longer statement)."""
        starts = [s for s in self.statements.get(_key(path), []) if s <= line]
        return max(starts) if starts else line

    def to_json(self) -> dict:
        return {"examples": self.examples, "seconds": self.seconds, "error": self.error,
                "hits": {p: {f: {str(k): v for k, v in lines.items()} for f, lines in files.items()}
                         for p, files in self.hits.items()}, "statements": self.statements,
                "infected": {p: {m: {str(k): v for k, v in levels.items()} for m, levels in by.items()}
                             for p, by in self.infected.items()}, "probed": self.probed, "levels": self.levels}

    @classmethod
    def from_json(cls, doc: dict) -> "Reach":
        return cls(examples=dict(doc["examples"]), seconds=doc["seconds"], error=doc["error"],
                   hits={p: {f: {int(k): v for k, v in lines.items()} for f, lines in files.items()}
                         for p, files in doc["hits"].items()}, statements=dict(doc["statements"]),
                   infected={p: {m: {int(k): v for k, v in levels.items()} for m, levels in by.items()}
                             for p, by in doc.get("infected", {}).items()},
                   probed=dict(doc.get("probed", {})), levels=dict(doc.get("levels", {})))


class Basis(enum.Enum):
    """What an aimed phase was chosen by."""

    LINE = "line"  # the shape whose examples run the mutant's line most
    RESULT = "result"  # the shape whose examples the mutant changes its function's result in most
    CATALOGUE = "planted bug"  # the hunt of a planted bug that replaces the mutant's function (``hunts``)
    # the same, for a survivor no probe saw change a result (its function writes what its caller sees,
    # or the map's examples never met the shape that tells), whatever its line's rate: the second
    # round's only evidence of where it tells
    UNSEEN = "planted bug, no probe saw a change"
    # the same, for a survivor whose result the default phases changed often: it outlived a round of
    # those changes, so they tell nothing of it; where its function's planted bugs show is next
    HARMLESS = "planted bug, the defaults' changes told nothing"


@dataclass(frozen=True)
class Aim:
    """What the map says of one mutant: the default phases' best rate of running its line (and, where
    its function was probed, of its changing the function's result), and the phase added (None where
    the defaults do either often enough, or no shape does more often)."""

    default_rate: float
    phase: Optional[str] = None
    phase_rate: float = 0.0
    basis: Basis = Basis.LINE
    default_infected: Optional[float] = None  # None: not probed, or no level's result ever changed
    level: str = ""  # the telling level's function
    # RESULT, UNSEEN and HARMLESS: the (other) planted bugs' hunts, by rate. With no probe's word on which
    # shape tells, the line's rate is no guide either (the walk's keyword line runs most in the
    # opaque-op shape and tells only in the scaled-cast shape), so the second round runs every hunt.
    more: tuple[str, ...] = ()


def _key(path: str) -> str:
    return str(Path(path).resolve())


def phase_name(strategy: str, size: str) -> str:
    return f"{strategy}:{size}"


def measured(phase: str) -> str:
    """The phase the map measured for ``phase``: a planted bug's hunt (``skip:REASON/VARIANT@FOCUS``)
    by its reason (``rule:REASON``), under drawn settings where the hunt draws them. A variant is one
    draw of its reason, so the reason's rate of running a line is the variant's best estimate the map has."""
    strategy, _, size = phase.rpartition(":")
    drawn = strategy_name(strategy)
    if not drawn.rule:
        return phase
    return phase_name(f"rule:{drawn.reason}{DRAWN_SPEC if drawn.draw_spec else ''}", size)


# A phase whose strategy ends in DRAWN_SPEC draws the spec's [I] settings per example: a line that
# runs only under a setting other than its default (a foreign wait taken for a barrier, other launch
# namespaces) is run by no other phase.


# Strategies the default phases do not draw from that a planted bug names as its hunt: uneven shards
# (a short rank's views of its reduced gradient) are one case in six of the mix, so the map measures
# them as a shape of their own.
HUNT_STRATEGIES = ("uneven",)
# Planted shapes that tell only under an [I] setting other than the default (a wait of the legacy
# packet is the kind's own only where its namespace is accepted): the map measures their reasons
# under drawn settings too, and a planted bug names such a hunt ``skip:REASON/VARIANT+spec``.
SPEC_SHAPES = ("unsupported_wait_users",)


def shape_phases() -> list[str]:
    """Every planted shape's hunt (``rule:REASON:tiny``), skip, split, singleton and fusion alike,
    hazards and SPEC_SHAPES under drawn [I] settings, and the strategies of HUNT_STRATEGIES."""
    from fsdp_verify.strategies import mutations
    reasons = sorted({*mutations.SKIP_MUTATIONS, *mutations.SPLIT_MUTATIONS, *mutations.SINGLETON_MUTATIONS,
                      *mutations.FUSION_MUTATIONS})
    return [*(phase_name(f"rule:{reason}", SHAPE_SIZE) for reason in reasons),
            phase_name("hazards" + DRAWN_SPEC, SHAPE_SIZE),
            *(phase_name(f"rule:{reason}{DRAWN_SPEC}", SHAPE_SIZE) for reason in SPEC_SHAPES),
            *(phase_name(strategy, SHAPE_SIZE) for strategy in HUNT_STRATEGIES)]


def aim(reach: Reach, path: str, line: int, defaults: Sequence[str], ident: Optional[str] = None,
        hunts: Sequence[str] = ()) -> Aim:
    """The phase to add for a mutant of ``line`` of ``path``. Where its function was probed and the
    default phases' examples change its result in fewer than AIM_BELOW of them: the planted shape
    whose examples it changes most (a line run by a third of the mix can still be one whose mutation
    matters in one draw in hundreds), then the hunts of ``hunts``. Else, when the default phases run
    the line in fewer than AIM_BELOW of their examples: of ``hunts`` (the shapes of planted bugs that
    replace its function or constant, ``hunts.hunts_for``) the one that runs the line most (each
    ranked by the reason the map measured, ``measured``); without one, the shape that
    runs it most. A shape that runs a line most is not always one that tells: a helper every
    evaluated op calls runs most where the keyword it looks for never appears. A mutant the map tried
    to probe and saw change no result (it could not watch the function, which writes what its caller
    sees, or its forty examples per shape missed the variant that tells) gets the hunt whatever its
    line's rate: a line every fusion runs still tells only in the shape its planted bug needs. So
    does a probed one whose result the defaults change in AIM_BELOW or more of their examples: it
    survived a round of them (the fused gather one node late changes the graph in a tenth of the mix
    and breaks it only where a view sits right after its source)."""
    best = max((reach.rate(phase, path, line) for phase in defaults), default=0.0)
    if reach.error:
        return Aim(best)
    planted = sorted((-reach.rate(measured(phase), path, line), index, phase) for index, phase in enumerate(hunts)
                     if measured(phase) in reach.examples and phase not in defaults)
    unseen = ident is not None and ident in reach.probed and \
        (reach.probed[ident] != "" or reach.telling_level(ident) is None)
    if unseen and planted:
        return Aim(best, planted[0][2], -planted[0][0], Basis.UNSEEN, more=tuple(p[2] for p in planted[1:]))
    infected, level = None, ""
    telling = reach.telling_level(ident) if ident is not None and reach.probed.get(ident) == "" else None
    if telling is not None:
        level = reach.levels.get(ident, [])[telling] if telling < len(reach.levels.get(ident, [])) else ""
        infected = max((reach.infection(phase, ident) for phase in defaults), default=0.0)
        shapes = sorted((-reach.infection(phase, ident), phase) for phase in reach.examples if phase not in defaults)
        if infected < AIM_BELOW and shapes and -shapes[0][0] > infected:
            # then its function's planted bugs' hunts: a shape that changes the result may still never
            # tell, where the bug's own variant does (a cast of a value the walk cannot follow)
            return Aim(best, shapes[0][1], -shapes[0][0], Basis.RESULT, infected, level,
                       more=tuple(p[2] for p in planted if p[2] != shapes[0][1]))
        if infected >= AIM_BELOW and planted:
            return Aim(best, planted[0][2], -planted[0][0], Basis.HARMLESS, infected, level,
                       more=tuple(p[2] for p in planted[1:]))
    if best >= AIM_BELOW:
        return Aim(best, default_infected=infected, level=level)
    if planted:
        return Aim(best, planted[0][2], -planted[0][0], Basis.CATALOGUE, infected, level)
    shapes = sorted(((-reach.rate(phase, path, line), phase) for phase in reach.examples if phase not in defaults))
    if not shapes or -shapes[0][0] <= best:
        return Aim(best, default_infected=infected, level=level)
    return Aim(best, shapes[0][1], -shapes[0][0], Basis.LINE, infected, level)


def measure(files: Sequence[str], target: str, defaults: Sequence[tuple[str, str]], seed: int, workers: int = 1,
            default_examples: int = DEFAULT_EXAMPLES, shape_examples: int = SHAPE_EXAMPLES,
            shapes: Optional[Sequence[str]] = None, probed: Sequence[probes.Probe | probes.Unprobed] = ()) -> Reach:
    """The map, measured in forked children (``workers`` at once, each a share of the phases): the
    project's modules are imported afresh under coverage there, with ``probed`` mutants' functions
    probed (``probes``), and this process stays as it was for the mutants it forks."""
    start = time.monotonic()
    phases = [_Measured(phase_name(*d), d[0], d[1], default_examples, seed + i) for i, d in enumerate(defaults)]
    phases += [_Measured(name, name.rsplit(":", 1)[0], SHAPE_SIZE, shape_examples, seed + len(defaults) + i)
               for i, name in enumerate(shape_phases() if shapes is None else shapes)]
    with tempfile.TemporaryDirectory(prefix="fsdp-verify-aim-") as scratch:
        children = {}
        shares = max(1, min(workers, len(phases)))
        for share in range(shares):
            out = Path(scratch, f"reach{share}.json")
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(files, target, phases[share::shares], out,
                       [p for p in probed if isinstance(p, probes.Probe)])
            children[pid] = out
        parts = []
        try:
            overran = _wait(children, start + MEASURE_LIMIT)
        except KeyboardInterrupt:
            _wait(children, 0.0)  # killed: no child outlives the run
            raise
        for pid, out in children.items():
            try:
                parts.append(Reach.from_json(json.loads(out.read_text())))
            except (OSError, ValueError, KeyError) as exc:
                why = "overran its wall limit" if pid in overran else f"left no map ({type(exc).__name__})"
                parts.append(Reach(error=f"a share of the reach measurement {why}"))
    merged = _merged(parts, round(time.monotonic() - start, 1))
    if merged.error:
        return merged
    reasons = {p.ident: p.reason for p in probed if isinstance(p, probes.Unprobed)}
    return replace(merged, probed={p.ident: reasons.get(p.ident, merged.probed.get(p.ident, "")) for p in probed},
                   levels={p.ident: [level.qualname for level in p.levels] for p in probed
                           if isinstance(p, probes.Probe)})


def _wait(children: dict[int, Path], until: float) -> set[int]:
    """Reap every child, killing those still running at ``until`` (a hanging target must not hold the
    run); the pids killed."""
    running, killed = set(children), set()
    while running:
        for pid in list(running):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                running.discard(pid)
        if running and time.monotonic() >= until:
            for pid in running:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            killed |= running
            running = set()
        time.sleep(0.05 if running else 0)
    return killed


@dataclass(frozen=True)
class _Measured:
    """One phase of the measurement: its name, what it draws, how many examples, its seed."""

    name: str
    strategy: str
    size: str
    examples: int
    seed: int


def _merged(parts: Sequence[Reach], seconds: float) -> Reach:
    """The shares' maps as one (each phase was measured by exactly one share)."""
    errors = [part.error for part in parts if part.error]
    if errors:
        return Reach(seconds=seconds, error=errors[0])
    examples, hits, statements, infected, probed = {}, {}, {}, {}, {}
    for part in parts:
        examples.update(part.examples)
        hits.update(part.hits)
        statements.update(part.statements)
        infected.update(part.infected)
        for ident, why in part.probed.items():  # a probe one share could not install is not probed
            probed[ident] = probed.get(ident) or why
    return Reach(examples, hits, statements, seconds, infected=infected, probed=probed)


def _child(files: Sequence[str], target: str, phases: Sequence[_Measured], out: Path,
           probed: Sequence[probes.Probe] = ()) -> None:
    """In a forked child: run its phases' examples under coverage, write its map; never returns."""
    code = 0
    try:
        descriptor = os.open(os.devnull, os.O_WRONLY)
        os.dup2(descriptor, 1)  # the campaigns' own output is not the run's
        out.write_text(json.dumps(_measured(files, target, phases, probed).to_json()))
    except BaseException:  # noqa: BLE001 - the parent reads the error instead of a map
        try:
            out.write_text(json.dumps(Reach(error=traceback.format_exc(limit=3).strip().splitlines()[-1]).to_json()))
        except OSError:
            code = 3
    os._exit(code)


def _measured(files: Sequence[str], target: str, phases: Sequence[_Measured],
              probed: Sequence[probes.Probe] = ()) -> Reach:
    import coverage

    from fsdp_verify.engine import mutate
    keys = [_key(f) for f in files]
    cov = coverage.Coverage(data_file=None, include=keys, branch=False, config_file=False)  # not the project's
    cov.start()
    infected: dict[str, dict[str, dict[int, set[int]]]] = {}
    current: list[Optional[tuple[str, int]]] = [None]  # the example running now: (phase, number)

    def flush(now: Optional[tuple[str, int]]) -> None:
        """Credit the mutants that changed a level's result to the example that just ran."""
        changed = probes.take()
        if current[0] is not None:
            for ident, level in changed:
                infected.setdefault(current[0][0], {}).setdefault(ident, {}).setdefault(level, set()).add(current[0][1])
        current[0] = now

    try:
        mutate._fresh_modules(mutate.module_name(Path(files[0])) if files else "fsdp_verify")
        from fsdp_verify.engine import campaign
        not_installed: dict[str, str] = {}
        if probed:
            importlib.import_module("fsdp_verify.targets").get_target(target)  # its modules, before probing
            not_installed = probes.install(probed)
        examples: dict[str, int] = {}
        with tempfile.TemporaryDirectory(prefix="fsdp-verify-aim-corpus-") as corpus:
            for phase in phases:
                def tick(done: int, failures: int, steps: int, name: str = phase.name) -> None:
                    cov.switch_context(f"{name}|{done}")  # the next example's lines are its own
                    flush((name, done))
                drawn = strategy_name(phase.strategy)
                config = campaign.Config(target=target, budget=campaign.Budget(examples=phase.examples),
                                         seed=phase.seed, profile="ci", corpus_dir=corpus, size=phase.size,
                                         modules=False, max_failures=phase.examples, strategy=drawn.strategy,
                                         shrink=False, draw_spec=drawn.draw_spec)
                examples[phase.name] = campaign.run(config, progress=tick).examples
                flush(None)
    finally:
        cov.stop()
    data = cov.get_data()
    hits: dict[str, dict[str, dict[int, int]]] = {name: {} for name in examples}
    statements = {}
    for key in keys:
        statements[key] = sorted(cov.analysis2(key)[1]) if Path(key).exists() else []
        for line, contexts in (data.contexts_by_lineno(key) or {}).items():
            ran: dict[str, set] = {}
            for context in contexts:
                name, _, number = context.rpartition("|")
                if name in hits:
                    ran.setdefault(name, set()).add(number)
            for name, numbers in ran.items():
                hits[name].setdefault(key, {})[line] = len(numbers)
    return Reach(examples, hits, statements,
                 infected={name: {ident: {level: len(numbers) for level, numbers in levels.items()}
                                  for ident, levels in by.items()} for name, by in infected.items()},
                 probed={p.ident: not_installed.get(p.ident, "") for p in probed})
