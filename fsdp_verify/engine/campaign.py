"""A fuzz campaign: Hypothesis draws cases, the target runs, every checker judges, failures shrink
and land in the corpus. Budgets are wall-clock or example counts; several worker processes share
one Hypothesis example database so a failure found once is replayed first next time.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Optional

import hypothesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from fsdp_verify.engine import collector, stages
from fsdp_verify.engine.stages import Stage
from fsdp_verify.corpus import files as corpus
from fsdp_verify.corpus import example_db
from fsdp_verify.corpus.known import CLASS_KEY, SIGNATURE_KEY, read_known
from fsdp_verify.model import names
from fsdp_verify.model.budget import Budget
from fsdp_verify.corpus import profiles
from fsdp_verify.model.case import Case
from fsdp_verify.graph import fx_sources
from fsdp_verify.checks import ERROR, INVALID
from fsdp_verify.execute.ranks import judge as real_ranks
from fsdp_verify.engine.run_case import check_all, children_started, close_children
from fsdp_verify.execute.isolation import die_with_parent, shows_output, unshared_bar_lock
from fsdp_verify.execute.ranks.pool import exit_reason
from fsdp_verify.report.tally import Result, effect_of, proofs_of
from fsdp_verify.engine.signature import Signature, collateral, primary
from fsdp_verify.engine.signature import signature as root_cause
from fsdp_verify.engine.triage import classify, excused_alone, receives
from fsdp_verify.model.classes import FailureClass
from fsdp_verify.targets import get_target

CHUNK = 40  # examples per Hypothesis run; each run starts from a fresh seed


class _CaseFailed(AssertionError):
    """Raised inside the property so Hypothesis shrinks the case."""


class _BudgetSpent(BaseException):
    """Raised inside the property when the budget ends: Hypothesis lets a BaseException through at
    once, without shrinking (as it does for KeyboardInterrupt)."""


def bug_signature(findings: list, target: Any = None, case: Optional[Case] = None) -> Signature:
    """One saved case per bug: the root cause of a failure (``engine/signature.py``), named by a
    finding the target's contract does not excuse on its own where there is one (with ``target``
    and ``case``)."""
    return root_cause(findings, _excused_alone(target, case, findings))


def _excused_alone(target: Any, case: Optional[Case], findings: list) -> tuple:
    """The error findings that cannot name the bug (``triage.excused_alone``); none without a target."""
    if target is None or case is None:
        return ()
    return excused_alone(target, case, [f for f in findings if f.severity == ERROR])


@dataclass
class Config:
    """What one campaign (or one worker of it) does."""

    target: str = "reference"
    budget: Budget = field(default_factory=lambda: Budget(seconds=60))
    seed: int = 0
    profile: str = "dev"
    db: tuple[str, ...] = ()  # --db values: folders, redis:// URLs, github: artifacts (fsdp_verify.corpus.example_db)
    corpus_dir: str = "corpus/found"
    size: str = "default"
    modules: bool = True
    max_failures: int = 10
    worker: int = 0
    deadline: Optional[float] = None  # seconds per target run; runs the target in a killable child
    strategy: str = "cases"  # "cases" (the full mix), "hazards" (several per graph), "mutations" (one
    # each), "captured" (models compiled through torch.compile; default_strategy gives it to inductor),
    # "uneven" (the mix, every case with uneven shards: ranks whose graphs differ), a focus of
    # strategies.graphs.FOCUSES ("wide", ...: the mix with one rare draw made common),
    # "skip:REASON" or "rule:REASON[/VARIANT][@FOCUS]" (one defect for that skip, split, singleton or
    # fusion rule, on a focus's blueprints if named: how the self-test hunts a bug in one rule)
    shrink: bool = True  # False: keep the first failing example as found (fast kill checks)
    stop_on: tuple[str, ...] = ()  # stop once a saved failure names one of these checkers
    spec: tuple[tuple[str, Any], ...] = ()  # pinned [I] settings (fsdp_verify.model.spec_params)
    draw_spec: bool = False  # draw the other [I] settings per example (recorded in each case)
    raw_forms: bool = False  # keep graph forms the target never receives in practice (contract probing)
    ranks: str = "simulated"  # or real, real:gloo, real:nccl: also plan and run on rank processes
    real_fraction: float = 1.0  # share of examples also run on real ranks (chosen by case content)
    rediscover: bool = False  # True: the corpus folder's saved bugs are not read; each is found as new


STRATEGIES = names.STRATEGIES


def default_strategy(target: str) -> str:
    """What a campaign draws from when ``--strategy`` is not given: the target says
    (``Target.default_strategy``: inductor's bucketing gets SimpleFSDP-style models captured
    through torch.compile; the others the FSDP-pass-shaped mix)."""
    return getattr(get_target(target), "default_strategy", "cases")


def database_key(config: Config) -> bytes:
    """Examples are stored by what they are drawn from, not by target (a failure of one target is
    tried first on the next), and not by this module's source (an edit keeps the database valid)."""
    return example_db.database_key(config.strategy, config.size, config.modules, config.spec, config.draw_spec)


