"""The ``fsdp-verify`` command line: fuzz, replay, show, repro, gate, targets, coverage, selftest.

Exit codes: 0 success, 1 a failure was found (or a replay disagreed), 2 bad input (unknown
target, malformed corpus file, bad arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fsdp_verify.model import names
from fsdp_verify.model import spec_params

if TYPE_CHECKING:
    from fsdp_verify.engine import campaign
    from fsdp_verify.corpus import files as corpus

# Torch and Hypothesis are imported by the commands that need them, not here: ``--help`` and
# argument errors answer in a fraction of a second (tests/test_cli.py imports nothing heavy).

DB_HELP = ("Hypothesis example database (repeatable, multiplexed): a folder, redis://host:port/db, or "
           "github:owner/repo[@artifact] (read-only); a remote one is paired with a local folder (another --db "
           "folder, else .hypothesis-db)")
HTML_HELP = "also write a self-contained HTML report here (summary, each finding with its picture and replay command)"
DEFAULT_CORPUS = "corpus"
DEFAULT_DEADLINE = 600.0  # seconds a target may take on one case before it is a finding


class UsageError(Exception):
    """Bad input: exit code 2 with this message."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def _positive_float(text: str) -> float:
    value = _number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


class _MutantNames:
    """The planted bugs' names as argparse choices, loaded (with torch) only when one is given."""

    def _names(self) -> list[str]:
        from fsdp_verify.targets.mutants import MUTANTS
        return sorted(MUTANTS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


def _budget(text: str) -> "campaign.Budget":
    from fsdp_verify.engine import campaign
    try:
        budget = campaign.Budget.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if (budget.seconds is not None and budget.seconds <= 0) or (budget.examples is not None and budget.examples < 1):
        raise argparse.ArgumentTypeError(f"budget {text!r} must be positive")
    return budget


def _writable_file(text: str) -> str:
    """An output file whose folder exists and is writable, checked before any work starts."""
    folder = Path(text).resolve().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} is not writable")
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    return text


def _writable_folder(text: str) -> str:
    """A folder to write into: it exists and is writable, or can be created."""
    path = Path(text).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: {existing} is not a writable folder")
    return text


def _database(text: str) -> str:
    from fsdp_verify.corpus import example_db
    """A ``--db`` value (folder, redis URL or GitHub artifact), checked before any work starts."""
    try:
        spec = example_db.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return _writable_folder(text) if spec.kind == "folder" else text


