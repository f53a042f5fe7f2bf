"""The module_plans checker and the skeleton it asks on."""

from __future__ import annotations

import pytest

from fsdp_verify.checks.module_plans import Call, expected_answer
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.graph.skeleton import Block, Container, skeleton
from fsdp_verify.model.case import PlanArgs
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case

PREFIX_NAMES = ("blocks.1", "blocks.10")


def test_the_skeleton_holds_every_module_prefix_and_blocks_by_number():
    model = skeleton(["blocks.0.w0", "blocks.0.attn.wq", "blocks.10.w0", "embed.weight", "training.x", "bare"])
    modules = dict(model.named_modules())
    assert {"", "blocks", "blocks.0", "blocks.0.inner", "blocks.0.attn", "blocks.10", "embed"} <= set(modules)
    assert isinstance(modules["blocks.0"], Block) and isinstance(modules["blocks.0.attn"], Container)
    assert "training" not in modules  # an attribute name cannot hold a module: left out


def test_the_spec_answer_takes_outermost_blocks_then_explicit_groups():
    model = skeleton(["blocks.0.w0", "blocks.1.w0", "embed.weight"])
    args = PlanArgs()
    assert expected_answer(Call("", model, (Block,), [["embed"]]), args).plans == (("blocks.0",), ("blocks.1",), ("embed",))
    assert expected_answer(Call("", model, (Block,), ["blocks.0"]), args).error == \
        "Overlapping module bucket scopes: 'blocks.0'"
    assert expected_answer(Call("", model, (), ["nope"]), args).error == \
        "Module bucket scope does not exist in model: 'nope'"


@pytest.mark.parametrize("mutant,rule,names", [
    ("nested_blocks_kept", "module_plans_refused_valid", ()),
    ("explicit_scopes_unchecked", "module_plans_accepted_invalid", ()),
    ("block_types_any_sequence", "module_plans_accepted_invalid", ()),
    ("nested_blocks_by_prefix", "module_plans_differ", PREFIX_NAMES),
    ("explicit_groups_first", "module_plans_differ", ()),
])
def test_each_module_plan_bug_breaks_its_rule_and_the_reference_none(mutant, rule, names):
    case = two_block_case(block_names=names)
    findings, _ = check_all(get_target(f"mutant:{mutant}"), case, only=("module_plans",))
    assert rule in {f.rule for f in findings}, [f.message for f in findings]
    assert check_all(get_target("reference"), case, only=("module_plans",))[0] == []


def test_prefix_sharing_names_are_what_a_bare_prefix_bug_needs():
    findings, _ = check_all(get_target("mutant:nested_blocks_by_prefix"), two_block_case(), only=("module_plans",))
    assert findings == []
