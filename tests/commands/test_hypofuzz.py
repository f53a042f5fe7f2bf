"""HypoFuzz on the fuzz properties: it finds a planted bug, shrinks it and saves it, and plain
pytest then fails at once on the saved failure (the replay profile runs stored examples only)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import unittest
from pathlib import Path

import pytest
from helpers import ROOT

pytest.importorskip("hypofuzz", reason="HypoFuzz is not installed (pip install -e '.[test]')")

PROPERTIES = "fsdp_verify/commands/fuzz_properties.py"
BUG = "mutant:constant_group_digest"

# HypoFuzz's hub looks at its workers once a minute (`time.sleep(60)` in FuzzWorkerHub.start), so it
# sat idle for 45-50 s after the worker had shrunk and saved the failure. The hub's clock is made to
# nap for a second at most; the worker, the shrinker and what they save are HypoFuzz's own.
HUB_NAPS = """
import sys, time, types
import hypofuzz.hypofuzz as hub
hub.time = types.SimpleNamespace(**{name: getattr(time, name) for name in dir(time) if not name.startswith("_")})
hub.time.sleep = lambda seconds: time.sleep(min(seconds, 1.0))
from hypothesis.extra.cli import main
sys.argv[0] = "hypothesis"
sys.exit(main())
"""


def test_hypofuzz_finds_shrinks_and_saves_a_planted_bug_and_pytest_replays_it(tmp_path):
    env = {**os.environ, "HYPOTHESIS_STORAGE_DIRECTORY": str(tmp_path), "FSDP_VERIFY_PROFILE": "dev"}
    env.pop("CI", None)
    hypothesis = shutil.which("hypothesis", path=str(Path(sys.executable).parent))
    assert hypothesis, "HypoFuzz's `hypothesis fuzz` command is not installed beside this Python"
    # HypoFuzz stops by itself once every selected property has a (shrunk) failure.
    fuzz = subprocess.run([sys.executable, "-c", HUB_NAPS, "fuzz", "-n", "1", "--no-dashboard", "--", PROPERTIES, "-k", "hazards",
                           "--fsdp-target", BUG, "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert "Found a failing input for every test" in fuzz.stdout + fuzz.stderr, fuzz.stdout[-2000:] + fuzz.stderr[-3000:]
    assert "slice_comments" not in fuzz.stderr  # it once crashed while shrinking
    replay = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", PROPERTIES, "-k", "hazards",
                             "--fsdp-target", BUG], cwd=ROOT, env={**env, "FSDP_VERIFY_PROFILE": "replay"},
                            capture_output=True, text=True, timeout=300)
    assert "1 failed" in replay.stdout, replay.stdout[-3000:]
    # shrunk: one planted hazard is left of the up to six the strategy draws (its label is
    # hazards:<kind>:<site>, either part possibly empty; several would be comma-separated)
    label = re.search(r"AssertionError: (hazards:[^:\s,]*:[^:\s,]*):", replay.stdout)
    assert label, replay.stdout[-3000:]


def test_without_a_saved_failure_the_replay_profile_runs_nothing(tmp_path, monkeypatch):
    # In this process, not a third interpreter (10 s): the plugin loads the profile the variable
    # names, and a property whose database holds nothing then runs no example and is skipped.
    from hypothesis import given, settings, strategies as st
    from hypothesis.database import DirectoryBasedExampleDatabase

    from fsdp_verify.commands import pytest_plugin
    before = settings.get_current_profile_name()
    monkeypatch.setenv("FSDP_VERIFY_PROFILE", "replay")
    ran = []
    try:
        pytest_plugin.pytest_configure(None)

        @settings(database=DirectoryBasedExampleDatabase(tmp_path / "none"))
        @given(st.integers())
        def prop(value: int) -> None:
            ran.append(value)
        with pytest.raises(unittest.SkipTest, match="no test cases"):  # Hypothesis's own skip
            prop()
    finally:
        settings.load_profile(before)
    assert ran == []
