"""What every ``fsdp-verify`` verb shares: argument types checked before any work starts, the
options several verbs take (isolation, ranks), and the usage error the command line turns into
exit 2. Torch and Hypothesis are imported inside the functions that need them, so ``--help`` and
argument errors answer in a fraction of a second.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from fsdp_verify.model import names
from fsdp_verify.model import spec_params

if TYPE_CHECKING:
    from fsdp_verify.model.budget import Budget
    from fsdp_verify.corpus import files as corpus

DB_HELP = ("Hypothesis example database (repeatable, multiplexed): a folder, redis://host:port/db, or "
           "github:owner/repo[@artifact] (read-only); a remote one is paired with a local folder (another --db "
           "folder, else .hypothesis-db)")
HTML_HELP = "also write a self-contained HTML report here (summary, each finding with its picture and replay command)"
DEFAULT_CORPUS = "corpus"
DEFAULT_DEADLINE = 600.0  # seconds a target may take on one case before it is a finding


class UsageError(Exception):
    """Bad input: exit code 2 with this message."""


RANK_MODES = names.RANK_MODES


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def positive_float(text: str) -> float:
    value = number(text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of seconds")
    return value


class MutantNames:
    """The planted bugs' names as argparse choices, loaded (with torch) only when one is given."""

    def _names(self) -> list[str]:
        from fsdp_verify.targets.mutants import MUTANTS
        return sorted(MUTANTS)

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


def budget(text: str) -> "Budget":
    from fsdp_verify.model.budget import Budget
    try:
        budget = Budget.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if (budget.seconds is not None and budget.seconds <= 0) or (budget.examples is not None and budget.examples < 1):
        raise argparse.ArgumentTypeError(f"budget {text!r} must be positive")
    return budget


def writable_file(text: str) -> str:
    """An output file whose folder exists and is writable, checked before any work starts."""
    folder = Path(text).resolve().parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: folder {folder} is not writable")
    if Path(text).is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder, not a file")
    return text


def writable_folder(text: str) -> str:
    """A folder to write into: it exists and is writable, or can be created."""
    path = Path(text).resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text}: {existing} is not a writable folder")
    return text


def database(text: str) -> str:
    from fsdp_verify.corpus import example_db
    """A ``--db`` value (folder, redis URL or GitHub artifact), checked before any work starts."""
    try:
        spec = example_db.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return writable_folder(text) if spec.kind == "folder" else text


