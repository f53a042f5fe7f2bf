"""Deadlock freedom of a multi-rank program, decided by z3 (spec 5.3.10-11).

Each rank's rewritten graph is reduced to its collective skeleton: launches and the waits that
complete them, in program order. The k-th launch of a group on one rank is the same collective
as the k-th launch of that group on every other member rank (a *slot*). Two models:

- ``nccl``: a collective starts on all member ranks together (a rendezvous), so operations on
  communicators that share ranks must be issued in one order on every rank, waits or not
  (NCCL's rule for concurrent communicators);
- ``gloo``: launches never block; a wait completes once every member rank has launched.

z3 decides whether *some* global interleaving of all ranks satisfies program order plus the
model's synchronisation: the question a lockstep simulation cannot answer, since it tries one
interleaving. z3's cost grows faster than linearly with the length of a difference-constraint
chain, so the programs are cut at consistent cuts (points where every rank has launched exactly
the same slots of every group) and each segment is solved alone. No constraint points backwards
across a consistent cut (a wait after the cut waits for slots launched before it on every rank),
so a cycle lies inside one segment and the cut loses nothing. On unsat, the unsat core names the
synchronisation edges of the cycle.

A segment in which every collective sits at the same position on every member rank (the usual
SPMD rewrite) needs no solver: running all ranks in lockstep is a schedule under both models (a
slot's launches happen together, and a wait comes after its launch on every rank because it does
on its own), so that witness is the proof. ``find_deadlock`` counts which segments each proof
settled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional

import z3

z3.set_param("ctrl_c", False)  # z3 would swallow Ctrl-C (a cancelled check returns "unknown")

SEGMENT = 48  # events per rank a segment holds at least (z3 time per segment stays in milliseconds)


@dataclass(frozen=True)
class Event:
    """A launch (``wait=False``) or a wait on one rank, for slot ``(group, ranks, k)``."""

    node: str
    slot: tuple
    wait: bool
    op: str = ""

    def describe(self) -> str:
        group, _, k = self.slot
        return f"{'waits at' if self.wait else 'launches'} {self.node} ({group} #{k})"


@dataclass(frozen=True)
class Deadlock:
    """A model under which no global schedule exists, and the cycle's synchronisation edges."""

    model: str
    edges: tuple[str, ...]
    nodes: tuple[str, ...]
    ranks: tuple[int, ...]

    def describe(self) -> str:
        rule = ("no global schedule exists: a cycle of blocking waits across ranks" if self.model == "gloo" else
                "the NCCL rule (collectives of communicators that share ranks are issued in one order on every "
                "rank) is broken")
        return f"{rule} [{self.model} model]: " + "; ".join(self.edges)


def _cuts(programs: dict[int, list[Event]]) -> list[dict[int, int]]:
    """End positions of consecutive segments, each at a consistent cut (see the module docstring)."""
    ranks = sorted(programs)
    counts = {r: {} for r in ranks}  # rank -> (group, ranks) -> launches so far
    at = {r: 0 for r in ranks}
    cuts = []

    def advance(rank: int) -> None:
        event = programs[rank][at[rank]]
        if not event.wait:
            key = event.slot[:2]
            counts[rank][key] = counts[rank].get(key, 0) + 1
        at[rank] += 1

    while any(at[r] < len(programs[r]) for r in ranks):
        for r in ranks:
            for _ in range(SEGMENT):
                if at[r] < len(programs[r]):
                    advance(r)
        changed = True
        while changed:
            changed = False
            for r in ranks:
                for key, count in list(counts[r].items()):
                    for other in key[1]:
                        while other in programs and counts[other].get(key, 0) < count \
                                and at[other] < len(programs[other]):
                            advance(other)
                            changed = True
        cuts.append(dict(at))
    return cuts