def _databases(args: argparse.Namespace) -> tuple[str, ...]:
    from fsdp_verify.corpus import example_db
    """The ``--db`` values, with every redis server asked whether it answers (exit 2 if not)."""
    values = tuple(args.db or ())
    try:
        example_db.check_reachable(values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return values


def _target(name: str):
    from fsdp_verify.targets import TargetNotFound, get_target
    try:
        return get_target(name)
    except TargetNotFound as exc:
        raise UsageError(str(exc)) from None


def _progress(args: argparse.Namespace, label: str, start: bool = True, **kwargs):
    """The progress line; its clock starts now, or (``start=False``) when the work reports first."""
    from fsdp_verify.report.progress import Progress
    progress = Progress(label, every=args.progress_every, **kwargs)
    if start:
        progress.update(0, 0)
    return progress


RANK_MODES = names.RANK_MODES


def _ranks_mode(text: str) -> str:
    if text not in RANK_MODES:
        raise argparse.ArgumentTypeError(f"--ranks {text!r}: expected one of {', '.join(RANK_MODES)}")
    return text


def _fraction(text: str) -> float:
    value = _number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def _ranks_options(parser: argparse.ArgumentParser, fraction: bool = True) -> None:
    parser.add_argument("--ranks", type=_ranks_mode, default="simulated", metavar="MODE",
                        help="simulated (default: every rank's target in this process), real (also plan, exchange "
                             "digests and run on real rank processes, each with its own PYTHONHASHSEED: NCCL when "
                             "there is a GPU per rank, else gloo), real:gloo or real:nccl")
    if fraction:
        parser.add_argument("--real-fraction", type=_fraction, default=1.0, metavar="F",
                            help="with --ranks real: the share of examples also run on real ranks (default 1; "
                                 "e.g. 0.1 for nightly throughput), chosen by each case's content")


def _check_ranks(args: argparse.Namespace) -> None:
    """Refuse a ``--ranks`` request this machine cannot meet (NCCL without a GPU is exit 2)."""
    from fsdp_verify.execute.ranks.judge import parse_mode
    from fsdp_verify.execute.ranks.pool import place
    if parse_mode(args.ranks) == "nccl":
        try:
            place("nccl", 2)
        except ValueError as exc:
            raise UsageError(f"--ranks {args.ranks}: {exc}") from None


def _real_session(args: argparse.Namespace, seed: int = 0):
    """The real-mode session ``--ranks`` asks for (None when simulated); NCCL without a GPU is exit 2."""
    from fsdp_verify.execute.ranks.judge import open_session
    _check_ranks(args)
    return open_session(args.ranks, seed, _deadline(args), getattr(args, "real_fraction", 1.0))


def _drawings(failures: Sequence[dict], target_name: str) -> dict:
    """Each saved failure replayed in this process and drawn for the HTML page (the first
    ``MAX_DRAWN``); a case that cannot be replayed gets a note saying why."""
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.report.html import MAX_DRAWN, Drawing, drawing
    drawn = {}
    for failure in list(failures)[:MAX_DRAWN]:
        try:
            entry = corpus.load(failure["file"])
            findings, ctx = check_all(_target(target_name), entry.case, keep_rewrite=True)
            drawn[failure["file"]] = drawing(ctx, findings)
        except Exception as exc:  # noqa: BLE001 - the page still lists the finding, with why it has no picture
            drawn[failure["file"]] = Drawing(note=f"not drawn: {type(exc).__name__}: {exc}")
    return drawn


def cmd_fuzz(args: argparse.Namespace) -> int:
    from fsdp_verify.engine import campaign
    from fsdp_verify.report.summary import junit_xml, summary_text
    _target(args.target)
    budget = args.budget
    config = campaign.Config(target=args.target, budget=budget, seed=args.seed, profile=args.profile,
                             db=_databases(args),
                             corpus_dir=args.corpus, size=args.size, modules=not args.no_modules,
                             max_failures=args.max_failures, deadline=None if args.in_process else args.deadline,
                             strategy=args.strategy or campaign.default_strategy(args.target),
                             spec=tuple(args.spec_param or ()),
                             draw_spec=args.draw_spec_params, raw_forms=args.raw_forms,
                             ranks=args.ranks, real_fraction=args.real_fraction)
    _check_ranks(args)  # before any work (the campaign opens its own session)
    if config.spec or config.draw_spec:
        print(f"spec settings: pinned {dict(config.spec) or 'none'}; "
              f"{'the others drawn per example (recorded in each case)' if config.draw_spec else 'the others default'}",
              flush=True)
    campaign.install_stop_handlers()
    print(f"fuzzing {args.target} with {args.workers} worker{'s' if args.workers > 1 else ''}, budget "
          f"{budget.describe()}", flush=True)
    with _progress(args, "fuzz", start=False, total=budget.examples, seconds=budget.seconds) as progress:
        result = campaign.run_parallel(config, args.workers, progress=progress.update)
    _triage_by_repro(args, result)
    print(summary_text(result, args.target))
    if args.junit:
        Path(args.junit).write_text(junit_xml(result, args.target))
    if args.json:
        Path(args.json).write_text(json.dumps({"target": args.target, **result.to_json()}, indent=1))
    if args.html:
        from fsdp_verify.report.html import campaign_html
        Path(args.html).write_text(campaign_html(result, args.target, _drawings(result.failures, args.target)))
    from fsdp_verify.model import classes
    bugs = [f for f in result.failures if classes.of(f).is_bug]
    code = 1 if bugs or result.harness_errors else 130 if result.interrupted else 0
    if result.interrupted:  # reports are written: skip the slow interpreter teardown (torch, z3)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _triage_by_repro(args: argparse.Namespace, result) -> None:
    """Each defect candidate's standalone repro decides its class (upstream defect or harness
    limitation); a stopped campaign, or ``--no-repro``, leaves them as candidates and says so."""
    import tempfile

    from fsdp_verify.engine.repro import triage_candidates
    from fsdp_verify.model import classes
    waiting = [f for f in result.failures if classes.of(f) is classes.FailureClass.CANDIDATE]
    if not waiting:
        return
    if args.no_repro or result.interrupted:
        result.repro.skipped = "--no-repro" if args.no_repro else "the campaign was stopped"
        return
    print(f"triage: running the standalone repro of {len(waiting)} defect candidate"
          f"{'' if len(waiting) == 1 else 's'}", flush=True)
    try:
        if args.repro_dir:
            triage_candidates(result, Path(args.repro_dir), target_name=args.target)
        else:
            with tempfile.TemporaryDirectory(prefix="fsdp-verify-repros-") as folder:
                triage_candidates(result, Path(folder), target_name=args.target)
    except KeyboardInterrupt:
        result.interrupted = True
        result.repro.skipped = "stopped while the repros ran"


def _load_all(paths: Sequence[str]) -> tuple[list[tuple[Path, "corpus.Entry"]], list[str]]:
    from fsdp_verify.corpus import files as corpus
    entries, errors = [], []
    for path in corpus.discover(paths or ["corpus"]):
        try:
            entries.append((path, corpus.load(path)))
        except corpus.CorpusError as exc:
            errors.append(str(exc))
    return entries, errors


def _deadline(args: argparse.Namespace) -> float | None:
    return None if args.in_process else args.deadline


def _isolation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deadline", type=_positive_float, default=DEFAULT_DEADLINE,
                        help=f"seconds a target may take on one case (default {DEFAULT_DEADLINE:g}); target and "
                             f"checkers run in a forked child, so a hang, crash or exit is a finding")
    parser.add_argument("--in-process", action="store_true",
                        help="run targets in this process (faster to profile; a native crash then ends the run)")
    parser.add_argument("--max-memory", type=_size, default=None, metavar="BYTES",
                        help="memory a case's forked child may allocate beyond what it starts with (default 8G; "
                             "0: no limit): a target past it fails as a finding, never the harness")
    parser.add_argument("--max-output", type=_size, default=None, metavar="BYTES",
                        help="largest file a case's forked child may write (default 1G; 0: no limit)")


