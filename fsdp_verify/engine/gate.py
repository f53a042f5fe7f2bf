"""Gate a planner change: the same cases through a baseline and a candidate target.

The candidate must not violate any invariant; the report shows what the change does to plans
(bucket counts, members, bytes per bucket, skip reasons it introduces) for a reviewer.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.database import ExampleDatabase, ReadOnlyDatabase

from fsdp_verify.corpus import example_db
from fsdp_verify.model.case import Case
from fsdp_verify.checks import ERROR, INVALID
from fsdp_verify.execute.ranks import judge as real_ranks
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.engine.signature import Signature, primary, signature
from fsdp_verify.engine.triage import classify, excused_alone, receives
from fsdp_verify.model.classes import FailureClass
from fsdp_verify.corpus.files import Entry
from fsdp_verify.report.tally import effect_of, launches_text
from fsdp_verify.targets.base import Target


def generated_cases(examples: int, seed_value: int, repeats: Optional[list[int]] = None) -> list[Case]:
    """A fixed list of generated cases (same seed, same cases); none for ``examples`` 0. A case
    drawn again is kept once; ``repeats`` (a one-item list) counts the draws that repeated one."""
    from fsdp_verify.strategies import cases
    drawn: list[Case] = []
    if examples <= 0:
        return drawn

    seen: set[str] = set()
    repeated = repeats if repeats is not None else [0]

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @seed(seed_value)
    @given(cases("default", modules=True))
    def collect(case: Case) -> None:
        # Hypothesis draws some cases twice (one in six of 150: choices a case does not read); a
        # case judged twice costs both targets' time and lists its violation twice
        key = json.dumps(case.to_json(), sort_keys=True, default=str)
        if key in seen:
            repeated[0] += 1
            return
        seen.add(key)
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


@dataclass(frozen=True)
class PlanChange:
    """How one planning round of one case changed between the baseline and the candidate."""

    round: int
    buckets: Optional[tuple[int, int]]  # buckets, baseline -> candidate; None: the same buckets
    fused: tuple[int, int]  # multi-member buckets
    fused_bytes: tuple[tuple[int, ...], tuple[int, ...]]  # bytes per fused bucket (first eight)
    new_skips: tuple[str, ...]  # skip reasons only the candidate gives

    def notes(self) -> list[str]:
        lines = []
        if self.buckets is not None:
            lines.append(f"round {self.round}: {self.buckets[0]} -> {self.buckets[1]} buckets; multi-member "
                         f"{self.fused[0]} -> {self.fused[1]}")
            lines.append(f"  bytes per fused bucket {list(self.fused_bytes[0])} -> {list(self.fused_bytes[1])}")
        if self.new_skips:
            lines.append(f"round {self.round}: new skip reasons {list(self.new_skips)}")
        return lines


def plan_changes(base: list[dict], cand: list[dict]) -> list[PlanChange]:
    """What the candidate does to the baseline's plans of one case, round by round."""
    changes = []
    for index, (a, b) in enumerate(zip(base, cand)):
        groups_a = [[m["param_name"] for m in bk["members"]] for bk in a["buckets"]]
        groups_b = [[m["param_name"] for m in bk["members"]] for bk in b["buckets"]]
        skips_a = Counter(d["reason"] for d in a["decisions"] if d["action"] == "skip")
        skips_b = Counter(d["reason"] for d in b["decisions"] if d["action"] == "skip")
        new = tuple(sorted(set(skips_b) - set(skips_a)))
        if groups_a == groups_b and not new:
            continue
        moved = groups_a != groups_b
        changes.append(PlanChange(
            index + 1, (len(groups_a), len(groups_b)) if moved else None,
            (sum(len(g) > 1 for g in groups_a), sum(len(g) > 1 for g in groups_b)),
            (tuple(bk["size_bytes"] for bk in a["buckets"] if bk["fusable"])[:8],
             tuple(bk["size_bytes"] for bk in b["buckets"] if bk["fusable"])[:8]), new))
    return changes


