"""What running a target on a case produced: the data the checkers judge."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Optional

from torch import fx

from fsdp_verify.graph.collectives import BUCKETED, fusable, launch_counts
from fsdp_verify.model.case import Case
from fsdp_verify.targets.generators import Generator


@dataclass
class TargetRun:
    """What a target did to one case: the untouched originals, its rewrites and plans, or its error."""

    case: Case
    originals: dict[int, fx.GraphModule]
    rewritten: dict[int, fx.GraphModule] = field(default_factory=dict)
    plans: dict[int, list[Any]] = field(default_factory=dict)
    error: Optional[str] = None
    error_type: Optional[str] = None
    error_message: Optional[str] = None  # the first line of the exception message
    watched: Any = None  # what a plan watch (``targets.watch``) kept during the target's run
    cpu: dict = field(default_factory=dict)  # CPU seconds by stage making this run (engine/stages.py)
    debug_logs: tuple[str, ...] = ()  # the target's loggers the run held at DEBUG (targets/debug_logs.py)
    raises_only_at_debug: bool = False  # it raised with them at DEBUG and runs clean without (a rerun says)
    generators_drawn: tuple[Generator, ...] = ()  # global random generators the run moved

    def effect(self) -> dict:
        """What the rewrite did to the collectives, summed over ranks: launches of each bucketed
        kind before and after, and whether the originals held any two a pass could fuse. Every
        check passes on a rewrite that changed nothing, so a run says how often the target fused
        (a pass that never matches its graphs is otherwise a pass that is never wrong)."""
        before, after = dict.fromkeys(BUCKETED, 0), dict.fromkeys(BUCKETED, 0)
        changed = False
        for rank, module in self.originals.items():
            for kind, count in launch_counts(module.graph).items():
                before[kind] += count
            if rank in self.rewritten:
                for kind, count in launch_counts(self.rewritten[rank].graph).items():
                    after[kind] += count
                changed = changed or _calls(self.rewritten[rank].graph) != _calls(module.graph)
        return {"before": {kind.value: n for kind, n in before.items()},
                "after": {kind.value: n for kind, n in after.items()},
                "fusable": any(fusable(module.graph) for module in self.originals.values()),
                "changed": changed}


def _calls(graph: fx.Graph) -> list[tuple[str, str, str, str, str]]:
    """A graph's nodes as (op, target, name, arguments), in order: a rewrite that moved, added,
    removed or rewired any node (a scheduling pass that fuses nothing) differs here from its
    original (an argument node is written as its name)."""
    return [(node.op, str(node.target), node.name, repr(node.args), repr(node.kwargs)) for node in graph.nodes]


class PlanRecord:
    """A plan that crossed a process boundary: its ``to_dict()`` report and nothing else."""

    def __init__(self, report: dict):
        self.report = report

    def to_dict(self) -> dict:
        return copy.deepcopy(self.report)

    def group_digest(self, group: str) -> str:
        return self.report["group_digests"][group]
