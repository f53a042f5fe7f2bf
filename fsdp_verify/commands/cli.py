"""The ``fsdp-verify`` command line: fuzz, replay, show, repro, gate, targets, coverage, selftest, mutate.

Exit codes: 0 success, 1 a failure was found (or a replay disagreed), 2 bad input (unknown
target, malformed corpus file, bad arguments).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from pathlib import Path
from typing import Sequence

from fsdp_verify.commands import (compiled, coverage, endtoend, fuzz, gate, mutate, options, replay, repro, selftest,
                                  show, targets)

# One module per verb, each with ``add_parser(sub, shown)`` and ``run(args)``; the order is --help's.
VERBS = (fuzz, replay, show, gate, compiled, endtoend, targets, coverage, selftest, mutate)
UsageError = options.UsageError  # what a verb raises for bad input: exit 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb."""
    parser = argparse.ArgumentParser(prog="fsdp-verify", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    shown = options.progress_option()
    for verb in VERBS:
        verb.add_parser(sub, shown)
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
        options.apply_limits(args)
        return args.func(args)
    except options.UsageError as exc:
        print(f"fsdp-verify: error: {exc}", file=sys.stderr)
        return 2


def entry() -> int:
    """The command line as a process of its own (the console script, ``python -m fsdp_verify``).

    What the command leaves is frozen before the interpreter ends: its last collection would walk
    every object a campaign left (1.1-1.3 CPU-s after 200 examples, 6% of the command) only to free
    memory the process gives back anyway. Reports are written and closed by then; only cyclic
    garbage goes unfinalised, and atexit handlers run as before. Not in ``main``: a test or a
    benchmark that calls ``main`` keeps running and must keep its collector."""
    code = main()
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(entry())
