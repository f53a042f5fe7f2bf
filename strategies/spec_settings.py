"""Draws of the spec's [I] settings (``fsdp_verify.model.spec_params``): pinned ones stay as given, the
rest are drawn per example when asked, shrinking towards the spec's recommended reading."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from fsdp_verify.model.spec_params import CHECK_ONLY, CHOICES, SpecParams


def spec_settings(pinned: dict[str, Any], draw: bool) -> st.SearchStrategy[SpecParams]:
    """Settings with ``pinned`` fixed and every other one drawn (``draw``) or left at its default."""
    fields = {name: st.just(value) for name, value in pinned.items()}
    if draw:
        fields.update({name: st.sampled_from(CHOICES[name]) for name in CHOICES
                       if name not in pinned and name not in CHECK_ONLY})
    return st.builds(SpecParams, **fields)
