"""Reference bucket rewriters (spec section 4): fuse each multi-member bucket into one collective.

AG buckets: copy-in (flatten + concatenate the member shards in bucket order), one gather,
then an independent copy-out per member so member frees keep their exact positions. RS
buckets: a private, tagged layout-preparation chain (reshape to (degree, -1), cat on dim 1,
flatten), one reduce-scatter, then a slice per member in place of its wait. A plan whose
signature does not match the graph is rejected before anything changes.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch
from torch import fx

from fsdp_verify.graph.builder import add_call
from fsdp_verify.reference import predicates as helpers
from fsdp_verify.reference.planner import (AG_KINDS, RS_KIND, Bucket, BucketPlan, graph_signature, packed_numel,
                                          static_shape)

aten = torch.ops.aten


class StalePlanError(ValueError):
    """The plan was made for another graph snapshot."""


def check_fresh(graph_module: fx.GraphModule, plan: BucketPlan) -> None:
    """Refuse a plan whose signature is not this graph's (spec section 4.1, stale plans)."""
    signature = graph_signature(graph_module.graph)
    if plan.signature != signature:
        raise StalePlanError(f"Stale bucket plan: plan signature {plan.signature[:12]} does not match "
                             f"graph signature {signature[:12]}; re-plan the current graph")


def _phase(backward: bool) -> dict:
    return {"autograd_backward": True} if backward else {}


def _launch_meta(bucket: Bucket, total: int) -> dict:
    first = bucket.members[0]
    degree = len(first.ranks)
    if first.kind == RS_KIND:
        input_shape, output_shape = (degree * total,), (total,)
    else:
        input_shape, output_shape = (total,), (degree * total,)
    return {"comm_type": first.kind, "comm_group": first.group, "autograd_backward": first.backward,
            "fsdp_bucket_id": bucket.bucket_id, "fsdp_bucket_members": [m.param_name for m in bucket.members],
            "fsdp_degree": degree,
            "fsdp_bucket_spec": {"input_shape": input_shape, "output_shape": output_shape,
                                 "dtype": first.dtype, "device": first.device}}


@dataclass
class DtypeWalk:
    """One graph's dtype walk: each parameter placeholder's dtype (``param_dtypes``) and the answer
    for every node walked so far. Sharing it between a graph's members is sound while the graph
    is unchanged: ``_apply`` makes every member before it fuses any bucket."""

    params: dict[str, torch.dtype]
    seen: dict[fx.Node, tuple[torch.dtype, bool] | None] = field(default_factory=dict)
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # parameter -> shard shape (``param_shapes``)
    real: dict[fx.Node, torch.Tensor | None] = field(default_factory=dict)  # ``_real``'s answers


def moved_dtype(source: fx.Node, spec_dtype: torch.dtype, walk: DtypeWalk | None = None) -> torch.dtype:
    """What a gather of ``source`` moves. The spec's dtype is the parameter's (spec 1.4, S4), but a
    low-precision all-gather gathers a cast of it: the traced value says so where the graph has
    one; else the dtype is followed back to a cast or to a parameter."""
    if source.op == "placeholder" and "val" not in source.meta:  # the parameter itself: its own spec
        return spec_dtype
    nodes = source.graph.nodes
    found = _traced(source, walk or DtypeWalk(param_dtypes(nodes), shapes=param_shapes(nodes)))
    return found[0] if found else spec_dtype


def param_dtypes(nodes: Iterable[fx.Node]) -> dict[str, torch.dtype]:
    """Each parameter placeholder's dtype, as the spec dtype of the collectives that name it
    (``param_node``): one scan per graph, shared by every member's walk. A placeholder whose
    collectives disagree (malformed metadata) is left out: the walk cannot tell its dtype."""
    seen: dict[str, set] = {}
    for node in nodes:
        dtype = (node.meta.get("fsdp_bucket_spec") or {}).get("dtype")
        if isinstance(node.meta.get("param_node"), str) and isinstance(dtype, torch.dtype):
            seen.setdefault(node.meta["param_node"], set()).add(dtype)
    return {name: dtypes.pop() for name, dtypes in seen.items() if len(dtypes) == 1}


