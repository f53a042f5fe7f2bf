"""``fsdp-verify compiled``: SimpleFSDP-style models compiled by inductor, bitwise against the unbucketed compile."""

from __future__ import annotations

import argparse

from fsdp_verify.commands import options


def add_parser(sub: argparse._SubParsersAction, shown: argparse.ArgumentParser) -> None:
    """The ``compiled`` verb."""
    compiled = sub.add_parser("compiled", help="end to end: SimpleFSDP-style models compiled by inductor with its "
                              "bucketing options on a real one-process gloo world, bitwise against the same compile "
                              "without bucketing (eager reported beside it)")
    compiled.add_argument("--models", nargs="+", default=["mlp", "tiny_block"],
                          choices=["mlp", "embed_norm_head", "tiny_block", "tied_lm"], help="models to compile")
    compiled.add_argument("--configs", type=options.positive_int, default=3,
                          help="configurations per model: all-on, then draws from inductor's option space")
    compiled.add_argument("--seed", type=int, default=0, help="seed of the draws and of the model weights")
    compiled.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile each model under each configuration and judge it bitwise."""
    import random

    import torch

    from fsdp_verify.execute.compiled.builtin import judge
    from fsdp_verify.strategies.modules import MODELS, TOKEN_MODELS, VOCAB, WIDTH
    from fsdp_verify.targets.inductor import CONFIG_SPACE
    draw = random.Random(args.seed)
    configs = [{"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"}]
    configs += [{name: draw.choice(values) for name, values in CONFIG_SPACE.items()} for _ in range(args.configs - 1)]
    differences = 0
    for kind in args.models:
        for options in configs:
            torch.manual_seed(args.seed)
            model = MODELS[kind]()
            data = torch.randint(0, VOCAB, (2, 3)) if kind in TOKEN_MODELS else torch.randn(2, 3, WIDTH)
            try:
                report = judge(model, (data,), options)
            except Exception as exc:  # noqa: BLE001 - a crashing compile is a finding, not the end
                differences += 1
                print(f"FAIL {kind} {options}: the compile raised {type(exc).__name__}: {str(exc)[:300]}")
                continue
            differences += report["difference"] is not None
            status = "ok  " if report["difference"] is None else "FAIL"
            print(f"{status} {kind} {options}: launches {report['launches']['unbucketed']} -> "
                  f"{report['launches']['bucketed']}; differs from unbucketed: {report['difference'] or 'no'}; "
                  f"from eager: {report['eager_difference'] or 'no'}", flush=True)
    print(f"{len(args.models) * len(configs)} compiles judged, {differences} with a difference or a crash")
    return 1 if differences else 0
