"""Planner bugs: one rule of the reference planner patched for the duration of a call."""

from __future__ import annotations

import dataclasses

from ...reference import planner
from .base import Patch


def _key_without(*positions: int) -> list[Patch]:
    original = planner.Candidate.key.fget

    def key(self):
        return tuple(part for index, part in enumerate(original(self)) if index not in positions)
    return [(planner.Candidate, "key", property(key))]


def _suppress(reason: str) -> list[Patch]:
    original = planner.split_reason

    def split_reason(*args):
        found = original(*args)
        return None if found == reason else found
    return [(planner, "split_reason", split_reason)]


def _graph_order_members() -> list[Patch]:
    def finalize(members):
        return planner.Bucket(tuple(members))
    return [(planner, "_finalize", finalize)]


@dataclasses.dataclass(frozen=True)
class _OffByOnePlan(planner.BucketPlan):
    """A plan whose reported offsets of later members are one too high."""

    def to_dict(self) -> dict:
        out = super().to_dict()
        for bucket in out["buckets"]:
            for member in bucket["members"][1:]:
                member["local_offset"] += 1
        return out


def _cap_off_by_one() -> list[Patch]:
    original = planner.split_reason

    def split_reason(current, candidate, nodes, order, policy):
        if policy.cap_bytes is not None:
            policy = dataclasses.replace(policy, cap_bytes=policy.cap_bytes + 1)
        return original(current, candidate, nodes, order, policy)
    return [(planner, "split_reason", split_reason)]


def _device_dependent(rank: int) -> list[Patch]:
    """Ranks on odd device indices split every bucket (grouping depends on the device index)."""
    if rank % 2 == 0:
        return []
    original = planner.split_reason
    return [(planner, "split_reason", lambda *args: original(*args) or "capacity")]