def param_shapes(nodes: Iterable[fx.Node]) -> dict[str, tuple[int, ...]]:
    """Each parameter placeholder's shard shape, as the input shape of the all-gathers that name it
    (``param_node``); one whose gathers disagree is left out. A gather whose shape rule 8 refuses (a
    dim of 0 or less, symbolic, none) says nothing of the shard: counted, it would make a parameter
    gathered again in the backward look ambiguous, and its cast fall back to the spec dtype."""
    seen: dict[str, set] = {}
    for node in nodes:
        shape = (node.meta.get("fsdp_bucket_spec") or {}).get("input_shape")
        if (isinstance(node.meta.get("param_node"), str) and node.meta.get("comm_type") in AG_KINDS
                and static_shape(shape)):
            seen.setdefault(node.meta["param_node"], set()).add(tuple(shape))
    return {name: shapes.pop() for name, shapes in seen.items() if len(shapes) == 1}


# Ops whose result has their (first) tensor input's dtype and rank. A pad is one: a short rank of an
# uneven shard pads its shard before the gather, and on a one-element stand-in a pad of a 2-D shard
# (four widths) cannot run, so that rank alone would fall back to the spec dtype.
_SAME_DTYPE = frozenset({"clone", "contiguous", "view", "reshape", "t", "transpose", "permute", "slice", "expand",
                         "neg", "abs", "_unsafe_view", "view_as", "unsqueeze", "squeeze", "select", "alias",
                         "constant_pad_nd", "all_gather_into_tensor", "wait_tensor", "reduce_scatter_tensor",
                         "all_reduce"})
_PROMOTING = frozenset({"add", "mul", "sub", "div"})
# The rank of the second stand-ins, and the length of each of their dims (see ``_evaluated``).
_PROBE_RANK = 4
_PROBE_SIZE = 2


def _op_name(node: fx.Node) -> str:
    packet = getattr(node.target, "overloadpacket", node.target)  # the FSDP pass calls packets
    return str(getattr(packet, "__name__", "")).split(".")[-1]


def _traced(node: fx.Node, walk: DtypeWalk) -> tuple[torch.dtype, bool] | None:
    """A node's dtype and whether it is 0-dim (torch promotes a 0-dim tensor beside a dimensioned
    one of the same kind to the dimensioned one's dtype: bf16 (2,) + float32 () is bf16), from its
    traced value, else followed back; None where the walk cannot tell. Each node is walked once
    (``walk.seen``): arithmetic that shares inputs would otherwise be walked exponentially often.
    The walk keeps its own stack, so a chain of any length is followed: a bound on its depth would
    fall back to the spec dtype past it, wrong for a cast far up the chain."""
    return _post_order(node, walk.seen, _read_by, lambda top: _walk(top, walk))


def _post_order(node: fx.Node, answers: dict, reads: Callable[[fx.Node], list[fx.Node]],
                answer: Callable[[fx.Node], Any]) -> Any:
    """``answers[node]``, each node answered once after the inputs it ``reads`` (``answer`` then finds
    theirs in ``answers``), on a stack of its own: a chain of any length is followed. An input still
    unanswered when its reader is entered again is a cycle: the reader answers without it."""
    stack, entered = [node], set()
    while stack:
        top = stack[-1]
        if top in answers:
            stack.pop()
            continue
        waiting = [n for n in reads(top) if n not in answers]
        if waiting and top not in entered:
            entered.add(top)
            stack.extend(waiting)
            continue
        answers[top] = answer(top)
        stack.pop()
    return answers[node]