def databases(args: argparse.Namespace) -> tuple[str, ...]:
    from fsdp_verify.corpus import example_db
    """The ``--db`` values, with every redis server asked whether it answers (exit 2 if not)."""
    values = tuple(args.db or ())
    try:
        example_db.check_reachable(values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return values


def resolve_target(name: str):
    from fsdp_verify.targets import TargetNotFound, get_target
    try:
        return get_target(name)
    except TargetNotFound as exc:
        raise UsageError(str(exc)) from None


def progress_line(args: argparse.Namespace, label: str, start: bool = True, **kwargs):
    """The progress line; its clock starts now, or (``start=False``) when the work reports first."""
    from fsdp_verify.report.progress import Progress
    progress = Progress(label, every=args.progress_every, **kwargs)
    if start:
        progress.update(0, 0)
    return progress


def ranks_mode(text: str) -> str:
    if text not in RANK_MODES:
        raise argparse.ArgumentTypeError(f"--ranks {text!r}: expected one of {', '.join(RANK_MODES)}")
    return text


def share(text: str) -> float:
    value = number(text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be in (0, 1]")
    return value


def ranks_options(parser: argparse.ArgumentParser, with_fraction: bool = True) -> None:
    parser.add_argument("--ranks", type=ranks_mode, default="simulated", metavar="MODE",
                        help="simulated (default: every rank's target in this process), real (also plan, exchange "
                             "digests and run on real rank processes, each with its own PYTHONHASHSEED: NCCL when "
                             "there is a GPU per rank, else gloo), real:gloo or real:nccl")
    if with_fraction:
        parser.add_argument("--real-fraction", type=share, default=1.0, metavar="F",
                            help="with --ranks real: the share of examples also run on real ranks (default 1; "
                                 "e.g. 0.1 for nightly throughput), chosen by each case's content")


def check_ranks(args: argparse.Namespace) -> None:
    """Refuse a ``--ranks`` request this machine cannot meet (NCCL without a GPU is exit 2)."""
    from fsdp_verify.execute.ranks.judge import parse_mode
    from fsdp_verify.execute.ranks.pool import place
    if parse_mode(args.ranks) == "nccl":
        try:
            place("nccl", 2)
        except ValueError as exc:
            raise UsageError(f"--ranks {args.ranks}: {exc}") from None


def real_session(args: argparse.Namespace, seed: int = 0):
    """The real-mode session ``--ranks`` asks for (None when simulated); NCCL without a GPU is exit 2."""
    from fsdp_verify.execute.ranks.judge import open_session
    check_ranks(args)
    return open_session(args.ranks, seed, case_deadline(args), getattr(args, "real_fraction", 1.0))


def drawings(failures: Sequence[dict], target_name: str) -> dict:
    """Each saved failure replayed in this process and drawn for the HTML page (the first
    ``MAX_DRAWN``); a case that cannot be replayed gets a note saying why."""
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.report.html import MAX_DRAWN, Drawing, drawing
    drawn = {}
    for failure in list(failures)[:MAX_DRAWN]:
        try:
            entry = corpus.load(failure["file"])
            findings, ctx = check_all(resolve_target(target_name), entry.case, keep_rewrite=True)
            drawn[failure["file"]] = drawing(ctx, findings)
        except Exception as exc:  # noqa: BLE001 - the page still lists the finding, with why it has no picture
            drawn[failure["file"]] = Drawing(note=f"not drawn: {type(exc).__name__}: {exc}")
    return drawn


def load_all(paths: Sequence[str]) -> tuple[list[tuple[Path, "corpus.Entry"]], list[str]]:
    from fsdp_verify.corpus import files as corpus
    entries, errors = [], []
    for path in corpus.discover(paths or ["corpus"]):
        try:
            entries.append((path, corpus.load(path)))
        except corpus.CorpusError as exc:
            errors.append(str(exc))
    return entries, errors


def case_deadline(args: argparse.Namespace) -> float | None:
    return None if args.in_process else args.deadline


def isolation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--deadline", type=positive_float, default=DEFAULT_DEADLINE,
                        help=f"seconds a target may take on one case (default {DEFAULT_DEADLINE:g}); target and "
                             f"checkers run in a forked child, so a hang, crash or exit is a finding")
    parser.add_argument("--in-process", action="store_true",
                        help="run targets in this process (faster to profile; a native crash then ends the run)")
    parser.add_argument("--max-memory", type=byte_size, default=None, metavar="BYTES",
                        help="memory a case's forked child may allocate beyond what it starts with (default 8G; "
                             "0: no limit): a target past it fails as a finding, never the harness")
    parser.add_argument("--max-output", type=byte_size, default=None, metavar="BYTES",
                        help="largest file a case's forked child may write (default 1G; 0: no limit)")
    parser.add_argument("--show-target-output", action="store_true",
                        help="print what the target prints on every case (its logs and warnings); by default a "
                             "case's output is kept and attached to the target's crash, hang or raise")


def byte_size(text: str) -> int:
    match = re.fullmatch(r"\s*(\d+)\s*([kKmMgGtT]?)[bB]?\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 512M, 8G or 0")
    return int(match.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[match.group(2).lower()]


def apply_limits(args: argparse.Namespace) -> None:
    """The child limits travel by environment, so every worker and child inherits them."""
    from fsdp_verify.engine.run_case import MEMORY_ENV, OUTPUT_ENV
    from fsdp_verify.execute.isolation import SHOW_OUTPUT_ENV
    for name, value in ((MEMORY_ENV, getattr(args, "max_memory", None)), (OUTPUT_ENV, getattr(args, "max_output", None))):
        if value is not None:
            os.environ[name] = str(value)
    if getattr(args, "show_target_output", False):
        os.environ[SHOW_OUTPUT_ENV] = "1"


def spec_param(text: str) -> tuple:
    try:
        return spec_params.parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def progress_option() -> argparse.ArgumentParser:
    """The parent parser of verbs that show progress."""
    shown = argparse.ArgumentParser(add_help=False)
    shown.add_argument("--progress-every", type=positive_float, default=10.0, metavar="SECONDS",
                       help="seconds between plain progress lines when stdout is not a terminal or CI is set "
                            "(default 10); on a terminal the progress is one live line")
    return shown
