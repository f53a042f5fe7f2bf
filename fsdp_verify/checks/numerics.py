"""Numerical equality in the simulated world: every output of every rank, bit for bit.

The run compared is the case's one run per world (``identity``): collective sources carry
identity codes there, so each source's own value, as computed before it was coded, is compared
too; a rewrite that computes a source differently cannot hide behind the codes.

A case whose original outputs or source values are not all finite cannot be judged (NaN payloads
and infinities carry no comparable meaning): it is ``invalid``, never a pass.
``ctx.metrics["numerics"]`` counts the elements judged, so a run can say what share of its
outputs was actually compared.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from fsdp_verify.graph.values import nonfinite
from fsdp_verify.execute.simulated import Deadlock, Desync, ReadAfterFree
from fsdp_verify.checks.divergence import bit_difference, first_divergence
from fsdp_verify.checks.findings import INVALID, CheckContext, Finding
from fsdp_verify.checks.registry import Checker

NAME = "numerics"


def output_names(module: fx.GraphModule) -> list[str]:
    """The node name behind each flattened output position."""
    output = next(iter(module.graph.find_nodes(op="output")))
    names: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        else:
            names.append(value.name if isinstance(value, fx.Node) else repr(value))

    walk(output.args[0])
    return names


def _nonfinite(outputs: dict[int, list], original: dict[int, fx.GraphModule]) -> str:
    """``"rank R #I name"`` of the first original output holding a NaN or an infinity, else ""."""
    for rank in sorted(outputs):
        for index, value in enumerate(outputs[rank]):
            if nonfinite(value):
                names = output_names(original[rank])
                return f"rank {rank} #{index} {names[index] if index < len(names) else '?'}"
    return ""


def _nonfinite_source(natural: dict[tuple[int, str], torch.Tensor]) -> str:
    """``"rank R source name"`` of the first original source value holding a NaN or an infinity."""
    for (rank, name), value in sorted(natural.items()):
        if nonfinite(value):
            return f"rank {rank} source {name}"
    return ""


def _source_findings(before: dict[tuple[int, str], torch.Tensor],
                     after: dict[tuple[int, str], torch.Tensor]) -> list[Finding]:
    """The first source per rank whose value, before coding, differs from the original's (a source
    the rewrite lost is the layout and conformance checkers' business: its consumers get no codes)."""
    findings, flagged = [], set()
    for (rank, name), x in sorted(before.items()):
        y = after.get((rank, name))
        if y is None or rank in flagged:
            continue
        diff = bit_difference(x, y)
        if diff is not None:
            flagged.add(rank)
            detail = ", ".join(f"{k} {v}" for k, v in diff.items())
            findings.append(Finding(NAME, f"rank {rank}: collective source {name} differs before the collective: "
                                          f"{detail}", nodes=(name,), details={"source": name, **diff}, rank=rank,
                                    rule="source_differs"))
    return findings


def _folded_casts(ctx: CheckContext) -> list[str]:
    """The pre-gather casts whose parameters carry their codes (``IdentityCodes.cast_nodes``) that
    some rewrite lacks."""
    casts = ctx.identity_codes.cast_nodes
    if not casts:
        return []
    kept = [{node.name for node in module.graph.nodes} for module in ctx.rewritten.values()]
    return sorted(name for name in casts if any(name not in names for names in kept))


def _plain_reasons(ctx: CheckContext, shared: Any) -> list[str]:
    """Why the shared runs' outputs cannot be compared (then plain runs of both worlds are): a
    source coded in one world only (a rewrite folded or renamed it), a coded source that did not own
    its storage (codes would hide a later free or write of what it shares, and its strides), or
    coded outputs that are not finite (the plain run may well be)."""
    before, after = ctx.original_run, ctx.rewritten_run
    reasons = []
    one_world = sorted({name for _, name in set(before.natural) ^ set(after.natural)})
    if one_world:
        reasons.append("coded in one world only: " + ", ".join(one_world[:4]))
    aliased = sorted({name for _, name in before.aliased | after.aliased})
    if aliased:
        reasons.append("sources sharing storage: " + ", ".join(aliased[:4]))
    folded = _folded_casts(ctx)
    if folded:  # codes are exact in both dtypes: only real values show how a folded cast rounds
        reasons.append("pre-gather casts folded by the rewrite: " + ", ".join(folded[:4]))
    if not reasons and _nonfinite(shared.outputs, ctx.original):
        reasons.append("coded outputs not finite")
    return reasons


