"""``fsdp-verify coverage``: the planner reasons and sub-conditions the strategies reach."""

from __future__ import annotations

import argparse
import sys

from fsdp_verify.commands import options
from fsdp_verify.model import names


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``coverage`` verb."""
    coverage = sub.add_parser("coverage", parents=[shown], help="planner reasons and sub-conditions the strategies "
                              "reach (exit 1 naming any unreached)")
    coverage.add_argument("--examples", type=options.positive_int, default=2000, help="generated cases")
    coverage.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    coverage.add_argument("--size", default="tiny", choices=names.SIZES, help="graph size preset")
    coverage.add_argument("--target", default="reference", help="target whose planner is asked")
    coverage.add_argument("--branches", action="store_true",
                          help="also plan and rewrite every case under coverage.py and report the branch "
                               "coverage of fsdp_verify/reference")
    coverage.add_argument("--endtoend", action="store_true",
                          help="instead, what `fsdp-verify endtoend` draws, without compiling: meshes, model "
                               "features (uneven shards, data-dependent rows, ...) and every configuration "
                               "value (compile cache, dynamic sizes, inductor's options)")
    coverage.add_argument("--models", type=options.positive_int, default=20, help="with --endtoend: models drawn")
    coverage.add_argument("--configs", type=options.positive_int, default=8,
                          help="with --endtoend: configurations planned per model (as endtoend --configs)")
    coverage.add_argument("--ranks", choices=("one", "real"), default="real",
                          help="with --endtoend: the meshes of one process or of real ranks (as endtoend --ranks)")
    coverage.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Report the reasons and sub-conditions reached; exit 1 naming any unreached."""
    if args.endtoend:
        return _endtoend(args)
    from fsdp_verify.coverage import format_reach, measure, unreached
    from fsdp_verify.report.summary import EXPECTED
    from fsdp_verify.strategies import cases
    options.resolve_target(args.target)
    with options.progress_line(args, "coverage", unit="cases", bad="refused", total=args.examples) as progress:
        reach = measure(cases(args.size), examples=args.examples, seed=args.seed, target_name=args.target,
                        progress=progress.update)
    print(format_reach(reach, EXPECTED))
    failures = unreached(reach, EXPECTED) + [f"{a} {r} (unexplained)" for a, r in sorted(reach.unexplained)]
    if args.branches:
        try:
            from fsdp_verify.coverage.branches import format_branches, measure_branches
        except ImportError as exc:
            raise options.UsageError(f"--branches needs coverage.py (pip install -e '.[test]'): {exc}") from None
        report = measure_branches(cases(args.size), examples=args.examples, seed=args.seed, target_name=args.target)
        print(format_branches(report))
        failures += [f"branch {file}:{start}->{end}" for file, start, end in report.unjustified]
    if failures:
        print(f"fsdp-verify: coverage: unreached in {args.examples} examples: {', '.join(failures)}", file=sys.stderr)
    return 1 if failures else 0


def _endtoend(args: argparse.Namespace) -> int:
    """What ``endtoend --models M --configs K --ranks R`` would draw; exit 1 naming what it misses."""
    from fsdp_verify.execute.compiled.reach import format_models, measure_models, unreached_models
    reach = measure_models(args.models, args.configs, args.seed, ranks=args.ranks == "real")
    print(format_models(reach))
    missing = unreached_models(reach)
    if missing:
        print(f"fsdp-verify: coverage: endtoend with {args.models} models and {args.configs} configurations never "
              f"reaches: {', '.join(missing)}", file=sys.stderr)
    return 1 if missing else 0