# skip reasons whose planted shapes are launches no real world runs (``triage.receives`` refuses them)
UNRUNNABLE_REASONS = ("group_size_mismatch", "unknown_process_group")


def _strategy(config: Config, target: Optional[Any] = None):
    """The graphs to draw, in the form ``target`` receives in practice (``config.raw_forms`` keeps the
    harness's own forms), each with one draw of the target's open options and of the [I] settings."""
    from fsdp_verify.strategies import (captured_graphs, cases, hazard_graphs, mutated_graphs, spec_settings,
                                        with_target_options)
    from fsdp_verify.strategies.graphs import FOCUSES, focused
    from fsdp_verify.strategies.uneven import uneven_cases
    if config.strategy == "captured":
        graphs = captured_graphs()
    elif config.strategy == "hazards":
        graphs = hazard_graphs(config.size, max_hazards=6)
    elif config.strategy == "mutations":
        graphs = mutated_graphs(config.size)
    elif config.strategy == "uneven":
        graphs = uneven_cases(cases(config.size))
    elif config.strategy in FOCUSES:
        graphs = cases(focused(config.size, config.strategy))
    elif (named := names.strategy_name(config.strategy)).draw_spec:
        raise ValueError(f"strategy {config.strategy!r}: a campaign takes +spec as Config.draw_spec, not in the name")
    elif named.rule:
        # a focus draws the blueprint the rule plants its defect in
        graphs = mutated_graphs(focused(config.size, named.focus) if named.focus else config.size,
                                reason=named.pinned)
    else:
        graphs = cases(config.size, modules=config.modules)
    if target is not None and not config.raw_forms:  # forms it never receives are not wasted on it
        named = names.strategy_name(config.strategy)
        if named.rule and named.reason in UNRUNNABLE_REASONS and not target.has_planner:
            raise ValueError(f"strategy {config.strategy!r}: every case it draws holds a launch no real world runs, "
                             f"which a target without a planner cannot be judged on (--raw-forms draws them)")
        graphs = graphs.map(target.normalise).filter(lambda case: receives(target, case))
    graphs = with_target_options(graphs, target.options() if target is not None else {})
    if not config.spec and not config.draw_spec:
        return graphs
    drawn = spec_settings(dict(config.spec), config.draw_spec)
    return st.tuples(graphs, drawn).map(lambda pair: replace(pair[0], spec=pair[1]))


# progress callback: (examples judged, distinct failures saved, shrink steps run): a long shrink shows
# as steps, not as a stalled count of examples
Tick = Callable[[int, int, int], None]


def run(config: Config, progress: Optional[Tick] = None, session: Optional[real_ranks.RealRanks] = None,
        on_failure: Optional[Callable[[dict], None]] = None) -> Result:
    """Fuzz until the budget is spent or ``max_failures`` distinct failures are saved; ``progress``
    hears the counts after every example, and ``on_failure`` each saved failure's record as soon as
    it is saved (a worker streams them, so its parent keeps them if the worker is killed).
    ``session``: real ranks to use (and leave open) instead of the ones ``config.ranks`` opens."""
    result = Result(shrunk=config.shrink)
    clock = stages.StageClock(result.cpu_by_stage)  # from here to the end: every CPU second is some stage's
    _read_known(config, result)
    if on_failure is not None:
        progress = _streaming(result, progress, on_failure)
    runner = Runner(config, get_target(config.target), result, progress,
                    database=example_db.open_database(config.db),
                    base=settings.get_profile(config.profile if config.profile in profiles.PROFILES else "dev"),
                    clock=clock)
    real = session or real_ranks.open_session(config.ranks, config.seed, config.deadline, config.real_fraction)
    runner.real = real
    result.has_planner = runner.target.has_planner
    try:
        with collector.tuned():  # loaded libraries frozen out of the collector's walks, young collections rarer
            if progress is not None:
                progress(0, 0, 0)  # the work starts now
            try:
                runner.explore()
            except KeyboardInterrupt:  # SIGINT or SIGTERM (install_stop_handlers): keep what was found, report, leave
                result.interrupted = True
                runner.keep_shrunk()  # shrunk as far as it got
            finally:
                result.isolated, result.forks = config.deadline is not None, children_started()
                result.output_kept = result.isolated and not shows_output()
                close_children()
                result.ranks = real_ranks.session_report(real)
                if real is not None and session is None:
                    real.close()
    finally:  # after the collector's thresholds are restored: the young collection they owe is this run's
        clock.finish()
    result.seconds = time.monotonic() - runner.start
    return result


