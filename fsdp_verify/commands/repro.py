"""``fsdp-verify repro CASE... [-o FILE|DIR] [--target NAME] [--run]``: standalone repro scripts.

One case and no ``-o``: the script goes to standard output. Several cases (or a folder): ``-o``
names a folder and each case's script is ``<case file stem>.py`` in it. ``--run`` runs each
written script in a fresh interpreter and says whether torch alone shows the failure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, usage_error: type[Exception]) -> None:
    """The ``repro`` verb; ``usage_error`` is what the command line turns into exit 2."""
    repro = sub.add_parser("repro", help="write a standalone script that shows a corpus case's failure with torch "
                                         "alone (run it: exit 1 reproduced, 0 not)")
    repro.add_argument("cases", nargs="+", help="corpus files or folders")
    repro.add_argument("-o", "--output", help="the script (one case), or a folder for one script per case")
    repro.add_argument("--target", help="write for this target instead of the one each case was recorded against")
    repro.add_argument("--run", action="store_true", help="run each written script and report whether it reproduced")
    repro.add_argument("--timeout", type=float, default=600.0, help="seconds a script may run with --run")
    repro.set_defaults(func=lambda args: run(args, usage_error))


def run(args: argparse.Namespace, usage_error: type[Exception]) -> int:
    """Write (and with ``--run``, run) the scripts; exit 1 when a run reproduced a failure."""
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.repro import run_script, script_env, script_for
    from fsdp_verify.report.repro import ReproError
    from fsdp_verify.targets.registry import TargetNotFound
    paths = [Path(p) for p in args.cases]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise usage_error(f"no such file or folder: {', '.join(missing)}")
    files = list(corpus.discover(paths))
    many = len(files) != 1 or any(p.is_dir() for p in paths)
    out = Path(args.output) if args.output else None
    if many and out is None:
        raise usage_error("several cases: name a folder with -o")
    if many and out.exists() and not out.is_dir():
        raise usage_error(f"-o {out}: several cases need a folder, and this is a file")
    if args.run and out is None:
        raise usage_error("--run needs -o (the scripts are run from where they are written)")
    written = []
    for path in files:
        try:
            entry = corpus.load(path)
        except corpus.CorpusError as exc:
            raise usage_error(str(exc)) from None
        target = args.target or entry.target
        destination = (out / f"{path.stem}.py") if many else out
        try:
            script = script_for(entry, target, source=str(path), filename=destination.name if destination else "repro.py")
        except (TargetNotFound, ReproError) as exc:
            raise usage_error(f"{path}: {exc}") from None
        if destination is None:
            sys.stdout.write(script.text)
            return 0
        destination.parent.mkdir(parents=True, exist_ok=True)
        destination.write_text(script.text)
        print(f"wrote {destination} ({script.kind.value} script for {target})")
        written.append((destination, target))
    if not args.run:
        return 0
    reproduced = 0
    for destination, target in written:
        # a pass found from here must import from the script's folder too
        ran = run_script(destination, timeout=args.timeout, env=script_env(target))
        reproduced += ran.reproduced
        print(f"{destination}: {ran.outcome.value}" + (f" ({ran.kind})" if ran.kind else "") + f" in {ran.seconds:.1f} s")
    return 1 if reproduced else 0