def _size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 512M, 8G or 0")
    return int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()]


def _apply_limits(args: argparse.Namespace) -> None:
    """The child limits travel by environment, so every worker and child inherits them."""
    from fsdp_verify.engine.run_case import MEMORY_ENV, OUTPUT_ENV
    for name, value in ((MEMORY_ENV, getattr(args, "max_memory", None)), (OUTPUT_ENV, getattr(args, "max_output", None))):
        if value is not None:
            os.environ[name] = str(value)


def cmd_replay(args: argparse.Namespace) -> int:
    from fsdp_verify.engine.replay import replay
    target = _target(args.target)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        raise UsageError(f"no such file or folder: {', '.join(missing)}")
    entries, errors = _load_all(args.paths)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    disagreements = 0
    from fsdp_verify.execute.ranks.judge import session_line
    real = _real_session(args)
    outcomes = []
    try:
        with _progress(args, "replay", unit="cases", bad="different", total=len(entries)) as progress:
            for done, (path, entry) in enumerate(entries, 1):
                outcome = replay(target, path, entry, _deadline(args), real, args.target)
                outcomes.append(outcome)
                disagreements += not outcome.agrees
                progress.write(outcome.line(target))
                progress.update(done, disagreements)
        print(session_line(real))
    finally:
        if real is not None:
            real.close()
    summary = (f"{len(entries)} cases replayed against {target.name}: {len(entries) - disagreements} as expected, "
               f"{disagreements} different, {len(errors)} unreadable")
    print(summary)
    if args.html:
        _replay_html(args.html, target, outcomes, errors, summary)
    if errors:
        return 2
    return 1 if disagreements else 0


