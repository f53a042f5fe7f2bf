"""One self-contained HTML page for a night's result: the summary with its figures, then one section
per finding with its picture, plan, message and the commands that replay it.

Everything is inline (CSS, SVG; no script, no network), so the page opens from a CI artifact as it
is. Pictures come from Graphviz (``report/picture.py``); a graph too large to read is cut to the
neighbourhood of what the finding names. Without Graphviz the page says so where a picture would be.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from jinja2 import Environment, FileSystemLoader, select_autoescape

from fsdp_verify.report.summary import (EXPECTED, class_line, class_reasons, effect_line, known_text, replay_command,
                                        repro_command, vacuous_lines)
from fsdp_verify.report.tally import PROOFS, Result

TEMPLATES = Path(__file__).parent / "templates"
MAX_DRAWN = 25  # findings drawn; the rest are listed
_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html", "j2"]),
                   trim_blocks=True, lstrip_blocks=True)


@dataclass
class Section:
    """One finding as the page shows it."""

    title: str
    klass: str
    checkers: list[str]
    rule: str
    message: str
    file: str
    commands: list[str]
    signature: list[str] = field(default_factory=list)
    collateral: list[str] = field(default_factory=list)
    plan: str = ""
    svg: str = ""  # inline SVG of the original and the rewrite, buckets grouped, divergence marked
    picture_note: str = ""  # why there is no picture, or how it was cut
    class_reasons: list[str] = field(default_factory=list)  # why a failure that is no bug is excused


@dataclass
class Bar:
    """One bar of a small chart: how much of a whole was reached."""

    label: str
    part: int
    whole: int

    @property
    def width(self) -> float:
        return 0.0 if not self.whole else 100.0 * self.part / self.whole


def svg_of(dot: str) -> str:
    """Graphviz's SVG of ``dot``, without the XML prolog, for inlining (raises GraphvizMissing)."""
    from fsdp_verify.report.picture import svg_text
    text = svg_text(dot)
    return text[text.index("<svg"):] if "<svg" in text else ""


@dataclass(frozen=True)
class Drawing:
    """A case's picture for the page: inline SVG, the plan summary, and a note (how it was cut, or
    why there is no picture)."""

    svg: str = ""
    plan: str = ""
    note: str = ""


def drawing(ctx: Any, findings: list) -> Drawing:
    """The picture of a checked case (``ctx``, as ``check_all(..., keep_rewrite=True)`` left it)."""
    from fsdp_verify.report.divergence import first_divergence
    from fsdp_verify.report.picture import GraphvizMissing, dot_source, plan_lines, shown_nodes
    plan = "\n".join(plan_lines(ctx))
    diverged = first_divergence(ctx)
    shown, total = shown_nodes(ctx, findings, diverged)
    note = "" if shown >= total else f"cut to the {shown} nodes nearest the finding, of {total}"
    try:
        return Drawing(svg_of(dot_source(ctx, findings, diverged)), plan, note)
    except GraphvizMissing as exc:
        return Drawing("", plan, str(exc))
    except subprocess.SubprocessError as exc:
        return Drawing("", plan, f"Graphviz failed: {exc}")


def campaign_sections(result: Result, target: str, drawings: dict[str, Drawing]) -> list[Section]:
    """A section per saved failure, with its drawing when ``drawings`` has one (by file)."""
    sections = []
    for failure in result.failures:
        file = failure["file"] or ""
        drawn = drawings.get(file, Drawing(note="not drawn" if file else "not saved: the corpus folder cannot "
                                                                          "be written; the case is in the JSON summary"))
        sections.append(Section(
            title=Path(file).name if file else "(not saved)", klass=failure.get("class", "defect"), checkers=list(failure.get("checkers", [])),
            rule=str(failure.get("rule", "")), message=failure.get("message", ""), file=file,
            commands=[replay_command(failure, target), *([repro_command(file)] if file else []),
                      f"fsdp-verify show {file} --target {target} --svg case.svg"],
            signature=[str(part) for part in failure.get("signature", [])],
            collateral=[f"{c['checker']}/{c['rule']}" for c in failure.get("collateral", [])],
            plan=drawn.plan, svg=drawn.svg, picture_note=drawn.note, class_reasons=class_reasons(failure)))
    return sections


def _coverage_bars(result: Result) -> list[Bar]:
    if result.has_planner is False:
        return []  # no plans in the reference's format: no decisions to cover
    return [Bar(action, sum((action, r) in result.decisions for r in reasons), len(reasons))
            for action, reasons in EXPECTED.items()]


def _checker_bars(result: Result) -> list[Bar]:
    whole = max(result.by_checker.values(), default=0)
    return [Bar(checker, count, whole) for checker, count in sorted(result.by_checker.items())]