@dataclass
class Shrinking:
    """The failure the current Hypothesis run shrinks (``signature`` None: the run explores). One
    run shrinks one bug: the checkers that fired are all a shrink step runs."""

    signature: Optional[Signature] = None
    case: Optional[Case] = None
    findings: list = field(default_factory=list)
    checkers: Optional[tuple[str, ...]] = None  # None: every checker (a target finding alone)
    recorded: bool = False

    @property
    def active(self) -> bool:
        return self.signature is not None


class Verdict(Enum):
    """What one judged case means for the run, decided by ``Runner.triage``."""

    PASSED = "passed"  # no error (an invalid case is rejected before)
    SHRINK = "shrink"  # a new bug: the property fails so that Hypothesis shrinks it
    STEP = "step"  # a shrink step that kept the bug being shrunk
    ASIDE = "aside"  # a shrink step that met another bug (kept for saving) or lost this one
    REPEAT = "repeat"  # a bug already saved (or met while shrinking): counted, not shrunk again
    KEPT = "kept"  # not the target's bug (a contract mismatch, an invalid input): saved as found


@dataclass
class Runner:
    """One campaign (or one worker of it) as named phases over typed state: ``explore`` runs
    Hypothesis in chunks until the budget is spent; each drawn case is ``judge``d (run the target
    and every checker, account it, ``triage`` its findings); a chunk that ends on a failure ends in
    ``finish_chunk``, which saves it. The budget is checked between phases, never inside one."""

    config: Config
    target: Any
    result: Result
    progress: Optional[Tick] = None
    database: Any = None
    base: Any = None
    clock: stages.StageClock = field(default_factory=lambda: stages.StageClock({}))
    real: Optional[real_ranks.RealRanks] = None
    start: float = field(default_factory=time.monotonic)
    shrinking: Shrinking = field(default_factory=Shrinking)
    pending: dict = field(default_factory=dict)  # signature -> (case, findings) of bugs met while shrinking another
    unshrunk: dict = field(default_factory=dict)  # signature -> index in result.failures, saved as met
    seen: dict = field(default_factory=dict)  # signature -> (examples, seconds) when first met
    chunk: int = 0

    # -- the budget ---------------------------------------------------------------------------
    def spent(self) -> bool:
        config, result = self.config, self.result
        return ((config.budget.seconds is not None and time.monotonic() - self.start >= config.budget.seconds)
                or (config.budget.examples is not None and result.examples >= config.budget.examples)
                or len(result.failures) >= config.max_failures
                or any(set(f["checkers"]) & set(config.stop_on) for f in result.failures))

    def time_left(self) -> Optional[float]:
        return _time_left(self.config, self.start)

    # -- phase 1: explore, a chunk of Hypothesis examples at a time ---------------------------------
    def explore(self) -> None:
        while not self.spent():
            self.shrinking = Shrinking()
            if not self.run_chunk():
                return

    def chunk_settings(self) -> settings:
        """This chunk's settings: saved failures are replayed once, in the first chunk; later chunks
        explore (and still save). No shrink phase when the campaign keeps failures as found."""
        phases = [p for p in hypothesis.Phase if (self.chunk == 0 or p is not hypothesis.Phase.reuse)
                  and (self.config.shrink or p is not hypothesis.Phase.shrink)]
        remaining = CHUNK if self.config.budget.examples is None else \
            max(1, min(CHUNK, self.config.budget.examples - self.result.examples))
        return settings(self.base, max_examples=remaining, database=self.database, deadline=None, phases=phases,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], print_blob=False)

    def run_chunk(self) -> bool:
        """One Hypothesis run; False once the budget ended inside it."""
        config = self.config

        @self.chunk_settings()
        @hypothesis.seed(config.seed * 1_000_003 + config.worker * 10_007 + self.chunk)
        @hypothesis.given(_timed(_strategy(config, self.target), self.clock))
        def fuzz_property(case: Case) -> None:
            self.judge(case)

        fuzz_property._hypothesis_internal_database_key = database_key(config)
        self.chunk += 1
        try:
            fuzz_property()
        except _CaseFailed:
            self.keep_shrunk()
        except hypothesis.errors.Unsatisfiable:
            pass
        except hypothesis.errors.Flaky as exc:
            self.result.notes.append(f"a failure did not reproduce when replayed (flaky target or deadline): {exc}"
                                     .splitlines()[0])
            self.keep_shrunk()  # keep it: it failed once
        except _BudgetSpent:
            self.keep_shrunk()  # shrunk as far as time allowed
            return False
        finally:
            self.finish_chunk()
        return True

    # -- phase 2: judge one drawn case ------------------------------------------------------------
    def judge(self, case: Case) -> None:
        """The property: run the target and the checkers on ``case``, account it, triage it."""
        config, result, shrinking = self.config, self.result, self.shrinking
        fx_sources.forget_old_sources()  # a night's worth of compiled graphs' source is no leak
        left = self.time_left()
        if (left is not None and left <= 0) or (not shrinking.active and config.budget.examples is not None
                                                and result.examples >= config.budget.examples):
            raise _BudgetSpent
        deadline = config.deadline if left is None or config.deadline is None else min(config.deadline,
                                                                                      max(left, 0.5))
        # Once a failure is known, shrinking only needs the checkers that fired (much cheaper).
        began = time.process_time()
        findings, ctx = check_all(self.target, case, only=shrinking.checkers, deadline=deadline, check_limit=left)
        self.clock.case(time.process_time() - began, ctx.metrics.get(stages.CPU, {}), config.deadline is not None)
        if self.real is not None:  # in this process: the rank pools outlive the case's forked child
            with self.clock.local(Stage.REAL_RANKS):
                findings = findings + real_ranks.judge(self.real, case, config.target, findings, ctx,
                                                       shrinking.checkers)
        if left is not None and self.time_left() <= 0:
            raise _BudgetSpent  # this example was cut short by the budget: no verdict from it
        self.account(ctx)
        errors = [f for f in findings if f.severity == ERROR]
        if not errors and any(f.severity == INVALID for f in findings):
            result.invalid += 1
            hypothesis.reject()  # cannot be judged: counted, and Hypothesis draws another case
        verdict = self.triage(case, errors)
        if verdict in (Verdict.SHRINK, Verdict.STEP):
            _fail(self.shrinking.signature)
        if verdict is Verdict.KEPT:
            with self.clock.local(Stage.REPORTING):
                _record(config, self.target, result, case, errors, seen=self.seen)  # not the target's bug: kept as found
        if verdict is Verdict.PASSED and self.progress is not None:
            with self.clock.local(Stage.REPORTING):
                self.progress(result.examples, len(result.failures), result.shrink_steps)

    def account(self, ctx) -> None:
        """Count a generated example (a shrink step only as a step); an accounting error is the
        harness's, reported and never shrunk."""
        if self.shrinking.active:
            self.result.shrink_steps += 1
            if self.progress is not None:
                with self.clock.local(Stage.REPORTING):
                    self.progress(self.result.examples, len(self.result.failures), self.result.shrink_steps)
            return
        try:
            with self.clock.local(Stage.REPORTING):
                _count(self.result, ctx)
        except Exception as exc:  # noqa: BLE001 - a harness bug is reported, never shrunk
            self.result.harness_errors += 1
            self.result.notes.append(f"harness error while accounting an example: {type(exc).__name__}: {exc}")

    def triage(self, case: Case, errors: list) -> Verdict:
        """What ``errors`` mean for the run. While shrinking, only the bug being shrunk counts: the
        shrinker must not slip from one bug to another (another one met is kept for saving)."""
        result, shrinking = self.result, self.shrinking
        if not errors:
            return Verdict.PASSED
        signature = bug_signature(errors, self.target, case)
        self.seen.setdefault(signature, (result.examples, round(time.monotonic() - self.start, 3)))
        excused = _excused(self.target, case, errors)
        if shrinking.active:
            # A smaller case that is a contract mismatch or invalid input is no step: the shrinker
            # must not turn the target's bug into one the target is excused from.
            if signature == shrinking.signature and not excused:
                shrinking.case, shrinking.findings = case, errors
                return Verdict.STEP
            if signature != shrinking.signature and not _known(result, signature, excused):
                self.pending.setdefault(signature, (case, errors))  # another bug, met while shrinking
            return Verdict.ASIDE
        if signature in self.unshrunk and not excused:
            # A bug saved as met while shrinking another is shrunk the first time it is generated:
            # otherwise the bug the shrinker happened to meet first keeps its unshrunk case.
            self.shrinking = Shrinking(signature, case, errors,
                                       tuple(sorted({f.checker for f in errors} - {"target"})) or None)
            return Verdict.SHRINK
        if _known(result, signature, excused) or signature in self.pending:
            result.repeats += 1  # a known bug: keep exploring instead of shrinking it again
            held = _in_corpus(result, signature, excused)
            if held is not None and signature not in result.signatures:
                result.known_sightings[held] += 1
            return Verdict.REPEAT
        if result.first_failure is None:
            result.first_failure = (result.examples, time.monotonic() - self.start)
        checkers = tuple(sorted({f.checker for f in errors}))
        if excused:
            return Verdict.KEPT
        self.shrinking = Shrinking(signature, case, errors, tuple(sorted(set(checkers) - {"target"})) or None)
        return Verdict.SHRINK

    # -- phase 3: keep what the chunk found ---------------------------------------------------------
    def keep_shrunk(self) -> None:
        """Save the failure being shrunk, as far as it got (once)."""
        if self.shrinking.active and not self.shrinking.recorded:
            index = self.unshrunk.pop(self.shrinking.signature, None)
            if index is None:
                _record(self.config, self.target, self.result, self.shrinking.case, self.shrinking.findings,
                        seen=self.seen)
            else:
                _replace(self.config, self.target, self.result, index, self.shrinking.case, self.shrinking.findings)
            self.shrinking.recorded = True

    def finish_chunk(self) -> None:
        """Save the other bugs met while shrinking (as found), and say where the run stands."""
        for signature, (case, errors) in self.pending.items():
            before = len(self.result.failures)
            _record(self.config, self.target, self.result, case, errors, while_shrinking=True, seen=self.seen)
            if len(self.result.failures) > before and self.result.failures[-1]["class"] not in _EXCUSED_CLASSES:
                self.unshrunk[signature] = before
        self.pending.clear()
        if self.progress is not None:
            self.progress(self.result.examples, len(self.result.failures), self.result.shrink_steps)


