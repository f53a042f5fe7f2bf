"""Self-test: fuzz every planted bug (``fsdp_verify.targets.mutants``) and report which checker kills it.

Each bug is hunted on tiny graphs with several planted hazards each (``hazard_graphs``), the
configuration that finds planner bugs fastest, under the CI profile and a fixed example budget.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Callable, Optional

from fsdp_verify.engine import campaign
from fsdp_verify.model.names import strategy_name
from fsdp_verify.targets.mutants import MUTANTS


@dataclass(frozen=True)
class Kill:
    """How one planted bug fared: killed by a checker meant for it (``intended``), only by others,
    or only by its own crash (``target``: not a kill)."""

    mutant: str
    intended_checkers: tuple[str, ...]
    examples: Optional[int]
    seconds: Optional[float]
    nodes: Optional[int]
    checkers: tuple[str, ...]
    not_hunted: str = ""  # why it was not hunted (a bug only real ranks show, in a simulated self-test)

    @property
    def outcome(self) -> str:
        """``intended``, ``other``, ``crash``, ``survived`` or ``not hunted``."""
        if self.not_hunted:
            return "not hunted"
        if not self.checkers:
            return "survived"
        if set(self.checkers) & set(self.intended_checkers):
            return "intended"
        return "crash" if set(self.checkers) == {"target"} else "other"

    @property
    def killed(self) -> bool:
        return self.outcome == "intended"


def hunt(name: str, examples: int, seed: int, corpus_dir: str, shrink: bool = True, ranks: str = "simulated",
         strategy: Optional[str] = None) -> Kill:
    """Fuzz one planted bug until a checker meant for it fires (shrunk unless ``shrink`` is off), a
    few other failures were saved, or the budget is spent. A bug that ``needs`` real ranks is not
    hunted in a simulated self-test (``ranks``), and says so; ``strategy`` overrides the bug's own."""
    intended = MUTANTS[name].kills
    if getattr(MUTANTS[name], "needs", "") == "real" and not ranks.startswith("real"):
        return Kill(name, intended, None, None, None, (), not_hunted="needs real ranks (--ranks real)")
    drawn = strategy_name(strategy or MUTANTS[name].hunt)  # ``+spec``: drawn [I] settings
    config = campaign.Config(target=f"mutant:{name}", budget=campaign.Budget(examples=examples), seed=seed,
                             profile="ci", corpus_dir=corpus_dir, size="tiny", modules=False, max_failures=4,
                             strategy=drawn.strategy, draw_spec=drawn.draw_spec, shrink=shrink, stop_on=intended,
                             ranks=ranks, rediscover=True)  # a kill is what this run finds, whatever the folder holds
    result = campaign.run(config)
    if not result.failures:
        return Kill(name, intended, None, None, None, ())
    failure = next((f for f in result.failures if set(f["checkers"]) & set(intended)), result.failures[0])
    # the kill's own time, not the first failure's: a planted bug that crashes on some shapes fails
    # early by its crash, and its intended checker may fire only many examples later
    found_examples, found_seconds = failure.get("found_at") or result.first_failure
    return Kill(name, intended, found_examples, found_seconds, failure["nodes"], tuple(failure["checkers"]))


def format_table(kills: list[Kill]) -> str:
    """The self-test table with the median time to kill."""
    lines = [f"{'planted bug':<32} {'outcome':<9} {'examples':>8} {'seconds':>8} {'nodes':>6}  "
             f"killed by (intended)"]
    for k in kills:
        if k.not_hunted:
            lines.append(f"{k.mutant:<32} {'not hunted':<9} {'-':>8} {'-':>8} {'-':>6}  {k.not_hunted} "
                         f"({', '.join(k.intended_checkers)})")
            continue
        hit = k.outcome != "survived"
        lines.append(f"{k.mutant:<32} {k.outcome:<9} {k.examples if hit else '-':>8} "
                     f"{f'{k.seconds:.1f}' if hit else '-':>8} {k.nodes if hit else '-':>6}  "
                     f"{', '.join(k.checkers) or '-'} ({', '.join(k.intended_checkers)})")
    times = sorted(k.seconds for k in kills if k.outcome not in ("survived", "not hunted"))
    median = times[len(times) // 2] if times else float("nan")
    counts = {o: sum(k.outcome == o for k in kills) for o in ("intended", "other", "crash", "survived")}
    lines.append(f"intended kills {counts['intended']}/{len(kills)}, killed only by other checkers "
                 f"{counts['other']}, only by their own crash {counts['crash']} (not kills), survived "
                 f"{counts['survived']}; median seconds to the kill {median:.1f}; "
                 f"max {max(times) if times else float('nan'):.1f}")
    skipped = [k for k in kills if k.not_hunted]
    if skipped:  # never a clean pass: the checkers these bugs are meant for were not tested
        lines.append(f"not hunted: {len(skipped)} (need --ranks real): {', '.join(k.mutant for k in skipped)}; "
                     f"their checkers ({', '.join(sorted({c for k in skipped for c in k.intended_checkers}))}) "
                     f"were not tested by this run")
    return "\n".join(lines)


# Planted rewriter bugs hunted on captured graphs too: their kills show the checkers work on real shapes.
REAL_SHAPE_HUNTS = ("swapped_copy_out", "rank_dependent_packing")  # avg_twice: DTensor reduces with "sum"


def real_shapes(examples: int = 10, seed: int = 0, hunts: tuple[str, ...] = REAL_SHAPE_HUNTS) -> tuple[str, list[str]]:
    """The reference's verdicts on real shapes (graphs captured through torch.compile): it must pass
    every checker on ``examples`` of them, and each bug of ``hunts`` must be killed on them."""
    problems, lines = [], []
    with tempfile.TemporaryDirectory() as folder:
        result = campaign.run(campaign.Config(target="reference", budget=campaign.Budget(examples=examples), seed=seed,
                                              profile="ci", corpus_dir=folder, strategy="captured", shrink=False))
        lines.append(f"reference on captured graphs: {result.examples} examples, {len(result.failures)} failures, "
                     f"{result.invalid} invalid")
        if result.failures or result.invalid:
            problems.append(f"reference on captured graphs: {[f['message'] for f in result.failures]}")
        for name in hunts:
            kill = hunt(name, examples, seed, folder, shrink=False, strategy="captured")
            lines.append(f"{name} on captured graphs: {kill.outcome} ({', '.join(kill.checkers) or '-'})")
            if not kill.killed:
                problems.append(f"{name} on captured graphs: {kill.outcome}")
    return "\n".join(lines), problems


def run_selftest(examples: int = 200, seed: int = 0, only: Optional[list[str]] = None,
                 progress: Optional[Callable[[int, int], None]] = None,
                 ranks: str = "simulated") -> tuple[str, list[str]]:
    """The table, and the planted bugs that no checker meant for them killed; ``progress`` hears
    (bugs hunted, survivors) after every hunt. A bug that needs real ranks is listed as not hunted
    in a simulated self-test (``ranks``), neither killed nor a survivor."""
    names = only or sorted(MUTANTS)
    kills: list[Kill] = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            kills.append(hunt(name, examples, seed, folder, ranks=ranks))
            if progress is not None:
                progress(len(kills), sum(not k.killed and not k.not_hunted for k in kills))
    table, survivors = format_table(kills), [k.mutant for k in kills if not k.killed and not k.not_hunted]
    if only is None:  # the whole self-test also checks the reference's verdicts on real shapes
        lines, problems = real_shapes(min(examples, 10), seed)
        table, survivors = f"{table}\n{lines}", survivors + problems
    return table, survivors