def run_failure(checker: str, error: Exception) -> Finding:
    """The finding for a rewritten graph that could not run (desync, read after free, crash)."""
    if isinstance(error, Deadlock):
        return Finding(checker, f"rewritten graphs deadlock in the simulated world: {error}",
                       nodes=tuple(step[1] for step in error.cycle), details={"kind": "deadlock"}, rule="deadlock")
    if isinstance(error, Desync):
        return Finding(checker, f"rewritten graphs desync: {error}", details={"kind": "desync", "differs": error.differs()},
                       rule="desync")
    if isinstance(error, ReadAfterFree):
        return Finding(checker, f"rewritten graph reads freed storage: {error}", nodes=(error.reader, error.freed),
                       rank=error.rank, details={"kind": "read_after_free"}, rule="read_after_free")
    return Finding(checker, f"rewritten graph fails in the simulated world: {type(error).__name__}: {error}",
                   details={"kind": "crash", "error_type": type(error).__name__}, rule="run_failed")


def _unrunnable(before: Any, after: Any) -> list[Finding]:
    """The finding for a pair of runs of which one raised (an original that cannot run makes the
    case ``invalid``), else none."""
    if isinstance(before, Exception):
        return [Finding(NAME, f"the original graph cannot run, so the case cannot be judged: {before}",
                        severity=INVALID, rule="original_unrunnable")]
    return [run_failure(NAME, after)] if isinstance(after, Exception) else []


def check_numerics(ctx: CheckContext) -> list[Finding]:
    """Original and rewritten graphs give bitwise equal outputs on every simulated rank (and equal
    collective sources before coding)."""
    original = ctx.original
    before, after = ctx.original_sim, ctx.rewritten_sim
    failed = _unrunnable(before, after)
    if failed:
        return failed
    sources, rewritten_sources = ctx.original_run.natural, ctx.rewritten_run.natural
    reasons = _plain_reasons(ctx, before)
    if reasons:
        # the shared runs' outputs cannot stand for the graphs' own: compare plain runs of both
        before, after = ctx.plain_runs
        failed = _unrunnable(before, after)
        if failed:
            return failed
    total = sum(t.numel() for outs in before.outputs.values() for t in outs if isinstance(t, torch.Tensor)) + \
        sum(t.numel() for t in sources.values())
    nonfinite = _nonfinite(before.outputs, original)
    where = f"output {nonfinite}" if nonfinite else "" if reasons else _nonfinite_source(sources)
    ctx.metrics["numerics"] = {"output_elements": total, "judged_elements": 0 if where else total,
                               "runs": "plain: " + "; ".join(reasons) if reasons else "shared"}
    if where:
        return [Finding(NAME, f"the original graph's {where} is not finite, so the case cannot be judged",
                        nodes=(where.split(" ")[-1],), severity=INVALID, details={"kind": "non_finite"},
                        rule="original_non_finite")]
    findings = _source_findings(sources, rewritten_sources)
    for rank in sorted(before.outputs):
        names = output_names(original[rank])
        expected, actual = before.outputs[rank], after.outputs.get(rank, [])
        if len(expected) != len(actual):
            findings.append(Finding(NAME, f"rank {rank}: {len(actual)} outputs instead of {len(expected)}",
                                    rank=rank, rule="output_count"))
            continue
        for index, (x, y) in enumerate(zip(expected, actual)):
            if not isinstance(x, torch.Tensor):
                continue
            diff = bit_difference(x, y) if isinstance(y, torch.Tensor) else {"reason": "not a tensor"}
            if diff is not None:
                name = names[index] if index < len(names) else f"#{index}"
                detail = ", ".join(f"{k} {v}" for k, v in diff.items())
                # only the first failing rank is located: each location runs both worlds again
                located = {} if any(f.rule == "output_differs" for f in findings) else _located(ctx, rank)
                findings.append(Finding(NAME, f"rank {rank}: output {index} ({name}) differs: {detail}",
                                        nodes=(name,), details={"output": index, **diff, **located}, rank=rank,
                                        rule="output_differs"))
                break
    return findings


def _located(ctx: CheckContext, rank: int) -> dict:
    """Where the two worlds' values first part on ``rank`` (the failure's identity), if found."""
    found = first_divergence(ctx.case, ctx.original, ctx.rewritten, rank)
    return {} if found is None else {"first_divergent": found.node, "first_divergent_op": found.op,
                                     "first_differs": found.differs}


CHECKER = Checker(NAME, check_numerics, after=("conformance",), summary='bitwise-equal outputs on every simulated rank')