def _timed(strategy: st.SearchStrategy, clock: stages.StageClock) -> st.SearchStrategy:
    """``strategy``, its draws (and the shrinker's redraws) charged to generation."""
    @st.composite
    def drawn(draw):
        with clock.local(Stage.GENERATION):
            return draw(strategy)
    return drawn()


def _streaming(result: Result, progress: Optional[Tick], on_failure: Callable[[dict], None]) -> Tick:
    """``progress`` that first hands ``on_failure`` every failure saved since its last call."""
    sent = [0]

    def tick(examples: int, failures: int, steps: int) -> None:
        while sent[0] < len(result.failures):
            on_failure(result.failures[sent[0]])
            sent[0] += 1
        if progress is not None:
            progress(examples, failures, steps)
    return tick


def _fail(signature: tuple) -> None:
    """The one place the property fails from: Hypothesis tells failures apart by where they are
    raised, and one campaign run shrinks one signature."""
    raise _CaseFailed(signature)


def _time_left(config: Config, start: float) -> float | None:
    """Seconds of the budget left (None for an example-count budget)."""
    return None if config.budget.seconds is None else config.budget.seconds - (time.monotonic() - start)


def _count(result: Result, ctx) -> None:
    """Account one generated example (not a shrink step)."""
    result.examples += 1
    first_plans = next(iter(ctx.run.plans.values()), [])  # the first round of the first rank
    if first_plans:
        result.decisions.update((d["action"], d["reason"]) for d in first_plans[0].to_dict()["decisions"])
    result.skipped.update(f"{name}: {why}" for name, why in ctx.skipped.items())
    judged = ctx.metrics.get("numerics", {})
    result.output_elements += judged.get("output_elements", 0)
    result.judged_elements += judged.get("judged_elements", 0)
    result.node_ranks += len(ctx.case.graph.nodes) * len(ctx.case.graph.world())
    result.proofs.update(proofs_of(ctx.metrics))
    result.effect.update(effect_of(ctx.metrics))


