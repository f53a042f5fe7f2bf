"""Self-test: under the CI profile every planted bug is killed by a checker meant for it."""

from __future__ import annotations

import pytest

from fsdp_verify.targets.mutants import MUTANTS
from fsdp_verify.engine.selftest import format_table, hunt

BUDGET = 300  # examples per planted bug: a hunt draws the shape its bug needs (a rule's variant, a focus)


def test_there_are_at_least_twenty_planted_bugs_each_meant_for_a_registered_checker():
    from fsdp_verify.checks import registered
    assert len(MUTANTS) >= 20
    # ``target`` is the run's own oracle (a raise is its finding): meant only for a bug whose raise is
    # the rule broken, a raise with the loggers at DEBUG (targets/debug_logs.py) or on a graph the spec
    # accepts whose answer is unknown (the dtype walk must say so, not raise), never beside a checker
    raising = {n for n, m in MUTANTS.items() if m.kills == ("target",)}
    assert raising == {"debug_log_reads_second_member", "real_shape_of_any_known_parameter"}
    assert all(m.kills and set(m.kills) <= set(registered()) for n, m in MUTANTS.items() if n not in raising)


@pytest.mark.parametrize("name", sorted(n for n, m in MUTANTS.items() if m.needs != "real"))  # real: tests/execute/ranks
def test_planted_bug_is_killed(name, tmp_path):
    # A kill is the first failing example; shrinking (what `fsdp-verify selftest` adds) is skipped
    # here so the 58 hunts fit the CI budget.
    budget = BUDGET
    kill = hunt(name, budget, seed=0, corpus_dir=str(tmp_path), shrink=False)
    print(format_table([kill]))
    assert kill.outcome == "intended", (f"planted bug {name}: {kill.outcome} (checkers {kill.checkers}, meant "
                                        f"for {kill.intended_checkers}) within {budget} examples")
    assert kill.nodes is not None