def _read_by(node: fx.Node) -> list[fx.Node]:
    """The inputs ``_walk`` reads of ``node``: both operands of arithmetic, the first tensor input of
    a cast, a same-dtype op or a reduction, and nothing of an op it cannot follow (so the walk never
    climbs past one)."""
    if node.op != "call_function" or isinstance(getattr(node.meta.get("val"), "dtype", None), torch.dtype):
        return []
    name = _op_name(node)
    if name in _PROMOTING:
        return [a for a in node.args[:2] if isinstance(a, fx.Node)]
    if name in _SAME_DTYPE or \
            node.target in (torch.ops.prims.convert_element_type.default, aten._to_copy.default):
        return [a for a in node.args if isinstance(a, fx.Node)][:1]
    if _evaluable(node):  # max(a, b) is no reduction: _evaluated reads both
        return [a for a in node.args if isinstance(a, fx.Node)]
    return []


def _evaluable(node: fx.Node) -> bool:
    """An aten or prims op (an overload, or the packet the FSDP pass calls) the walk may run on
    stand-ins: one with a tensor input or a ``device`` argument, and no device by position. Every
    device an aten or prims schema takes by keyword is named ``device`` (two ops that compare
    devices aside), and ``_on_meta`` makes it meta, given or not: a traced ``.to(device)`` names a
    device object there, and a factory (a constant gain's ``scalar_tensor``, a pass's ``randint``
    with no device keyword) then makes a meta tensor. So nothing it runs allocates real memory,
    draws from a real generator or starts a device. An op whose tensors are not all direct
    arguments (cat's list, a tensor by keyword) gets graph nodes where it wants tensors and fails,
    which ``_run`` answers as unknown. Python's indexing of a node (``operator.getitem``, as a
    symbolic trace records ``t[0]``) runs too: on a tensor it is torch's own indexing, and a
    multi-output op's list has no stand-in, so its pieces stay unknown."""
    target = node.target
    if target is operator.getitem:
        return any(isinstance(first, fx.Node) for first in node.args[:1])
    namespace = target.namespace if isinstance(target, torch._ops.OpOverload) else \
        target._qualified_op_name.split("::")[0] if isinstance(target, torch._ops.OpOverloadPacket) else None
    return namespace in ("aten", "prims") and not any(isinstance(a, torch.device) for a in node.args) and \
        (any(isinstance(a, fx.Node) for a in node.args) or "device" in node.kwargs or _takes_device(target))


@functools.cache
def _takes_device(target: torch._ops.OpOverload | torch._ops.OpOverloadPacket) -> bool:
    """Whether the op's schema (any overload's, for a packet) has a ``device`` argument."""
    overloads = [getattr(target, name) for name in target.overloads()] \
        if isinstance(target, torch._ops.OpOverloadPacket) else [target]
    return any(arg.name == "device" for overload in overloads for arg in overload._schema.arguments)


def _walk(node: fx.Node, walk: DtypeWalk) -> tuple[torch.dtype, bool] | None:
    """One node's answer from its inputs' answers (``walk.seen``, filled by ``_traced``)."""
    value = node.meta.get("val")
    if isinstance(getattr(value, "dtype", None), torch.dtype):
        return value.dtype, value.dim() == 0
    if node.op == "placeholder":
        return (walk.params[node.name], False) if node.name in walk.params else None  # a shard is never 0-dim
    if node.op != "call_function":
        return None
    inputs = [a for a in node.args if isinstance(a, fx.Node)]
    first = walk.seen.get(inputs[0]) if inputs else None
    # a cast keeps its input's rank; an input the walk cannot follow is taken as dimensioned, as
    # every parameter shard is
    if node.target is torch.ops.prims.convert_element_type.default:  # the dtype by position or by keyword
        dtype = node.args[1] if len(node.args) == 2 else node.kwargs.get("dtype")
        if isinstance(dtype, torch.dtype):
            return dtype, bool(first and first[1])
    if node.target is aten._to_copy.default and isinstance(node.kwargs.get("dtype"), torch.dtype):
        return node.kwargs["dtype"], bool(first and first[1])
    name = _op_name(node)
    if name in _SAME_DTYPE:
        return first
    if name in _PROMOTING and inputs:
        return _promoted(name, node.args, walk)
    if _evaluable(node):
        return _evaluated(node, walk)
    return None