def _classified(target: Any, case: Case, errors: list) -> tuple[str, list[str]]:
    """``classify`` on the checkers of ``errors``: triage and saving ask the same question."""
    return classify(target, case, tuple(sorted({f.checker for f in errors})), errors)


def _excused(target: Any, case: Case, errors: list) -> bool:
    """Whether ``errors`` on ``case`` are a contract mismatch or a finding on invalid input."""
    return FailureClass(_classified(target, case, errors)[0]).excused


def _known(result: Result, signature: Any, excused: bool) -> bool:
    """Whether a failure of ``signature`` is saved already, by this run or in the corpus folder
    before it. A sighting on input the target accepts is new while only excused sightings are saved:
    the first sighting of a root cause on a graph the target never receives (a joint graph, say)
    must not hide every later one on a graph it does."""
    return signature in result.bug_signatures or (excused and signature in result.signatures) or \
        _in_corpus(result, signature, excused) is not None


def _in_corpus(result: Result, signature: Any, excused: bool) -> Optional[str]:
    """The corpus file an earlier run saved ``signature`` in (an excused one only for an excused
    sighting), or None."""
    held = result.known.get(tuple(signature.to_json()))
    return held[0] if held is not None and (excused or not held[1]) else None


def _read_known(config: Config, result: Result) -> None:
    """The bugs the corpus folder holds against this target, so a bug saved by an earlier run is a
    sighting of a known bug, not a new failure shrunk and saved again (``--rediscover``: not read)."""
    if config.rediscover:
        result.known_read = {"folder": config.corpus_dir, "rediscover": True}
        return
    known = read_known(config.corpus_dir, config.target)
    result.known = {signature: (bug.file, bug.excused) for signature, bug in known.bugs.items()}
    result.known_read = {"folder": known.folder, "rediscover": False, "unsigned": known.unsigned,
                         "unreadable": known.unreadable}


