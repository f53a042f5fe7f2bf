"""The names the command line offers (profiles, graph sizes, campaign strategies, rank modes), importable
without torch or Hypothesis so that ``fsdp-verify --help`` answers at once. The modules that
give the names meaning use these tuples (sizes: ``tests/commands/test_cli.py`` checks they agree)."""

PROFILES = ("dev", "ci", "nightly", "smoke", "replay")
SIZES = ("tiny", "default", "medium", "large", "scale")
STRATEGIES = ("cases", "hazards", "mutations", "captured", "uneven", "wide", "prefix_scopes", "backward_gathers",
              "full_precision", "strided_sources")
RANK_MODES = ("simulated", "real", "real:gloo", "real:nccl")  # --ranks: the simulated world, or real ranks
