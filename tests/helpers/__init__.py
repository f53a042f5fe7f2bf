"""Helpers for the tests, not tests: example cases, planted targets and torch-only passes.

This package imports nothing of fsdp_verify itself: repro tests import ``helpers.torch_passes``
in an interpreter where fsdp_verify cannot be imported.
"""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
