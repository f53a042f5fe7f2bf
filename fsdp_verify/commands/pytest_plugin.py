"""pytest plugin: corpus cases as test items, ``--fsdp-target``, and the Hypothesis profiles.

Every ``*.json`` file below a folder named ``corpus`` is collected as one test that replays the
case against ``--fsdp-target`` (default ``reference``). A case recorded against that same target
must give its recorded verdict; a case recorded against another target (a counterexample found
in someone else's planner) is a regression test that every invariant holds: it must pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fsdp_verify.corpus import files as corpus
from fsdp_verify.corpus import profiles


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fsdp-verify")
    group.addoption("--fsdp-target", default="reference",
                    help="target (planner + rewriter) that corpus cases and property tests run against")
    group.addoption("--fsdp-deadline", type=float, default=600.0,
                    help="seconds a target may take on one corpus case; it runs in a forked child, so a hang "
                         "or crash fails that item only (0: run in the pytest process)")


def pytest_configure(config: pytest.Config) -> None:
    profiles.load_default()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a fuzz property runs, what HypoFuzz found for it is made what Hypothesis replays first."""
    module = getattr(item, "module", None)
    if getattr(module, "__name__", "") == "fsdp_verify.commands.fuzz_properties":
        module.adopt_hypofuzz_failures(item)


def pytest_collect_file(parent: pytest.Collector, file_path: Path):
    if file_path.suffix == ".json" and "corpus" in file_path.parts and not file_path.name.startswith(".tmp-"):
        return CorpusFile.from_parent(parent, path=file_path)
    return None


class CorpusFile(pytest.File):
    """One corpus file: one replay test."""

    def collect(self):
        yield CorpusItem.from_parent(self, name=self.path.stem)


class CorpusMismatch(Exception):
    """The replayed verdict differs from the recorded one."""


class CorpusItem(pytest.Item):
    """Replays one corpus case and compares verdicts."""

    def runtest(self) -> None:
        from fsdp_verify.engine.replay import replay
        from fsdp_verify.targets import get_target
        entry = corpus.load(self.path)  # a CorpusError names file, field and reason
        target = get_target(self.config.getoption("--fsdp-target"))
        deadline = self.config.getoption("--fsdp-deadline") or None
        outcome = replay(target, self.path, entry, deadline)
        if not outcome.agrees:
            raise CorpusMismatch(outcome.line(target))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (CorpusMismatch, corpus.CorpusError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, 0, f"corpus case {self.path.name}"
