"""Rewriter bugs: a correct reference rewrite, then damaged the way a real rewriter bug would."""

from __future__ import annotations

import dataclasses
import operator
import os

import torch
from torch import fx

from fsdp_verify.execute.simulated import draws
from fsdp_verify.graph import collectives
from fsdp_verify.graph.ops import _free_tensor_storage
# the correct rules, bound before a planted bug patches the module's own names
from fsdp_verify.reference.rewrite import (_evaluable as _correct_evaluable, _fuse_ag as _correct_fuse_ag,
                                          _fuse_rs as _correct_fuse_rs,
                                          _evaluated as _correct_evaluated, _holds, _op_name,
                                          _promoted as _correct_promoted, _read_by as _correct_read_by,
                                          _walk as _correct_walk, wire_dtype as _correct_wire)

aten = torch.ops.aten

# The reductions over every dim that the reference's walk once named in a table (it now runs any op
# on stand-ins); planted bugs that bring back a table-bound walk read it.
_FULL_REDUCTIONS = frozenset({"sum", "amax", "amin", "max", "min", "prod"})


def refused_after_writing(check_fresh):
    """``check_fresh`` that, on a stale plan, marks the graph's first fused launch before refusing
    (the refusal is right, but the graph it was given is no longer what it was)."""
    def check(module: fx.GraphModule, plan) -> None:
        try:
            check_fresh(module, plan)
        except ValueError:
            for launch in fused_launches(module, AG + RS)[:1]:
                launch.meta["fsdp_stale_plan_seen"] = True
            raise
    return check


def fused_launches(module: fx.GraphModule, kinds: tuple[str, ...]) -> list[fx.Node]:
    """The rewrite's fused launches of ``kinds`` (those marked with ``fsdp_bucket_members``)."""
    return [n for n in module.graph.nodes if n.meta.get("fsdp_bucket_members") and n.meta.get("comm_type") in kinds
            and n.op == "call_function"]


def _same_phase(node: fx.Node, like: fx.Node) -> fx.Node:
    """Tag a node a planted bug adds with its launch's phase, so that only the planted fault shows."""
    if "autograd_backward" in like.meta:
        node.meta["autograd_backward"] = like.meta["autograd_backward"]
    return node


AG = ("fsdp_all_gather", "fsdp_all_gather_backward")
RS = ("fsdp_reduce_scatter",)


def _copy_outs(launch: fx.Node) -> list[fx.Node]:
    wait = next(iter(launch.users))
    rows = next(iter(wait.users))
    return [u for u in rows.users if u.target is aten.slice.Tensor]


def swap_copy_out_offsets(module: fx.GraphModule, rank: int) -> None:
    """The first member's copy-out reads columns at the second member's offset."""
    for launch in fused_launches(module, AG):
        slices = _copy_outs(launch)
        if len(slices) >= 2:
            first, second = slices[0], slices[1]
            total = first.args[0].args[1][1]
            width = first.args[3] - first.args[2]
            start = min(second.args[2], total - width)
            first.args = (first.args[0], 1, start, start + width)
            return


def free_moved_early(module: fx.GraphModule, rank: int) -> None:
    """A member's free is moved right after the copy-out, before the member's consumers."""
    for launch in fused_launches(module, AG):
        for copy_slice in _copy_outs(launch):
            clone = next(iter(copy_slice.users))
            result = next(iter(clone.users))
            frees = [u for u in result.users if u.target is _free_tensor_storage]
            readers = [u for u in result.users if u.target is not _free_tensor_storage]
            if frees and readers:
                result.append(frees[0])
                return


def send_buffer_freed_early(module: fx.GraphModule, rank: int) -> None:
    """Rank 0 frees a fused all-gather's send buffer right after the launch, before its wait (and
    before its peers launch): a real collective would send freed memory."""
    if rank != 0:
        return
    for launch in fused_launches(module, AG):
        if launch.args and isinstance(launch.args[0], fx.Node):
            with module.graph.inserting_after(launch):
                _same_phase(module.graph.call_function(_free_tensor_storage, (launch.args[0],)), launch)
            return


def rs_packed_member_major(module: fx.GraphModule, rank: int) -> None:
    """A fused reduce-scatter packs its members one after another (member-major) instead of each
    rank's shard of every member together (rank-major): each rank receives another rank's part."""
    for launch in fused_launches(module, RS):
        flat = launch.args[0]
        packed = flat.args[0] if isinstance(flat, fx.Node) and flat.args else None
        if not isinstance(packed, fx.Node) or packed.target is not aten.cat.default:
            continue
        rows = packed.args[0]
        for row in rows:
            row.args = (row.args[0], [-1])
        packed.args = (rows, 0)
        return


_EXACT_SUMS = {torch.float16: 2048, torch.bfloat16: 256, torch.float32: 2**24, torch.float64: 2**53}


