"""The fuzz properties are plain Hypothesis tests: pytest collects one per target and runs them,
which is what HypoFuzz (``hypothesis fuzz``) needs."""

from __future__ import annotations

import os
import subprocess
import sys

import fsdp_verify.commands.fuzz_properties as properties
from helpers import ROOT



def test_pytest_collects_one_property_per_target_and_runs_them():
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", properties.__file__,
                          "-k", "hazards", "--fsdp-target", "reference,mutant:constant_group_digest"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300,
                         env={**os.environ, "FSDP_VERIFY_PROFILE": "smoke"})  # 3 examples, no shrinking
    # Two properties x two targets collected; on hazards the reference passes and the planted bug fails.
    assert "1 failed, 1 passed, 2 deselected" in out.stdout, out.stdout[-3000:] + out.stderr[-2000:]
    assert "FAILED fsdp_verify/commands/fuzz_properties.py::test_target_passes_every_check_on_hazards[mutant:" in out.stdout
