"""Reason coverage: which planner decisions a strategy reaches, under a fixed seed."""

from __future__ import annotations

from collections import Counter
from typing import Callable, Optional

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from .case import Case
from .execute.world import build_world
from .targets import get_target


def decision_counts(case: Case, target_name: str = "reference") -> Counter:
    """(action, reason) counts of the target's plan of rank 0; bad arguments count as errors."""
    target = get_target(target_name)
    module = build_world(case)[case.graph.world()[0]]
    try:
        plan = target.plan(case, module, case.graph.world()[0])
    except ValueError as exc:
        return Counter({("error", str(exc).split(":")[0]): 1})
    return Counter((d["action"], d["reason"]) for d in plan.decisions)


def reason_histogram(strategy: st.SearchStrategy[Case], examples: int = 2000, seed: int = 0,
                     target_name: str = "reference", progress: Optional[Callable[[int, int], None]] = None) -> Counter:
    """Decision counts over ``examples`` draws (and the number of cases, as ("cases", "total"));
    ``progress`` hears (cases drawn, argument errors) after every draw."""
    counts: Counter = Counter()

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @hypothesis.seed(seed)
    @given(strategy)
    def collect(case: Case) -> None:
        found = decision_counts(case, target_name)
        counts.update(found)
        counts[("cases", "total")] += 1
        if progress is not None:
            progress(counts[("cases", "total")], sum(n for (action, _), n in counts.items() if action == "error"))

    collect()
    return counts


def format_histogram(counts: Counter, expected: Optional[dict[str, tuple[str, ...]]] = None) -> str:
    """A text table of counts per action and reason, with the reasons never reached."""
    lines = [f"{'action':<10} {'reason':<34} {'count':>7}"]
    for (action, reason), count in sorted(counts.items()):
        lines.append(f"{action:<10} {reason:<34} {count:>7}")
    for action, reasons in (expected or {}).items():
        missing = [r for r in reasons if (action, r) not in counts]
        lines.append(f"unreached {action}: {', '.join(missing) if missing else 'none'}")
    return "\n".join(lines)
