"""Real collectives: original and rewritten graphs on real rank processes (gloo or NCCL).

Bitwise verdicts use exact inputs: every value that feeds a reduction is an exact dyadic, so
gloo's ring order cannot change bits; the real run must then equal the rewritten real run and
the simulated world. With ``drift`` on, a second run on random values compares original and
rewritten within a per-dtype tolerance: a difference within tolerance is a weaker "drift"
finding (reduction order moved), beyond it an error.
"""

from __future__ import annotations

import torch

from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankFailure, RankPool, jobs_for, reduce_sources
from fsdp_verify.execute.inputs import exact_override
from fsdp_verify.execute.world import simulate
from fsdp_verify.checks.findings import DRIFT, ERROR, INVALID, CheckContext, Finding
from fsdp_verify.checks.numerics import bit_difference, output_names

NAME = "collectives"
TOLERANCE = {torch.float16: 1e-2, torch.bfloat16: 6e-2, torch.float32: 1e-5, torch.float64: 1e-12}


def compare_outputs(expected: list, actual: list, names: list[str], rank: int, what: str) -> list[Finding]:
    """The first difference between two output lists: their count, a tensor against a non-tensor,
    or a tensor's bits (as ``numerics`` judges the simulated world)."""
    if len(expected) != len(actual):
        return [Finding(NAME, f"rank {rank}: {what}: {len(actual)} outputs instead of {len(expected)}", rank=rank,
                        details={"reason": "output count", "expected": len(expected), "actual": len(actual)},
                        rule="output_count")]
    for index, (x, y) in enumerate(zip(expected, actual)):
        if not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor):
            continue
        diff = bit_difference(x, y) if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else \
            {"reason": f"{type(x).__name__} vs {type(y).__name__}"}
        if diff is not None:
            name = names[index] if index < len(names) else f"#{index}"
            return [Finding(NAME, f"rank {rank}: {what}: output {index} ({name}) differs: "
                                     f"{', '.join(f'{k} {v}' for k, v in diff.items())}",
                            nodes=(name,), rank=rank, details={"output": index, **diff}, rule="output_differs")]
    return []


def _drift(expected: list, actual: list, names: list[str], rank: int) -> list[Finding]:
    for index, (x, y) in enumerate(zip(expected, actual)):
        if not isinstance(x, torch.Tensor) or not x.is_floating_point() or bit_difference(x, y) is None:
            continue
        tolerance = TOLERANCE.get(x.dtype, 1e-5)
        error = float((x.double() - y.double()).abs().max() / (x.double().abs().max() + 1e-30))
        severity = DRIFT if error <= tolerance else ERROR
        name = names[index] if index < len(names) else f"#{index}"
        return [Finding(NAME, f"rank {rank}: random inputs: output {index} ({name}) drifts by relative "
                                 f"{error:.2e} (tolerance {tolerance:.0e} for {x.dtype})", nodes=(name,),
                        rank=rank, severity=severity, details={"relative_error": error}, rule="drift")]
    return []


def check_collectives(ctx: CheckContext, pool: RankPool, drift: bool = False) -> list[Finding]:
    """Run the case on ``pool``: rewritten == original bitwise, and real == simulated."""
    case = ctx.case
    if not ctx.rewritten:
        return []
    try:
        results = pool.run(jobs_for(case, ctx.rewritten, originals=ctx.original))
    except PoolStartFailure as exc:  # the harness's resource, not the rewrite: the case cannot be judged
        return [Finding(NAME, f"the rank pool could not start, so the case cannot be judged: {exc}", severity=INVALID,
                        details={"kind": "pool_not_started"}, rule="pool_not_started")]
    except RankFailure as exc:
        return [Finding(NAME, f"real collectives failed ({exc.kind}): {exc}",
                        details={"kind": exc.kind, "last_collective": exc.last_collective, "errors": exc.errors},
                        rule=f"rank_{exc.kind}")]
    simulated = simulate(case, ctx.original, override=exact_override(reduce_sources(case), case.seed))
    findings = []
    for rank, result in sorted(results.items()):
        names = output_names(ctx.original[rank])
        findings += compare_outputs(result["original"], result["rewritten"], names, rank, "rewritten vs original (real)")
        findings += compare_outputs(simulated.outputs[rank], result["original"], names, rank, "real vs simulated")
    if drift and not findings:
        try:
            noisy = pool.run(jobs_for(case, ctx.rewritten, mode="random", originals=ctx.original))
        except PoolStartFailure as exc:
            return findings + [Finding(NAME, f"the rank pool could not start, so drift was not judged: {exc}",
                                       severity=INVALID, details={"kind": "pool_not_started"},
                                       rule="pool_not_started")]
        except RankFailure as exc:
            return [Finding(NAME, f"real collectives failed on random inputs ({exc.kind}): {exc}",
                            rule=f"rank_{exc.kind}")]
        for rank, result in sorted(noisy.items()):
            findings += _drift(result["original"], result["rewritten"], output_names(ctx.original[rank]), rank)
    return findings
