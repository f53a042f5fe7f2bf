"""Checkers: pure functions of one ``CheckContext`` that return findings, found by the registry.

Running a target and then the checkers is the orchestration's job (``fsdp_verify.engine.run_case``);
this package only judges.
"""

from __future__ import annotations

from fsdp_verify.checks.findings import DRIFT, ERROR, INVALID, CheckContext, Finding, Problem, Severity
from fsdp_verify.checks.registry import Checker, CheckerError, default_checkers, registered

__all__ = ["DRIFT", "ERROR", "INVALID", "CheckContext", "Checker", "CheckerError", "Finding", "Problem",
           "Severity", "default_checkers", "registered"]
