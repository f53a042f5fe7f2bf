"""The one vocabulary of functional collectives (graph/collectives.py): kinds, overloads, size
arguments, and the rule that triage and the real-rank judge both apply through it."""

from __future__ import annotations

import re

import pytest

from fsdp_verify.graph import collectives
from fsdp_verify.graph.collectives import Kind
from helpers import ROOT



@pytest.mark.parametrize("target, kind", [
    ("_c10d_functional.all_gather_into_tensor", Kind.ALL_GATHER),
    ("_c10d_functional.all_gather_into_tensor.default", Kind.ALL_GATHER),
    ("_c10d_functional.all_gather_into_tensor_coalesced.default", Kind.ALL_GATHER),
    ("c10d_functional.reduce_scatter_tensor", Kind.REDUCE_SCATTER),
    ("_c10d_functional.all_reduce_.default", Kind.ALL_REDUCE),
    ("_c10d_functional.wait_tensor.default", Kind.WAIT),
    ("_c10d_functional.broadcast.default", Kind.OTHER),
    ("aten.mm.default", None),
    ("fsdp_verify.free_tensor_storage", None),
])
def test_kinds_whatever_the_overload_or_namespace(target, kind):
    assert collectives.kind(target) == kind
    assert collectives.is_collective(target) == (kind is not None)
    assert collectives.is_launch(target) == (kind not in (None, Kind.WAIT))


def test_packets_are_told_from_overloads():
    assert collectives.is_packet("_c10d_functional.all_reduce")
    assert not collectives.is_packet("_c10d_functional.all_reduce.default")
    assert not collectives.is_packet("aten.add")


class _Node:
    def __init__(self, target, args, kwargs=None, name="n"):
        self.target, self.args, self.kwargs, self.name, self.op = target, args, kwargs or {}, name, "call_function"


@pytest.mark.parametrize("op", sorted(collectives.SIZED))
def test_every_sized_launch_is_checked_for_its_group_and_size(op):
    position = collectives.SIZED[op]
    args = ["x", "sum", 4, "g"] if position is not None else ["x", "sum", "g"]
    node = _Node(f"_c10d_functional.{op}.default", tuple(args))
    assert collectives.is_sized(node.target)
    assert collectives.unrunnable(node, None, 1) == "group 'g' is not a group of rank 1"
    if position is not None:
        assert "size argument 4 on a group of 2 ranks" == collectives.unrunnable(node, (0, 1), 0)
        assert collectives.unrunnable(node, (0, 1, 2, 3), 0) is None


@pytest.mark.parametrize("op", ["all_gather_into_tensor", "all_gather_into_tensor_coalesced"])
def test_triage_and_the_real_rank_judge_agree_on_every_sized_launch(op):
    """They once kept two tables (3 ops and 9): a coalesced gather with a wrong size was invalid
    input on real ranks but a defect to triage."""
    from dataclasses import replace

    from fsdp_verify.engine.triage import invalid_collectives
    from fsdp_verify.execute.ranks.judge import unrunnable_collectives
    from helpers.cases import two_block_case
    case = two_block_case()
    gather = next(n for n in case.graph.nodes if collectives.kind(n.target) == Kind.ALL_GATHER)
    args = list(gather.args)
    args[-2] = args[-2] + 1
    bad = replace(gather, target=f"_c10d_functional.{op}", args=tuple(args))
    case = replace(case, graph=case.graph.with_nodes([bad if n is gather else n for n in case.graph.nodes]))
    by_triage = invalid_collectives(case)
    by_judge = unrunnable_collectives(case, {rank: case.graph for rank in case.graph.world()})
    assert by_triage and by_judge and all(gather.name in line for line in by_triage + by_judge)


PREFIX_TESTS = re.compile(r"""startswith\(\(?["']_?c10d_functional|["']_?c10d_functional\.["']""")


def test_no_module_spells_out_the_collective_namespace_for_itself():
    found = []
    for path in sorted((ROOT / "fsdp_verify").rglob("*.py")):
        if path.name == "collectives.py" and path.parent.name == "graph":
            continue
        found += [f"{path.relative_to(ROOT)}:{i}" for i, line in enumerate(path.read_text().splitlines(), 1)
                  if PREFIX_TESTS.search(line)]
    assert not found, "ask fsdp_verify.graph.collectives instead:\n" + "\n".join(found)
