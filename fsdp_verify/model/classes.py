"""The classes a failure ends in, and which of them are bugs of the target.

A class is stored in reports and JSON summaries as its value (a phrase people read); code
compares the enum, never the phrase.
"""

from __future__ import annotations

from enum import Enum


class FailureClass(str, Enum):
    """What a failure is, after triage."""

    DEFECT = "defect"                          # the project's own code (or a target it owns) is wrong
    CANDIDATE = "defect candidate"             # external: waiting for its standalone repro to run
    UPSTREAM = "upstream defect"               # external: the standalone repro fails on torch alone
    MISMATCH = "contract mismatch"             # forms the target never receives in practice
    INVALID_INPUT = "invalid input"            # no real world could run the graph
    LIMITATION = "harness limitation"          # the harness flagged what torch alone does not show

    @property
    def is_bug(self) -> bool:
        """Counted as a bug (fails the run and its JUnit case); a candidate counts until triaged."""
        return self in (FailureClass.DEFECT, FailureClass.CANDIDATE, FailureClass.UPSTREAM)

    @property
    def excused(self) -> bool:
        """Not the target's bug on input it accepts: a contract mismatch or invalid input."""
        return self in (FailureClass.MISMATCH, FailureClass.INVALID_INPUT)


def of(failure: dict) -> FailureClass:
    """The class of a failure record (a campaign's ``failures`` entry); unclassified is a defect."""
    return FailureClass(failure.get("class", FailureClass.DEFECT.value))
