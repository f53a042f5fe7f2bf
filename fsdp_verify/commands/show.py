"""``fsdp-verify show``: a readable account of one case, optionally drawn with Graphviz."""

from __future__ import annotations

import argparse
from pathlib import Path

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``show`` verb."""
    show = sub.add_parser("show", help="a readable account of one case, optionally drawn with Graphviz")
    show.add_argument("case", help="a corpus file")
    show.add_argument("--target", help="target to replay against (default reference)")
    show.add_argument("--svg", type=options.writable_file, help="write an SVG picture of original and rewritten graph")
    show.add_argument("--dot", type=options.writable_file, help="write the Graphviz source")
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the account of one case (and draw it, with --svg or --dot)."""
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.report.account import account
    from fsdp_verify.report.divergence import first_divergence
    from fsdp_verify.report.picture import GraphvizMissing, dot_source, render_svg
    try:
        entry = corpus.load(args.case)
    except corpus.CorpusError as exc:
        raise options.UsageError(str(exc)) from None
    target = options.resolve_target(args.target or "reference")
    # in process, the rewrite kept as the target returned it: the picture needs the live graphs
    findings, ctx = check_all(target, entry.case, keep_rewrite=True)
    print(f"{args.case} (recorded against {entry.target}: {entry.verdict.status}; replayed against {target.name})")
    print(account(ctx, findings))
    dot = dot_source(ctx, findings, first_divergence(ctx)) if (args.dot or args.svg) else None
    if args.dot:
        Path(args.dot).write_text(dot)
        print(f"wrote {args.dot}")
    if args.svg:
        try:
            render_svg(dot, args.svg)
        except GraphvizMissing as exc:
            raise options.UsageError(str(exc)) from None
        print(f"wrote {args.svg}")
    return 0