def _record(config: Config, target: Any, result: Result, case: Case, findings: list,
            while_shrinking: bool = False, seen: Optional[dict] = None) -> None:
    """Save one failure per bug signature to the corpus (the shrunk case, or one met while shrinking
    another bug, saved as found); an excused failure's signature is saved again once it is seen on
    input the target accepts. ``seen``: when each signature was first met (examples, seconds into
    the worker's run), recorded as the failure's ``found_at``."""
    passed_over = _excused_alone(target, case, findings)
    signature = root_cause(findings, passed_over)
    kind, why = _classified(target, case, [f for f in findings if f.severity == ERROR])
    excused = FailureClass(kind).excused
    if _known(result, signature, excused):
        return  # the same bug again: one failure, not two
    entry = corpus.Entry(case, config.target, corpus.Verdict.of(findings),
                         corpus.provenance(config.seed, worker=config.worker, label=case.label,
                                           **{SIGNATURE_KEY: signature.to_json(), CLASS_KEY: kind}))
    try:
        path, written = corpus.save(entry, config.corpus_dir)
    except (OSError, corpus.CorpusError) as exc:  # a full, read-only or vanished folder loses nothing
        path, written = None, False
        result.harness_errors += 1
        result.notes.append(f"the corpus folder {config.corpus_dir} cannot be written ({type(exc).__name__}: "
                            f"{exc}): this failure's case is kept in the summary in full (failures[].case)")
    if path is not None and path.stem != entry.key:
        result.notes.append(f"{Path(config.corpus_dir) / (entry.key + '.json')} is unreadable or holds another "
                            f"case; left as it is, this failure was saved as {path.name}")
    result.signatures.add(signature)
    if not excused:
        result.bug_signatures.add(signature)
    for checker in entry.verdict.checkers:
        result.by_checker[checker] += 1
    result.failures.append({"file": None if path is None else str(path), "new": written,
                            **({"case": entry.to_json()} if path is None else {}),
                            **_described(entry, findings, kind, why, passed_over),
                            "signature": signature.to_json(), "found_while_shrinking": while_shrinking,
                            "found_at": list((seen or {}).get(signature) or ()),
                            "target_options": dict(case.target_options)})


def _described(entry: corpus.Entry, findings: list, kind: str, why: list, excused: tuple = ()) -> dict:
    """The fields of a failure's record that its case and findings decide (``excused``: the findings
    that cannot name it, ``bug_signature``)."""
    first = primary(findings, excused)
    return {"checkers": list(entry.verdict.checkers), "message": first.message,
            "nodes": len(entry.case.graph.nodes), "rule": first.rule,
            "collateral": [{"checker": f.checker, "rule": f.rule} for f in collateral(findings, excused)],
            "class": kind, "class_reasons": why}


_EXCUSED_CLASSES = frozenset(kind.value for kind in FailureClass if kind.excused)


