"""The reference rewriters take a plan of one's own planner: objects with exactly the spec's fields
(FSDP_GRAPHS.md §2.6 for candidates; members and bucket_id for buckets; buckets and signature for
the plan), nothing the reference planner adds beside them."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import torch
from torch import fx

from fsdp_verify.graph.builder import build_module
from fsdp_verify.model.case import Case
from fsdp_verify.reference.planner import Candidate, plan_fsdp_buckets
from fsdp_verify.reference.rewrite import apply_ag_buckets, apply_rs_buckets
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render


@dataclass(frozen=True)
class SpecCandidate:
    """§2.6, field for field (the derived ``size_bytes`` and ``key`` are the planner's business)."""

    launch: fx.Node
    wait: fx.Node
    source: fx.Node
    param_name: str
    state_idx: int
    kind: str
    backward: bool
    module_fqns: tuple
    scope: str
    group: str
    ranks: tuple
    dtype: torch.dtype
    device: str
    input_shape: tuple
    output_shape: tuple
    ready: int
    first_use: int
    reduce_op: Optional[str]


@dataclass(frozen=True)
class SpecBucket:
    members: tuple
    bucket_id: str


@dataclass(frozen=True)
class SpecPlan:
    buckets: tuple
    signature: str


def _spec_only(plan: Any) -> SpecPlan:
    names = [f.name for f in fields(SpecCandidate)]
    return SpecPlan(tuple(SpecBucket(tuple(SpecCandidate(**{n: getattr(m, n) for n in names}) for m in b.members),
                                     b.bucket_id) for b in plan.buckets), plan.signature)


def _case() -> Case:
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat"), ParamDraw((1, 2, 3), view="split")),
              (ParamDraw((2, 2), view="chain"), ParamDraw((1, 5), view="slice")))
    return Case(render(Blueprint(blocks=blocks, degree=2)))


def _rewrite(case: Case, convert) -> str:
    module = build_module(case.graph)
    groups = case.group_ranks(0)
    apply_ag_buckets(module, convert(plan_fsdp_buckets(module, group_ranks=groups)))
    apply_rs_buckets(module, convert(plan_fsdp_buckets(module, group_ranks=groups)))
    return module.code


def test_the_spec_candidate_has_no_field_the_planner_does_not():
    assert {f.name for f in fields(SpecCandidate)} == {f.name for f in fields(Candidate)}


def test_rewriters_on_spec_only_plans_rewrite_as_on_the_reference_plans():
    case = _case()
    reference = _rewrite(case, lambda plan: plan)
    spec_only = _rewrite(case, _spec_only)
    assert spec_only == reference
    assert reference != build_module(case.graph).code  # multi-member buckets were fused
