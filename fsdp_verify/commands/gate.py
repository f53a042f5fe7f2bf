"""``fsdp-verify gate``: one set of cases through two targets: the candidate must break no invariant."""

from __future__ import annotations

import argparse
from pathlib import Path

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``gate`` verb."""
    gate = sub.add_parser("gate", parents=[shown], help="run the same cases through two targets; fail if the candidate breaks "
                                       "an invariant; report plan differences")
    gate.add_argument("--baseline", required=True, help="the target the change starts from")
    gate.add_argument("--candidate", required=True, help="the changed target")
    gate.add_argument("--examples", type=options.positive_int, default=100, help="generated cases (fixed seed)")
    gate.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    gate.add_argument("--corpus", nargs="*", default=None,
                      help=f"corpus folders/files to include (default: {options.DEFAULT_CORPUS}/ when the working folder "
                           f"has one; an unreadable file is a usage error, before any case runs)")
    gate.add_argument("--markdown", type=options.writable_file, metavar="FILE",
                      help="also write the verdict as Markdown (violations, plan differences as a table), e.g. "
                           "for $GITHUB_STEP_SUMMARY or a pull-request comment")
    gate.add_argument("--html", type=options.writable_file, metavar="REPORT.html", help=options.HTML_HELP)
    gate.add_argument("--db", action="append", type=options.database, metavar="FOLDER|URL",
                      help=options.DB_HELP + "; its examples of a default campaign (--strategy cases --size default) are "
                                     "replayed too, read only (a PR gate replays what the nightly found)")
    options.isolation_options(gate)
    options.ranks_options(gate)
    gate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 0: the candidate passes; 1: it violates an invariant; 2: a usage error, said before
    any case runs (an unreadable corpus file included), so a CI step tells a broken call apart."""
    from fsdp_verify.corpus import example_db
    from fsdp_verify.engine.gate import run_gate, stored_cases
    baseline, candidate = options.resolve_target(args.baseline), options.resolve_target(args.candidate)
    notes = []
    paths = args.corpus
    if paths is None:  # the default: the corpus folder of the working folder, when there is one
        paths = [options.DEFAULT_CORPUS] if Path(options.DEFAULT_CORPUS).is_dir() else []
        if not paths:
            notes.append(f"note: no {options.DEFAULT_CORPUS}/ folder here: gating on generated (and stored) cases only")
    entries, errors = options.load_all(paths) if paths else ([], [])
    if errors:
        raise options.UsageError("gate: corpus: " + "; ".join(errors))
    databases = options.databases(args)
    stored = stored_cases(example_db.open_database(databases)) if databases else []
    real = options.real_session(args, args.seed)
    try:
        with options.progress_line(args, "gate", unit="cases", bad="violations",
                                   total=args.examples + len(entries) + len(stored)) as progress:
            result = run_gate(baseline, candidate, [e for _, e in entries], args.examples, args.seed,
                              options.case_deadline(args), progress=progress.update, stored=stored, real=real,
                              candidate_spec=args.candidate, notes=notes, on_total=progress.set_total)
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