def _solve(programs: dict[int, list[Event]], start: dict[int, int], end: dict[int, int],
           model: str) -> Optional[Deadlock]:
    solver = z3.Solver()
    solver.set("core.minimize", True)
    time: dict[tuple[int, int], z3.ArithRef] = {}
    launches: dict[tuple, dict[int, z3.ArithRef]] = {}
    waits: list[tuple[int, Event, z3.ArithRef]] = []
    for rank in sorted(programs):
        previous = None
        for i in range(start[rank], end[rank]):
            event = programs[rank][i]
            var = z3.Int(f"r{rank}_{i}")
            time[(rank, i)] = var
            if previous is not None:
                solver.add(var > previous)
            previous = var
            if event.wait:
                waits.append((rank, event, var))
            else:
                launches.setdefault(event.slot, {})[rank] = var
    labels: dict[str, str] = {}
    nodes: dict[str, tuple[str, ...]] = {}
    involved: dict[str, tuple[int, int]] = {}
    events = {(rank, programs[rank][i].slot, programs[rank][i].wait): programs[rank][i]
              for rank in programs for i in range(start[rank], end[rank])}
    if model == "nccl":
        for slot, per_rank in launches.items():
            ranks = sorted(per_rank)
            for a, b in zip(ranks, ranks[1:]):
                label = f"e{len(labels)}"
                ea, eb = events[(a, slot, False)], events[(b, slot, False)]
                labels[label] = f"rank {a} {ea.describe()} together with rank {b} ({eb.node})"
                nodes[label] = (ea.node, eb.node)
                involved[label] = (a, b)
                solver.assert_and_track(per_rank[a] == per_rank[b], label)
    else:
        for rank, event, var in waits:
            for other, launch in sorted(launches.get(event.slot, {}).items()):
                if other == rank:
                    continue
                label = f"e{len(labels)}"
                source = events[(other, event.slot, False)]
                labels[label] = f"rank {rank} {event.describe()} until rank {other} launches {source.node}"
                nodes[label] = (event.node, source.node)
                involved[label] = (rank, other)
                solver.assert_and_track(var > launch, label)
    if solver.check() != z3.unsat:
        return None
    core = sorted((str(c) for c in solver.unsat_core()), key=lambda s: int(s[1:]))
    ranks = sorted({r for c in core for r in involved[c]})
    return Deadlock(model, tuple(labels[c] for c in core) + ("each rank issues these in its program order",),
                    tuple(dict.fromkeys(n for c in core for n in nodes[c])), tuple(ranks))


def lockstep(programs: dict[int, list[Event]], start: dict[int, int], end: dict[int, int]) -> bool:
    """Whether the segment has as many events on every rank and each event's slot and kind are the
    same at its position on every member rank that has a program (the lockstep witness)."""
    lengths = {end[rank] - start[rank] for rank in programs}
    if len(lengths) > 1:
        return False
    for offset in range(lengths.pop() if lengths else 0):
        for rank, program in programs.items():
            event = program[start[rank] + offset]
            for other in event.slot[1]:
                if other != rank and other in programs:
                    twin = programs[other][start[other] + offset]
                    if twin.slot != event.slot or twin.wait != event.wait:
                        return False
    return True


def find_deadlock(programs: dict[int, list[Event]], proofs: Optional[Counter] = None) -> Optional[Deadlock]:
    """None when a global schedule exists under the NCCL model (hence under gloo too); else the
    strongest violated model: ``gloo`` (hangs on any backend) before ``nccl`` (NCCL's rule only).
    ``proofs`` counts the segments settled by the lockstep witness and by z3."""
    proofs = Counter() if proofs is None else proofs
    start = {rank: 0 for rank in programs}
    for end in _cuts(programs):
        if lockstep(programs, start, end):
            proofs["lockstep"] += 1
        else:
            proofs["z3"] += 1
            if _solve(programs, start, end, "nccl") is not None:
                return _solve(programs, start, end, "gloo") or _solve(programs, start, end, "nccl")
        start = end
    return None
