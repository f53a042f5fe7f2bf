"""Shared helpers for the tests: building cases and planning them with the reference planner."""

from __future__ import annotations

from pathlib import Path

from fsdp_verify.corpus import files as corpus
from fsdp_verify.model.case import Case
from fsdp_verify.graph.builder import build_module, localize
from fsdp_verify.reference.planner import BucketPolicy, plan_fsdp_buckets
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from helpers import ROOT


def two_block_case(**blueprint) -> Case:
    """Two blocks of two float32 parameters each: every AG, backward AG and RS pair buckets."""
    blocks = ((ParamDraw((2, 4), view="t"), ParamDraw((3,), view="flat")),
              (ParamDraw((2, 2, 2), view="split"), ParamDraw((1, 6), view="chain")))
    return Case(render(Blueprint(blocks=blocks, **blueprint)))


def plan(case: Case, rank: int = 0):
    """Plan ``case`` on ``rank`` with the reference planner."""
    module = build_module(localize(case.graph, rank))
    args = case.plan_args
    policy = BucketPolicy(**args.policy) if args.policy is not None else None
    return plan_fsdp_buckets(module, group_ranks=case.group_ranks(rank),
                             module_bucket_plans=args.module_bucket_plans, policy=policy,
                             pp_degree=args.pp_degree, dp_mode=args.dp_mode)


def decision_for(plan_, node: str, action: str | None = None) -> dict | None:
    """The decision naming ``node`` (and of ``action``, when given)."""
    for decision in plan_.decisions:
        if decision["node"] == node and (action is None or decision["action"] == action):
            return decision
    return None


def shipped_paths(limit_four: int) -> list[Path]:
    """Every two-rank case of the shipped corpus and the first ``limit_four`` four-rank ones."""
    paths, fours = [], 0
    for path in corpus.discover([str(ROOT / "corpus")]):
        world = len(corpus.load(path).case.graph.world())
        if world == 2 or (world == 4 and fours < limit_four):
            fours += world == 4
            paths.append(path)
    return paths
