"""The names the command line offers (profiles, graph sizes, campaign strategies, rank modes), importable
without torch or Hypothesis so that ``fsdp-verify --help`` answers at once. The modules that
give the names meaning use these tuples (sizes: ``tests/commands/test_cli.py`` checks they agree)."""

from dataclasses import dataclass

PROFILES = ("dev", "ci", "nightly", "smoke", "replay")
SIZES = ("tiny", "default", "medium", "large", "scale")
STRATEGIES = ("cases", "hazards", "mutations", "captured", "uneven", "wide", "prefix_scopes", "backward_gathers",
              "full_precision", "strided_sources", "expert_groups")
RANK_MODES = ("simulated", "real", "real:gloo", "real:nccl")  # --ranks: the simulated world, or real ranks

# A strategy name with this suffix draws the spec's [I] settings per example (``Config.draw_spec``).
DRAWN_SPEC = "+spec"
RULE_KINDS = ("rule", "skip")  # a planted shape's hunt: ``rule:REASON`` or ``skip:REASON``


@dataclass(frozen=True)
class StrategyName:
    """What a campaign draws from, read once from its name: ``STRATEGY``, or a planted shape's hunt
    ``rule:REASON[/VARIANT][@FOCUS]`` (``skip:`` alike), either with ``+spec`` to draw the [I]
    settings. The campaign, the self-test, mutate's aims and the hunts' test all read it here."""

    strategy: str  # the name without ``+spec``: what ``campaign.Config.strategy`` holds
    draw_spec: bool = False
    rule: str = ""  # "rule" or "skip" for a planted shape's hunt, else ""
    reason: str = ""
    variant: str = ""
    focus: str = ""  # a key of ``strategies.graphs.FOCUSES``: the blueprints the shape is planted in

    @property
    def pinned(self) -> str:
        """``REASON[/VARIANT]``, as ``mutated_graphs`` takes it."""
        return f"{self.reason}/{self.variant}" if self.variant else self.reason


def strategy_name(text: str) -> StrategyName:
    """``text`` read as a StrategyName (no check that its strategy, reason or focus exists)."""
    draw_spec = text.endswith(DRAWN_SPEC)
    strategy = text[:-len(DRAWN_SPEC)] if draw_spec else text
    kind, colon, rest = strategy.partition(":")
    if not colon or kind not in RULE_KINDS:
        return StrategyName(strategy, draw_spec)
    pinned, _, focus = rest.partition("@")
    reason, _, variant = pinned.partition("/")
    return StrategyName(strategy, draw_spec, kind, reason, variant, focus)
