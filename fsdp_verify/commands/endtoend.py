"""``fsdp-verify endtoend``: drawn models compiled by inductor under configurations of its option space."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``endtoend`` verb."""
    endtoend = sub.add_parser("endtoend", help="end to end on drawn models (the captured strategy's descriptions): "
                              "each compiled by inductor under configurations of the torch-inductor space on a "
                              "one-process gloo world, bitwise against the unbucketed compile")
    endtoend.add_argument("--models", type=options.positive_int, default=3, help="model descriptions to draw")
    endtoend.add_argument("--configs", type=options.positive_int, default=3,
                          help="configurations per model (together they take every choice of every option)")
    endtoend.add_argument("--seed", type=int, default=0, help="seed of the draws and of the weights")
    endtoend.add_argument("--plant", default=None, help="a planted merge fault (execute/compiled/drawn.py PLANTS)")
    endtoend.add_argument("--shrink", action="store_true", help="shrink the model of the first failure")
    endtoend.add_argument("--ranks", choices=("one", "real"), default="one",
                          help="one (default: one process, a one-rank gloo group) or real (each model on one gloo "
                               "process per rank of its mesh, 2 or 4: DTensor parameters, uneven shards, HSDP; a warm "
                               "configuration is loaded by fresh ranks from one cache folder all ranks share)")
    endtoend.add_argument("--json", default=None, help="write every report here")
    endtoend.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile drawn models under drawn configurations and judge them bitwise."""
    import math

    from fsdp_verify.execute.compiled import sweep as e2e
    from fsdp_verify.execute.compiled.blas import said
    from fsdp_verify.execute.compiled.drawn import COMPILE_SPACE, VECTOR_ORDER_ULPS
    from fsdp_verify.execute.compiled.reach import undrawn_values
    from fsdp_verify.targets.inductor import CONFIG_SPACE
    try:
        configs = e2e.planned_configurations(args.configs, args.plant)
    except ValueError as exc:
        raise options.UsageError(str(exc)) from None
    print(f"{args.models} drawn models x {len(configs)} configurations, seed {args.seed}", flush=True)
    undrawn = undrawn_values(configs)
    if undrawn and not args.plant:  # said, never silent: fewer configurations than the widest option has values
        print(f"not drawn with --configs {args.configs} (each value needs a configuration; "
              f"`fsdp-verify coverage --endtoend` counts them): {', '.join(undrawn)}", flush=True)
    outcome = e2e.run(args.models, args.configs, args.seed, args.plant, args.shrink,
                      progress=lambda line: print(line, flush=True), ranks=args.ranks == "real")
    for failure in outcome.failures:
        print(f"FAILURE{' (shrunk)' if failure.get('shrunk') else ''}: {failure['why']}\n  model: "
              f"{json.dumps(failure['model'])}")
    for why in outcome.invalid:
        print(f"INVALID (not judged): {why}")
    distinct = len({json.dumps(r["options"], sort_keys=True, default=str) for r in outcome.reports})
    print(f"{outcome.compiles} (model, configuration) examples judged in {outcome.seconds:.1f} s "
          f"({outcome.per_second:.2f} examples/s), {len(outcome.failures)} failures; {distinct} of "
          f"{math.prod(len(c) for c in {**CONFIG_SPACE, **COMPILE_SPACE}.values())} configurations of the space; "
          f"{outcome.not_exercised} bucketed nothing (equal by default, not evidence); "
          f"{len(outcome.invalid)} models not judged (unbucketed compile failed)")
    warm, visited = outcome.warm
    dynamic = sum(bool(r["options"].get("dynamic")) for r in outcome.reports)
    where = "by fresh ranks sharing its folder" if args.ranks == "real" else "in a fresh process"
    print(f"compile: {dynamic} with dynamic sizes; {outcome.data_dependent} of models with data-dependent row "
          f"counts; {warm} with a warm FX graph cache, {visited} of them loaded "
          f"from it {where}" + (f" ({warm - visited} did not run the warm path: see each report's "
                                          f"'warm')" if warm > visited else ""))
    if outcome.order_tolerated:
        print(f"{outcome.order_tolerated} configurations passed with gradients equal only up to the order of a "
              f"reduction over 3+ ranks (within group-1 units in the last place of the reduce dtype; each "
              f"report's 'order_tolerated' names them); everything else is judged bit for bit")
    if outcome.vector_order:
        print(f"{outcome.vector_order} configurations differed only in the order inductor's vectorized kernels "
              f"add in: equal bit for bit with scalar kernels on both sides, and within {VECTOR_ORDER_ULPS} units "
              f"in the last place (each report's 'vector_order' names the tensor)")
    if outcome.reports:
        print(said(outcome.blas))
    if args.json:
        Path(args.json).write_text(json.dumps({"models": outcome.models, "compiles": outcome.compiles,
                                               "seconds": outcome.seconds, "failures": outcome.failures,
                                               "not_exercised": outcome.not_exercised, "invalid": outcome.invalid,
                                               "order_tolerated": outcome.order_tolerated,
                                               "data_dependent": outcome.data_dependent,
                                               "vector_order": outcome.vector_order,
                                               "blas": sorted(state.value for state in outcome.blas),
                                               "reports": outcome.reports}, indent=1, default=str))
    return 1 if outcome.failures else 2 if outcome.invalid and not outcome.compiles else 0  # 2: nothing judged
