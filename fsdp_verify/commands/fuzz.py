"""``fsdp-verify fuzz``: fuzz a target: draw cases, judge each, shrink and save failures, triage candidates."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fsdp_verify.commands import options
from fsdp_verify.model import names
from fsdp_verify.model import spec_params


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``fuzz`` verb."""
    fuzz = sub.add_parser("fuzz", parents=[shown], help="fuzz a target; shrunk failures are saved to the corpus")
    fuzz.add_argument("--target", default="reference", help="target name or module:callable (default reference)")
    fuzz.add_argument("--budget", default="60s", type=options.budget,
                      help="wall clock (90s, 5m, 1h) or an example count (500: each worker's, with --workers); default 60s")
    fuzz.add_argument("--workers", type=options.positive_int, default=1, help="worker processes (they share --db)")
    fuzz.add_argument("--seed", type=int, default=0, help="seed of the example stream (each worker derives its own)")
    fuzz.add_argument("--profile", choices=names.PROFILES, default="dev", help="Hypothesis settings profile")
    fuzz.add_argument("--db", action="append", type=options.database, metavar="FOLDER|URL",
                      help=options.DB_HELP + "; shared by the workers and by later runs, which try its examples first")
    fuzz.add_argument("--corpus", default="corpus/found", type=options.writable_folder,
                      help="where shrunk failures are written")
    fuzz.add_argument("--size", default="default", choices=names.SIZES, help="graph size preset")
    fuzz.add_argument("--no-modules", action="store_true", help="skip graphs traced from real nn.Modules")
    fuzz.add_argument("--strategy", choices=names.STRATEGIES, default=None,
                      help="cases (the default, torch-inductor aside): valid, mutated, hazard and traced graphs; "
                           "hazards: several planted hazards per graph (finds planner bugs fastest); captured (the "
                           "default for torch-inductor): SimpleFSDP-style models compiled through torch.compile; "
                           "uneven: every case shards unevenly; wide, prefix_scopes, backward_gathers, "
                           "full_precision: the mix with one rare shape made common (parameters past a "
                           "half-precision reduce-scatter's exact span, block names that share a prefix without "
                           "a dot, every parameter gathered again for backward, no half-precision parameters)")
    fuzz.add_argument("--spec-param", action="append", type=options.spec_param, metavar="NAME=VALUE",
                      help="pin one of the spec's [I] settings for planner and oracles alike (repeatable): "
                           + ", ".join(sorted(spec_params.CHOICES)))
    fuzz.add_argument("--draw-spec-params", action="store_true",
                      help="draw the [I] settings that are not pinned per example (each case records its own)")
    fuzz.add_argument("--raw-forms", action="store_true",
                      help="hand the target the harness's own graph forms, also those it never receives in practice "
                           "(findings on them are counted as contract mismatches, not bugs)")
    fuzz.add_argument("--max-failures", type=options.positive_int, default=10,
                      help="stop after this many distinct failures")
    fuzz.add_argument("--no-shrink", action="store_true",
                      help="save each failure as found, unshrunk (a quicker first look; the saved cases are "
                           "larger, and the summary says so)")
    fuzz.add_argument("--rediscover", action="store_true",
                      help="do not read the bugs the corpus folder already holds: each is shrunk and saved again "
                           "as new (by default a bug an earlier run saved is counted as a sighting of that file)")
    fuzz.add_argument("--no-repro", action="store_true",
                      help="do not write and run each defect candidate's standalone repro at the end (the "
                           "summary says they are left untriaged)")
    fuzz.add_argument("--repro-dir", help="keep the repro scripts of the defect candidates here (default: a "
                                          "temporary folder; fsdp-verify repro writes them again)")
    fuzz.add_argument("--require-fusion", action="store_true",
                      help="fail the run (exit 1, a JUnit failure) when the target fused no launch in any case that "
                           "held launches a pass could fuse: a bucketing pass that never matches passes every check "
                           "(without it the summary warns)")
    options.isolation_options(fuzz)
    options.ranks_options(fuzz)
    fuzz.add_argument("--junit", type=options.writable_file, help="write a JUnit XML report here")
    fuzz.add_argument("--json", type=options.writable_file, help="write a JSON summary here")
    fuzz.add_argument("--html", type=options.writable_file, metavar="REPORT.html", help=options.HTML_HELP)
    fuzz.set_defaults(func=run)


