"""The harness's one vocabulary for functional collectives: their names, kinds and size arguments.

Every part of the harness that runs, records, triages or hands over collectives asks this module,
so a new op or overload is taught once. Two parts keep their own rules on purpose: the reference
planner (``reference/predicates.py``, whose namespaces are the spec's [I] settings) and the
oracle (``checks/graph_facts.py``): a planner bug must not hide behind a helper the oracle shares.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Optional

NAMESPACE = "_c10d_functional"
LEGACY_NAMESPACE = "c10d_functional"  # the older packet of the same ops
NAMESPACES = (NAMESPACE, LEGACY_NAMESPACE)


class Kind(Enum):
    """What a collective does, whatever its overload or variant."""

    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_REDUCE = "all_reduce"
    WAIT = "wait"
    OTHER = "other"  # broadcast, all_to_all, ...: runnable, never bucketed


# launch -> position of its group-size argument (None: it has none); the group is the last argument
SIZED: dict[str, Optional[int]] = {
    "all_gather_into_tensor": -2, "all_gather_into_tensor_out": -2, "all_gather_into_tensor_coalesced": -2,
    "reduce_scatter_tensor": -2, "reduce_scatter_tensor_coalesced": -2,
    "all_reduce": None, "all_reduce_": None, "all_reduce_coalesced": None, "all_reduce_coalesced_": None,
}

_KINDS = {"all_gather": Kind.ALL_GATHER, "reduce_scatter": Kind.REDUCE_SCATTER, "all_reduce": Kind.ALL_REDUCE,
          "wait_tensor": Kind.WAIT}


def op_name(target: Any, namespaces: tuple[str, ...] = NAMESPACES) -> Optional[str]:
    """``all_gather_into_tensor`` for ``_c10d_functional.all_gather_into_tensor`` (packet or any
    overload, either namespace); None for an op that is no functional collective."""
    parts = str(target).split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in namespaces else None


def kind(target: Any) -> Optional[Kind]:
    """The collective's kind, or None for an op that is no functional collective."""
    op = op_name(target)
    if op is None:
        return None
    return next((k for prefix, k in _KINDS.items() if op.startswith(prefix)), Kind.OTHER)


def is_collective(target: Any) -> bool:
    """Any functional collective op, waits included."""
    return op_name(target) is not None


def is_launch(target: Any) -> bool:
    """A functional collective that starts communication: anything but ``wait_tensor``."""
    op = op_name(target)
    return op is not None and op != "wait_tensor"


def is_wait(target: Any) -> bool:
    return op_name(target) == "wait_tensor"


def is_packet(target: Any) -> bool:
    """Called through its packet (``_c10d_functional.all_reduce``, the FSDP pass's form), not an
    overload (``.default``, what inductor's post-grad passes receive)."""
    return op_name(target, (NAMESPACE,)) is not None and str(target).count(".") == 1


def size_position(target: Any) -> Optional[int]:
    """Where a launch carries its group size, or None (no size argument, or no sized launch)."""
    return SIZED.get(op_name(target, (NAMESPACE,)) or "")


def is_sized(target: Any) -> bool:
    """A launch whose group and size a real group checks (``SIZED``)."""
    return (op_name(target, (NAMESPACE,)) or "") in SIZED


def group_of(node: Any) -> Any:
    """The group name a launch is called on (keyword or last positional argument)."""
    return node.kwargs.get("group_name", node.args[-1] if node.args else None)


def unrunnable(node: Any, ranks: Optional[tuple], rank: int) -> Optional[str]:
    """Why a real group could not run this sized launch on ``rank``, whose group has ``ranks`` (None:
    no such group), or None when it could."""
    group = group_of(node)
    if ranks is None:
        return f"group {group!r} is not a group of rank {rank}"
    position = size_position(node.target)
    if position is not None and len(node.args) >= 3 and (type(node.args[position]) is not int
                                                         or node.args[position] != len(ranks)):
        return f"size argument {node.args[position]!r} on a group of {len(ranks)} ranks"
    return None


def reduce_sources(spec: Any) -> tuple[str, ...]:
    """Names of the nodes (of a ``GraphSpec``) feeding reduce-scatters and all-reduces: real runs
    replace their values by exact dyadics, so every summation order gives the same bits."""
    names = []
    for node in spec.nodes:
        op = op_name(node.target, (NAMESPACE,)) or ""
        if op in ("reduce_scatter_tensor", "all_reduce") and node.args and hasattr(node.args[0], "name"):
            names.append(node.args[0].name)
    return tuple(names)


def invalid_launches(spec: Any) -> list[str]:
    """Launches of a ``GraphSpec`` that no real world could run: an unknown group, or a size
    argument that is not the group's size (checked on every rank, since groups are rank-local)."""
    found = []
    for node in spec.nodes:
        if not is_sized(node.target):
            continue
        group = group_of(node)
        for rank in spec.world():
            why = unrunnable(node, spec.group_ranks(rank).get(group) if isinstance(group, str) else None, rank)
            if why:
                found.append(f"{node.name}: {why}")
                break
    return found


BUCKETED = (Kind.ALL_GATHER, Kind.REDUCE_SCATTER, Kind.ALL_REDUCE)  # the kinds a bucketing pass fuses


def launch_counts(graph: Any) -> dict[Kind, int]:
    """Launches of each bucketed kind in an FX graph (a coalesced launch counts once: it is one
    launch). A rewrite that fuses holds fewer of some kind than its original."""
    counts = dict.fromkeys(BUCKETED, 0)
    for node in graph.nodes:
        if node.op == "call_function" and is_launch(node.target):
            found = kind(node.target)
            if found in counts:
                counts[found] += 1
    return counts


def fusable(graph: Any) -> bool:
    """Whether an FX graph holds two launches of one bucketed kind on one group: something a
    bucketing pass could fuse (whether it may is the checkers' question)."""
    seen = set()
    for node in graph.nodes:
        if node.op == "call_function" and is_launch(node.target) and kind(node.target) in BUCKETED:
            key = (kind(node.target), group_of(node))
            if key in seen:
                return True
            seen.add(key)
    return False