@dataclass(frozen=True)
class CaseNote:
    """One case the report names: its number, label, and the first finding or the plan changes."""

    number: int
    label: str
    checker: str = ""
    rule: str = ""
    message: str = ""
    changes: tuple[PlanChange, ...] = ()
    rounds: tuple[int, int] = (0, 0)
    kind: str = ""  # a failure's class (``FailureClass`` value) where it is not a violation
    shared: bool = False  # a violation the baseline shows on the same case, with the same bug signature
    why: tuple[str, ...] = ()  # the class's reasons
    signature: Optional[Signature] = None  # a violation's bug signature: cases of one bug are listed as one


@dataclass
class GateResult:
    """What the gate found: the candidate's violations, the cases it could not judge, the
    baseline's own failures and every case whose plans differ."""

    baseline: str
    candidate: str
    cases: int
    generated: int
    seed: int
    from_corpus: int
    from_database: int
    violations: list[CaseNote] = field(default_factory=list)
    invalid: list[CaseNote] = field(default_factory=list)
    baseline_failures: int = 0
    differing: list[CaseNote] = field(default_factory=list)
    # the candidate's failures its contract excuses (forms it never receives, input no world runs)
    excused: list[CaseNote] = field(default_factory=list)
    # cases a target cannot be judged on (``triage.receives``), by role: not run against it
    outside: dict[str, int] = field(default_factory=lambda: {"candidate": 0, "baseline": 0})
    judged: int = 0  # cases the candidate ran
    plans_compared: bool = True  # both targets plan in the reference's format
    real: str = ""
    notes: list[str] = field(default_factory=list)  # said before the cases ran (a missing corpus folder)
    # what each target's rewrites did (``report.tally.effect_of`` summed), on the cases both ran, and
    # the cases the baseline fused that the candidate left as they were
    effect: dict[str, Counter] = field(default_factory=lambda: {"candidate": Counter(), "baseline": Counter()})
    left_alone: list[int] = field(default_factory=list)

    @property
    def vacuous(self) -> bool:
        """The candidate fused nothing on the cases where the baseline fused: every check passes on
        a rewrite that changed nothing, so the gate proved nothing of the change's bucketing."""
        return self.effect["baseline"]["fused"] > 0 and self.effect["candidate"]["fused"] == 0

    @property
    def passed(self) -> bool:
        """No violation, on at least one case the candidate was judged on (a gate that judged
        nothing proves nothing), and a candidate that fused where the baseline did."""
        return not self.violations and self.judged > 0 and not self.vacuous

    @property
    def verdict(self) -> str:
        """The verdict's words, after FAIL or pass."""
        return ("the candidate violates invariants" if self.violations else
                "no case judged" if not self.judged else
                "the candidate fused no launch where the baseline fused: nothing of its bucketing was judged"
                if self.vacuous else "")

    def _effect_lines(self) -> list[str]:
        """What each target fused on the cases both ran."""
        base, cand = self.effect["baseline"], self.effect["candidate"]
        if not base["rewritten"] and not cand["rewritten"]:
            return []
        lines = [f"rewrites on the cases both ran: baseline fused launches in {base['fused']} of {base['rewritten']}, "
                 f"candidate in {cand['fused']} of {cand['rewritten']}; launches after the rewrite, summed over "
                 f"ranks: baseline {launches_text(base) or 'none'}, candidate {launches_text(cand) or 'none'}"]
        if self.left_alone:
            lines.append(f"cases the baseline fused and the candidate left as they were: {len(self.left_alone)} "
                         f"(cases {', '.join(map(str, self.left_alone[:20]))}{', ...' if len(self.left_alone) > 20 else ''})")
        return lines

    def bugs(self) -> list[list[CaseNote]]:
        """The violations by bug signature, in order of first case: one bug met on many cases is
        one entry (a report of 26 violations held 4 bugs)."""
        groups: dict[object, list[CaseNote]] = {}
        for note in self.violations:
            groups.setdefault(note.signature or note.number, []).append(note)
        return list(groups.values())

    @staticmethod
    def cases_of(notes: list[CaseNote]) -> str:
        """One bug's case numbers, the first twelve: ``74, 75, 76``."""
        return ", ".join(str(n.number) for n in notes[:12]) + (", ..." if len(notes) > 12 else "")

    def _bug_lines(self) -> list[str]:
        lines = []
        for notes in self.bugs()[:20]:
            first, shared = notes[0], sum(n.shared for n in notes)
            cases = self.cases_of(notes)
            lines.append(f"  [{first.checker}/{first.rule}] on {len(notes)} case{'s' if len(notes) > 1 else ''} "
                         f"({cases}){f'; the baseline too on {shared}' if shared else ''}: "
                         f"case {first.number} ({first.label[:80]}): {first.message[:240]}")
        return lines

    def _shared_text(self) -> str:
        """How many violations the baseline shows too (the change did not bring them)."""
        shared = sum(n.shared for n in self.violations)
        return f" ({shared} the baseline shows too: the same bug on the same case)" if shared else ""

    def _outside_lines(self) -> list[str]:
        """What was not run, and against which target (a skipped case is said, never silent)."""
        names = {"candidate": self.candidate, "baseline": self.baseline}
        lines = [f"not run against the {role} {names[role]}: {count} cases it cannot be judged on (forms it never "
                 f"receives, or launches no real world runs)" for role, count in self.outside.items() if count]
        return lines + (["the candidate was judged on no case: nothing is proved"] if not self.judged else [])

    def text(self) -> str:
        """The plain report the command prints."""
        lines = [*self.notes,
                 f"gate: baseline {self.baseline} vs candidate {self.candidate} on {self.cases} cases "
                 f"({self.generated} generated with seed {self.seed}, {self.from_corpus} from the corpus, "
                 f"{self.from_database} from the example database)",
                 *self._outside_lines(),
                 *self._effect_lines(),
                 f"candidate violations: {len(self.violations)}{self._shared_text()}"
                 + (f", {len(self.bugs())} distinct bug{'s' if len(self.bugs()) > 1 else ''} by signature"
                    if self.violations else ""),
                 *self._bug_lines(),
                 f"candidate failures its contract excuses (not violations): {len(self.excused)}",
                 *(f"  case {n.number} ({n.label}): [{n.checker}] {n.kind}: {'; '.join(n.why)[:240]}"
                   for n in self.excused[:20]),
                 f"cases that cannot be judged (invalid, not passes): {len(self.invalid)}",
                 *(f"  case {n.number} ({n.label}): [{n.checker}] {n.message[:240]}" for n in self.invalid[:20]),
                 f"baseline violations: {self.baseline_failures}",
                 f"cases whose plans differ: {len(self.differing)}" if self.plans_compared else
                 "plans not compared: a target makes no plans in the reference's format"]
        for note in self.differing[:20]:
            lines.append(f"  case {note.number} ({note.label}):")
            lines += [f"    {line}" for change in note.changes for line in change.notes()]
            if note.rounds[0] != note.rounds[1]:
                lines.append(f"    {note.rounds[0]} planning rounds -> {note.rounds[1]}")
        lines.append(self.real)
        lines.append("verdict: " + ("pass" if self.passed else f"FAIL ({self.verdict})"))
        return "\n".join(lines)

    def markdown(self) -> str:
        """The verdict for a pull request's job summary or comment: a headline, the violations,
        and the plan differences as a table."""
        verdict = "**pass**" if self.passed else f"**FAIL**: {self.verdict}"
        lines = [f"## fsdp-verify gate: {verdict}", "",
                 f"Baseline `{self.baseline}`, candidate `{self.candidate}`: {self.cases} cases "
                 f"({self.generated} generated with seed {self.seed}, {self.from_corpus} from the corpus, "
                 f"{self.from_database} from the example database).", ""]
        if self.notes:
            lines += [*(f"> {note}" for note in self.notes), ""]
        outside = self._outside_lines() + self._effect_lines()
        lines += [*(f"> {line}" for line in outside), ""] if outside else []
        lines += ["| | cases |", "| --- | ---: |",
                  f"| candidate violations | {len(self.violations)}{self._shared_text()} |",
                  f"| candidate failures its contract excuses | {len(self.excused)} |",
                  f"| cannot be judged (invalid, not passes) | {len(self.invalid)} |",
                  f"| baseline violations | {self.baseline_failures} |",
                  f"| plans differ | {len(self.differing) if self.plans_compared else 'not compared'} |", ""]
        if self.violations:
            lines += ["### Violations, one row per bug", "", "| cases | checker | rule | finding (first case) |",
                      "| --- | --- | --- | --- |"]
            for notes in self.bugs()[:50]:
                first, shared = notes[0], sum(n.shared for n in notes)
                cases = self.cases_of(notes)
                lines.append(f"| {cases} | {first.checker} | `{first.rule}` | {_cell(first.message[:240])}"
                             f"{f' (the baseline too on {shared})' if shared else ''} |")
            lines.append("")
        if self.excused:
            lines += ["### Excused by the candidate's contract (not violations)", "",
                      "| case | checker | class | why |", "| ---: | --- | --- | --- |"]
            lines += [f"| {n.number} `{_cell(n.label, 60)}` | {n.checker} | {n.kind} | {_cell('; '.join(n.why))} |"
                      for n in self.excused[:50]]
            lines.append("")
        if self.invalid:
            lines += ["### Cannot be judged", "", "| case | checker | rule | why |", "| ---: | --- | --- | --- |"]
            lines += [f"| {n.number} `{_cell(n.label, 60)}` | {n.checker} | `{n.rule}` | {_cell(n.message[:240])} |"
                      for n in self.invalid[:50]]
            lines.append("")
        if self.differing:
            lines += ["### Plan differences", "",
                      "| case | round | buckets | multi-member | bytes per fused bucket | new skip reasons |",
                      "| ---: | ---: | --- | --- | --- | --- |"]
            for note in self.differing[:50]:
                for change in note.changes:
                    same = change.buckets is None
                    buckets = "same" if same else f"{change.buckets[0]} → {change.buckets[1]}"
                    fused = "" if same else f"{change.fused[0]} → {change.fused[1]}"
                    sizes = "" if same else \
                        f"{list(change.fused_bytes[0])} → {list(change.fused_bytes[1])}"
                    lines.append(f"| {note.number} `{_cell(note.label, 60)}` | {change.round} | {buckets} | {fused} | "
                                 f"{sizes} | {', '.join(change.new_skips)} |")
                if note.rounds[0] != note.rounds[1]:
                    lines.append(f"| {note.number} `{_cell(note.label, 60)}` | | {note.rounds[0]} → {note.rounds[1]} "
                                 f"planning rounds | | | |")
            lines.append("")
        if self.real:
            lines += [self.real, ""]
        return "\n".join(lines)


