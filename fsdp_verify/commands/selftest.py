"""``fsdp-verify selftest``: fuzz every planted bug and report which checker kills it."""

from __future__ import annotations

import argparse

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``selftest`` verb."""
    selftest = sub.add_parser("selftest", parents=[shown], help="fuzz every planted bug and report which checker kills it")
    selftest.add_argument("--examples", type=options.positive_int, default=200, help="example budget per planted bug")
    selftest.add_argument("--seed", type=int, default=0, help="seed of the hunts")
    selftest.add_argument("--mutant", action="append", choices=options.MutantNames(), metavar="NAME",
                          help="only this planted bug (repeatable; `fsdp-verify targets` lists them)")
    options.ranks_options(selftest, with_fraction=False)
    selftest.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Hunt every planted bug; exit 1 when one is not killed by its intended checker."""
    from fsdp_verify.engine.selftest import run_selftest
    from fsdp_verify.targets.mutants import MUTANTS
    only = args.mutant or None
    with options.progress_line(args, "selftest", unit="planted bugs", bad="survivors",
                               total=len(only or MUTANTS)) as progress:
        table, survivors = run_selftest(args.examples, args.seed, only=only, progress=progress.update,
                                        ranks=args.ranks)
    print(table)
    return 1 if survivors else 0
