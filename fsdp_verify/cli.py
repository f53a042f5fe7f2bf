"""The ``fsdp-verify`` command line."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from .graph.builder import build_module
from .graph.examples import mlp_graph
from .reference.planner import plan_fsdp_buckets


def _cmd_example(args: argparse.Namespace) -> int:
    spec = mlp_graph(layers=args.layers, degree=args.degree)
    module = build_module(spec)
    plan = plan_fsdp_buckets(module, group_ranks=spec.group_ranks(0))
    print(json.dumps(plan.to_dict(), indent=2, default=str))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="fsdp-verify", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    example = sub.add_parser("example", help="print the reference plan of the built-in MLP example graph")
    example.add_argument("--layers", type=int, default=2)
    example.add_argument("--degree", type=int, default=2)
    example.set_defaults(func=_cmd_example)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