def _cell(text: str, limit: int = 240) -> str:
    """Text safe inside a Markdown table cell, cut at ``limit`` characters."""
    text = str(text)
    text = text if len(text) <= limit else text[:limit - 1] + "…"
    return text.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def run_gate(baseline: Target, candidate: Target, entries: list[Entry], examples: int,
             seed_value: int, deadline: float | None = None,
             progress: Optional[Callable[[int, int], None]] = None, stored: Sequence[Case] = (),
             real=None, candidate_spec: Optional[str] = None, notes: Sequence[str] = (),
             on_total: Optional[Callable[[int], None]] = None) -> GateResult:
    """Run every case through both targets (each as it receives it; a case a target cannot be
    judged on is not run against it, and counted); ``progress`` hears (cases done, violations)
    after every case. ``stored`` are cases from an example database. With ``real`` (a ``RealRanks`` session)
    the candidate also runs on real ranks (as ``candidate_spec``)."""
    counted = [0]
    generated = generated_cases(examples, seed_value, counted)
    cases = generated + [entry.case for entry in entries] + list(stored)
    repeats = counted[0]
    if on_total is not None:
        on_total(len(cases))
    result = GateResult(baseline.name, candidate.name, len(cases), len(generated), seed_value, len(entries), len(stored),
                        notes=[*notes, *([f"note: {repeats} of {examples} generated draws repeated a case: each case "
                                          f"is judged once"] if repeats else [])])
    # Plans in the reference's format are compared only where both targets make them: a pass
    # without a planner would show every case as "2 planning rounds -> 0".
    result.plans_compared = baseline.has_planner and candidate.has_planner

    for number, drawn in enumerate(cases):
        # Each target sees the case in the forms it receives in practice (as a campaign hands it
        # over); a case it cannot be judged on is not run against it, and counted.
        base_case, cand_case = _received(baseline, drawn), _received(candidate, drawn)
        base_bug = None
        if base_case is None:
            result.outside["baseline"] += 1
        else:
            base_findings, base_ctx = check_all(baseline, base_case, deadline=deadline)
            base_bug = _bug_signature(baseline, base_case, base_findings)
            result.baseline_failures += base_bug is not None
        if cand_case is None:
            result.outside["candidate"] += 1
        else:
            result.judged += 1
            cand_findings, cand_ctx = check_all(candidate, cand_case, deadline=deadline)
            if real is not None:
                cand_findings = cand_findings + real_ranks.judge(real, cand_case, candidate_spec or candidate.name,
                                                                 cand_findings, cand_ctx)
            _judge(result, candidate, number, cand_case, cand_findings, base_bug)
        if base_case is not None and cand_case is not None:
            _compare_effects(result, number, base_ctx, cand_ctx)
        if result.plans_compared and base_case is not None and cand_case is not None:
            base_plans, cand_plans = _plan_shape(base_ctx), _plan_shape(cand_ctx)
            changes = plan_changes(base_plans, cand_plans)
            if changes or len(base_plans) != len(cand_plans):
                result.differing.append(CaseNote(number, drawn.label, changes=tuple(changes),
                                                 rounds=(len(base_plans), len(cand_plans))))
        if progress is not None:
            progress(number + 1, len(result.violations))
    result.real = real_ranks.session_line(real)
    return result


