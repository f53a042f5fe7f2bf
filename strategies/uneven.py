"""Uneven shards: ranks whose graphs differ from the others'.

A parameter whose first dimension the degree does not divide is sharded unevenly: the last ranks
of each group hold fewer rows and pad their shard before it is gathered, as SimpleFSDP pads an
uneven DTensor shard before its all-gather (``ParamSpec.padding``, applied by
``builder.localize``; a cast of the shard comes first and the pad after it, in SimpleFSDP's order). Those ranks trace a graph with one more node per padded parameter, a
smaller placeholder and a gather source ready later. A pass that decides on rank-local facts
(shard sizes, node positions, where a source becomes ready) then decides differently on them:
with identical graphs on every rank, only rank 0's graph is ever seen.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from fsdp_verify.graph.spec import GraphSpec, ParamSpec
from fsdp_verify.model.case import Case


def _read(graph: GraphSpec) -> set[str]:
    return {name for node in graph.nodes for name in node.inputs()}


@st.composite
def padding(draw, graph: GraphSpec, param: ParamSpec) -> tuple[tuple[int, int], ...]:
    """Which ranks pad ``param``'s shard and by how many rows: the last ``short`` positions of
    every subgroup of its group (each replica shards the same way)."""
    parts = graph.groups[param.group]
    degree = len(parts[0])
    short = draw(st.integers(1, degree - 1))
    rows = draw(st.integers(1, param.shard_shape[0]))
    return tuple(sorted((rank, rows) for part in parts for rank in part[degree - short:]))


@st.composite
def uneven(draw, case: Case) -> Case:
    """``case`` with some of its gathered parameters sharded unevenly (at least one, where any is)."""
    graph = case.graph
    read = _read(graph)
    able = [i for i, p in enumerate(graph.params)
            if p.shard_shape and p.shard_shape[0] >= 1 and p.placeholder in read and len(graph.groups[p.group][0]) > 1]
    if not able:
        return case
    chosen = set(draw(st.lists(st.sampled_from(able), min_size=1, max_size=len(able), unique=True)))
    params = tuple(replace(p, padding=draw(padding(graph, p))) if i in chosen else p
                   for i, p in enumerate(graph.params))
    label = f"{case.label}+uneven" if case.label else "uneven"
    return replace(case, graph=replace(graph, params=params), label=label)


def sometimes_uneven(cases: st.SearchStrategy[Case], one_in: int = 6) -> st.SearchStrategy[Case]:
    """``cases``, one in ``one_in`` of them with uneven shards (the largest draw: a case shrinks
    towards even shards, and the simplest example Hypothesis tries first is even)."""
    return st.tuples(cases, st.integers(0, one_in - 1)).flatmap(
        lambda pair: uneven(pair[0]) if pair[1] == one_in - 1 else st.just(pair[0]))


def uneven_cases(cases: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    """``cases``, every one with uneven shards where it gathers a parameter (the ``uneven`` hunt)."""
    return cases.flatmap(uneven)


__all__ = ["padding", "sometimes_uneven", "uneven", "uneven_cases"]
