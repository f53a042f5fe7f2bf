"""Real mode throughput: examples/s with real rank processes vs simulated only, and the pool's
per-case overhead.

    python benchmarks/bench_real.py [--cases 20] [--examples 40] [--max-ranks 4]

1. One fixed two-rank case, ``--cases`` times: the simulated checks alone (``check_all``), the real
   check alone (plan + digest exchange + real collectives on 2 gloo ranks), and a bare round trip
   through the pool (a job that does nothing): the pool's per-case overhead.
2. A campaign on generated tiny graphs, ``--examples`` examples, simulated only and then with
   ``--ranks real:gloo`` (pools started once per world size and reused; cases with more than
   ``--max-ranks`` ranks are not run on real ranks and counted as such).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace

from fsdp_verify.engine import campaign
from fsdp_verify.model.case import Case
from fsdp_verify.execute.ranks.judge import RealRanks
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets import get_target
from fsdp_verify.execute.ranks.rank_side import RealJob


def fixed_case() -> Case:
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((1, 6), view="chain"), ParamDraw((2, 2), view="split")))
    return Case(render(Blueprint(blocks=blocks, degree=2)))


def per_case(count: int) -> None:
    target, base = get_target("reference"), fixed_case()
    cases = [replace(base, seed=s) for s in range(count)]
    begin = time.perf_counter()
    for case in cases:
        check_all(target, case)
    simulated = (time.perf_counter() - begin) / count
    with RealRanks(backend="gloo") as real:
        begin = time.perf_counter()
        pool = real.pool(2)
        started = time.perf_counter() - begin
        begin = time.perf_counter()
        for _ in range(count):
            pool.run({rank: RealJob("env") for rank in range(2)})
        trip = (time.perf_counter() - begin) / count
        begin = time.perf_counter()
        for case in cases:
            assert real.check(case, "reference") == ([], None)
        checked = (time.perf_counter() - begin) / count
    print(f"fixed 2-rank case x {count}")
    print(f"  simulated checks (check_all)      {simulated * 1000:8.1f} ms/case")
    print(f"  real check (plan+exchange+run)    {checked * 1000:8.1f} ms/case  (2 round trips to the ranks)")
    print(f"  pool round trip (empty job)       {trip * 1000:8.1f} ms/case  <- per-case pool overhead")
    print(f"  pool start (2 ranks, once)        {started:8.2f} s")


def campaign_rates(examples: int, max_ranks: int) -> None:
    rates = {}
    for mode in ("simulated", "real:gloo"):
        with tempfile.TemporaryDirectory() as folder:
            config = campaign.Config(target="reference", budget=campaign.Budget(examples=examples), seed=0,
                                     profile="ci", corpus_dir=folder, size="tiny", modules=False, ranks=mode)
            session = RealRanks(backend="gloo", max_ranks=max_ranks) if mode != "simulated" else None
            try:
                result = campaign.run(config, session=session)
            finally:
                if session is not None:
                    session.close()
        rates[mode] = result.examples / result.seconds
        extra = ""
        if session is not None:
            r = result.ranks
            extra = (f"; {r['cases']} planned and {r['executed']} run on real ranks ({r['seconds']:.1f}s of it), "
                     f"pools {r['placements']}, not on real ranks: {sum(r['not_run'].values())}")
        print(f"campaign {mode:<10} {result.examples} examples in {result.seconds:6.1f}s -> "
              f"{rates[mode]:6.2f} examples/s{extra}")
    print(f"real mode runs at {rates['real:gloo'] / rates['simulated']:.0%} of the simulated rate "
          f"(pool starts included)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=20)
    parser.add_argument("--examples", type=int, default=40)
    parser.add_argument("--max-ranks", type=int, default=4)
    args = parser.parse_args()
    per_case(args.cases)
    campaign_rates(args.examples, args.max_ranks)


if __name__ == "__main__":
    main()
