"""Hypothesis settings profiles, registered in one place: ``dev``, ``ci``, ``nightly``, ``smoke``
and ``replay`` (only the examples the database holds).

``ci`` bounds examples and drops deadlines so the suite fits 2 cores; ``nightly`` is the long
campaign; ``smoke`` runs three examples without a database or shrinking, to see that properties
run (and fail) at all. ``load_default()`` picks ``ci`` when the ``CI`` environment variable is set.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

from fsdp_verify.model import names

# Health checks stay on except these two: big graphs are slow to draw and large by design.
SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile("dev", max_examples=50, deadline=None, suppress_health_check=SLOW_OK)
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True, print_blob=True,
                          suppress_health_check=SLOW_OK)
settings.register_profile("smoke", max_examples=3, deadline=None, derandomize=True, database=None,
                          phases=[Phase.explicit, Phase.generate],
                          suppress_health_check=SLOW_OK)
# Only what the database holds: a failure HypoFuzz (or a campaign) found and shrank, replayed as is.
settings.register_profile("replay", deadline=None, phases=[Phase.explicit, Phase.reuse], print_blob=True,
                          suppress_health_check=SLOW_OK)
settings.register_profile("nightly", max_examples=5000, deadline=None, print_blob=True,
                          suppress_health_check=SLOW_OK)

PROFILES = names.PROFILES


def load_default() -> str:
    """Load the profile named by FSDP_VERIFY_PROFILE, else ``ci`` under CI, else ``dev``."""
    name = os.environ.get("FSDP_VERIFY_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
    settings.load_profile(name)
    return name