def _evaluated(node: fx.Node, walk: DtypeWalk) -> tuple[torch.dtype, bool] | None:
    """Any other op's result dtype as torch computes it: the op on meta stand-ins of each tensor
    input's dtype, 0-dim or of one element (torch's dtype rules read only dtypes and whether a
    tensor is 0-dim). The stand-ins' result is dimensioned exactly when the real one is, unless it
    comes out 0-dim from a dimensioned input. That is a reduction over every dim (``mean(x)``,
    ``amax(x, [], False)``) only if it also comes out 0-dim from stand-ins of ``_PROBE_RANK`` dims of
    two elements each: a reduction over named dims keeps the rest, an op that drops dims of one
    element (a squeeze) keeps those of two; either leaves the real result's rank to the real input's,
    which the walk does not know, so the answer is unknown."""
    out = _run(node, walk, ())
    if out is None:
        return None
    if out.dim() == 0 and any(walk.seen[a][1] is False for a in node.args if isinstance(a, fx.Node)):
        probe = _run(node, walk, (_PROBE_SIZE,) * _PROBE_RANK)
        if probe is None or probe.dim() != 0:  # the stand-ins cannot tell; the real shapes may
            real = _real(node, walk)
            return None if real is None else (real.dtype, real.dim() == 0)
    return out.dtype, out.dim() == 0


def _real(node: fx.Node, walk: DtypeWalk) -> torch.Tensor | None:
    """``node``'s op run on meta tensors of the real shapes: every input it reads must lead back,
    through ops the walk may run, to a traced value or to a parameter whose shard shape its gathers
    name (``walk.shapes``); else None. Asked only where the stand-ins leave the rank open: a squeeze
    of ``amax(abs(p), [0], True)`` is 0-dim exactly when every row of the shard holds one element,
    and taking it for dimensioned packs a half-precision cast times it in float32. Its own stack,
    as ``_traced``'s, so a chain of any length is followed."""
    def reads(top: fx.Node) -> list[fx.Node]:
        return [a for a in top.args if isinstance(a, fx.Node)] if _runs_real(top, walk) else []

    def answer(top: fx.Node) -> torch.Tensor | None:
        value = top.meta.get("val")
        if isinstance(value, torch.Tensor):
            return _meta_like(value)
        if top.name in walk.shapes and top.name in walk.params:
            return torch.empty(walk.shapes[top.name], dtype=walk.params[top.name], device="meta")
        if not _runs_real(top, walk):
            return None
        args = [walk.real.get(a) if isinstance(a, fx.Node) else a for a in top.args]
        return None if any(a is None for a in args) else _call(top, args)
    return _post_order(node, walk.real, reads, answer)


def _runs_real(node: fx.Node, walk: DtypeWalk) -> bool:
    """Whether ``_real`` runs ``node``'s op (no traced value or known shard shape answers it)."""
    return (not isinstance(node.meta.get("val"), torch.Tensor) and node.name not in walk.shapes
            and node.op == "call_function" and _evaluable(node))


def _meta_like(value: torch.Tensor) -> torch.Tensor | None:
    """A meta tensor of a traced value's shape and dtype (None for a symbolic shape)."""
    try:
        return torch.empty(tuple(int(dim) for dim in value.shape), dtype=value.dtype, device="meta")
    except Exception:  # noqa: BLE001 - a symbolic size: unknown
        return None


def _call(node: fx.Node, args: list) -> torch.Tensor | None:
    """``node``'s op on ``args`` (meta tensors) with its keywords on meta, or None where it does not fit."""
    try:
        out = node.target(*args, **_on_meta(node))
    except Exception:  # noqa: BLE001 - an op these tensors do not fit: unknown
        return None
    return out if isinstance(out, torch.Tensor) else None


def _run(node: fx.Node, walk: DtypeWalk, shape: tuple[int, ...]) -> torch.Tensor | None:
    """``node``'s op on stand-ins (``_standin``; ``shape`` for the dimensioned ones, one element
    where empty), or None where the stand-ins do not fit it (a shape argument) or it gives no tensor."""
    standins = [_standin(arg, walk, shape) if isinstance(arg, fx.Node) else arg for arg in node.args]
    return None if any(standin is None for standin in standins) else _call(node, standins)


