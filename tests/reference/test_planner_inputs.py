"""Input validation (spec 2.1-2.3), module plans and validate_group_plans (2.12)."""

from __future__ import annotations

import pytest
from torch import nn

from fsdp_verify.reference.planner import (
    BucketPolicy, build_module_bucket_plans, match_module_bucket, normalize_module_bucket_plans,
    validate_group_plans)
from fsdp_verify.strategies import mutations
from helpers.cases import plan, two_block_case

GROUP_ERROR = "group_ranks must map PG names to distinct ordered non-negative global ranks"


@pytest.mark.parametrize("name,args", sorted(mutations.ARG_MUTATIONS.items()))
def test_broken_planner_arguments_raise_the_spec_message(name, args):
    case = two_block_case().with_args(**args)
    expected = {
        "group_ranks": GROUP_ERROR,
        "policy": "must be None or a non-negative integer (cap_bytes must be positive)",
    }
    with pytest.raises(ValueError) as info:
        plan(case)
    message = str(info.value)
    key = next(iter(args))
    if key in expected:
        assert expected[key] in message
    else:
        assert any(text in message for text in (
            "module_bucket_plans must be a list or tuple of module groups",
            "Each module bucket group must be a FQN or a nonempty list/tuple",
            "Invalid explicit module FQN", "Overlapping module bucket scopes"))


@pytest.mark.parametrize("plans,message", [
    ("a", "module_bucket_plans must be a list or tuple of module groups"),
    ({"a"}, "module_bucket_plans must be a list or tuple of module groups"),
    ([()], "Each module bucket group must be a FQN or a nonempty list/tuple"),
    ([3], "Each module bucket group must be a FQN or a nonempty list/tuple"),
    ([""], "Invalid explicit module FQN: ''"),
    (["a?"], "Invalid explicit module FQN: 'a?'"),
    (["a.[b]"], "Invalid explicit module FQN: 'a.[b]'"),
    (["a..b"], "Invalid explicit module FQN: 'a..b'"),
    ([" a"], "Invalid explicit module FQN: ' a'"),
    ([["a", 1]], "Invalid explicit module FQN: 1"),
    (["a", "a"], "Overlapping module bucket scopes: 'a'"),
    (["a.b", ["a"]], "Overlapping module bucket scopes: 'a'"),
    ([["x", "x.y"]], "Overlapping module bucket scopes: 'x.y'"),
])
def test_normalize_rejects(plans, message):
    with pytest.raises(ValueError, match=None) as info:
        normalize_module_bucket_plans(plans)
    assert str(info.value) == message


def test_normalize_accepts_and_is_idempotent():
    plans = ["layers.1", ("layers.10", "emb"), ["head proj"]]
    once = normalize_module_bucket_plans(plans)
    assert once == (("layers.1",), ("layers.10", "emb"), ("head proj",))
    assert normalize_module_bucket_plans(once) == once
    assert normalize_module_bucket_plans([]) == ()


def test_match_module_bucket_uses_dot_boundaries():
    plans = (("layers.1",), ("layers.10", "emb"))
    assert match_module_bucket("layers.1.w", plans) == ("layers.1",)
    assert match_module_bucket("layers.10.w", plans) == ("layers.10", "emb")
    assert match_module_bucket("emb.weight", plans) == ("layers.10", "emb")
    assert match_module_bucket("layers.1", plans) is None
    assert match_module_bucket("layers.100.w", plans) is None


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(2, 2)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(4, 2)
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(2, 2)


