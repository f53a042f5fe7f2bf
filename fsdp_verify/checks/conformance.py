"""Plan conformance: what each plan says is what the rewritten graph launches and sends.

The planner oracle proves a plan right against the spec and the layout checker proves that every
consumer still gets its own elements; neither notices a rewrite that is correct but does
something other than the plan it reported (and exchanged with the other ranks as a digest). Here
each fusable bucket of a round is matched, through the refinement map (no plan ids or meta), to
the one launch of the rewrite that now delivers exactly its members, and every quantity the plan
states is read back from the rewritten world: kind, group, reduce op, dtype and element count
from the simulated collective stream, and each member's offset from an identity-tensor run that
records what the fused launch really sends (spec 2.10 offset rule, rank-major for RS).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Optional

import torch
from torch import fx

from fsdp_verify.execute.simulated import WorldRun
from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.graph_facts import FSDP_KINDS, by_name
from fsdp_verify.checks.identity import HALF_AND_UP, cast_dtype, holds_exactly
from fsdp_verify.checks.registry import Checker

NAME = "conformance"
ROUND_KINDS = (("fsdp_all_gather", "fsdp_all_gather_backward"), ("fsdp_reduce_scatter",))  # AG round, RS round
OPS = {"fsdp_all_gather": "all_gather_into_tensor", "fsdp_all_gather_backward": "all_gather_into_tensor",
       "fsdp_reduce_scatter": "reduce_scatter_tensor"}
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _key(param: Any, kind: Any, index: Any) -> tuple:
    return (str(param), str(kind), str(index))


def applied_buckets(reports: list[dict]) -> list[dict]:
    """The fusable buckets each round's rewriter acts on (AG in round 1, RS in round 2; spec 3.5)."""
    return [bucket for report, kinds in zip(reports, ROUND_KINDS) for bucket in report["buckets"]
            if bucket["fusable"] and bucket["members"][0]["kind"] in kinds]


def _launches(ctx: CheckContext, rank: int) -> dict[str, list[fx.Node]]:
    """New launch of the rewrite -> the original tagged launches whose values it now delivers."""
    return {name: nodes for name, nodes in ctx.refinement(rank).members.items()
            if all(n.meta.get("comm_type") in FSDP_KINDS for n in nodes)}


def _by_members(launches: dict[str, list[fx.Node]]) -> dict[frozenset, str]:
    """Each launch under the multiset of members it delivers (the first launch wins a tie), so a
    bucket finds its launch in one lookup instead of a scan of every launch."""
    index: dict[frozenset, str] = {}
    for name, nodes in launches.items():
        members = Counter(_key(n.meta.get("param_name"), n.meta.get("comm_type"), n.meta.get("state_idx"))
                          for n in nodes)
        index.setdefault(frozenset(members.items()), name)
    return index


def _match(bucket: dict, index: dict[frozenset, str]) -> Optional[str]:
    want = Counter(_key(m["param_name"], m["kind"], m["state_idx"]) for m in bucket["members"])
    return index.get(frozenset(want.items()))


def _dtype(name: str) -> torch.dtype:
    return getattr(torch, name.split(".")[-1])


def _stream_problems(bucket: dict, record: Any, degree: int, moved: set[str]) -> Optional[str]:
    """Kind, group, reduce op, dtype, element count and bytes of the launch against the plan.

    The plan's dtype is the parameters' (spec 1.4); what the members' own launches moved
    (``moved``) is what the fused one must move: a low-precision gather moves a cast of its
    parameter, and members that moved several dtypes need one that holds each of them exactly."""
    first = bucket["members"][0]
    rs = first["kind"] == "fsdp_reduce_scatter"
    packed = sum(m["local_numel"] for m in bucket["members"])
    numel = packed * degree if rs else packed
    sent = math.prod(record.shape)
    itemsize = _dtype(record.dtype).itemsize
    want_dtype, want_bytes = first["dtype"], bucket["size_bytes"]
    if moved and moved != {want_dtype}:
        want_bytes = packed * degree * itemsize
        if len(moved) == 1:
            want_dtype = next(iter(moved))
            want_bytes = packed * degree * _dtype(want_dtype).itemsize
        elif all(holds_exactly(_dtype(d), _dtype(record.dtype)) for d in moved):
            want_dtype = record.dtype  # whether no narrower one would do is the next rule's
        else:
            want_dtype = f"one that holds each of {sorted(moved)} exactly"
    facts = [("op", OPS[first["kind"]], record.op), ("group", first["group"], record.group),
             ("reduce op", first["reduce_op"], record.reduce_op if rs else None),
             ("dtype", want_dtype, record.dtype), ("elements sent", numel, sent),
             ("bytes of the full buffer", want_bytes, packed * degree * itemsize)]
    wrong = [f"{what} {got} (plan: {want})" for what, want, got in facts if want != got]
    return "; ".join(wrong) or None


