"""Self-test: fuzz every planted bug (``fsdp_verify.targets.mutants``) and report which checker kills it.

Each bug is hunted on tiny graphs with several planted hazards each (``hazard_graphs``), the
configuration that finds planner bugs fastest, under the CI profile and a fixed example budget.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Optional

from . import campaign
from .targets.mutants import MUTANTS


@dataclass(frozen=True)
class Kill:
    """How one planted bug fared."""

    mutant: str
    killed: bool
    examples: Optional[int]
    seconds: Optional[float]
    nodes: Optional[int]
    checkers: tuple[str, ...]


def hunt(name: str, examples: int, seed: int, corpus_dir: str, shrink: bool = True) -> Kill:
    """Fuzz one planted bug until the first failure (shrunk unless ``shrink`` is off) or the budget."""
    config = campaign.Config(target=f"mutant:{name}", budget=campaign.Budget(examples=examples), seed=seed,
                             profile="ci", corpus_dir=corpus_dir, size="tiny", modules=False, max_failures=1,
                             strategy="hazards", shrink=shrink)
    result = campaign.run(config)
    if not result.failures:
        return Kill(name, False, None, None, None, ())
    failure = result.failures[0]
    found_examples, found_seconds = result.first_failure
    return Kill(name, True, found_examples, found_seconds, failure["nodes"], tuple(failure["checkers"]))


def format_table(kills: list[Kill]) -> str:
    """The self-test table with the median time to kill."""
    lines = [f"{'planted bug':<30} {'killed':<6} {'examples':>8} {'seconds':>8} {'nodes':>6}  checkers"]
    for k in kills:
        lines.append(f"{k.mutant:<30} {'yes' if k.killed else 'NO':<6} {k.examples if k.killed else '-':>8} "
                     f"{f'{k.seconds:.1f}' if k.killed else '-':>8} {k.nodes if k.killed else '-':>6}  "
                     f"{', '.join(k.checkers)}")
    times = sorted(k.seconds for k in kills if k.killed)
    median = times[len(times) // 2] if times else float("nan")
    lines.append(f"killed {sum(k.killed for k in kills)}/{len(kills)}; median seconds to first failure "
                 f"{median:.1f}; max {max(times) if times else float('nan'):.1f}")
    return "\n".join(lines)


def run_selftest(examples: int = 200, seed: int = 0, only: Optional[list[str]] = None) -> tuple[str, list[str]]:
    """The table, and the planted bugs that survived."""
    names = only or sorted(MUTANTS)
    with tempfile.TemporaryDirectory() as folder:
        kills = [hunt(name, examples, seed, folder) for name in names]
    return format_table(kills), [k.mutant for k in kills if not k.killed]