def _triage_by_repro(args: argparse.Namespace, result) -> None:
    """Each defect candidate's standalone repro decides its class (upstream defect or harness
    limitation); a stopped campaign, or ``--no-repro``, leaves them as candidates and says so."""
    import tempfile

    from fsdp_verify.engine.repro import triage_candidates
    from fsdp_verify.model import classes
    waiting = [f for f in result.failures if classes.of(f) is classes.FailureClass.CANDIDATE]
    if not waiting:
        return
    if args.no_repro or result.interrupted:
        result.repro.skipped = "--no-repro" if args.no_repro else "the campaign was stopped"
        return
    print(f"triage: running the standalone repro of {len(waiting)} defect candidate"
          f"{'' if len(waiting) == 1 else 's'}", flush=True)
    try:
        if args.repro_dir:
            triage_candidates(result, Path(args.repro_dir), target_name=args.target)
        else:
            with tempfile.TemporaryDirectory(prefix="fsdp-verify-repros-") as folder:
                triage_candidates(result, Path(folder), target_name=args.target)
    except KeyboardInterrupt:
        result.interrupted = True
        result.repro.skipped = "stopped while the repros ran"


def run(args: argparse.Namespace) -> int:
    """The campaign, its triage and its reports; exit 1 when a bug (or a harness error) was found."""
    from fsdp_verify.engine import campaign
    from fsdp_verify.report.summary import junit_xml, summary_text
    options.resolve_target(args.target)
    budget = args.budget
    config = campaign.Config(target=args.target, budget=budget, seed=args.seed, profile=args.profile,
                             db=options.databases(args),
                             corpus_dir=args.corpus, size=args.size, modules=not args.no_modules,
                             max_failures=args.max_failures, deadline=None if args.in_process else args.deadline,
                             strategy=args.strategy or campaign.default_strategy(args.target),
                             spec=tuple(args.spec_param or ()),
                             draw_spec=args.draw_spec_params, raw_forms=args.raw_forms,
                             ranks=args.ranks, real_fraction=args.real_fraction, shrink=not args.no_shrink,
                             rediscover=args.rediscover)
    options.check_ranks(args)  # before any work (the campaign opens its own session)
    if config.spec or config.draw_spec:
        print(f"spec settings: pinned {dict(config.spec) or 'none'}; "
              f"{'the others drawn per example (recorded in each case)' if config.draw_spec else 'the others default'}",
              flush=True)
    campaign.install_stop_handlers()
    print(f"fuzzing {args.target} with {args.workers} worker{'s' if args.workers > 1 else ''}, budget "
          f"{budget.describe()}", flush=True)
    with options.progress_line(args, "fuzz", start=False, total=budget.examples, seconds=budget.seconds) as progress:
        result = campaign.run_parallel(config, args.workers, progress=progress.update)
    _triage_by_repro(args, result)
    print(summary_text(result, args.target, args.require_fusion))
    if args.junit:
        Path(args.junit).write_text(junit_xml(result, args.target, args.require_fusion))
    if args.json:
        Path(args.json).write_text(json.dumps({"target": args.target, **result.to_json()}, indent=1))
    if args.html:
        from fsdp_verify.report.html import campaign_html
        Path(args.html).write_text(campaign_html(result, args.target, options.drawings(result.failures, args.target),
                                                 require_fusion=args.require_fusion))
    from fsdp_verify.model import classes
    bugs = [f for f in result.failures if classes.of(f).is_bug]
    code = 1 if bugs or result.harness_errors or result.fails_fusion(args.require_fusion) else \
        130 if result.interrupted else 0
    if result.interrupted:  # reports are written: skip the slow interpreter teardown (torch, z3)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code
