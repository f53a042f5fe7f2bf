"""A target's open options, drawn per case: the configuration a campaign runs each example under
(``Target.options``: option -> the values it takes), recorded in the case so replay uses it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

from hypothesis import strategies as st

from fsdp_verify.model.case import Case


def with_target_options(cases: st.SearchStrategy[Case], space: Mapping[str, tuple[Any, ...]]) -> st.SearchStrategy[Case]:
    """``cases``, each with one draw of every option of ``space`` (``Case.target_options``); ``cases``
    itself where the space is empty. Each option is drawn on its own, so every value of every
    option is met (``fsdp-verify coverage`` counts them) without the whole product."""
    if not space:
        return cases
    choices = st.fixed_dictionaries({name: st.sampled_from(values) for name, values in space.items()})
    return st.tuples(cases, choices).map(lambda pair: replace(pair[0], target_options=tuple(sorted(pair[1].items()))))


__all__ = ["with_target_options"]