def _on_meta(node: fx.Node) -> dict[str, Any]:
    """An op's keywords with its ``device`` (a string or a device object) made ``meta``, and given as
    ``meta`` where the op takes one and the node names none (a factory then makes no real tensor):
    the stand-ins are meta tensors, and a copy out of one to a real device fails."""
    kwargs = {key: "meta" if key == "device" else value for key, value in node.kwargs.items()}
    if "device" not in kwargs and isinstance(node.target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)) \
            and _takes_device(node.target):
        kwargs["device"] = "meta"
    return kwargs


def _standin(node: fx.Node, walk: DtypeWalk, shape: tuple[int, ...] = ()) -> torch.Tensor | None:
    """A meta tensor of ``node``'s walked dtype, 0-dim or dimensioned (``shape``, one element where
    empty); None where it is unknown."""
    found = walk.seen.get(node)
    return None if found is None else torch.empty(() if found[1] else (shape or (1,)), dtype=found[0], device="meta")


def _promoted(name: str, args: tuple, walk: DtypeWalk) -> tuple[torch.dtype, bool] | None:
    """The op's result dtype as torch computes it: the op itself on meta tensors of each input's
    dtype and rank (python scalars as they are), so every promotion rule is torch's own."""
    operands = []
    for arg in args[:2]:
        if isinstance(arg, fx.Node):
            operand = _standin(arg, walk)
            if operand is None:
                return None
            operands.append(operand)
        elif isinstance(arg, (bool, int, float)):
            operands.append(arg)
        else:
            return None
    try:
        out = getattr(torch, name)(*operands)
    except (RuntimeError, TypeError):  # a pair torch refuses (two bools subtracted): unknown
        return None
    return out.dtype, out.dim() == 0


@dataclass(frozen=True)
class _Float:
    """What the hold test reads of a floating dtype."""

    eps: float
    max: float
    smallest_normal: float
    signed_zero: bool  # -0.0 is a value of its own (the fnuz formats have none: their -0 bits are NaN)
    infinite: bool  # it has infinities (e4m3fn and the fnuz formats have none)


@functools.cache
def _finfo(dtype: torch.dtype) -> _Float:
    """``torch.finfo(dtype)`` with its epsilon measured: the gap from 1 to the dtype's next value.
    torch's own is 0.125 for float8_e5m2fnuz, where 1 + 0.125 rounds to 1 (two mantissa bits: 0.25)."""
    info = torch.finfo(dtype)
    eps = info.eps
    while torch.tensor(1.0 + eps, dtype=torch.float64).to(dtype).item() == 1.0:
        eps *= 2
    specials = torch.tensor([-0.0, float("inf")], dtype=torch.float64).to(dtype).to(torch.float64)
    return _Float(eps, info.max, info.smallest_normal, bool(torch.signbit(specials[0])), bool(torch.isinf(specials[1])))


def _holds(narrow: torch.dtype, wide: torch.dtype) -> bool:
    """Whether every value of ``narrow`` is a value of ``wide`` (so a cast there and back is exact)."""
    if narrow == wide:
        return True
    if not wide.is_floating_point or narrow.is_complex or narrow == torch.bool:
        return False
    w = _finfo(wide)
    if not narrow.is_floating_point:
        return max(-torch.iinfo(narrow).min, torch.iinfo(narrow).max) <= 2 / w.eps
    n = _finfo(narrow)
    if (n.signed_zero and not w.signed_zero) or (n.infinite and not w.infinite):
        return False  # a gathered -0.0 or infinity would come back as +0.0 or NaN
    # precision, range, and the smallest subnormal
    return n.eps >= w.eps and n.max <= w.max and n.smallest_normal * n.eps >= w.smallest_normal * w.eps