def test_build_module_bucket_plans():
    model = Model()
    assert build_module_bucket_plans(model, block_module_types=(Block,), module_bucket_plans=[["emb", "head"]]) == (
        ("layers.0",), ("layers.1",), ("emb", "head"))
    assert build_module_bucket_plans(model) == ()
    with pytest.raises(ValueError, match="model must be a torch.nn.Module"):
        build_module_bucket_plans(object())
    with pytest.raises(ValueError, match="block_module_types must be a tuple of torch.nn.Module subclasses"):
        build_module_bucket_plans(model, block_module_types=[Block])
    with pytest.raises(ValueError, match="block_module_types must be a tuple of torch.nn.Module subclasses"):
        build_module_bucket_plans(model, block_module_types=(int,))
    with pytest.raises(ValueError, match="Module bucket scope does not exist in model: 'missing'"):
        build_module_bucket_plans(model, module_bucket_plans=["missing"])
    with pytest.raises(ValueError, match="Overlapping module bucket scopes: 'layers.0.inner'"):
        build_module_bucket_plans(model, block_module_types=(Block,), module_bucket_plans=["layers.0.inner"])


@pytest.mark.parametrize("kwargs,field", [
    ({"cap_bytes": 0}, "cap_bytes"), ({"cap_bytes": True}, "cap_bytes"), ({"cap_bytes": 1.5}, "cap_bytes"),
    ({"max_input_distance": -1}, "max_input_distance"), ({"max_consumer_distance": "3"}, "max_consumer_distance"),
    ({"cap_bytes": 0, "max_input_distance": -1}, "cap_bytes"),
])
def test_policy_validation(kwargs, field):
    with pytest.raises(ValueError) as info:
        BucketPolicy(**kwargs)
    assert str(info.value) == f"{field} must be None or a non-negative integer (cap_bytes must be positive)"


def test_policy_accepts_bounds():
    assert BucketPolicy(cap_bytes=1, max_input_distance=0, max_consumer_distance=0).cap_bytes == 1


@pytest.mark.parametrize("ranks", [{"fsdp": (0, 0)}, {"fsdp": ()}, {"fsdp": (0, -1)}, {"fsdp": (False, 1)},
                                   {"fsdp": (0, 1.0)}, {3: (0, 1)}])
def test_group_ranks_validation(ranks):
    with pytest.raises(ValueError) as info:
        plan(two_block_case().with_args(group_ranks=ranks))
    assert str(info.value) == GROUP_ERROR


def test_group_ranks_order_is_kept_and_unsorted_is_fine():
    result = plan(two_block_case().with_args(group_ranks={"fsdp": (1, 0)}))
    assert result.group_ranks == {"fsdp": (1, 0)}
    assert result.buckets[0].members[0].ranks == (1, 0)


def test_validate_group_plans():
    case = two_block_case()
    p0, p1 = plan(case, 0), plan(case, 1)
    validate_group_plans({0: p0, 1: p1}, "fsdp")
    validate_group_plans({0: p0.to_dict(), 1: p1.to_dict()}, "fsdp")
    with pytest.raises(ValueError, match="^No rank reports supplied$"):
        validate_group_plans({}, "fsdp")
    with pytest.raises(ValueError, match=r"^Expected reports for group fsdp ranks \(0, 1\)$"):
        validate_group_plans({0: p0}, "fsdp")
    with pytest.raises(ValueError, match=r"^Expected reports for group fsdp ranks \(0, 1\)$"):
        validate_group_plans({0: p0, 1: p1, 2: p1}, "fsdp")
    with pytest.raises(ValueError, match="^Expected reports for group other ranks None$"):
        validate_group_plans({0: p0, 1: p1}, "other")
    reordered = p1.to_dict()
    reordered["group_ranks"]["fsdp"] = (1, 0)
    with pytest.raises(ValueError, match="^Bucket plans disagree for group fsdp$"):
        validate_group_plans({0: p0, 1: reordered}, "fsdp")
    other = p1.to_dict()
    other["group_digests"]["fsdp"] = "0" * 64
    with pytest.raises(ValueError, match="^Bucket plans disagree for group fsdp$"):
        validate_group_plans({0: p0, 1: other}, "fsdp")
    with pytest.raises(KeyError):
        validate_group_plans({0: {"group_ranks": {"fsdp": (0, 1)}}, 1: p1}, "fsdp")
    no_digest = {"group_ranks": {"fsdp": (0, 1)}, "group_digests": {}}
    validate_group_plans({0: no_digest, 1: dict(no_digest)}, "fsdp")
