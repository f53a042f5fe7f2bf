"""Resource limits of a case's forked child: a target that allocates or writes without bound is
stopped in its own child and reported as a finding; the harness goes on."""

from __future__ import annotations

import argparse

import pytest

from fsdp_verify.commands.options import byte_size as _size
from fsdp_verify.engine.run_case import MEMORY_ENV, OUTPUT_ENV, check_all
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def test_a_target_that_allocates_without_bound_is_a_finding(monkeypatch):
    monkeypatch.setenv(MEMORY_ENV, str(512 << 20))
    findings, _ = check_all(get_target("helpers.targets:Hoarding"), two_block_case(), deadline=120)
    assert [f.key for f in findings] == [("target", "raised")], findings
    assert "allocate" in findings[0].message


def test_a_target_that_writes_without_bound_is_a_finding(monkeypatch):
    monkeypatch.setenv(OUTPUT_ENV, str(32 << 20))
    findings, _ = check_all(get_target("helpers.targets:Scribbling"), two_block_case(), deadline=120)
    assert [f.key for f in findings] == [("target", "raised")], findings
    assert "File too large" in findings[0].message  # Python ignores SIGXFSZ: the write raises instead


def test_the_reference_runs_within_the_default_limits():
    findings, _ = check_all(get_target("reference"), two_block_case(), deadline=120)
    assert not [f for f in findings if f.severity == "error"]


@pytest.mark.parametrize("text, value", [("512M", 512 << 20), ("8G", 8 << 30), ("0", 0), ("1024", 1024), ("2kb", 2048)])
def test_sizes_on_the_command_line(text, value):
    assert _size(text) == value


def test_a_bad_size_is_a_usage_error():
    with pytest.raises(argparse.ArgumentTypeError, match="expected a size"):
        _size("lots")


def test_a_campaign_on_a_hoarding_target_saves_the_case_and_goes_on(tmp_path, monkeypatch):
    from fsdp_verify.commands.cli import main
    monkeypatch.setenv(MEMORY_ENV, "0")  # restored after the test; main sets it from --max-memory
    code = main(["fuzz", "--target", "helpers.targets:Hoarding", "--budget", "8s", "--max-memory", "256M", "--size", "tiny",
                 "--max-failures", "1", "--corpus", str(tmp_path / "found"), "--json", str(tmp_path / "s.json")])
    # A time budget bounds the shrink (each step forks: the raise retires its child). Out of address
    # space, the allocator may raise or the process may die: either is a target finding, and one
    # met while shrinking is saved too.
    saved = list((tmp_path / "found").glob("*.json"))
    assert code == 1 and saved
    import json
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["harness_errors"] == 0 and len(summary["failures"]) == len(saved)
    assert all(f["checkers"] == ["target"] for f in summary["failures"])