# Where a bucket's members move several dtypes, the wire is one of these or of theirs.
_WIRE_CANDIDATES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def wire_dtype(moved: list[torch.dtype], spec_dtype: torch.dtype) -> torch.dtype:
    """The one dtype a bucket's copy-in packs: what every member moves, or, when members move several
    (low-precision gathers beside full-precision ones), the narrowest dtype that holds each exactly,
    the parameters' own on a tie: torch.cat would promote them, or refuse float8, and a wider wire
    than needed sends bytes a low-precision gather was meant to save."""
    if len(set(moved)) == 1:
        return moved[0]
    holders = [wide for wide in dict.fromkeys((spec_dtype, *moved, *_WIRE_CANDIDATES))
               if all(_holds(d, wide) for d in moved)]
    return min(holders, key=lambda wide: wide.itemsize)


class _Member:
    """A bucket member's nodes in *this* graph (a plan names nodes; equal signatures make names safe)."""

    def __init__(self, candidate, by_name: dict[str, fx.Node], walk: DtypeWalk):
        self.launch = by_name[candidate.launch.name]
        self.wait = by_name[candidate.wait.name]
        self.source = by_name[candidate.source.name]
        self.local_numel = packed_numel(candidate)
        self.output_shape = candidate.output_shape
        self.dtype = moved_dtype(self.source, candidate.dtype, walk)


def _anchor(bucket: Bucket, members: list[_Member], nodes: list[fx.Node], order: dict[fx.Node, int]) -> fx.Node:
    """The node the fused launch goes before: P = max(earliest member launch, latest input + 1)."""
    first_launch = min(order[m.launch] for m in members)
    latest_input = max(m.ready for m in bucket.members)
    return nodes[max(first_launch, latest_input + 1)]


def _views_before(wait: fx.Node, anchor_index: int, order: dict[fx.Node, int]) -> list[fx.Node]:
    """Views of a member result that sit before the insertion point (they must move after it)."""
    views = helpers.view_closure(wait)[0]
    return sorted((v for v in views if order.get(v, anchor_index) < anchor_index), key=order.__getitem__)


def _new(graph: fx.Graph, target, args: tuple, meta: dict, kwargs: dict | None = None) -> fx.Node:
    node = add_call(graph, target, args, kwargs or {})
    node.meta.update(meta)
    return node


def _fuse_ag(graph: fx.Graph, bucket: Bucket, members: list[_Member], anchor: fx.Node,
             order: dict[fx.Node, int]) -> None:
    first = bucket.members[0]
    degree = len(first.ranks)
    phase = _phase(first.backward)
    total = sum(m.local_numel for m in members)
    moved = [v for m in members for v in _views_before(m.wait, order[anchor], order)]
    wire = wire_dtype([m.dtype for m in members], first.dtype)
    with graph.inserting_before(anchor):
        flats = [_new(graph, aten.reshape.default, (m.source, [-1]), phase) for m in members]
        flats = [flat if m.dtype == wire else _new(graph, torch.ops.prims.convert_element_type.default, (flat, wire), phase)
                 for m, flat in zip(members, flats)]
        packed = _new(graph, aten.cat.default, (flats,), phase)
        launch = _new(graph, members[0].launch.target, (packed, degree, first.group), _launch_meta(bucket, total))
        wait = _new(graph, members[0].wait.target, (launch,), {**phase, "wait_for": launch.name})
        rows = _new(graph, aten.view.default, (wait, [degree, total]), phase)
        offset = 0
        for member in members:
            columns = _new(graph, aten.slice.Tensor, (rows, 1, offset, offset + member.local_numel), phase)
            if member.dtype == wire:
                copy = _new(graph, aten.clone.default, (columns,), phase, {"memory_format": torch.contiguous_format})
            else:  # back to what the member moved: a new tensor, exact by the choice of wire
                copy = _new(graph, torch.ops.prims.convert_element_type.default, (columns, member.dtype), phase)
            result = _new(graph, aten.view.default, (copy, list(member.output_shape)), phase)
            member.wait.replace_all_uses_with(result)
            offset += member.local_numel
    for view in sorted(set(moved), key=order.__getitem__):
        anchor.prepend(view)
    for member in members:
        graph.erase_node(member.wait)
        graph.erase_node(member.launch)


