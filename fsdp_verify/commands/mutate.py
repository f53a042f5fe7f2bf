"""``fsdp-verify mutate``: mutation testing of a target's source with cosmic-ray's operators."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from fsdp_verify.commands import options

if TYPE_CHECKING:  # the engine is imported when a mutate command runs, not when the CLI starts
    from fsdp_verify.engine.mutate import Phase


def _phase(text: str) -> Phase:
    """STRATEGY[:SIZE], or rule:REASON[/VARIANT][@FOCUS][:SIZE] / skip:...: graphs with that one
    planted shape (the self-test's hunts), for a class of bugs the default mix reaches too rarely;
    either with +spec draws the spec's [I] settings per example. ``rule:`` names a reason of any
    table, as the campaign reads it and as this command's report names its aims (a skip reason's
    hunt too); ``skip:`` names skip reasons only."""
    from fsdp_verify.engine.mutate import Phase
    from fsdp_verify.model import names
    parts = text.split(":")
    size = parts.pop() if len(parts) > 1 and parts[-1] in names.SIZES else "default"
    strategy = ":".join(parts)
    named = names.strategy_name(strategy)
    directed = bool(named.rule) and _kind_of(named.pinned) in \
        (("skip",) if named.rule == "skip" else ("skip", "split", "singleton", "fusion")) and _focus_known(named.focus)
    if not directed and named.strategy not in names.STRATEGIES:
        raise argparse.ArgumentTypeError(f"{text!r}: expected STRATEGY[:SIZE] with a strategy of "
                                         f"{', '.join(names.STRATEGIES)} (or rule:REASON, skip:REASON; STRATEGY+spec draws "
                                         f"the [I] settings) and a size "
                                         f"of {', '.join(names.SIZES)}")
    return Phase(strategy, size)


def _kind_of(reason: str) -> str:
    """Which table of planted shapes ``reason`` (``REASON[/VARIANT]``) names (skip, split, singleton,
    fusion), or "" where the reason or its variant is unknown."""
    from fsdp_verify.strategies import graphs
    try:
        if "/" in reason:
            graphs.pinned_variant(reason)
        return graphs.rule_kind(reason)
    except ValueError:
        return ""


def _focus_known(focus: str) -> bool:
    """No focus, or one of ``strategies.graphs.FOCUSES``."""
    from fsdp_verify.strategies import graphs
    return not focus or focus in graphs.FOCUSES


def _fraction(text: str) -> float:
    """A share of the budget, 0 <= x < 1, as a decimal or as N/M (``1/3``)."""
    part, slash, whole = text.partition("/")
    try:
        value = float(part) / float(whole) if slash else float(text)
    except (ValueError, ZeroDivisionError):
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a share from 0 up to (not including) 1, e.g. 1/3 or 0.25")
    return value


def _share(text: str) -> tuple[int, int]:
    part, _, whole = text.partition("/")
    if not (part.isdigit() and whole.isdigit() and int(part) < int(whole)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected K/N with 0 <= K < N, e.g. 1/4")
    return int(part), int(whole)


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``mutate`` verb."""
    mutate = sub.add_parser("mutate", parents=[shown],
                            help="mutation testing: fuzz each mutant of a target's source, report the score")
    mutate.add_argument("paths", nargs="+", metavar="PATH",
                        help="module files or folders to mutate (e.g. fsdp_verify/reference)")
    mutate.add_argument("--target", default="reference",
                        help="the target whose campaign judges each mutant (name or module:callable; default "
                             "reference)")
    mutate.add_argument("--sample", type=options.positive_int, default=None, metavar="N",
                        help="a uniform sample of N mutants (default: all of them)")
    mutate.add_argument("--share", type=_share, default=None, metavar="K/N",
                        help="only the K-th of N disjoint shares of the mutants (0-based; a CI matrix runs all N)")
    mutate.add_argument("--seed", type=int, default=0, help="seed of the sample and of each mutant's campaign")
    mutate.add_argument("--budget", type=options.positive_float, default=30.0, metavar="SECONDS",
                        help="campaign seconds per mutant (default 30), both rounds together, split over the "
                             "phases")
    mutate.add_argument("--round-two", type=_fraction, default=1 / 3, metavar="SHARE",
                        help="the share of the budget held for round two, a survivor's aimed rerun (default "
                             "1/3; 0 ends the run after round one); without aim, round one has it all")
    mutate.add_argument("--phase", action="append", type=_phase, metavar="STRATEGY[:SIZE]",
                        help="what each mutant's campaign draws from, in turn (repeatable; default "
                             "hazards:tiny then cases:default)")
    mutate.add_argument("--no-aim", dest="aim", action="store_false",
                        help="run the given phases only (default: a mutant whose line the phases run in under "
                             "a tenth of their examples also gets, first, the planted shape's phase that runs "
                             "it most, measured once per run with coverage.py)")
    mutate.add_argument("--workers", type=options.positive_int, default=1, help="mutants run at once")
    mutate.add_argument("--only", action="append", metavar="IDENT", default=[],
                        help="only this mutant (PATH:LINE:OPERATOR#N, as --list prints; repeatable)")
    mutate.add_argument("--survivors-of", metavar="FILE.json",
                        help="only the mutants that survived in this file (a --json output or a benchmark list)")
    mutate.add_argument("--operators", metavar="REGEX", help="only cosmic-ray operators whose name matches")
    mutate.add_argument("--equivalent", metavar="FILE.json",
                        help="survivors explained as equivalent: {\"equivalent\": [{path, operator, before, "
                             "after, reason}]}")
    mutate.add_argument("--list", action="store_true", help="list the mutants (after sampling) and exit")
    mutate.add_argument("--json", type=options.writable_file, help="write every mutant's result here")
    mutate.add_argument("--keep-cases", metavar="DIR", default="",
                        help="keep each mutant's campaign folder under DIR (one per mutant and round): the "
                             "case that killed it, to replay, show or shrink; the JSON report names it")
    mutate.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Exit 1 when a mutant survived unexplained or the harness failed on one, 130 when stopped."""
    from fsdp_verify.engine import mutate
    try:
        options.resolve_target(args.target)
        everything = mutate.enumerate_mutants(args.paths, args.operators)
        equivalences = mutate.load_equivalences(args.equivalent) if args.equivalent else []
        chosen = mutate.sample(everything, args.sample, args.seed)
        if args.survivors_of:
            chosen = mutate.select(chosen, mutate.survivor_idents(args.survivors_of), args.survivors_of)
        if args.only:
            chosen = mutate.select(chosen, args.only, "--only")
    except mutate.BadInput as exc:
        raise options.UsageError(str(exc)) from None
    if args.share:
        chosen = chosen[args.share[0]::args.share[1]]
    if args.list:
        for mutant in chosen:
            print(mutant.ident)
        return 0
    settings = mutate.Settings(target=args.target, seconds=args.budget, workers=args.workers, seed=args.seed,
                               phases=tuple(args.phase or mutate.DEFAULT_PHASES), aim=args.aim,
                               keep_cases=args.keep_cases, again=args.round_two)
    print(f"mutating {', '.join(args.paths)}: {len(chosen)} of {len(everything)} mutants, {args.budget:g} s each "
          f"({' + '.join(f'{s:g}' for s in settings.round_budgets() if s)} s by round) against {args.target}, "
          f"{args.workers} at a time", flush=True)
    with options.progress_line(args, "mutate", unit="mutants", bad="survivors", total=len(chosen)) as progress:
        tally = {"done": 0, "survivors": 0}

        def tell(result) -> None:
            if result.round == 2:  # a survivor run again: it was counted, and may be a survivor no more
                tally["survivors"] -= result.outcome is not mutate.Outcome.SURVIVED
            else:
                tally["done"] += 1
                tally["survivors"] += result.outcome is mutate.Outcome.SURVIVED
            progress.update(tally["done"], tally["survivors"])
        outcome = mutate.run(chosen, settings, equivalences, progress=tell, total=len(everything))
    print(mutate.format_table(outcome))
    if args.json:
        Path(args.json).write_text(json.dumps({"target": args.target, "paths": args.paths, "seed": args.seed,
                                               "budget_seconds": args.budget,
                                               "round_seconds": list(settings.round_budgets()),
                                               **outcome.to_json()}, indent=1))
    if outcome.interrupted:
        return 130
    bad = outcome.counts()
    return 1 if bad[mutate.Outcome.SURVIVED.value] or bad[mutate.Outcome.HARNESS_ERROR.value] else 0
