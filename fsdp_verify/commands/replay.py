"""``fsdp-verify replay``: re-run corpus cases and compare each verdict with the recorded one."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``replay`` verb."""
    replay = sub.add_parser("replay", parents=[shown], help="re-run corpus cases; exit 0 only if every verdict is as recorded")
    replay.add_argument("paths", nargs="*", help="case files or folders (default corpus/)")
    replay.add_argument("--target", default="reference", help="target to replay against (default reference)")
    replay.add_argument("--html", type=options.writable_file, metavar="REPORT.html", help=options.HTML_HELP)
    options.isolation_options(replay)
    options.ranks_options(replay)
    replay.set_defaults(func=run)


def _replay_html(path: str, target, outcomes: list, errors: list[str], summary: str) -> None:
    from fsdp_verify.report.html import Row, Section, table_html
    from fsdp_verify.report.summary import repro_command
    first = {o.path: o.got.findings[0] if o.got.findings else ("", "") for o in outcomes}  # (checker, message)
    rows = [Row(str(o.path), "as expected" if o.agrees else "DIFFERENT", checker=first[o.path][0],
                message=first[o.path][1]) for o in outcomes]
    different = [o for o in outcomes if not o.agrees]
    drawings = options.drawings([{"file": str(o.path)} for o in different], target.name)
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


def run(args: argparse.Namespace) -> int:
    """Replay the cases; exit 0 only when every verdict is as recorded."""
    from fsdp_verify.engine.replay import replay
    target = options.resolve_target(args.target)
    missing = [p for p in args.paths if not Path(p).exists()]
    if missing:
        raise options.UsageError(f"no such file or folder: {', '.join(missing)}")
    entries, errors = options.load_all(args.paths)
    for error in errors:
        print(f"error: {error}", file=sys.stderr)
    disagreements = 0
    from fsdp_verify.execute.ranks.judge import session_line
    real = options.real_session(args)
    outcomes = []
    try:
        with options.progress_line(args, "replay", unit="cases", bad="different", total=len(entries)) as progress:
            for done, (path, entry) in enumerate(entries, 1):
                outcome = replay(target, path, entry, options.case_deadline(args), real, args.target)
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