def _replay_html(path: str, target, outcomes: list, errors: list[str], summary: str) -> None:
    from fsdp_verify.report.html import Row, Section, table_html
    from fsdp_verify.report.summary import repro_command
    first = {o.path: o.got.findings[0] if o.got.findings else ("", "") for o in outcomes}  # (checker, message)
    rows = [Row(str(o.path), "as expected" if o.agrees else "DIFFERENT", checker=first[o.path][0],
                message=first[o.path][1]) for o in outcomes]
    different = [o for o in outcomes if not o.agrees]
    drawings = _drawings([{"file": str(o.path)} for o in different], target.name)
    sections = [Section(title=o.path.name, klass="different", checkers=list(o.got.checkers), rule="",
                        message=(o.got.findings[0][1] if o.got.findings else f"now {o.got.status}"),
                        file=str(o.path), commands=[f"fsdp-verify replay {o.path} --target {target.name}",
                                  repro_command(str(o.path), target.name)],
                        plan=drawings[str(o.path)].plan, svg=drawings[str(o.path)].svg,
                        picture_note=drawings[str(o.path)].note) for o in different if str(o.path) in drawings]
    verdict = "FAIL" if different or errors else "pass"
    Path(path).write_text(table_html(f"fsdp-verify replay against {target.name}", verdict,
                                     [("cases", len(outcomes)), ("as expected", len(outcomes) - len(different)),
                                      ("different", len(different)), ("unreadable", len(errors))],
                                     rows, sections, notes=[summary, *errors]))


def cmd_show(args: argparse.Namespace) -> int:
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.report.account import account
    from fsdp_verify.report.divergence import first_divergence
    from fsdp_verify.report.picture import GraphvizMissing, dot_source, render_svg
    try:
        entry = corpus.load(args.case)
    except corpus.CorpusError as exc:
        raise UsageError(str(exc)) from None
    target = _target(args.target or "reference")
    # in process, the rewrite kept as the target returned it: the picture needs the live graphs
    findings, ctx = check_all(target, entry.case, keep_rewrite=True)
    print(f"{args.case} (recorded against {entry.target}: {entry.verdict.status}; replayed against {target.name})")
    print(account(ctx, findings))
    dot = dot_source(ctx, findings, first_divergence(ctx)) if (args.dot or args.svg) else None
    if args.dot:
        Path(args.dot).write_text(dot)
        print(f"wrote {args.dot}")
    if args.svg:
        try:
            render_svg(dot, args.svg)
        except GraphvizMissing as exc:
            raise UsageError(str(exc)) from None
        print(f"wrote {args.svg}")
    return 0


def cmd_compiled(args: argparse.Namespace) -> int:
    import random

    import torch

    from fsdp_verify.execute.compiled.builtin import judge
    from fsdp_verify.strategies.modules import MODELS, TOKEN_MODELS, VOCAB, WIDTH
    from fsdp_verify.targets.inductor import CONFIG_SPACE
    draw = random.Random(args.seed)
    configs = [{"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"}]
    configs += [{name: draw.choice(values) for name, values in CONFIG_SPACE.items()} for _ in range(args.configs - 1)]
    differences = 0
    for kind in args.models:
        for options in configs:
            torch.manual_seed(args.seed)
            model = MODELS[kind]()
            data = torch.randint(0, VOCAB, (2, 3)) if kind in TOKEN_MODELS else torch.randn(2, 3, WIDTH)
            try:
                report = judge(model, (data,), options)
            except Exception as exc:  # noqa: BLE001 - a crashing compile is a finding, not the end
                differences += 1
                print(f"FAIL {kind} {options}: the compile raised {type(exc).__name__}: {str(exc)[:300]}")
                continue
            differences += report["difference"] is not None
            status = "ok  " if report["difference"] is None else "FAIL"
            print(f"{status} {kind} {options}: launches {report['launches']['unbucketed']} -> "
                  f"{report['launches']['bucketed']}; differs from unbucketed: {report['difference'] or 'no'}; "
                  f"from eager: {report['eager_difference'] or 'no'}", flush=True)
    print(f"{len(args.models) * len(configs)} compiles judged, {differences} with a difference or a crash")
    return 1 if differences else 0