def _swaps_at_span(tensor: torch.Tensor, degree: int) -> torch.Tensor:
    """``tensor``'s flat elements with the first ones swapped with those one reduce-scatter code
    span (of a ``degree``-rank sum) further on."""
    flat = tensor.reshape(-1).clone()
    span = max(1, (_EXACT_SUMS.get(tensor.dtype, 256) - 1) // degree)
    count = min(span, flat.numel() - span)
    if count > 0:
        first = flat[:count].clone()
        flat[:count] = flat[span:span + count]
        flat[span:span + count] = first
    return flat.reshape(tensor.shape)


def _reaches(node: fx.Node, target: fx.Node, depth: int = 6) -> bool:
    """Whether ``node`` is ``target`` or reads it through at most ``depth`` nodes."""
    return node is target or (depth > 0 and any(_reaches(n, target, depth - 1) for n in node.all_input_nodes))


def output_reads_one_member_twice(module: fx.GraphModule, rank: int) -> None:
    """The graph's output reads a fused reduce-scatter's first member in its second one's place."""
    output = next(n for n in module.graph.nodes if n.op == "output")
    read = [n for n in output.all_input_nodes]
    for launch in fused_launches(module, RS):
        members = [n for n in read if _reaches(n, launch)]
        if len(members) >= 2:
            first, second = members[:2]
            output.args = fx.map_arg(output.args, lambda node: first if node is second else node)
            return


def output_drops_a_member(module: fx.GraphModule, rank: int) -> None:
    """The graph's output leaves out a fused reduce-scatter's last member it reads."""
    output = next(n for n in module.graph.nodes if n.op == "output")
    for launch in fused_launches(module, RS):
        members = [n for n in output.all_input_nodes if _reaches(n, launch)]
        if members and isinstance(output.args[0], (list, tuple)):
            kept = [arg for arg in output.args[0] if arg is not members[-1]]
            output.args = (type(output.args[0])(kept),)
            return


def rs_swaps_at_code_span(module: fx.GraphModule, rank: int) -> None:
    """A fused reduce-scatter's copy-out swaps elements of a member that lie one code span apart
    (a tiling error at that stride): identity codes repeat with that period, so the shared run
    moves equal codes, and only a second run with codes of another digit tells them apart."""
    for launch in fused_launches(module, RS):
        wait = next(iter(launch.users))
        for out in [u for u in wait.users if u.target is aten.slice.Tensor]:
            with module.graph.inserting_after(out):
                swapped = _same_phase(module.graph.call_function(_swaps_at_span, (out, launch.args[2])), launch)
            out.replace_all_uses_with(swapped, delete_user_cb=lambda user: user is not swapped)


def copy_out_reads_launch(module: fx.GraphModule, rank: int) -> None:
    """Copy-out reads the fused launch's handle instead of its wait."""
    for launch in fused_launches(module, AG):
        wait = next(iter(launch.users))
        rows = next(iter(wait.users))
        rows.replace_input_with(wait, launch)
        return


def avg_twice(module: fx.GraphModule, rank: int) -> None:
    """The fused reduce-scatter averages, then divides by the degree once more."""
    for launch in fused_launches(module, RS):
        if launch.args[1] == "avg":
            wait = next(iter(launch.users))
            with module.graph.inserting_after(wait):
                divided = _same_phase(module.graph.call_function(aten.div.Tensor, (wait, float(launch.args[2]))), launch)
            wait.replace_all_uses_with(divided, delete_user_cb=lambda user: user is not divided)
            return


_TENSOR_IN_FIRST = (aten.mul.Tensor, aten.contiguous.default, aten.t.default, aten.view.default)


def rs_source_rescaled(module: fx.GraphModule, rank: int) -> None:
    """One fused reduce-scatter member's source is computed from a halved input (a gradient
    prescale applied a second time, upstream of the bucket): only the source's own value changes,
    which the identity codes that replace it in the shared run would hide from every other reader."""
    for launch in fused_launches(module, RS):
        packed = launch.args[0].args[0]  # flat <- cat(rows) <- reshape(source) per member
        rows = packed.args[0] if packed.target is aten.cat.default else []
        for row in rows:
            source = row.args[0]
            feed = source.args[0] if source.op == "call_function" and source.args else None
            if source.target in _TENSOR_IN_FIRST and isinstance(feed, fx.Node):
                with module.graph.inserting_before(source):
                    halved = module.graph.call_function(aten.mul.Tensor, (feed, 0.5))
                source.replace_input_with(feed, halved)
                return


def wrong_group(module: fx.GraphModule, rank: int) -> None:
    """The fused launch names the wrong process group."""
    groups = {n.args[-1] for n in module.graph.nodes if n.op == "call_function"
              and collectives.op_name(n.target, (collectives.NAMESPACE,)) and n.args and isinstance(n.args[-1], str)}
    for launch in fused_launches(module, AG + RS):
        other = sorted(groups - {launch.args[-1]})
        if other:
            launch.args = (*launch.args[:-1], other[0])
            return


def drop_fused_meta(module: fx.GraphModule, rank: int) -> None:
    """Fused launches lose ``fsdp_bucket_members``: re-planning would bucket them again."""
    for launch in fused_launches(module, AG + RS):
        launch.meta.pop("fsdp_bucket_members")


def rank_dependent_packing(module: fx.GraphModule, rank: int) -> None:
    """Odd ranks pack an AG bucket's first two members in the other order (a cross-rank layout bug)."""
    if rank % 2 == 0:
        return
    for launch in fused_launches(module, AG):
        cat = launch.args[0]
        parts = list(cat.args[0])
        if len(parts) >= 2:
            parts[0], parts[1] = parts[1], parts[0]
            cat.args = (parts, *cat.args[1:])
            return


def _odd_rank_process() -> bool:
    """Whether this process's ``RANK`` environment variable is odd (unset in the harness: never)."""
    return int(os.environ.get("RANK", "0")) % 2 == 1


def packing_follows_rank_env(module: fx.GraphModule, rank: int) -> None:
    """The rewriter reads the process's ``RANK``, not the rank it is given: an odd rank process packs
    an AG bucket's first two members in the other order (the plan and its digest are untouched)."""
    if _odd_rank_process():
        rank_dependent_packing(module, 1)


def bucket_padded_by_rank_env(module: fx.GraphModule, rank: int) -> None:
    """An odd rank process (by its ``RANK``) appends its first member once more to the first fused AG
    buffer and widens its own rows to match: each rank is consistent alone, but the ranks gather
    buffers of different sizes (the plan and its digest are untouched)."""
    if not _odd_rank_process():
        return
    for launch in fused_launches(module, AG):
        cat, slices = launch.args[0], _copy_outs(launch)
        rows = next(iter(next(iter(launch.users)).users))
        if slices and len(rows.args) > 1 and len(rows.args[1]) == 2:
            parts = list(cat.args[0])
            cat.args = ([*parts, parts[0]], *cat.args[1:])
            width = slices[0].args[3] - slices[0].args[2]
            rows.args = (rows.args[0], [rows.args[1][0], rows.args[1][1] + width])
            return


def leak_fused_buffers(module: fx.GraphModule, rank: int) -> None:
    """Each fused AG result is copied three times and kept alive to the end of the graph."""
    output = next(iter(module.graph.find_nodes(op="output")))
    for launch in fused_launches(module, AG):
        wait = next(iter(launch.users))
        with module.graph.inserting_after(wait):
            copies = [_same_phase(module.graph.call_function(aten.clone.default, (wait,)), launch) for _ in range(3)]
        with module.graph.inserting_before(output):
            module.graph.call_function(operator.getitem, (copies, 0))


def gather_in_float64(module: fx.GraphModule, rank: int) -> None:
    """Fused all-gathers of narrower floats send float64 (exact both ways: the values survive, the
    plan's dtype and bytes on the wire do not)."""
    for launch in fused_launches(module, AG):
        source, wait = launch.args[0], next(iter(launch.users))
        dtype = launch.meta["fsdp_bucket_spec"]["dtype"]
        if dtype == torch.float64:
            continue
        with module.graph.inserting_before(launch):
            wide = _same_phase(module.graph.call_function(aten._to_copy.default, (source,), {"dtype": torch.float64}),
                               launch)
        launch.args = (wide, *launch.args[1:])
        with module.graph.inserting_after(wait):
            narrow = _same_phase(module.graph.call_function(aten._to_copy.default, (wait,), {"dtype": dtype}), launch)
        wait.replace_all_uses_with(narrow, delete_user_cb=lambda user: user is not narrow)


def _wire_of_first_member(moved: list, spec_dtype: torch.dtype) -> torch.dtype:
    """A bucket packs in its first member's dtype: a wider member after a low-precision one is
    rounded (exact whenever the first member is the widest)."""
    return moved[0]


def _wire_is_parameter_dtype(moved: list, spec_dtype: torch.dtype) -> torch.dtype:
    """A bucket packs in its parameters' dtype wherever that holds each member: low-precision
    gathers then send full precision (exact values; the dtype and bytes on the wire are not what
    the members moved)."""
    return spec_dtype if all(_holds(d, spec_dtype) for d in moved) else _correct_wire(moved, spec_dtype)


def _wire_in_float64(moved: list, spec_dtype: torch.dtype) -> torch.dtype:
    """A bucket whose members move several dtypes packs in float64, which holds every one of them:
    exact, but fp16 beside bf16 sends twice the bytes float32 would."""
    return moved[0] if len(set(moved)) == 1 else torch.float64


def _promoted_by_type(name: str, args: tuple, walk) -> tuple[torch.dtype, bool] | None:
    """A member's dtype through arithmetic by ``torch.promote_types`` alone: a bf16 cast times a
    0-dim float32 gain is taken for float32 (torch gives bf16), so the member is packed and handed
    back in float32."""
    found = [walk.seen.get(a) for a in args[:2] if isinstance(a, fx.Node)]
    if not found or not all(found):
        return None
    try:
        out = found[0][0]
        for other in found[1:]:
            out = torch.promote_types(out, other[0])
    except RuntimeError:  # float8 does not promote
        return None
    return out, False


def promoted_copy_in(module: fx.GraphModule, rank: int) -> None:
    """A fused all-gather packs its members as ``torch.cat`` promotes them, and each copy-out keeps
    the promoted dtype (a bucket that mixes a low-precision gather with a full-precision one hands
    the low-precision member's consumers another dtype; float8 beside another dtype fails to run)."""
    convert = torch.ops.prims.convert_element_type.default
    for launch in fused_launches(module, AG):
        cat = launch.args[0]
        if not isinstance(cat, fx.Node) or cat.target is not aten.cat.default:
            continue
        casts = [f for f in cat.args[0] if isinstance(f, fx.Node) and f.target is convert]
        cat.args = ([f.args[0] if f in casts else f for f in cat.args[0]], *cat.args[1:])
        for cast in casts:
            if not cast.users:
                module.graph.erase_node(cast)
        for piece in _copy_outs(launch):
            for copy in [u for u in piece.users if u.target is convert]:
                copy.target, copy.args, copy.kwargs = aten.clone.default, (piece,), {}


def _storage_order_flat(tensor: torch.Tensor) -> torch.Tensor:
    """A member's elements as its storage holds them: its logical order only when it is contiguous."""
    return tensor.as_strided((tensor.numel(),), (1,))


def packs_storage_order(module: fx.GraphModule, rank: int) -> None:
    """A fused all-gather's copy-in flattens each member by reading its storage, not its elements:
    exact on every contiguous source, a permuted member on a non-contiguous one."""
    for launch in fused_launches(module, AG):
        cat = launch.args[0]
        if not isinstance(cat, fx.Node) or cat.target is not aten.cat.default:
            continue
        for flat in cat.args[0]:
            if isinstance(flat, fx.Node) and flat.target is aten.reshape.default:
                flat.target, flat.args = _storage_order_flat, (flat.args[0],)


def fused_spec_from_shard(module: fx.GraphModule, rank: int) -> None:
    """A fused all-gather's ``fsdp_bucket_spec`` gives its output as its input (a cost model would
    see a gather that moves nothing); the values are untouched."""
    for launch in fused_launches(module, AG):
        spec = launch.meta.get("fsdp_bucket_spec")
        if isinstance(spec, dict):
            launch.meta["fsdp_bucket_spec"] = {**spec, "output_shape": spec.get("input_shape")}


def copy_out_tagged_forward(module: fx.GraphModule, rank: int) -> None:
    """A backward all-gather bucket's copy-out nodes lose their phase flag (a later round would
    see a phase boundary; later passes treat them as forward)."""
    for launch in fused_launches(module, ("fsdp_all_gather_backward",)):
        for piece in _copy_outs(launch):
            for node in (piece, *piece.users):
                node.meta.pop("autograd_backward", None)


def _earliest_first(jobs: list[tuple], order: dict) -> list[tuple]:
    """Fusion jobs in anchor order, earliest first: a later bucket may then insert before a member
    wait that the earlier bucket's fusion erased."""
    return sorted(jobs, key=lambda job: order[job[2]])


def fuses_earliest_first() -> list[tuple]:
    """Earliest-first fusion in a rewriter that does not lint what it built (FX's lint is what
    stops the reference's own graph there), so the graph it hands back reads values it defines
    later or no longer holds."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_fusion_order", _earliest_first), (fx.Graph, "lint", lambda graph: None)]


def _views_left(name: str, correct) -> list[tuple]:
    """``correct`` (a fusion of the reference) told that its anchor sits before every node, so it finds
    no view of a member's result to move past the fused launch, in a rewriter that does not lint."""
    from fsdp_verify.reference import rewrite

    def fuse(graph: fx.Graph, bucket, members, anchor: fx.Node, order: dict) -> None:
        correct(graph, bucket, members, anchor, {**order, anchor: -1})  # no view sits before -1
    return [(rewrite, name, fuse), (fx.Graph, "lint", lambda graph: None)]


def views_left_behind() -> list[tuple]:
    """The all-gather fusion moves no view of a member's result past the fused launch: where B's
    source is computed after A's first view, that view now reads A's copy-out, defined after it."""
    return _views_left("_fuse_ag", _correct_fuse_ag)


def rs_views_left_behind() -> list[tuple]:
    """The reduce-scatter fusion moves no view of a member's result past the fused launch: a short
    rank of an uneven shard narrows its reduced gradient right after the wait, and where another
    member's gradient is ready later that view now reads the copy-out defined after it."""
    return _views_left("_fuse_rs", _correct_fuse_rs)


def anchor_one_late() -> list[tuple]:
    """The fused launch goes one node after P (latest input + 2, not + 1), in a rewriter that does not
    lint: where A's first real consumer directly follows B's source (a view of A, then B's copy, then
    the consumer), that consumer now comes before the fused launch and reads A's copy-out, defined
    after it."""
    from fsdp_verify.reference import rewrite

    def late(bucket, members, nodes: list, order: dict) -> fx.Node:
        first_launch = min(order[m.launch] for m in members)
        latest_input = max(m.ready for m in bucket.members)
        return nodes[min(max(first_launch, latest_input + 2), len(nodes) - 1)]
    return [(rewrite, "_anchor", late), (fx.Graph, "lint", lambda graph: None)]


def _capped(node: fx.Node, walk, depth: int = 0):
    """The dtype walk as it once was: recursive, giving up (None: the spec dtype) past 32 steps."""
    from fsdp_verify.reference import rewrite
    if node not in walk.seen:
        traced = isinstance(getattr(node.meta.get("val"), "dtype", None), torch.dtype)
        if depth > 32 and node.op == "call_function" and not traced:
            walk.seen[node] = None
        else:
            for source in rewrite._read_by(node):
                _capped(source, walk, depth + 1)
            walk.seen[node] = rewrite._walk(node, walk)
    return walk.seen[node]


def walk_capped() -> list[tuple]:
    """A member's dtype followed back at most 32 steps: a cast further up its source chain is lost,
    and the member is packed and handed back in the spec dtype."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_traced", lambda node, walk: _capped(node, walk))]


def promoted_rank_flipped() -> list[tuple]:
    """Arithmetic's result is taken as 0-dim where it is dimensioned and the other way round: a
    scaled cast scaled again by a 0-dim gain is then promoted to the gain's float32."""
    from fsdp_verify.reference import rewrite

    def flipped(name: str, args: tuple, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_promoted(name, args, walk)
        return None if found is None else (found[0], not found[1])
    return [(rewrite, "_promoted", flipped)]


def integer_holds_floats() -> list[tuple]:
    """An integer dtype is taken to hold any dtype that is not complex: an int8 gather (a quantised
    weight) beside a float32 one is the narrowest candidate, and the float32 member is truncated."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_holds", lambda narrow, wide: (not wide.is_floating_point and not narrow.is_complex
                                                      and wide != torch.bool) or _holds(narrow, wide))]


def finfo_eps_trusted() -> list[tuple]:
    """The hold test reads ``torch.finfo`` as it is: its float8_e5m2fnuz epsilon is 0.125 (the format
    has two mantissa bits: 0.25), so e5m2fnuz is taken to hold e4m3fnuz and a bucket of AMD's two
    float8 formats is packed in e5m2fnuz, rounding the e4m3fnuz member."""
    from fsdp_verify.reference import rewrite

    correct = rewrite._finfo

    def trusted(dtype: torch.dtype):
        return dataclasses.replace(correct(dtype), eps=torch.finfo(dtype).eps)
    return [(rewrite, "_finfo", trusted)]


def subnormal_bound_ignored() -> list[tuple]:
    """Whether one float dtype holds another is judged by precision and range, the smallest
    subnormal unread (every smallest normal read as 0): e4m3fn is taken to hold AMD's e4m3fnuz
    (whose steps go down to 2**-10, below e4m3fn's 2**-9), so a bucket of the two vendors' formats
    packs in e4m3fn and rounds the fnuz member's smallest values."""
    from fsdp_verify.reference import rewrite

    correct = rewrite._finfo

    def unread(dtype: torch.dtype):
        return dataclasses.replace(correct(dtype), smallest_normal=0.0)
    return [(rewrite, "_finfo", unread)]


def integer_bound_ignored() -> list[tuple]:
    """Every integer dtype is taken to fit every float one (the bound of exact integers unread): an
    int32 gather (packed 4-bit weights) beside a bf16 one is packed in bf16 and rounded."""
    from fsdp_verify.reference import rewrite

    def unbounded(narrow: torch.dtype, wide: torch.dtype) -> bool:
        if wide.is_floating_point and not narrow.is_floating_point and not narrow.is_complex and narrow != torch.bool:
            return True
        return _holds(narrow, wide)
    return [(rewrite, "_holds", unbounded)]


def precision_ignored() -> list[tuple]:
    """Whether one float dtype holds another is judged by range alone: fp16 beside a bf16 parameter's
    gather packs in bf16, rounding fp16's three extra mantissa bits."""
    from fsdp_verify.reference import rewrite

    def by_range(narrow: torch.dtype, wide: torch.dtype) -> bool:
        if narrow.is_floating_point and wide.is_floating_point and not narrow.is_complex:
            return torch.finfo(narrow).max <= torch.finfo(wide).max
        return _holds(narrow, wide)
    return [(rewrite, "_holds", by_range)]


def cast_keyword_ignored() -> list[tuple]:
    """A cast is known only with its dtype by position: ``convert_element_type(x, dtype=bf16)`` is
    unknown, so its member is packed and handed back in its parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def positional_only(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        if node.target is torch.ops.prims.convert_element_type.default and len(node.args) < 2:
            return None
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", positional_only)]


def opaque_op_taken_for_reduction() -> list[tuple]:
    """An op the walk does not know, with one known input, is taken for a 0-dim reduction of it: relu
    of a float32 parameter plus its bf16 cast is then promoted to bf16."""
    from fsdp_verify.reference import rewrite

    def as_reduction(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        inputs = [a for a in node.args if isinstance(a, fx.Node)]
        if node.op == "call_function" and len(inputs) == 1 and "val" not in node.meta and \
                _op_name(node) not in _FULL_REDUCTIONS and inputs[0] in walk.seen and \
                node.target in (aten.relu.default, aten.exp.default, aten.sigmoid.default, aten.tanh.default):
            found = walk.seen[inputs[0]]
            return None if found is None else (found[0], True)
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", as_reduction)]


def opaque_ops_fall_back() -> list[tuple]:
    """An op outside the walk's tables is unknown, so its member falls back to the parameter's dtype:
    relu of a bf16 cast is packed and handed back as float32 (what the reference did before it ran
    such ops on stand-ins)."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_evaluated", lambda node, walk: None)]


def products_taken_dimensioned() -> list[tuple]:
    """Arithmetic's result is always taken as dimensioned: a gain squared (0-dim) then widens a bf16
    cast to float32."""
    from fsdp_verify.reference import rewrite

    def dimensioned(name: str, args: tuple, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_promoted(name, args, walk)
        return None if found is None else (found[0], False)
    return [(rewrite, "_promoted", dimensioned)]


def traced_rank_flipped() -> list[tuple]:
    """A traced value's rank is read the wrong way round: in a graph a pass edited after tracing, a
    bf16 cast times its traced 0-dim gain is then promoted to float32."""
    from fsdp_verify.reference import rewrite

    def flipped(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        value = node.meta.get("val")
        if isinstance(getattr(value, "dtype", None), torch.dtype):
            return value.dtype, value.dim() != 0
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", flipped)]


def reduction_keywords_unknown() -> list[tuple]:
    """A full reduction with a keyword (``sum(x, dtype=float32)``) is unknown, as the reference once
    had it: a gain computed so leaves its scaled cast to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def unknown(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        if node.op == "call_function" and "val" not in node.meta and _op_name(node) in _FULL_REDUCTIONS and node.kwargs:
            return None
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", unknown)]


def dtype_keyword_read_as_cast() -> list[tuple]:
    """Any op with a ``dtype`` keyword is read as a cast that keeps its input's rank: a gain summed with
    ``dtype=float32`` is then dimensioned and widens its bf16 cast to float32."""
    from fsdp_verify.reference import rewrite

    def as_cast(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        inputs = [a for a in node.args if isinstance(a, fx.Node)]
        if node.op == "call_function" and "val" not in node.meta and isinstance(node.kwargs.get("dtype"), torch.dtype):
            first = walk.seen.get(inputs[0]) if inputs else None
            return node.kwargs["dtype"], bool(first and first[1])
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", as_cast)]


def python_operators_unknown() -> list[tuple]:
    """``operator.mul`` (a symbolic trace's ``cast * gain``) is not followed: the scaled cast falls back
    to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def unknown(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        if node.target in (operator.mul, operator.add, operator.sub, operator.truediv):
            return None
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", unknown)]


def packets_not_evaluated() -> list[tuple]:
    """An op called as its packet (``aten.relu``, as the FSDP pass calls ops) is not run on stand-ins:
    relu of a bf16 cast falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_evaluable", lambda node: isinstance(node.target, torch._ops.OpOverload)
             and _correct_evaluable(node))]


def casts_of_unknown_values_unknown() -> list[tuple]:
    """A cast of a value the walk cannot follow is unknown too, though the cast alone decides its dtype:
    ``convert(cat([p]), bf16)`` falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def unknown(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        inputs = [a for a in node.args if isinstance(a, fx.Node)]
        if node.target is torch.ops.prims.convert_element_type.default and inputs and walk.seen.get(inputs[0]) is None:
            return None
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", unknown)]


def bare_reductions_unknown() -> list[tuple]:
    """A full reduction with its dims left to their default (``amax(x)``) is taken for a reduction over
    dims the stand-in lacks: unknown, so the scaled cast it gains falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def unknown(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        if node.op == "call_function" and "val" not in node.meta and _op_name(node) in _FULL_REDUCTIONS \
                and len(node.args) == 1:
            return None
        return _correct_walk(node, walk)
    return [(rewrite, "_walk", unknown)]


def standins_empty() -> list[tuple]:
    """The walk's stand-ins hold no element: an op that refuses an empty input (``amax`` over every
    dim, named by keyword) then fails on them, its result is unknown, and the scaled cast it gains
    falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def empty(node: fx.Node, walk, shape: tuple[int, ...] = ()) -> torch.Tensor | None:
        found = walk.seen.get(node)
        return None if found is None else torch.empty(() if found[1] else (0,), dtype=found[0], device="meta")
    return [(rewrite, "_standin", empty)]


def full_reductions_by_table() -> list[tuple]:
    """A 0-dim result from a dimensioned input is taken for a reduction over every dim only where the
    op is one the walk's table names, its dims by position or left out (as the reference once had
    it): ``mean(abs(p))`` or ``amax(x, [], False)`` as a gain is unknown, and the scaled cast falls
    back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def by_table(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_evaluated(node, walk)
        dimensioned = any(walk.seen.get(a) is not None and not walk.seen[a][1]
                          for a in node.args if isinstance(a, fx.Node))
        if found is not None and found[1] and dimensioned and \
                (_op_name(node) not in _FULL_REDUCTIONS or len(node.args) > 2):
            return None
        return found
    return [(rewrite, "_evaluated", by_table)]


def full_reductions_need_real_shapes() -> list[tuple]:
    """A reduction the stand-ins show full is known only where the walk can also run it on the real
    shapes: a gain reducing ``-abs(p)`` negated by Python's ``-`` (which the walk follows by name but
    cannot run) is unknown, and the scaled cast it gains falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def needs_real(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_evaluated(node, walk)
        dimensioned = any(walk.seen.get(a) is not None and not walk.seen[a][1]
                          for a in node.args if isinstance(a, fx.Node))
        if found is not None and found[1] and dimensioned and rewrite._real(node, walk) is None:
            return None
        return found
    return [(rewrite, "_evaluated", needs_real)]


def probe_skipped() -> list[tuple]:
    """The second stand-ins have one dim, as the first: a reduction over dim 0 comes out 0-dim from
    both, so a per-column gain (``sum(abs(p), [0])``) is taken for 0-dim and its float32 product
    is packed and handed back in the cast's half precision."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_PROBE_RANK", 1)]


def probe_of_ones() -> list[tuple]:
    """The second stand-ins hold one element per dim: a squeeze drops all four dims of them, as it does
    the one of the first, so a per-column gain squeezed out of ``amax(abs(p), [0], True)`` is taken
    for 0-dim and its float32 product is packed in the cast's half precision."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_PROBE_SIZE", 1)]


def to_copy_read_as_0dim() -> list[tuple]:
    """A ``_to_copy`` naming its dtype is taken for 0-dim wherever its input is followed: a scaled
    cast written ``_to_copy(p, dtype=bf16) * gain`` promotes with its 0-dim float32 gain to float32."""
    from fsdp_verify.reference import rewrite

    def walk_(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_walk(node, walk)
        untraced = not isinstance(getattr(node.meta.get("val"), "dtype", None), torch.dtype)
        if untraced and node.target is aten._to_copy.default and found is not None:
            inputs = [a for a in node.args if isinstance(a, fx.Node)]
            return found[0], bool(inputs) and walk.seen.get(inputs[0]) is not None
        return found
    return [(rewrite, "_walk", walk_)]


def real_rank_read_as_dimensioned() -> list[tuple]:
    """Where the stand-ins leave a result's rank open, the walk runs the op on the real shapes and
    keeps the real result's dtype but takes it for dimensioned: a half-precision cast times a gain
    squeezed to a scalar is packed in float32."""
    from fsdp_verify.reference import rewrite

    def evaluated(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_evaluated(node, walk)
        if found is None or not found[1]:
            return found
        if not any(walk.seen.get(a) is not None and walk.seen[a][1] is False
                   for a in node.args if isinstance(a, fx.Node)):
            return found  # 0-dim from 0-dim inputs: the stand-ins tell
        probe = rewrite._run(node, walk, (rewrite._PROBE_SIZE,) * rewrite._PROBE_RANK)
        return (found[0], False) if probe is None or probe.dim() != 0 else found
    return [(rewrite, "_evaluated", evaluated)]


def real_shapes_ignored() -> list[tuple]:
    """The dtype walk never runs an op on the real shard shapes: where the stand-ins leave a result's
    rank open (a squeeze of a per-row reduction), the cast after it takes its input for dimensioned,
    so a half-precision cast times a gain squeezed to a scalar is packed in float32."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_real", lambda node, walk: None)]


def shard_shapes_unread() -> list[tuple]:
    """The parameters' shard shapes are never read from their gathers' specs: the walk cannot run an
    op on the real shapes where the stand-ins leave a rank open, so a half-precision cast times a gain
    squeezed to a scalar is packed in float32 (as ``real_shapes_ignored``, one step earlier)."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "param_shapes", lambda nodes: {})]


def device_key_by_identity() -> list[tuple]:
    """The walk finds an op's ``device`` keyword by identity, as if every keyword name were the
    interned literal: on a graph whose names are new strings (loaded from disk, or built) the copy
    ``_to_copy(cast, device="cpu")`` runs on a meta stand-in with its real device, fails, and the
    member is packed in the parameter's dtype."""
    from fsdp_verify.reference import rewrite
    device = "device"

    def by_identity(kwargs) -> dict:
        return {key: "meta" if key is device else value for key, value in kwargs.items()}
    return [(rewrite, "_on_meta", by_identity)]


def collectives_not_followed() -> list[tuple]:
    """The walk treats a collective and its wait as ops it cannot follow (as a table of compute ops
    alone would): a scaled cast whose gain is all-reduced over the group, as float8 training syncs
    amax, falls back to the parameter's dtype, though torch keeps the cast's."""
    from fsdp_verify.reference import rewrite
    collectives = {"all_gather_into_tensor", "wait_tensor", "reduce_scatter_tensor", "all_reduce"}
    return [(rewrite, "_SAME_DTYPE", rewrite._SAME_DTYPE - collectives)]


def real_shapes_asked_of_every_result() -> list[tuple]:
    """The walk asks the real shapes of every result with a dimensioned input, not only of a 0-dim one
    whose rank the stand-ins leave open: relu of a cast of a value it cannot follow (``cat([p])``) has
    no real shapes, so its answer is lost and the member falls back to the parameter's dtype, though
    the cast decides it."""
    from fsdp_verify.reference import rewrite

    def evaluated(node: fx.Node, walk) -> tuple[torch.dtype, bool] | None:
        found = _correct_evaluated(node, walk)
        dimensioned = any(walk.seen.get(a) is not None and walk.seen[a][1] is False
                          for a in node.args if isinstance(a, fx.Node))
        if found is None or found[1] or not dimensioned:
            return found
        real = rewrite._real(node, walk)
        return None if real is None else (real.dtype, real.dim() == 0)
    return [(rewrite, "_evaluated", evaluated)]


def unrunnable_inputs_unread() -> list[tuple]:
    """The walk reads a same-dtype op's input only where it could also run the op (one branch for
    both): a collective's wait, a ``_c10d_functional`` op the walk follows by name but never runs,
    answers before its input is walked, so an all-reduced gain is unknown and its scaled cast falls
    back to the parameter's dtype, though torch keeps the cast's."""
    from fsdp_verify.reference import rewrite

    def reading(node: fx.Node) -> list[fx.Node]:
        runnable = node.op == "call_function" and (_op_name(node) in rewrite._PROMOTING or _correct_evaluable(node))
        return _correct_read_by(node) if runnable else []
    return [(rewrite, "_read_by", reading)]


def arithmetic_read_as_any_op() -> list[tuple]:
    """The walk reads arithmetic's operands as any other op's, only where it could run the op:
    ``operator.mul`` (a symbolic trace's ``cast * gain``) is followed by name, but its operands are
    never walked first, so the scaled cast falls back to the parameter's dtype."""
    from fsdp_verify.reference import rewrite

    def reading(node: fx.Node) -> list[fx.Node]:
        if node.op == "call_function" and _op_name(node) in rewrite._PROMOTING and not _correct_evaluable(node):
            return []
        return _correct_read_by(node)
    return [(rewrite, "_read_by", reading)]


def param_dtypes_unread() -> list[tuple]:
    """The walk never takes a parameter's dtype from its gathers' specs: an untraced parameter is
    unknown, so the gain of a scaled cast (its amax) is too, and the bf16 member falls back to float32."""
    from fsdp_verify.reference import rewrite

    def nothing(nodes) -> dict:
        return {}
    return [(rewrite, "param_dtypes", nothing)]


def device_objects_refused() -> list[tuple]:
    """The walk runs no op with a device object among its keywords: ``_to_copy(cast,
    device=torch.device("cpu"))``, a traced graph's move of a bf16 cast, is unknown, and its member
    is packed in the parameter's dtype (a device given as a string still runs)."""
    from fsdp_verify.reference import rewrite

    def refusing(node: fx.Node) -> bool:
        return _correct_evaluable(node) and not any(isinstance(v, torch.device) for v in node.kwargs.values())
    return [(rewrite, "_evaluable", refusing)]


def factories_unevaluated() -> list[tuple]:
    """The walk runs only ops with a tensor input: a constant gain made by a factory
    (``scalar_tensor(0.5, dtype=float32, device=...)``) is unknown, and its scaled cast falls back to
    the parameter's dtype, though torch keeps the cast's."""
    from fsdp_verify.reference import rewrite

    def with_input(node: fx.Node) -> bool:
        return _correct_evaluable(node) and any(isinstance(a, fx.Node) for a in node.args)
    return [(rewrite, "_evaluable", with_input)]


def first_operand_decides() -> list[tuple]:
    """Arithmetic takes its first operand's dtype: a bf16 cast plus a float32 value (relu of the
    parameter) is packed as bf16, where torch promotes the sum to float32."""
    from fsdp_verify.reference import rewrite

    def first(name: str, args: tuple, walk) -> tuple[torch.dtype, bool] | None:
        return walk.seen.get(args[0]) if args and isinstance(args[0], fx.Node) else None
    return [(rewrite, "_promoted", first)]


def uint8_exceeds_bf16() -> list[tuple]:
    """An integer fits a float dtype only below 1/eps (half the exact span): uint8 beside a bf16 gather
    is packed in float32, wider than bf16, which holds all 256 values."""
    from fsdp_verify.reference import rewrite

    def tight(narrow: torch.dtype, wide: torch.dtype) -> bool:
        if narrow != wide and wide.is_floating_point and not narrow.is_floating_point and not narrow.is_complex \
                and narrow != torch.bool:
            return max(-torch.iinfo(narrow).min, torch.iinfo(narrow).max) <= 1 / torch.finfo(wide).eps
        return _holds(narrow, wide)
    return [(rewrite, "_holds", tight)]


class _ShapesOfEveryDtype(dict):
    """Shard shapes that claim to know every parameter whose dtype the walk knows."""

    def __init__(self, shapes: dict, params: dict):
        super().__init__(shapes)
        self.params = params

    def __contains__(self, name: object) -> bool:
        return dict.__contains__(self, name) or name in self.params


def real_shape_of_any_known_parameter() -> list[tuple]:
    """The real-shape walk takes a parameter whose collectives name its dtype for one whose gathers
    name its shard shape too: a gain that reads a neighbour gathered with a symbolic shape raises
    KeyError, and the whole rewrite with it."""
    from fsdp_verify.reference import rewrite
    correct = rewrite._real

    def real(node: fx.Node, walk) -> torch.Tensor | None:
        return correct(node, dataclasses.replace(walk, shapes=_ShapesOfEveryDtype(walk.shapes, walk.params)))
    return [(rewrite, "_real", real)]


def device_less_factories_unknown() -> list[tuple]:
    """The walk runs a factory only where the node names its device (the reference until session 35):
    a random gain a pass wrote with no device keyword is unknown, so its scaled cast is packed and
    handed back in the parameter's dtype, though torch keeps the cast's."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_takes_device", lambda target: False)]


def device_less_factories_run_for_real() -> list[tuple]:
    """The walk gives a factory ``device="meta"`` only where the node names a device: one that names
    none runs on the real default device, so a pass's random gain draws from torch's global generator
    during the compile (right dtype, every later random number of the step moved)."""
    from fsdp_verify.reference import rewrite

    def named_only(node: fx.Node) -> dict:
        return {key: "meta" if key == "device" else value for key, value in node.kwargs.items()}
    return [(rewrite, "_on_meta", named_only)]


def python_indexing_unknown() -> list[tuple]:
    """The walk runs no Python function, indexing included (the reference until session 35): a gain
    a symbolic trace indexed (``amax(abs(p), [0], True)[0]``) is unknown, the cast after it takes it
    for dimensioned, and a 1-D shard's half-precision product is packed and handed back in float32."""
    from fsdp_verify.reference import rewrite

    def no_python(node: fx.Node) -> bool:
        return node.target is not operator.getitem and _correct_evaluable(node)
    return [(rewrite, "_evaluable", no_python)]


def every_keyword_made_meta() -> list[tuple]:
    """The walk makes every keyword of an op it runs ``meta``, not only the device: a gain of
    ``std(abs(p), correction=0)`` then fails on the stand-ins, is unknown, and its bf16 product is
    packed and handed back in float32."""
    from fsdp_verify.reference import rewrite
    correct = rewrite._on_meta

    def all_meta(node: fx.Node) -> dict:
        return {**correct(node), **{key: "meta" for key in node.kwargs}}
    return [(rewrite, "_on_meta", all_meta)]


def every_op_given_a_device() -> list[tuple]:
    """The walk gives every op it runs ``device="meta"``, whether its schema takes one or not: a gain
    of ``std(abs(p), correction=0)`` then fails on the stand-ins, is unknown, and its bf16 product is
    packed and handed back in float32."""
    from fsdp_verify.reference import rewrite
    return [(rewrite, "_takes_device", lambda target: True)]


def random_factory_hoisted(module: fx.GraphModule, rank: int) -> None:
    """The last random op with no input (a factory) is hoisted to the top of the graph, as a pass
    that prefetches a gather's whole input chain moves it: it now draws before the random ops that
    came first, and each rank's numbers go to other ops (the frees it crosses tell ``ordering``; the
    numbers, ``numerics``)."""
    factories = [node for node in module.graph.nodes
                 if node.op == "call_function" and draws(node.target) and not node.all_input_nodes]
    if len(factories) < 2:
        return
    next(node for node in module.graph.nodes if node.op != "placeholder").prepend(factories[-1])
