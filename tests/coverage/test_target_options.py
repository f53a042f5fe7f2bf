"""``fsdp-verify coverage`` counts every value of a target's open options, drawn per case as a
campaign draws them, and names each value never drawn; a target without a planner is measured on
the reference planner's decisions, and the report says so."""

from __future__ import annotations

from fsdp_verify.coverage import format_reach, measure, unreached
from fsdp_verify.report.summary import EXPECTED
from fsdp_verify.strategies import cases


def test_every_value_of_a_target_s_options_is_counted_and_an_undrawn_one_is_named():
    reach = measure(cases("tiny"), examples=30, seed=0, target_name="helpers.targets:Knobbed")
    assert reach.space == ("knob=1", "knob=2", "knob=3")
    assert sum(reach.options.values()) == 30 and all(reach.options[key] for key in reach.space)
    assert not [m for m in unreached(reach, EXPECTED) if m.startswith("option ")]
    assert "target options: 3 of 3 values drawn: knob=1 " in format_reach(reach, EXPECTED)
    assert reach.planner == "helpers.targets:Knobbed"  # its own planner decided
    one = measure(cases("tiny"), examples=1, seed=0, target_name="helpers.targets:Knobbed")
    assert len([m for m in unreached(one, EXPECTED) if m.startswith("option knob=")]) == 2


def test_inductor_s_options_are_drawn_and_its_reasons_are_the_reference_planner_s():
    from fsdp_verify.targets import get_target
    reach = measure(cases("tiny"), examples=8, seed=0, target_name="torch-inductor")
    assert len(reach.space) == sum(len(values) for values in get_target("torch-inductor").options().values())
    assert sum(reach.options.values()) == 8 * len(get_target("torch-inductor").options())
    assert reach.planner == "reference" and reach.decisions  # no planner of its own: not a crash
    assert "decisions asked of: the reference planner (torch-inductor exposes none" in format_reach(reach, EXPECTED)