def campaign_html(result: Result, target: str, drawings: Optional[dict[str, Drawing]] = None, title: str = "",
                  require_fusion: bool = False) -> str:
    """The page of one fuzz campaign (``drawings``: each saved failure's picture, by file)."""
    rate = result.examples / result.seconds if result.seconds else 0.0
    known = known_text(result)
    classes: dict[str, int] = {}
    for failure in result.failures:
        classes[failure.get("class", "defect")] = classes.get(failure.get("class", "defect"), 0) + 1
    figures = [("target", target), ("examples", f"{result.examples} (+{result.shrink_steps} shrink steps)"),
               ("seconds", f"{result.seconds:.1f}"), ("examples/s", f"{rate:.2f}"),
               ("failures", f"{len(result.failures)} distinct, {result.repeats} repeats of known bugs"),
               *([("known bugs", known)] if known else []),
               ("by class", class_line(result)), ("invalid cases", f"{result.invalid} (cannot be judged: never passed)"),
               ("harness errors", str(result.harness_errors)),
               ("rewrites", effect_line(result).removeprefix("rewrites").strip())]
    vacuous = vacuous_lines(result, require_fusion)
    return _ENV.get_template("report.html.j2").render(
        title=title or f"fsdp-verify fuzz {target}", kind="fuzz",
        verdict="FAIL" if result.failures or result.fails_fusion(require_fusion) else "pass",
        interrupted=result.interrupted, figures=figures, classes=sorted(classes.items()),
        checker_bars=_checker_bars(result), coverage_bars=_coverage_bars(result),
        proofs=[(key.replace("_", " "), result.proofs[key]) for key in PROOFS],
        skipped=sorted(result.skipped.items()), notes=[*vacuous, *result.notes],
        sections=campaign_sections(result, target, drawings or {}), rows=[])


@dataclass
class Row:
    """One line of a table page (replay, gate): a case, its verdict and what it says."""

    case: str
    verdict: str
    checker: str = ""
    rule: str = ""
    message: str = ""


def table_html(title: str, verdict: str, figures: Sequence[tuple[str, Any]], rows: Sequence[Row],
               sections: Sequence[Section] = (), notes: Sequence[str] = ()) -> str:
    """A page for replay and gate: figures, one row per case that needs a look, the findings drawn."""
    return _ENV.get_template("report.html.j2").render(
        title=title, kind="table", verdict=verdict, interrupted=False, figures=list(figures), classes=[],
        checker_bars=[], coverage_bars=[], proofs=[], skipped=[], notes=list(notes), sections=list(sections),
        rows=list(rows))


def gate_html(result: Any) -> str:
    """The page of a gate run (``engine.gate.GateResult``)."""
    figures = [("baseline", result.baseline), ("candidate", result.candidate), ("cases", result.cases),
               ("candidate violations", len(result.violations)),
               ("of which the baseline shows too", sum(n.shared for n in result.violations)),
               ("excused by the candidate's contract", len(result.excused)), ("cannot be judged", len(result.invalid)),
               ("baseline violations", result.baseline_failures),
               ("plans differ", len(result.differing) if result.plans_compared else "not compared"),
               *((f"not run against the {role} (cannot be judged on them)", count)
                 for role, count in result.outside.items() if count),
               *((f"cases the {role} fused", f"{result.effect[role]['fused']} of {result.effect[role]['rewritten']}")
                 for role in ("baseline", "candidate")),
               ("cases the baseline fused, the candidate left alone", len(result.left_alone))]
    rows = []
    for notes in result.bugs():  # one row per bug, as the text and Markdown reports list them
        first, shared = notes[0], sum(n.shared for n in notes)
        cases = result.cases_of(notes)
        rows.append(Row(f"case{'s' if len(notes) > 1 else ''} {cases} ({first.label})",
                        f"violation (the baseline too on {shared})" if shared else "violation",
                        first.checker, first.rule, first.message))
    rows += [Row(f"case {n.number} ({n.label})", n.kind, n.checker, n.rule, "; ".join(n.why)) for n in result.excused]
    rows += [Row(f"case {n.number} ({n.label})", "invalid", n.checker, n.rule, n.message) for n in result.invalid]
    rows += [Row(f"case {n.number} ({n.label})", "plans differ", message="; ".join(
        line for change in n.changes for line in change.notes())) for n in result.differing]
    return table_html(f"fsdp-verify gate: {result.candidate} against {result.baseline}",
                      "pass" if result.passed else "FAIL", figures, rows,
                      notes=[*result.notes, *([f"FAIL: {result.verdict}"] if result.vacuous else [])])


__all__ = ["Bar", "Drawing", "Row", "Section", "campaign_html", "drawing", "gate_html", "table_html"]
