"""The GitHub workflows, validated without GitHub: against the workflow schema (check-jsonschema's
vendored copy, no network) and for what each must do."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is not installed (pip install -e '.[test]')")

WORKFLOWS = Path(__file__).resolve().parents[1] / ".github" / "workflows"


def _load(name: str) -> dict:
    doc = yaml.safe_load((WORKFLOWS / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as true
    return doc


@pytest.mark.parametrize("name", sorted(p.name for p in WORKFLOWS.glob("*.yml")))
def test_workflow_matches_the_github_schema(name):
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    if exe is None:
        pytest.skip("check-jsonschema is not installed (pip install -e '.[test]')")
    out = subprocess.run([exe, "--builtin-schema", "vendor.github-workflows", str(WORKFLOWS / name)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_gate_runs_on_pull_requests_writes_markdown_to_the_summary_and_fails_on_a_violation():
    doc = _load("gate.yml")
    assert "pull_request" in doc["on"]
    steps = doc["jobs"]["gate"]["steps"]
    gate = next(s for s in steps if s.get("id") == "gate")
    assert "fsdp-verify gate" in gate["run"] and "--markdown gate.md" in gate["run"]
    assert "GITHUB_STEP_SUMMARY" in gate["run"] and "exit $code" in gate["run"]  # 1 and 2 fail the check
    assert "hypothesis-example-db" in gate["run"]  # what the nightly stored
    comment = next(s for s in steps if "gh pr comment" in s.get("run", ""))
    assert "pull_request" in comment["if"]
    assert doc["permissions"]["pull-requests"] == "write"


def test_the_nightly_uploads_the_database_the_gate_reads_and_its_html_report():
    doc = _load("nightly-fuzz.yml")
    uploads = [s for job in doc["jobs"].values() for s in job["steps"] if "upload-artifact" in s.get("uses", "")]
    assert any(s["with"]["name"] == "hypothesis-example-db" for s in uploads)
    fuzz = next(s for s in doc["jobs"]["fuzz"]["steps"] if "fsdp-verify fuzz" in s.get("run", ""))
    assert "--html fuzz-report.html" in fuzz["run"]
    assert any("fuzz-report.html" in s["with"]["path"] for s in uploads)


def test_the_nightly_mutation_job_covers_the_reference_in_disjoint_shares_with_the_equivalence_claims():
    doc = _load("nightly-mutate.yml")
    job = doc["jobs"]["mutate"]
    shares = job["strategy"]["matrix"]["share"]
    run = next(s for s in job["steps"] if "fsdp-verify mutate" in s.get("run", ""))["run"]
    assert "fsdp_verify/reference" in run and f"--share ${{{{ matrix.share }}}}/{len(shares)}" in run
    assert shares == list(range(len(shares)))
    assert "--equivalent benchmarks/mutants_equivalent.json" in run and "--sample" not in run
    assert "--budget 60" in run  # issue 33's gate: each mutant killed within 60 s, both rounds together
    assert (WORKFLOWS.parents[1] / "benchmarks" / "mutants_equivalent.json").is_file()