def _replace(config: Config, target: Any, result: Result, index: int, case: Case, findings: list) -> None:
    """Put the shrunk ``case`` in place of failure ``index``, saved unshrunk when it was met while
    shrinking another bug; the larger case stays only when shrinking did not make it smaller."""
    failure = result.failures[index]
    if len(case.graph.nodes) >= failure["nodes"]:
        return
    kind, why = _classified(target, case, [f for f in findings if f.severity == ERROR])
    passed_over = _excused_alone(target, case, findings)
    entry = corpus.Entry(case, config.target, corpus.Verdict.of(findings),
                         corpus.provenance(config.seed, worker=config.worker, label=case.label,
                                           **{SIGNATURE_KEY: root_cause(findings, passed_over).to_json(), CLASS_KEY: kind}))
    try:
        path, written = corpus.save(entry, config.corpus_dir)
    except (OSError, corpus.CorpusError) as exc:
        result.harness_errors += 1
        result.notes.append(f"the corpus folder {config.corpus_dir} cannot be written ({type(exc).__name__}: "
                            f"{exc}): the shrunk case of '{failure['message']}' is not saved; the case as met is")
        return
    old = failure["file"]
    if old is not None and failure["new"] and old != str(path):
        with contextlib.suppress(OSError):
            os.unlink(old)  # written by this run, as met: the shrunk case replaces it
    failure.update({"file": str(path), "new": written or failure["new"], **_described(entry, findings, kind, why,
                                                                          passed_over),
                    "found_while_shrinking": False})
    failure.pop("case", None)


def install_stop_handlers(force_on_second: bool = True) -> None:
    """The first SIGINT or SIGTERM stops the campaign cleanly (its reports are still written); a
    second one forces the exit at once (a worker ignores it: its parent kills it after a grace)."""
    def handler(signum, frame):
        if Stop.requested:
            if force_on_second:
                os._exit(128 + signum)
            return
        Stop.requested = True
        raise KeyboardInterrupt
    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


class Stop:
    """Whether a stop was requested in this process."""

    requested = False


TICK_EVERY = 0.5  # seconds between a worker's progress messages


def _worker(config: Config, results: Any, parent: int) -> None:
    die_with_parent(signal.SIGTERM, parent)  # stop cleanly, not killed, when the parent dies
    unshared_bar_lock()  # a worker killed at its stop's grace leaves no semaphore behind
    install_stop_handlers(force_on_second=False)  # a terminal Ctrl-C and the parent's SIGINT both arrive
    stop = signal.getsignal(signal.SIGTERM)

    def orphaned(signum, frame) -> None:
        # A dead parent reads nothing: a clean stop has nobody to send its result to. The corpus
        # files it wrote stay.
        if os.getppid() != parent:
            os._exit(128 + signum)
        stop(signum, frame)
    signal.signal(signal.SIGTERM, orphaned)
    last = [0.0]

    def send(message: tuple) -> None:
        try:
            results.send(message)
        except OSError:  # the reading end is gone: so is the parent, and the corpus files stay
            os._exit(1)

    def tick(examples: int, failures: int, steps: int) -> None:
        if time.monotonic() - last[0] >= TICK_EVERY:
            last[0] = time.monotonic()
            send(("tick", config.worker, (examples, failures, steps)))

    def saved(failure: dict) -> None:
        send(("failure", config.worker, failure))
    send(("done", config.worker, run(config, tick, on_failure=saved)))


