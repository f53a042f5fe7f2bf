"""Gate a planner change: the same cases through a baseline and a candidate target.

The candidate must not violate any invariant; the report shows what the change does to plans
(bucket counts, members, bytes per bucket, skip reasons it introduces) for a reviewer.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Optional, Sequence

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.database import ExampleDatabase, ReadOnlyDatabase

from fsdp_verify.corpus import example_db
from fsdp_verify.model.case import Case
from fsdp_verify.checks import ERROR, INVALID
from fsdp_verify.execute.ranks import judge as real_ranks
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.corpus.files import Entry
from fsdp_verify.targets.base import Target


def generated_cases(examples: int, seed_value: int) -> list[Case]:
    """A fixed list of generated cases (same seed, same cases)."""
    from fsdp_verify.strategies import cases
    drawn: list[Case] = []

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @seed(seed_value)
    @given(cases("default", modules=True))
    def collect(case: Case) -> None:
        drawn.append(case)

    collect()
    return drawn


# The key a default fuzz campaign (--strategy cases --size default, modules on) stores examples under.
STORED_KEY = example_db.database_key("cases", "default", True)


def stored_cases(database: ExampleDatabase, limit: int = 1000) -> list[Case]:
    """The cases a default fuzz campaign saved in ``database`` (its failures first), read only:
    a PR gate replays what the nightly campaigns found."""
    from fsdp_verify.strategies import cases
    found: list[Case] = []

    @settings(max_examples=limit, database=ReadOnlyDatabase(database), phases=[Phase.reuse], deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(cases("default", modules=True))
    def collect(case: Case) -> None:
        found.append(case)

    collect._hypothesis_internal_database_key = STORED_KEY
    collect()
    return found


def _plan_shape(ctx) -> list[dict]:
    if not ctx.run.plans:
        return []
    return [plan.to_dict() for plan in ctx.run.plans[min(ctx.run.plans)]]


def plan_difference(base: list[dict], cand: list[dict]) -> list[str]:
    """Human-readable differences between two targets' plans of one case."""
    notes = []
    for index, (a, b) in enumerate(zip(base, cand)):
        groups_a = [[m["param_name"] for m in bk["members"]] for bk in a["buckets"]]
        groups_b = [[m["param_name"] for m in bk["members"]] for bk in b["buckets"]]
        if groups_a != groups_b:
            notes.append(f"round {index + 1}: {len(groups_a)} -> {len(groups_b)} buckets; multi-member "
                         f"{sum(len(g) > 1 for g in groups_a)} -> {sum(len(g) > 1 for g in groups_b)}")
            bytes_a = [bk["size_bytes"] for bk in a["buckets"] if bk["fusable"]]
            bytes_b = [bk["size_bytes"] for bk in b["buckets"] if bk["fusable"]]
            notes.append(f"  bytes per fused bucket {bytes_a[:8]} -> {bytes_b[:8]}")
        skips_a = Counter(d["reason"] for d in a["decisions"] if d["action"] == "skip")
        skips_b = Counter(d["reason"] for d in b["decisions"] if d["action"] == "skip")
        new = sorted(set(skips_b) - set(skips_a))
        if new:
            notes.append(f"round {index + 1}: new skip reasons {new}")
    if len(base) != len(cand):
        notes.append(f"{len(base)} planning rounds -> {len(cand)}")
    return notes


def gate_report(baseline: Target, candidate: Target, entries: list[Entry], examples: int,
                seed_value: int, deadline: float | None = None,
                progress: Optional[Callable[[int, int], None]] = None, stored: Sequence[Case] = (),
                real=None, candidate_spec: Optional[str] = None) -> tuple[str, int]:
    """The report text and the number of candidate violations; ``progress`` hears (cases done,
    violations) after every case. ``stored`` are cases from an example database. With ``real`` (a
    ``checks.real_ranks.RealRanks``) the candidate also runs on real ranks (as ``candidate_spec``)."""
    cases = generated_cases(examples, seed_value) + [entry.case for entry in entries] + list(stored)
    violations, baseline_failures, differing, invalid = [], 0, [], []
    for number, case in enumerate(cases):
        base_findings, base_ctx = check_all(baseline, case, deadline=deadline)
        cand_findings, cand_ctx = check_all(candidate, case, deadline=deadline)
        if real is not None:
            cand_findings = cand_findings + real_ranks.judge(real, case, candidate_spec or candidate.name,
                                                             cand_findings, cand_ctx)
        errors = [f for f in cand_findings if f.severity == ERROR]
        baseline_failures += any(f.severity == ERROR for f in base_findings)
        if errors:
            violations.append(f"  case {number} ({case.label}): [{errors[0].checker}] {errors[0].message[:240]}")
        elif any(f.severity == INVALID for f in cand_findings):
            first = next(f for f in cand_findings if f.severity == INVALID)
            invalid.append(f"  case {number} ({case.label}): [{first.checker}] {first.message[:240]}")
        notes = plan_difference(_plan_shape(base_ctx), _plan_shape(cand_ctx))
        if notes:
            differing.append((number, case.label, notes))
        if progress is not None:
            progress(number + 1, len(violations))
    lines = [f"gate: baseline {baseline.name} vs candidate {candidate.name} on {len(cases)} cases "
             f"({examples} generated with seed {seed_value}, {len(entries)} from the corpus, {len(stored)} from the "
             f"example database)",
             f"candidate violations: {len(violations)}", *violations[:20],
             f"cases that cannot be judged (invalid, not passes): {len(invalid)}", *invalid[:20],
             f"baseline violations: {baseline_failures}",
             f"cases whose plans differ: {len(differing)}"]
    for number, label, notes in differing[:20]:
        lines.append(f"  case {number} ({label}):")
        lines += [f"    {note}" for note in notes]
    lines.append(real_ranks.session_line(real))
    lines.append("verdict: " + ("FAIL (the candidate violates invariants)" if violations else "pass"))
    return "\n".join(lines), len(violations)
