"""Each standalone reproduction of docs/findings.md (imports only torch) still reproduces."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPROS = sorted((Path(__file__).resolve().parents[1] / "docs" / "repros").glob("*.py"))


@pytest.mark.parametrize("script", REPROS, ids=[p.stem for p in REPROS])
def test_the_reproduction_imports_only_torch_and_reproduces(script):
    modules = {alias.name.split(".")[0] for node in ast.walk(ast.parse(script.read_text()))
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in
               (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])}
    assert modules <= {"torch"}, modules
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.stdout.strip().splitlines()[-1].startswith("REPRODUCED"), done.stdout + done.stderr


def test_every_finding_names_its_class_and_reproduction():
    text = (REPROS[0].parents[1] / "findings.md").read_text()
    for script in REPROS:
        assert f"docs/repros/{script.name}" in text