def _fuse_rs(graph: fx.Graph, bucket: Bucket, members: list[_Member], anchor: fx.Node,
             order: dict[fx.Node, int]) -> None:
    first = bucket.members[0]
    degree = len(first.ranks)
    total = sum(m.local_numel for m in members)
    # The planner's consumer walk passes through views (a short rank narrows its uneven shard right
    # after the wait), so a member's views may sit before the split, as an AG member's may.
    moved = [v for m in members for v in _views_before(m.wait, order[anchor], order)]
    prepare = {"autograd_backward": True, "fsdp_bucket_prepare": bucket.bucket_id}
    with graph.inserting_before(anchor):
        rows = [_new(graph, aten.reshape.default, (m.source, [degree, -1]), prepare) for m in members]
        packed = _new(graph, aten.cat.default, (rows, 1), prepare)
        flat = _new(graph, aten.reshape.default, (packed, [-1]),
                    {**prepare, "fsdp_reduce_scatter_prepare": bucket.bucket_id})
        launch = _new(graph, members[0].launch.target, (flat, first.reduce_op, degree, first.group),
                      _launch_meta(bucket, total))
        wait = _new(graph, members[0].wait.target, (launch,), {"autograd_backward": True, "wait_for": launch.name})
        offset = 0
        for member in members:
            piece = _new(graph, aten.slice.Tensor, (wait, 0, offset, offset + member.local_numel),
                         {"autograd_backward": True})
            result = _new(graph, aten.view.default, (piece, list(member.output_shape)), {"autograd_backward": True})
            member.wait.replace_all_uses_with(result)
            offset += member.local_numel
    for view in sorted(set(moved), key=order.__getitem__):
        anchor.prepend(view)
    for member in members:
        graph.erase_node(member.wait)
        graph.erase_node(member.launch)


def _fusion_order(jobs: list[tuple], order: dict[fx.Node, int]) -> list[tuple]:
    """(bucket, members, anchor) jobs, latest anchor first: an earlier bucket's fusion may erase the
    node (a member wait) that a later bucket inserts before."""
    return sorted(jobs, key=lambda job: order[job[2]], reverse=True)


def _apply(graph_module: fx.GraphModule, plan: BucketPlan, kinds: tuple[str, ...]) -> fx.GraphModule:
    check_fresh(graph_module, plan)
    buckets = [b for b in plan.buckets if len(b.members) > 1 and b.members[0].kind in kinds]
    if not buckets:
        return graph_module
    graph = graph_module.graph
    nodes = list(graph.nodes)
    order = {node: index for index, node in enumerate(nodes)}
    by_name = {node.name: node for node in nodes}
    walk = DtypeWalk(param_dtypes(nodes), shapes=param_shapes(nodes))  # shared by every member: no bucket is fused yet
    jobs = []
    for bucket in buckets:
        members = [_Member(candidate, by_name, walk) for candidate in bucket.members]
        jobs.append((bucket, members, _anchor(bucket, members, nodes, order)))
    for bucket, members, anchor in _fusion_order(jobs, order):
        if bucket.members[0].kind == RS_KIND:
            _fuse_rs(graph, bucket, members, anchor, order)
        else:
            _fuse_ag(graph, bucket, members, anchor, order)
    graph.lint()
    graph_module.recompile()
    return graph_module


def apply_ag_buckets(graph_module: fx.GraphModule, plan: BucketPlan) -> fx.GraphModule:
    """Fuse every multi-member all-gather bucket of ``plan`` (forward and backward)."""
    return _apply(graph_module, plan, AG_KINDS)


def apply_rs_buckets(graph_module: fx.GraphModule, plan: BucketPlan) -> fx.GraphModule:
    """Fuse every multi-member reduce-scatter bucket of ``plan``."""
    return _apply(graph_module, plan, (RS_KIND,))
