"""Replaying corpus cases: one rule for the command line and the pytest plugin.

A case recorded against the target under test must give its recorded verdict; a case recorded
against another target must pass every invariant (a bug found in another planner is a
regression case for this one). A case that names the spec's expected decisions must get them
from any target with a planner. A case that cannot be judged is ``invalid``, never a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fsdp_verify.corpus import files as corpus
from fsdp_verify.corpus.expectations import check_expected
from fsdp_verify.execute.ranks import judge as real_ranks
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets.base import Target


def replay_entry(target: Target, entry: corpus.Entry, deadline: float | None = None, real=None,
                 target_spec: str | None = None) -> corpus.Verdict:
    """The verdict ``target`` gives the entry's case now (in a killable child when ``deadline`` is set),
    with the spec's expected decisions the file names checked against the target's planner. With
    ``real`` (a ``checks.real_ranks.RealRanks``) the case is also planned and run on real ranks,
    which resolve the target from ``target_spec`` (its name, by default)."""
    findings, ctx = check_all(target, entry.case, deadline=deadline)
    if real is not None:
        findings = findings + real_ranks.judge(real, entry.case, target_spec or target.name, findings, ctx)
    if any(f.checker == "target" for f in findings):
        return corpus.Verdict.of(findings)  # planning again in this process could hang or crash it
    return corpus.Verdict.of(findings + check_expected(target, entry))


def expected_verdict(target: Target, entry: corpus.Entry) -> corpus.Verdict:
    """What replaying ``entry`` against ``target`` must give."""
    return entry.verdict if entry.target == target.name else corpus.Verdict(corpus.PASS)


def _label(verdict: corpus.Verdict) -> str:
    return verdict.status + (f" [{', '.join(verdict.checkers)}]" if verdict.checkers else "")


@dataclass(frozen=True)
class Replayed:
    """One replayed file: what the rule expects, what the target gave, and whether they agree."""

    path: Path
    entry: corpus.Entry
    expected: corpus.Verdict
    got: corpus.Verdict

    @property
    def agrees(self) -> bool:
        return self.got.status == self.expected.status and self.got.checkers == self.expected.checkers

    def line(self, target: Target) -> str:
        """``ok``/``DIFF``, the file, the recorded target and verdict, what was expected and what came."""
        rule = "its recorded verdict" if self.entry.target == target.name else "pass (recorded against another target)"
        text = (f"{'ok  ' if self.agrees else 'DIFF'} {self.path}: recorded against {self.entry.target} as "
                f"{_label(self.entry.verdict)}; expected {rule}; now {_label(self.got)}")
        if not self.agrees and self.got.findings:
            text += f"\n     {self.got.findings[0][0]}: {self.got.findings[0][1][:300]}"
        return text


def replay(target: Target, path: Path, entry: corpus.Entry, deadline: float | None = None, real=None,
           target_spec: str | None = None) -> Replayed:
    """Replay one loaded corpus entry under the rule above (also on real ranks with ``real``)."""
    return Replayed(path, entry, expected_verdict(target, entry),
                    replay_entry(target, entry, deadline, real, target_spec))