class _Inbox:
    """The parent's end of one pipe per worker. A shared ``multiprocessing.Queue`` has one write
    lock for all its writers: a worker SIGKILLed (the OOM killer) while its feeder thread held it
    left every other worker blocked at exit, and the campaign waiting on them for ever. Here a
    worker killed mid-message garbles only its own pipe, whose end the parent reads as a death."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self._readers: dict[int, Any] = {}

    def open(self, index: int) -> Any:
        """The writing end for worker ``index``; the parent closes its copy once the worker holds it."""
        reader, writer = self._context.Pipe(duplex=False)
        self._readers[index] = reader
        return writer

    def receive(self, timeout: float, sentinels: list) -> list[tuple]:
        """The messages that arrive within ``timeout`` (or fewer once a worker's process ends)."""
        ready = set(multiprocessing.connection.wait([*self._readers.values(), *sentinels], timeout))
        return [message for index, reader in list(self._readers.items()) if reader in ready
                for message in self._read(index, reader)]

    def drain(self, index: int, patience: float = 0.2) -> list[tuple]:
        """What worker ``index`` sent before it ended: read until its pipe is closed or quiet."""
        messages = []
        reader = self._readers.get(index)
        while reader is not None and index in self._readers and reader.poll(patience):
            messages += self._read(index, reader)
        return messages

    def _read(self, index: int, reader: Any) -> list[tuple]:
        try:
            return [reader.recv()]
        except (EOFError, OSError):  # closed, or cut mid-message by the worker's death
            reader.close()
            del self._readers[index]
            return []

    def close(self) -> None:
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()


MAX_RESTARTS = 3  # workers restarted in one campaign after they died; past that the run ends short


def run_parallel(config: Config, workers: int, grace: float = 1.5, progress: Optional[Tick] = None) -> Result:
    """``workers`` processes, each with its own seed stream, sharing the database and corpus. A
    stop of the parent stops every worker: each returns what it found within ``grace`` seconds,
    or is killed. ``progress`` hears the counts summed over the workers."""
    if workers <= 1:
        return run(config, progress)
    context = multiprocessing.get_context("spawn")
    inbox = _Inbox(context)
    # Not daemonic (a worker forks a child per case); PR_SET_PDEATHSIG and the finally below reap them.
    began = time.monotonic()

    def start(index: int, budget: Budget) -> Any:
        writer = inbox.open(index)
        process = context.Process(target=_worker, args=(Config(**{**config.__dict__, "worker": index,
                                                                  "budget": budget}), writer, os.getpid()))
        process.start()
        writer.close()  # the worker's copy is the only one: its death closes the pipe
        return process

    running = {index: start(index, config.budget) for index in range(workers)}  # worker index -> process
    processes = list(running.values())
    merged, done, counts = Result(), set(), {}
    _read_known(config, merged)  # as each worker does: said even if every worker dies
    streamed: dict[int, list[dict]] = {}  # failures a running worker has saved, kept if it dies
    restarts = 0

    def take(messages: list[tuple]) -> None:
        for kind, index, part in messages:
            if kind == "tick":
                counts[index] = part
            elif kind == "failure":
                streamed.setdefault(index, []).append(part)
            else:
                done.add(index)
                streamed.pop(index, None)  # the worker's own result holds them
                merged.merge(part)
                counts[index] = (part.examples, len(part.failures), part.shrink_steps)
        report()

    def receive(timeout: float) -> None:
        take(inbox.receive(timeout, [p.sentinel for i, p in running.items() if i not in done]))

    def bury(index: int, process: Any) -> None:
        """A worker died without its result: keep what it streamed, say so, and restart it."""
        nonlocal restarts
        seen, kept = counts.pop(index, (0, 0, 0))[0], streamed.pop(index, [])
        merged.examples += seen
        for failure in kept:
            merged.add_failure(failure)
        merged.harness_errors += 1
        elapsed = time.monotonic() - began
        note = (f"worker {index} died {elapsed:.1f}s into the run ({exit_reason(process.exitcode)}) after "
                f"{seen} examples: its {len(kept)} saved failures are kept, the examples it ran since its last "
                f"report (at most {TICK_EVERY:g}s of work) are lost")
        left = None if config.budget.seconds is None else config.budget.seconds - elapsed
        todo = None if config.budget.examples is None else config.budget.examples - seen
        if restarts < MAX_RESTARTS and not Stop.requested and (left is None or left > 1) and (todo is None or todo > 0):
            restarts += 1
            new = workers + restarts - 1  # a fresh seed stream
            running[new] = start(new, Budget(seconds=left, examples=todo))
            processes.append(running[new])
            note += f"; restarted as worker {new}"
        else:
            note += "; not restarted"
        merged.notes.append(note)

    def report() -> None:
        if progress is not None and counts:
            progress(*(sum(count[i] for count in counts.values()) for i in range(3)))

    try:
        while len(done) < len(running):
            receive(0.5)
            for index, process in list(running.items()):
                if index not in done and not process.is_alive():
                    take(inbox.drain(index))  # its result may still be in its pipe
                    if index not in done:
                        bury(index, process)
                        done.add(index)
    except KeyboardInterrupt:
        merged.interrupted = True
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)
        deadline = time.monotonic() + grace
        while len(done) < len(running) and time.monotonic() < deadline:
            receive(max(0.05, deadline - time.monotonic()))
            for index, process in list(running.items()):
                if index not in done and not process.is_alive():
                    take(inbox.drain(index))
            if all(index in done or not process.is_alive() for index, process in running.items()):
                break  # every worker has reported or ended: nothing more will come
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(5)
        inbox.close()
    lost = [p for index, p in running.items() if index not in done]
    if lost and not merged.interrupted:
        merged.harness_errors += len(lost)
        merged.notes.append(f"{len(lost)} worker(s) ended without a result (exit codes "
                            f"{', '.join(str(p.exitcode) for p in lost)}); their examples are not counted")
    return merged
