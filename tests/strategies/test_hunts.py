"""Hunts: a rule's variant pinned, and the foci that make one rare draw of the mix common."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings

from fsdp_verify.engine.aim import SPEC_SHAPES
from fsdp_verify.model.names import strategy_name
from fsdp_verify.model import names
from fsdp_verify.strategies import blueprints, mutated_graphs
from fsdp_verify.strategies.graphs import FOCUSES, PREFIX_SHARING_NAMES, SIZES, focused, rule_kind
from fsdp_verify.strategies.blueprint import STRIDED_GROUP, render
from fsdp_verify.targets.mutants import MUTANTS

_DRAWS = settings(max_examples=30, database=None, derandomize=True, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))


def _labels(strategy) -> list[str]:
    labels: list[str] = []

    @_DRAWS
    @given(strategy)
    def draw(case):
        labels.append(case.label)

    draw()
    return labels


def test_a_pinned_variant_is_the_only_one_planted():
    labels = _labels(mutated_graphs("tiny", reason="cast_beside_opaque_op/cast_copied_to_device"))
    planted = [label for label in labels if label != "fsdp_graphs"]
    assert len(planted) >= len(labels) // 4, labels
    assert all(label.startswith("fusion:cast_beside_opaque_op:cast_copied_to_device@") for label in planted), planted


def test_the_wide_integer_pair_gathers_an_int32_cast_beside_a_half_precision_one():
    from fsdp_verify.graph.values import dtype_from_name
    drawn = []

    @_DRAWS
    @given(mutated_graphs("tiny", reason="every_member_cast/wide_integer_beside_half"))
    def draw(case):
        drawn.append(case)

    draw()
    planted = [case for case in drawn if case.label != "fsdp_graphs"]
    assert len(planted) >= len(drawn) // 2, [case.label for case in drawn]
    for case in planted:
        a, b = case.label.split("@")[1].split("/")
        casts = [case.graph.node(case.graph.node(launch).args[0].name).args[1] for launch in (a, b)]
        assert casts[0] == torch.int32 and casts[1] in (torch.bfloat16, torch.float16), casts
        dtype = case.graph.param(case.graph.node(a).meta["param_name"]).dtype
        assert dtype_from_name(dtype) != torch.float16, "int32 codes unpacked in float16 would overflow"


def test_an_unknown_variant_names_the_choices():
    with pytest.raises(ValueError, match="cast_copied_to_device"):
        _labels(mutated_graphs("tiny", reason="cast_beside_opaque_op/no_such_variant"))


def test_each_focus_is_a_strategy_and_changes_only_its_own_odds():
    assert set(FOCUSES) <= set(names.STRATEGIES)
    tiny = SIZES["tiny"]
    for focus in FOCUSES:
        size = focused("tiny", focus)
        changed = {field for field in tiny.__dataclass_fields__ if getattr(size, field) != getattr(tiny, field)}
        assert changed == set(FOCUSES[focus]), focus


@pytest.mark.parametrize("focus", sorted(FOCUSES))
def test_a_focus_draws_its_shape_in_most_examples(focus):
    drawn = []

    @_DRAWS
    @given(blueprints(focused("tiny", focus)))
    def draw(blueprint):
        drawn.append(blueprint)

    draw()
    params = [p for b in drawn for block in b.blocks for p in block]
    if focus == "wide":  # past bf16's exact span on 2 ranks (255 // 2 elements)
        assert sum(p.shard_shape[-1] >= 48 and len(p.shard_shape) == 2 for p in params) >= len(params) // 3
    elif focus == "full_precision":
        assert not {p.dtype for p in params} & {"float16", "bfloat16"}  # a frozen int8 or float8 one may be left
    elif focus == "strided_sources":
        assert all(p.layout == "column_major" for p in params if len(p.shard_shape) >= 2)
    elif focus == "prefix_scopes":
        assert all(b.block_names == PREFIX_SHARING_NAMES[:len(b.blocks)] for b in drawn)
    elif focus == "expert_groups":  # a degree of 5 has no room for subgroups; the others have them
        assert all(b.degree >= 4 for b in drawn)
        assert sum(b.expert_degree > 0 for b in drawn) >= len(drawn) // 2
        # two groups of one size with different ranks in some graphs (a 2-D mesh's two axes)
        assert any(STRIDED_GROUP in dict(render(b).groups) for b in drawn)
    else:
        assert all(p.regather for p in params) and all(len(block) >= 2 for b in drawn for block in b.blocks)


def test_every_planted_bug_s_hunt_is_a_strategy_or_a_rule_that_exists():
    for mutant in MUTANTS.values():
        named = strategy_name(mutant.hunt)
        if named.rule:
            assert not named.draw_spec or named.reason in SPEC_SHAPES, \
                f"{mutant.name}: the map measures {named.reason} under the default settings only"
            rule_kind(named.pinned)  # raises on an unknown reason
            assert not named.focus or named.focus in FOCUSES, mutant.name
            if named.variant:
                labels = _labels(mutated_graphs("tiny", reason=named.pinned))
                assert any(label != "fsdp_graphs" for label in labels), mutant.name
        else:
            assert mutant.hunt in names.STRATEGIES, mutant.name