def cmd_endtoend(args: argparse.Namespace) -> int:
    import math

    from fsdp_verify.execute.compiled import sweep as e2e
    from fsdp_verify.targets.inductor import CONFIG_SPACE
    try:
        configs = e2e.planned_configurations(args.configs, args.plant)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    print(f"{args.models} drawn models x {len(configs)} configurations, seed {args.seed}", flush=True)
    outcome = e2e.run(args.models, args.configs, args.seed, args.plant, args.shrink,
                      progress=lambda line: print(line, flush=True), ranks=args.ranks == "real")
    for failure in outcome.failures:
        print(f"FAILURE{' (shrunk)' if failure.get('shrunk') else ''}: {failure['why']}\n  model: "
              f"{json.dumps(failure['model'])}")
    for why in outcome.invalid:
        print(f"INVALID (not judged): {why}")
    distinct = len({json.dumps(r["options"], sort_keys=True, default=str) for r in outcome.reports})
    print(f"{outcome.compiles} (model, configuration) examples judged in {outcome.seconds:.1f} s "
          f"({outcome.per_second:.2f} examples/s), {len(outcome.failures)} failures; {distinct} of "
          f"{math.prod(len(c) for c in CONFIG_SPACE.values())} configurations of the space; "
          f"{outcome.not_exercised} bucketed nothing (equal by default, not evidence); "
          f"{len(outcome.invalid)} models not judged (unbucketed compile failed)")
    if args.json:
        Path(args.json).write_text(json.dumps({"models": outcome.models, "compiles": outcome.compiles,
                                               "seconds": outcome.seconds, "failures": outcome.failures,
                                               "not_exercised": outcome.not_exercised, "invalid": outcome.invalid,
                                               "reports": outcome.reports}, indent=1, default=str))
    return 1 if outcome.failures else 2 if outcome.invalid and not outcome.compiles else 0  # 2: nothing judged


def cmd_targets(args: argparse.Namespace) -> int:
    from fsdp_verify.targets import available
    from fsdp_verify.targets.mutants import MUTANTS
    for name, summary in sorted(available().items()):
        print(f"{name:<20} {summary}")
    print("module:callable      any importable factory returning a fsdp_verify.targets.Target")
    print(f"\nplanted bugs ({len(MUTANTS)}; name one as mutant:<name>; the checkers meant to kill it in brackets):")
    for name, mutant in sorted(MUTANTS.items()):
        print(f"  mutant:{name:<34} {mutant.summary} [{', '.join(mutant.kills)}]")
    return 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from fsdp_verify.coverage import format_reach, measure, unreached
    from fsdp_verify.report.summary import EXPECTED
    from fsdp_verify.strategies import cases
    _target(args.target)
    with _progress(args, "coverage", unit="cases", bad="refused", total=args.examples) as progress:
        reach = measure(cases(args.size), examples=args.examples, seed=args.seed, target_name=args.target,
                        progress=progress.update)
    print(format_reach(reach, EXPECTED))
    failures = unreached(reach, EXPECTED) + [f"{a} {r} (unexplained)" for a, r in sorted(reach.unexplained)]
    if args.branches:
        try:
            from fsdp_verify.coverage.branches import format_branches, measure_branches
        except ImportError as exc:
            raise UsageError(f"--branches needs coverage.py (pip install -e '.[test]'): {exc}") from None
        report = measure_branches(cases(args.size), examples=args.examples, seed=args.seed, target_name=args.target)
        print(format_branches(report))
        failures += [f"branch {file}:{start}->{end}" for file, start, end in report.unjustified]
    if failures:
        print(f"fsdp-verify: coverage: unreached in {args.examples} examples: {', '.join(failures)}", file=sys.stderr)
    return 1 if failures else 0


