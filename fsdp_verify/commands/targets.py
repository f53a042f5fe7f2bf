"""``fsdp-verify targets``: list the available targets."""

from __future__ import annotations

import argparse



def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``targets`` verb."""
    targets = sub.add_parser("targets", help="list the available targets")
    targets.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List the targets and the planted bugs."""
    from fsdp_verify.targets import available
    from fsdp_verify.targets.mutants import MUTANTS
    for name, summary in sorted(available().items()):
        print(f"{name:<20} {summary}")
    print("module:callable      any importable factory returning a fsdp_verify.targets.Target")
    print(f"\nplanted bugs ({len(MUTANTS)}; name one as mutant:<name>; the checkers meant to kill it in brackets):")
    for name, mutant in sorted(MUTANTS.items()):
        print(f"  mutant:{name:<34} {mutant.summary} [{', '.join(mutant.kills)}]")
    return 0
