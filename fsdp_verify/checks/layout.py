"""Layout offsets: the plan's packed layout is right, and the rewrite really uses it.

The plan check recomputes offsets from the member shapes (spec section 2.10). The run check
replaces every collective's source with *identity tensors* (``identity``: each element carries a
code that names parameter, rank and element; reduce-scatter sums stay exact). Every consumer of
a collective result must then receive, position by position, the same codes in the rewrite as in
the original; a mismatch is decoded into the member it came from.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Mapping, Optional

import torch
from torch import fx

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.identity import INT_VIEW, IdentityCodes, IdentityRun, consumer_slots
from fsdp_verify.checks.numerics import run_failure
from fsdp_verify.checks.registry import Checker

NAME = "layout"


def _plan_findings(ctx: CheckContext) -> list[Finding]:
    findings = []
    for rank in sorted(ctx.plans):
        for report in ctx.reports(rank):
            for bucket in report["buckets"]:
                offset = 0
                for member in bucket["members"]:
                    rs = member["kind"] == "fsdp_reduce_scatter"
                    numel = math.prod(member["output_shape"] if rs else member["input_shape"])
                    if member["local_offset"] != offset or member["local_numel"] != numel:
                        findings.append(Finding(
                            NAME, f"rank {rank}: bucket {bucket['bucket_id']} member {member['param_name']} has "
                                     f"offset {member['local_offset']}, numel {member['local_numel']}; expected "
                                     f"{offset}, {numel}", nodes=(member["param_name"],), rank=rank,
                            rule="member_offset"))
                        return findings
                    offset += numel
    return findings


def _named(codes: IdentityCodes, run: IdentityRun, tensor: torch.Tensor, position: int, param: str,
           group_ranks: Optional[dict[str, tuple[int, ...]]] = None) -> str:
    """What the value at ``position`` is: an all-gather code's parameter, rank and element, a
    reduce-scatter sum's parameter and element (``param``'s, the consumer's own, first; over the
    receiving rank's group where ``group_ranks`` names it), else the value itself."""
    found = codes.gathered(tensor, position) or codes.summed(run, tensor, position, param, group_ranks)
    return found if found is not None else codes.decode(tensor, position)


def _compare(before: IdentityRun, after: IdentityRun, codes: IdentityCodes, watched: dict[str, str],
             originals: Mapping[int, fx.GraphModule],
             groups: Callable[[int], dict[str, tuple[int, ...]]] = lambda rank: {}) -> list[Finding]:
    """The first consumer input whose codes differ between the runs, decoded, and named by the
    parameter that input carries (``consumer_slots`` of the rank's original: a consumer of several
    collective results names the one that differs), else the one ``watched`` names."""
    runs = (before, after)
    before, after = _watched(before, watched), _watched(after, watched)
    for (rank, name), inputs in sorted(before.items()):
        if (rank, name) not in after:
            continue
        if len(inputs) != len(after[(rank, name)]):  # slot by slot would judge only the inputs both hold
            param = watched[name]
            return [Finding(NAME, f"rank {rank}: consumer {name!r} of {param} reads {len(after[(rank, name)])} "
                                  f"inputs where the original reads {len(inputs)}", nodes=(name,), rank=rank,
                            details={"param": param, "differs": "arity"}, rule="consumer_arity")]
        for slot, (x, y) in enumerate(zip(inputs, after[(rank, name)])):
            if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
                continue
            if x.shape != y.shape or x.dtype != y.dtype:
                param = _param(originals, rank, name, slot, watched)
                return [Finding(NAME, f"rank {rank}: consumer {name!r} of {param} received a "
                                         f"{tuple(y.shape)} {y.dtype} tensor instead of {tuple(x.shape)} {x.dtype}",
                                nodes=(name,), rank=rank,
                                details={"param": param, "differs": "shape" if x.shape != y.shape else "dtype"},
                                rule="consumer_shape")]
            ints = INT_VIEW.get(x.element_size())
            if ints is None or x.is_complex():  # integer sources are coded too (quantised weights)
                continue
            xi, yi = x.contiguous().view(ints).reshape(-1), y.contiguous().view(ints).reshape(-1)
            if torch.equal(xi, yi):  # bitwise (integer views), one call where a mismatch search takes three
                continue
            differ = (xi != yi).nonzero()
            if len(differ):
                position = int(differ[0])
                param = _param(originals, rank, name, slot, watched)
                return [Finding(NAME, f"rank {rank}: consumer {name!r} of {param} received "
                                         f"{_named(codes, runs[1], y, position, param, groups(rank))} at position "
                                         f"{position} where the original delivers "
                                         f"{_named(codes, runs[0], x, position, param, groups(rank))}",
                                nodes=(name,), rank=rank,
                                details={"param": param, "input": slot, "position": position,
                                         "differs": "values"},
                                rule="element_misplaced")]
    return []


def _param(originals: Mapping[int, fx.GraphModule], rank: int, name: str, slot: int, watched: dict[str, str]) -> str:
    """The parameter consumer ``name``'s input ``slot`` carries on ``rank`` (computed once a finding
    needs it), else the one ``watched`` names."""
    module = originals.get(rank)
    carried = consumer_slots(module).get(name, {}) if module is not None else {}
    return carried.get(slot, watched[name])


def check_layout(ctx: CheckContext) -> list[Finding]:
    """Plan offsets are contiguous per the numel rule, and every consumer gets its own elements."""
    findings = _plan_findings(ctx)
    if findings:
        return findings
    codes, watched = ctx.identity_codes, ctx.watched_consumers
    if not codes.sources or not watched:
        return []
    before, after = ctx.original_run, ctx.rewritten_run
    if isinstance(before, Exception):
        return []  # the numerics checker reports an original that cannot run
    if isinstance(after, Exception):
        return [run_failure(NAME, after)]
    groups = ctx.case.graph.group_ranks  # a sub-group's sums are over its own ranks
    findings = _compare(before, after, codes, watched, ctx.original, groups)
    # a proof for every input only where no source's codes repeat (docs/proofs.md)
    ctx.metrics[NAME] = {"codes_wrapped": len(codes.wrapped), "proved": not codes.wrapped, "runs": 1}
    if findings or not codes.wrapped:
        return findings
    # Codes that repeat hide a misplacement by their period: a second run whose codes carry each
    # counter's next digit tells those elements apart (up to capacity squared of them).
    before, after, second = ctx.second_runs
    if isinstance(before, Exception) or isinstance(after, Exception):
        return [] if isinstance(before, Exception) else [run_failure(NAME, after)]
    beyond = codes.beyond_two_digits()
    ctx.metrics[NAME] = {"codes_wrapped": len(codes.wrapped), "proved": False, "runs": 2,
                         "two_digits": not beyond}
    return [replace(f, message=f"{f.message} (second coded run: codes of each counter's next digit)",
                    details={**f.details, "coded_run": 2})
            for f in _compare(before, after, second, watched, ctx.original, groups)]


def _watched(run, watched: dict[str, str]) -> dict:
    return {k: v for k, v in run.inputs.items() if k[1] in watched}


CHECKER = Checker(NAME, check_layout, after=("ordering",), summary='packed offsets, checked with identity tensors')