def cmd_gate(args: argparse.Namespace) -> int:
    """Exit 0: the candidate passes; 1: it violates an invariant; 2: a usage error, said before
    any case runs (an unreadable corpus file included), so a CI step tells a broken call apart."""
    from fsdp_verify.corpus import example_db
    from fsdp_verify.engine.gate import run_gate, stored_cases
    baseline, candidate = _target(args.baseline), _target(args.candidate)
    notes = []
    paths = args.corpus
    if paths is None:  # the default: the corpus folder of the working folder, when there is one
        paths = [DEFAULT_CORPUS] if Path(DEFAULT_CORPUS).is_dir() else []
        if not paths:
            notes.append(f"note: no {DEFAULT_CORPUS}/ folder here: gating on generated (and stored) cases only")
    entries, errors = _load_all(paths) if paths else ([], [])
    if errors:
        raise UsageError("gate: corpus: " + "; ".join(errors))
    databases = _databases(args)
    stored = stored_cases(example_db.open_database(databases)) if databases else []
    real = _real_session(args, args.seed)
    try:
        with _progress(args, "gate", unit="cases", bad="violations",
                       total=args.examples + len(entries) + len(stored)) as progress:
            result = run_gate(baseline, candidate, [e for _, e in entries], args.examples, args.seed,
                              _deadline(args), progress=progress.update, stored=stored, real=real,
                              candidate_spec=args.candidate, notes=notes)
    finally:
        if real is not None:
            real.close()
    print(result.text())
    if args.markdown:
        Path(args.markdown).write_text(result.markdown() + "\n")
    if args.html:
        from fsdp_verify.report.html import gate_html
        Path(args.html).write_text(gate_html(result))
    return 0 if result.passed else 1


def cmd_selftest(args: argparse.Namespace) -> int:
    from fsdp_verify.engine.selftest import run_selftest
    from fsdp_verify.targets.mutants import MUTANTS
    only = args.mutant or None
    with _progress(args, "selftest", unit="planted bugs", bad="survivors",
                   total=len(only or MUTANTS)) as progress:
        table, survivors = run_selftest(args.examples, args.seed, only=only, progress=progress.update,
                                        ranks=args.ranks)
    print(table)
    return 1 if survivors else 0


