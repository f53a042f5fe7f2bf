"""Branch coverage of the reference, measured over generated cases (issue 13, item 9)."""

from __future__ import annotations

import ast

import pytest

pytest.importorskip("coverage")

from fsdp_verify.coverage.branches import JUSTIFIED, REFERENCE, format_branches, measure_branches  # noqa: E402
from fsdp_verify.strategies import cases  # noqa: E402


def test_branch_report_runs_and_reports_a_percentage():
    report = measure_branches(cases("tiny"), examples=5, seed=0)
    assert {"planner.py", "predicates.py", "rewrite.py", "driver.py"} <= set(report.files)
    assert 0 < report.percent < 100
    text = format_branches(report)
    assert "branch coverage of fsdp_verify/reference:" in text and "planner.py" in text
    assert any(line.strip().startswith("missed ") for line in text.splitlines())


def test_every_justified_branch_names_a_line_of_a_function_of_the_reference():
    for entry in JUSTIFIED:
        tree = ast.parse((REFERENCE / entry.file).read_text())
        function = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == entry.function)
        lines = (REFERENCE / entry.file).read_text().splitlines()[function.lineno - 1:function.end_lineno]
        assert not entry.line or any(line.strip() == entry.line for line in lines), entry
        assert entry.reason