def _meta_problem(bucket: dict, launch: fx.Node, degree: int, spec_meta: bool) -> Optional[str]:
    """The fused launch's tags against its bucket (spec 5.6), and, when it carries them, its
    ``fsdp_bucket_spec`` and ``fsdp_degree`` against what the plan says it moves ([I])."""
    first, meta = bucket["members"][0], launch.meta
    rs = first["kind"] == "fsdp_reduce_scatter"
    facts = [("comm_type", first["kind"], meta.get("comm_type")), ("comm_group", first["group"], meta.get("comm_group")),
             ("autograd_backward", bool(first["backward"]), bool(meta.get("autograd_backward", False)))]
    if bucket.get("bucket_id"):
        facts.append(("fsdp_bucket_id", bucket["bucket_id"], meta.get("fsdp_bucket_id")))
    spec = meta.get("fsdp_bucket_spec")
    if spec_meta and isinstance(spec, dict):
        packed = sum(m["local_numel"] for m in bucket["members"])
        sent, got = (packed * degree, packed) if rs else (packed, packed * degree)
        facts += [("fsdp_bucket_spec input elements", sent, _numel(spec.get("input_shape"))),
                  ("fsdp_bucket_spec output elements", got, _numel(spec.get("output_shape"))),
                  ("fsdp_bucket_spec dtype", _dtype_name(first["dtype"]), _dtype_name(spec.get("dtype")))]
    if spec_meta and "fsdp_degree" in meta:
        facts.append(("fsdp_degree", degree, meta["fsdp_degree"]))
    wrong = [f"{what} {got!r} (plan: {want!r})" for what, want, got in facts if want != got]
    return "; ".join(wrong) or None


def _wider_than_needed(record: Any, moved: set[str]) -> Optional[str]:
    """Where members moved several dtypes, a wire wider than the narrowest that holds each of them
    exactly: exact too, but it sends bytes a low-precision gather was meant to save (fp16 beside
    bf16 in float64 sends twice float32's)."""
    if len(moved) < 2:
        return None
    names = {*moved, *(str(d) for d in HALF_AND_UP)}
    holders = sorted((name for name in names if all(holds_exactly(_dtype(d), _dtype(name)) for d in moved)),
                     key=lambda name: (_dtype(name).itemsize, name))
    width = _dtype(record.dtype).itemsize
    if not holders or width <= _dtype(holders[0]).itemsize:
        return None
    narrowest = [name for name in holders if _dtype(name).itemsize == _dtype(holders[0]).itemsize]
    return (f"sends {record.dtype} ({width} bytes an element) where {' or '.join(narrowest)} holds each of "
            f"{sorted(moved)} exactly")


def _dtype_name(dtype: Any) -> str:
    """``torch.float32`` and ``"float32"`` alike: a user's rewriter may write either."""
    return str(dtype).removeprefix("torch.")


def _numel(shape: Any) -> Optional[int]:
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        return None
    return math.prod(shape)


def _added_nodes(launch: fx.Node, original: set[str]) -> list[fx.Node]:
    """The nodes the rewrite added around one fused launch: its copy-in (inputs back to nodes the
    original holds) and its copy-out or split (users on to nodes the original holds)."""
    seen: set[fx.Node] = set()
    stack = [*launch.all_input_nodes, *launch.users]
    while stack:
        node = stack.pop()
        if node in seen or node.name in original or node.op in ("placeholder", "output", "get_attr"):
            continue
        seen.add(node)
        stack.extend(node.all_input_nodes)
        stack.extend(node.users)
    return sorted(seen, key=lambda n: n.name)