def _spec_param(text: str) -> tuple:
    try:
        return spec_params.parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="fsdp-verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    shown = argparse.ArgumentParser(add_help=False)
    shown.add_argument("--progress-every", type=_positive_float, default=10.0, metavar="SECONDS",
                       help="seconds between plain progress lines when stdout is not a terminal or CI is set "
                            "(default 10); on a terminal the progress is one live line")

    fuzz = sub.add_parser("fuzz", parents=[shown], help="fuzz a target; shrunk failures are saved to the corpus")
    fuzz.add_argument("--target", default="reference", help="target name or module:callable (default reference)")
    fuzz.add_argument("--budget", default="60s", type=_budget,
                      help="wall clock (90s, 5m, 1h) or an example count (500); default 60s")
    fuzz.add_argument("--workers", type=_positive_int, default=1, help="worker processes (they share --db)")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the example stream (each worker derives its own)")
    fuzz.add_argument("--profile", choices=names.PROFILES, default="dev", help="Hypothesis settings profile")
    fuzz.add_argument("--db", action="append", type=_database, metavar="FOLDER|URL",
                      help=DB_HELP + "; shared by the workers and by later runs, which try its examples first")
    fuzz.add_argument("--corpus", default="corpus/found", type=_writable_folder,
                      help="where shrunk failures are written")
    fuzz.add_argument("--size", default="default", choices=names.SIZES, help="graph size preset")
    fuzz.add_argument("--no-modules", action="store_true", help="skip graphs traced from real nn.Modules")
    fuzz.add_argument("--strategy", choices=names.STRATEGIES, default=None,
                      help="cases (the default, torch-inductor aside): valid, mutated, hazard and traced graphs; "
                           "hazards: several planted hazards per graph (finds planner bugs fastest); captured (the "
                           "default for torch-inductor): SimpleFSDP-style models compiled through torch.compile")
    fuzz.add_argument("--spec-param", action="append", type=_spec_param, metavar="NAME=VALUE",
                      help="pin one of the spec's [I] settings for planner and oracles alike (repeatable): "
                           + ", ".join(sorted(spec_params.CHOICES)))
    fuzz.add_argument("--draw-spec-params", action="store_true",
                      help="draw the [I] settings that are not pinned per example (each case records its own)")
    fuzz.add_argument("--raw-forms", action="store_true",
                      help="hand the target the harness's own graph forms, also those it never receives in practice "
                           "(findings on them are counted as contract mismatches, not bugs)")
    fuzz.add_argument("--max-failures", type=_positive_int, default=10,
                      help="stop after this many distinct failures")
    fuzz.add_argument("--no-repro", action="store_true",
                      help="do not write and run each defect candidate's standalone repro at the end (the "
                           "summary says they are left untriaged)")
    fuzz.add_argument("--repro-dir", help="keep the repro scripts of the defect candidates here (default: a "
                                          "temporary folder; fsdp-verify repro writes them again)")
    _isolation_options(fuzz)
    _ranks_options(fuzz)
    fuzz.add_argument("--junit", type=_writable_file, help="write a JUnit XML report here")
    fuzz.add_argument("--json", type=_writable_file, help="write a JSON summary here")
    fuzz.add_argument("--html", type=_writable_file, metavar="REPORT.html", help=HTML_HELP)
    fuzz.set_defaults(func=cmd_fuzz)

    replay = sub.add_parser("replay", parents=[shown], help="re-run corpus cases; exit 0 only if every verdict is as recorded")
    replay.add_argument("paths", nargs="*", help="case files or folders (default corpus/)")
    replay.add_argument("--target", default="reference", help="target to replay against (default reference)")
    replay.add_argument("--html", type=_writable_file, metavar="REPORT.html", help=HTML_HELP)
    _isolation_options(replay)
    _ranks_options(replay)
    replay.set_defaults(func=cmd_replay)

    show = sub.add_parser("show", help="a readable account of one case, optionally drawn with Graphviz")
    show.add_argument("case", help="a corpus file")
    show.add_argument("--target", help="target to replay against (default reference)")
    show.add_argument("--svg", type=_writable_file, help="write an SVG picture of original and rewritten graph")
    show.add_argument("--dot", type=_writable_file, help="write the Graphviz source")
    show.set_defaults(func=cmd_show)

    gate = sub.add_parser("gate", parents=[shown], help="run the same cases through two targets; fail if the candidate breaks "
                                       "an invariant; report plan differences")
    gate.add_argument("--baseline", required=True, help="the target the change starts from")
    gate.add_argument("--candidate", required=True, help="the changed target")
    gate.add_argument("--examples", type=_positive_int, default=100, help="generated cases (fixed seed)")
    gate.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    gate.add_argument("--corpus", nargs="*", default=None,
                      help=f"corpus folders/files to include (default: {DEFAULT_CORPUS}/ when the working folder "
                           f"has one; an unreadable file is a usage error, before any case runs)")
    gate.add_argument("--markdown", type=_writable_file, metavar="FILE",
                      help="also write the verdict as Markdown (violations, plan differences as a table), e.g. "
                           "for $GITHUB_STEP_SUMMARY or a pull-request comment")
    gate.add_argument("--html", type=_writable_file, metavar="REPORT.html", help=HTML_HELP)
    gate.add_argument("--db", action="append", type=_database, metavar="FOLDER|URL",
                      help=DB_HELP + "; its examples of a default campaign (--strategy cases --size default) are "
                                     "replayed too, read only (a PR gate replays what the nightly found)")
    _isolation_options(gate)
    _ranks_options(gate)
    gate.set_defaults(func=cmd_gate)

    compiled = sub.add_parser("compiled", help="end to end: SimpleFSDP-style models compiled by inductor with its "
                              "bucketing options on a real one-process gloo world, bitwise against the same compile "
                              "without bucketing (eager reported beside it)")
    compiled.add_argument("--models", nargs="+", default=["mlp", "tiny_block"],
                          choices=["mlp", "embed_norm_head", "tiny_block", "tied_lm"], help="models to compile")
    compiled.add_argument("--configs", type=_positive_int, default=3,
                          help="configurations per model: all-on, then draws from inductor's option space")
    compiled.add_argument("--seed", type=int, default=0, help="seed of the draws and of the model weights")
    compiled.set_defaults(func=cmd_compiled)

    endtoend = sub.add_parser("endtoend", help="end to end on drawn models (the captured strategy's descriptions): "
                              "each compiled by inductor under configurations of the torch-inductor space on a "
                              "one-process gloo world, bitwise against the unbucketed compile")
    endtoend.add_argument("--models", type=_positive_int, default=3, help="model descriptions to draw")
    endtoend.add_argument("--configs", type=_positive_int, default=3,
                          help="configurations per model (together they take every choice of every option)")
    endtoend.add_argument("--seed", type=int, default=0, help="seed of the draws and of the weights")
    endtoend.add_argument("--plant", default=None, help="a planted merge fault (execute/compiled/drawn.py PLANTS)")
    endtoend.add_argument("--shrink", action="store_true", help="shrink the model of the first failure")
    endtoend.add_argument("--ranks", choices=("one", "real"), default="one",
                          help="one (default: one process, a one-rank gloo group) or real (each model on one gloo "
                               "process per rank of its mesh, 2 or 4: DTensor parameters, uneven shards, HSDP)")
    endtoend.add_argument("--json", default=None, help="write every report here")
    endtoend.set_defaults(func=cmd_endtoend)

    targets = sub.add_parser("targets", help="list the available targets")
    targets.set_defaults(func=cmd_targets)

    coverage = sub.add_parser("coverage", parents=[shown], help="planner reasons and sub-conditions the strategies "
                              "reach (exit 1 naming any unreached)")
    coverage.add_argument("--examples", type=_positive_int, default=2000, help="generated cases")
    coverage.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    coverage.add_argument("--size", default="tiny", choices=names.SIZES, help="graph size preset")
    coverage.add_argument("--target", default="reference", help="target whose planner is asked")
    coverage.add_argument("--branches", action="store_true",
                          help="also plan and rewrite every case under coverage.py and report the branch "
                               "coverage of fsdp_verify/reference")
    coverage.set_defaults(func=cmd_coverage)

    selftest = sub.add_parser("selftest", parents=[shown], help="fuzz every planted bug and report which checker kills it")
    selftest.add_argument("--examples", type=_positive_int, default=200, help="example budget per planted bug")
    selftest.add_argument("--seed", type=int, default=0, help="seed of the hunts")
    selftest.add_argument("--mutant", action="append", choices=_MutantNames(), metavar="NAME",
                          help="only this planted bug (repeatable; `fsdp-verify targets` lists them)")
    _ranks_options(selftest, fraction=False)
    selftest.set_defaults(func=cmd_selftest)

    from fsdp_verify.commands import repro
    repro.add_parser(sub, UsageError)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    # Hypothesis's own files (constants cache, downloaded artifacts) go to the user's cache, never a
    # stray .hypothesis/ in the working folder: examples live only where --db says.
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(os.environ.get("XDG_CACHE_HOME")
                                                                    or Path.home() / ".cache") / "fsdp-verify" / "hypothesis"))
    from fsdp_verify.corpus import profiles
    profiles.load_default()
    try:
        _apply_limits(args)
        return args.func(args)
    except UsageError as exc:
        print(f"fsdp-verify: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
