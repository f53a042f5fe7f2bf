"""pytest plugin: Hypothesis profiles and the ``--fsdp-target`` option."""

from __future__ import annotations

import pytest

from . import profiles


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsdp-verify")
    group.addoption("--fsdp-target", default="reference",
                    help="target (planner + rewriter) that corpus cases and property tests run against")


def pytest_configure(config: pytest.Config) -> None:
    profiles.load_default()


@pytest.fixture
def fsdp_target(request: pytest.FixtureRequest) -> str:
    """The target name given with --fsdp-target."""
    return request.config.getoption("--fsdp-target")