def _phase_problem(bucket: dict, launch: fx.Node, original: set[str]) -> Optional[str]:
    """A node added for the bucket whose phase flag is not the bucket's: a later round reads it
    (``phase_boundary``), and the phase decides where later passes may move the node."""
    backward = bool(bucket["members"][0]["backward"])
    wrong = [n.name for n in _added_nodes(launch, original) if bool(n.meta.get("autograd_backward", False)) != backward]
    if not wrong:
        return None
    return (f"nodes {wrong[:6]}{' ...' if len(wrong) > 6 else ''} added for the bucket are tagged "
            f"{'forward' if backward else 'backward'}; the bucket is {'backward' if backward else 'forward'}")


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    ints = _BITS.get(a.element_size())
    return a.dtype == b.dtype and a.shape == b.shape and ints is not None and \
        torch.equal(a.contiguous().view(ints), b.contiguous().view(ints))


def _offset_problem(bucket: dict, sent: torch.Tensor, sources: list[Optional[torch.Tensor]], degree: int) -> Optional[str]:
    """The first member whose elements are not where the plan's offsets put them (an RS member's
    rank blocks compared at once, as columns of the rank-major buffer)."""
    flat = sent.reshape(-1)
    packed = sum(m["local_numel"] for m in bucket["members"])
    rs = bucket["members"][0]["kind"] == "fsdp_reduce_scatter"
    for member, source in zip(bucket["members"], sources):
        if source is None:
            continue
        offset, numel, own = member["local_offset"], member["local_numel"], source.reshape(-1)
        if rs:
            placed = flat.numel() == degree * packed and own.numel() == degree * numel and \
                _same_bits(flat.reshape(degree, packed)[:, offset:offset + numel], own.reshape(degree, numel))
        else:
            # a member packed in a wider wire dtype (members of several dtypes) is compared as the
            # wire holds it: exact where the wire holds it, other bits where it does not
            own = own.to(flat.dtype) if own.dtype != flat.dtype else own
            placed = offset + numel <= flat.numel() and _same_bits(flat[offset:offset + numel], own)
        if not placed:
            return (f"member {member['param_name']} is not sent at its plan offset {offset} "
                    f"({numel} elements{', rank-major' if rs else ''}; plan order "
                    f"{[m['param_name'] for m in bucket['members']]})")
    return None


