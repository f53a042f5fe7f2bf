"""Reason coverage: which planner decisions, and which branch of each, a strategy reaches.

Every generated case is planned on its first rank; each decision is counted under its reason and
under the sub-condition that explains it (``subconditions.classify``), and the parallel-mode
arguments drawn are tallied, so a generator that only ever trips one branch of a rule shows up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Optional

import hypothesis
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from fsdp_verify.model.case import Case
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.corpus.profiles import SLOW_OK
from fsdp_verify.strategies.mutations import DP_MODES, PP_DEGREES
from fsdp_verify.targets import get_target
from fsdp_verify.coverage.subconditions import SUBCONDITIONS, Site, classify

ACTIONS = ("skip", "split", "singleton")
# The parallel-mode arguments every run must draw: the default and each value the mutations plant.
PARALLEL_VALUES = {"pp_degree": (1, *PP_DEGREES), "dp_mode": ("fsdp", *DP_MODES)}


@dataclass
class Reach:
    """What a run of generated cases reached."""

    cases: int = 0
    decisions: Counter = field(default_factory=Counter)  # (action, reason) -> decisions
    subconditions: Counter = field(default_factory=Counter)  # "reason/name" -> decisions
    unexplained: Counter = field(default_factory=Counter)  # (action, reason) no sub-condition explains
    errors: Counter = field(default_factory=Counter)  # argument error message -> cases
    pp_degree: Counter = field(default_factory=Counter)  # repr(value) -> cases
    dp_mode: Counter = field(default_factory=Counter)

    def add(self, other: "Reach") -> None:
        """Fold ``other`` into this tally."""
        self.cases += other.cases
        for name in ("decisions", "subconditions", "unexplained", "errors", "pp_degree", "dp_mode"):
            getattr(self, name).update(getattr(other, name))


def _current(plan, previous: str, index: dict, by_name: dict) -> tuple:
    """The members of the bucket a split closed (the one holding ``previous``), in graph order."""
    for bucket in plan.buckets:
        names = [member.launch.name for member in bucket.members]
        if previous in names:
            return tuple(sorted((by_name[n] for n in names), key=index.__getitem__))
    return ()


def case_reach(case: Case, target_name: str = "reference") -> Reach:
    """The decisions of ``case``'s plan on its first rank, each with its sub-condition."""
    reach = Reach(cases=1, pp_degree=Counter([repr(case.plan_args.pp_degree)]),
                  dp_mode=Counter([repr(case.plan_args.dp_mode)]))
    rank = case.graph.world()[0]
    module = build_module(localize(case.graph, rank))
    try:
        plan = get_target(target_name).plan(case, module, rank)
    except ValueError as exc:
        reach.errors[str(exc).split(":")[0]] += 1
        return reach
    nodes = tuple(module.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    by_name = {node.name: node for node in nodes}
    groups = case.group_ranks(rank)
    for decision in plan.decisions:
        action, reason = decision["action"], decision["reason"]
        reach.decisions[(action, reason)] += 1
        current = _current(plan, decision["previous_node"], index, by_name) if action == "split" else ()
        site = Site(by_name[decision["node"]], nodes, index, case.plan_args, groups, current)
        found = classify(site, action, reason)
        if found is None:
            reach.unexplained[(action, reason)] += 1
        else:
            reach.subconditions[found.key] += 1
    return reach


def measure(strategy: st.SearchStrategy[Case], examples: int = 2000, seed: int = 0,
            target_name: str = "reference", progress: Optional[Callable[[int, int], None]] = None) -> Reach:
    """The reach of ``examples`` draws of ``strategy`` under a fixed seed (generation only);
    ``progress`` hears (cases drawn, cases whose planner arguments were refused) after each draw."""
    total = Reach()

    @settings(max_examples=examples, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=SLOW_OK)
    @hypothesis.seed(seed)
    @given(strategy)
    def collect(case: Case) -> None:
        total.add(case_reach(case, target_name))
        if progress is not None:
            progress(total.cases, sum(total.errors.values()))

    collect()
    return total


def unreached(reach: Reach, expected: dict[str, tuple[str, ...]]) -> list[str]:
    """Reasons (``action reason``), reachable sub-conditions (``reason/name``) and parallel-mode
    values (``pp_degree=2``) never reached."""
    missing = [f"{action} {reason}" for action, reasons in expected.items() for reason in reasons
               if (action, reason) not in reach.decisions]
    missing += [s.key for s in SUBCONDITIONS if not s.unreachable and s.key not in reach.subconditions]
    return missing + [f"{name}={value!r}" for name, values in PARALLEL_VALUES.items() for value in values
                      if repr(value) not in getattr(reach, name)]


def format_reach(reach: Reach, expected: dict[str, tuple[str, ...]]) -> str:
    """Counts per reason and per sub-condition, the parallel-mode values drawn, and what was missed."""
    lines = [f"cases {reach.cases}", f"{'action':<10} {'reason / sub-condition':<56} {'count':>7}"]
    for action in ACTIONS:
        for reason in dict.fromkeys(s.reason for s in SUBCONDITIONS if s.action == action):
            lines.append(f"{action:<10} {reason:<56} {reach.decisions[(action, reason)]:>7}")
            for sub in (s for s in SUBCONDITIONS if s.action == action and s.reason == reason):
                note = f"  (unreachable: {sub.unreachable})" if sub.unreachable else ""
                lines.append(f"{'':<10}   {sub.name:<53} {reach.subconditions[sub.key]:>7}{note}")
    for message, count in sorted(reach.errors.items()):
        lines.append(f"{'error':<10} {message[:56]:<56} {count:>7}")
    lines.append("pp_degree values: " + ", ".join(f"{v}={n}" for v, n in sorted(reach.pp_degree.items())))
    lines.append("dp_mode values: " + ", ".join(f"{v}={n}" for v, n in sorted(reach.dp_mode.items())))
    for (action, reason), count in sorted(reach.unexplained.items()):
        lines.append(f"UNEXPLAINED {action} {reason}: {count} decisions no sub-condition explains")
    missing = unreached(reach, expected)
    lines.append(f"unreached: {', '.join(missing)}" if missing else "unreached: none")
    return "\n".join(lines)