def _compare_effects(result: GateResult, number: int, base_ctx, cand_ctx) -> None:
    """Add what each target's rewrite of one case did (a target that raised did nothing)."""
    base, cand = effect_of(base_ctx.metrics), effect_of(cand_ctx.metrics)
    result.effect["baseline"].update(base)
    result.effect["candidate"].update(cand)
    if base["fused"] and cand["rewritten"] and not cand["fused"]:  # a candidate that raised left nothing as it was
        result.left_alone.append(number)


def _received(target: Target, case: Case) -> Optional[Case]:
    """``case`` as ``target`` receives it (``normalise``), or None where the target cannot be judged
    on it (``triage.receives``: forms it never receives, launches no world runs), as a campaign
    filters its draws."""
    case = target.normalise(case)
    return case if receives(target, case) else None


def _judge(result: GateResult, candidate: Target, number: int, case: Case, findings: list,
           baseline_bug: Optional[Signature] = None) -> None:
    """File the candidate's verdict on one case: a violation (``shared`` where the baseline's bug
    on it has the same signature), a failure its contract excuses (a contract mismatch, a finding
    on invalid input: said, never counted as a violation), or a case that cannot be judged."""
    errors = [f for f in findings if f.severity == ERROR]
    if errors:
        kind, why = classify(candidate, case, tuple(sorted({f.checker for f in errors})), errors)
        passed_over = excused_alone(candidate, case, errors)
        first = primary(errors, passed_over)
        if FailureClass(kind).excused:
            result.excused.append(CaseNote(number, case.label, first.checker, first.rule, first.message,
                                           kind=kind, why=tuple(why)))
        else:
            bug = signature(errors, passed_over)
            result.violations.append(CaseNote(number, case.label, first.checker, first.rule, first.message,
                                              shared=baseline_bug is not None and bug == baseline_bug,
                                              signature=bug))
    elif any(f.severity == INVALID for f in findings):
        first = next(f for f in findings if f.severity == INVALID)
        result.invalid.append(CaseNote(number, case.label, first.checker, first.rule, first.message))


def _bug_signature(target: Target, case: Case, findings: list) -> Optional[Signature]:
    """The signature of ``target``'s bug on ``case``: None where it has none, or its contract
    excuses the failure."""
    errors = [f for f in findings if f.severity == ERROR]
    if not errors or FailureClass(classify(target, case, tuple(sorted({f.checker for f in errors})), errors)[0]).excused:
        return None
    return signature(errors, excused_alone(target, case, errors))


def gate_report(baseline: Target, candidate: Target, entries: list[Entry], examples: int,
                seed_value: int, deadline: float | None = None,
                progress: Optional[Callable[[int, int], None]] = None, stored: Sequence[Case] = (),
                real=None, candidate_spec: Optional[str] = None) -> tuple[str, int]:
    """The report text and the number of candidate violations (``run_gate``)."""
    result = run_gate(baseline, candidate, entries, examples, seed_value, deadline, progress, stored, real,
                      candidate_spec)
    return result.text(), len(result.violations)