def check_conformance(ctx: CheckContext) -> list[Finding]:
    """Every applied bucket is one launch of the rewrite that sends what the plan says, where it says."""
    if not ctx.has_planner or ctx.run.error is not None or not ctx.plans:
        return []
    run = ctx.rewritten_sim
    if not isinstance(run, WorldRun):
        return []  # the numerics checker reports a rewrite that cannot run
    spec = ctx.case.spec
    before = ctx.original_sim
    findings: list[Finding] = []
    matched: dict[int, list[tuple[dict, str, list[fx.Node]]]] = {}
    for rank in sorted(ctx.plans):
        launches = _launches(ctx, rank)
        index = _by_members(launches)
        records = {record.node: record for record in run.streams.get(rank, [])}
        # what each original launch moved (its source's dtype), from the original's own stream
        moved_by = {record.node: record.dtype for record in
                    (before.streams.get(rank, []) if isinstance(before, WorldRun) else [])}
        rewritten_nodes = by_name(ctx.rewritten[rank])
        original = set(by_name(ctx.original[rank]))
        used: set[str] = set()
        for bucket in applied_buckets(ctx.reports(rank)):
            name = _match(bucket, index)
            names = [m["param_name"] for m in bucket["members"]]
            if name is None:
                findings.append(Finding(NAME, f"rank {rank}: the plan fuses {names} ({bucket['members'][0]['kind']}) "
                                              f"but no launch of the rewrite delivers exactly these members",
                                        rank=rank, rule="planned_bucket_missing"))
                continue
            used.add(name)
            degree = len(bucket["members"][0]["ranks"])
            moved = {moved_by[n.name] for n in launches[name] if n.name in moved_by}
            problem = _stream_problems(bucket, records[name], degree, moved) if name in records else "never ran"
            if problem:
                findings.append(Finding(NAME, f"rank {rank}: fused launch of {names}: {problem}", nodes=(name,),
                                        rank=rank, rule="launch_stream" if name in records else "launch_never_ran"))
                continue
            problem = _wider_than_needed(records[name], moved)
            if problem:
                findings.append(Finding(NAME, f"rank {rank}: fused launch of {names}: {problem}", nodes=(name,),
                                        rank=rank, rule="wire_wider_than_needed"))
                continue
            launch = rewritten_nodes[name]
            problem = _meta_problem(bucket, launch, degree, spec.fused_spec_describes_launch)
            if problem:
                findings.append(Finding(NAME, f"rank {rank}: fused launch of {names}: meta {problem}", nodes=(name,),
                                        rank=rank, rule="launch_meta"))
                continue
            problem = _phase_problem(bucket, launch, original) if spec.new_nodes_carry_phase else None
            if problem:
                findings.append(Finding(NAME, f"rank {rank}: fused launch of {names}: {problem}", nodes=(name,),
                                        rank=rank, rule="added_node_phase"))
                continue
            matched.setdefault(rank, []).append((bucket, name, launches[name]))
        for name in sorted(set(launches) - used):
            members = sorted(str(n.meta.get("param_name")) for n in launches[name])
            findings.append(Finding(NAME, f"rank {rank}: launch fuses {members}, which no applied plan bucket names",
                                    nodes=(name,), rank=rank, rule="launch_unplanned"))
    if findings or not matched:
        return findings
    return _offset_findings(ctx, matched)


def _sent_codes(seen: Any, rank: int, source: fx.Node, cast_nodes: frozenset) -> Optional[torch.Tensor]:
    """The codes a member's launch sent: its source's, or, for a low-precision gather coded at its
    parameter (``identity``), the parameter's codes in the cast's dtype (which holds them exactly)."""
    if source.name in cast_nodes and source.args and isinstance(source.args[0], fx.Node):
        coded = seen.sources.get((rank, source.args[0].name))
        narrow = cast_dtype(source)
        return coded.to(narrow) if coded is not None and narrow is not None else None
    return seen.sources.get((rank, source.name))


def _offset_findings(ctx: CheckContext, matched: dict[int, list[tuple[dict, str, list[fx.Node]]]]) -> list[Finding]:
    """Each member's codes where the plan's offset puts them in what its fused launch sent (the
    shared identity run of the rewrite; a member whose source has no codes is counted unverified)."""
    seen = ctx.rewritten_run
    if isinstance(seen, Exception):
        return []  # the layout checker reports a rewrite that cannot run on identity tensors
    unverified = 0
    for rank in sorted(matched):
        for bucket, name, nodes in matched[rank]:
            by_key = {_key(n.meta.get("param_name"), n.meta.get("comm_type"), n.meta.get("state_idx")): n
                      for n in nodes}
            members = [by_key[_key(m["param_name"], m["kind"], m["state_idx"])] for m in bucket["members"]]
            values = [_sent_codes(seen, rank, n.args[0], ctx.identity_codes.cast_nodes)
                      if n.args and isinstance(n.args[0], fx.Node) else None for n in members]
            unverified += sum(v is None for v in values)
            sent = (seen.inputs.get((rank, name)) or [None])[0]
            if sent is None:
                unverified += len(values)
                continue
            problem = _offset_problem(bucket, sent, values, len(bucket["members"][0]["ranks"]))
            if problem:
                return [Finding(NAME, f"rank {rank}: fused launch {name}: {problem}", nodes=(name,), rank=rank,
                                rule="sent_offset")]
    ctx.metrics[NAME] = {"members_unverified": unverified}
    return []


CHECKER = Checker(NAME, check_conformance, after=("layout",),
                  summary="each applied bucket is one launch sending what and where its plan says")
