"""torch.fx passes that import only torch, for ``fx-pass:`` targets: inductor's all-gather bucketing
as it is (``correct``) and with one planted bug each (a value change, a crash, a dtype change).

Repro tests run scripts written for these in an interpreter where fsdp_verify cannot be imported.
"""

from __future__ import annotations

import operator
import os
import random
import time

import torch
from torch import fx
from torch._inductor.fx_passes.bucketing import bucket_all_gather
from torch._inductor.pattern_matcher import stable_topological_sort

WAIT = torch.ops._c10d_functional.wait_tensor.default
AG = torch.ops._c10d_functional.all_gather_into_tensor.default


def correct(gm: fx.GraphModule) -> None:
    """Inductor's all-gather bucketing, then its stable topological sort."""
    bucket_all_gather(gm)
    stable_topological_sort(gm.graph)


def never_matches(gm: fx.GraphModule) -> None:
    """Planted no-op: inductor's bucketing, asked only where a launch is the op's packet
    (``all_gather_into_tensor``), which post-grad graphs never hold (they call ``.default``): it
    never fuses, so every check passes on every graph."""
    packet = torch.ops._c10d_functional.all_gather_into_tensor
    if any(node.target is packet for node in gm.graph.nodes):
        correct(gm)


def _insert_after(graph: fx.Graph, node: fx.Node, target, *extra, **kwargs) -> fx.Node:
    with graph.inserting_after(node):
        new = graph.call_function(target, (node, *extra), kwargs)
    node.replace_all_uses_with(new, delete_user_cb=lambda user: user is not new)
    return new


def negates_first_wait(gm: fx.GraphModule) -> None:
    """Planted value bug: the first gathered result reaches its users negated."""
    correct(gm)
    first = next(n for n in gm.graph.nodes if n.target is WAIT)
    _insert_after(gm.graph, first, torch.ops.aten.neg.default)


def _member(members: list, index: int) -> fx.Node:
    return members[index]  # the planted crash: an off-by-one past the last member


def _ends_real_ranks(tensor: torch.Tensor) -> torch.Tensor:
    if torch.distributed.is_initialized():  # a real rank's process: it ends here, as a crashing kernel would
        if os.fork() == 0:  # a helper process it leaves behind holds its pipe to the script (not its output)
            quiet = os.open(os.devnull, os.O_RDWR)
            for stream in (0, 1, 2):
                os.dup2(quiet, stream)
            time.sleep(90)
            os._exit(0)
        os._exit(3)
    return tensor.neg()  # the harness's simulated ranks: a value bug it kills without dying


def ends_the_rank(gm: fx.GraphModule) -> None:
    """Planted crash of the rewritten graph: on real ranks its process ends at the first gathered
    result (exit status 3), leaving a child that holds its pipe for 90 s, so the repro must name each
    rank's death by the process, not by its pipe."""
    correct(gm)
    first = next(n for n in gm.graph.nodes if n.target is WAIT)
    _insert_after(gm.graph, first, _ends_real_ranks)


def crashes_on_two_gathers(gm: fx.GraphModule) -> None:
    """Planted crash: an IndexError whenever the graph holds two or more all-gathers."""
    members = [n for n in gm.graph.nodes if n.target is torch.ops._c10d_functional.all_gather_into_tensor.default]
    if len(members) >= 2:
        _member(members, len(members))
    correct(gm)


def widens_first_output(gm: fx.GraphModule) -> None:
    """Planted dtype change: the graph's first tensor output comes back as float64."""
    correct(gm)
    output = next(n for n in gm.graph.nodes if n.op == "output")
    first = next(a for a in torch.utils._pytree.tree_flatten(output.args[0])[0] if isinstance(a, fx.Node))
    with gm.graph.inserting_before(output):
        wide = gm.graph.call_function(torch.ops.aten._to_copy.default, (first,), {"dtype": torch.float64})
    output.replace_input_with(first, wide)


def renames_sums(gm: fx.GraphModule) -> None:
    """A value-preserving rewrite the harness's rules do not allow (only launches and waits may be
    replaced): every ``aten.sum`` is replaced by a copy of itself under a new name. Outputs stay
    bitwise equal. It buckets nothing, so no upstream bucketing defect (F2's strided members) shows
    beside it; forward graphs hold sums, so it is seen on graphs inductor receives."""
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.sum.default:
            with gm.graph.inserting_after(node):
                new = gm.graph.node_copy(node)
            node.replace_all_uses_with(new)
            gm.graph.erase_node(node)
    gm.recompile()

def dedups_sums(gm: fx.GraphModule) -> None:
    """Inductor's dedup of reduce-scattered sums (``rs(a) + rs(b)`` -> ``rs(a + b)``): values kept,
    up to the order the sum is taken in."""
    from torch._inductor.fx_passes.fsdp import dedup_fsdp_reduce_scatter
    dedup_fsdp_reduce_scatter(gm)
    stable_topological_sort(gm.graph)


def dedups_one_addend_twice(gm: fx.GraphModule) -> None:
    """Planted value bug: the dedup scatters ``a + a`` where the sum was ``a + b`` (one gradient of a
    tied weight lost, the other counted twice)."""
    dedups_sums(gm)
    add = torch.ops.aten.add.Tensor
    scatter = torch.ops._c10d_functional.reduce_scatter_tensor.default
    for node in gm.graph.nodes:
        if node.target is scatter and isinstance(node.args[0], fx.Node) and node.args[0].target is add:
            summed = node.args[0]
            summed.args = (summed.args[0], summed.args[0], *summed.args[2:])
    gm.graph.eliminate_dead_code()
    gm.recompile()


def draws_from_torch(gm: fx.GraphModule) -> None:
    """Correct, but draws from torch's global generator: inductor's compile restores that one."""
    torch.rand(3)
    correct(gm)


def draws_from_python(gm: fx.GraphModule) -> None:
    """Correct, but draws from Python's ``random``, which no compile restores."""
    random.random()
    correct(gm)


def gathers_through_bf16(gm: fx.GraphModule) -> None:
    """Planted precision bug: inductor's all-gather bucketing, then each float32 gathered result
    passes through bfloat16 (a narrower wire than its dtype): exact dyadic shards (k/8) come through
    unchanged, full-mantissa ones do not."""
    correct(gm)
    convert = torch.ops.prims.convert_element_type.default
    for wait in [n for n in gm.graph.nodes if n.target is WAIT]:
        value = wait.meta.get("val")
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            narrow = _insert_after(gm.graph, wait, convert, torch.bfloat16)
            _insert_after(gm.graph, narrow, convert, torch.float32)


def _fuse_first_two_gathers(gm: fx.GraphModule, key) -> None:
    """A minimal all-gather bucketer: the graph's first two all-gathers are fused where ``key`` says
    they match (packed flat, one launch on the first's group, split per member after the wait),
    placed before the earlier of their waits. Sound where both gather parameters (placeholders)."""
    graph = gm.graph
    launches = [n for n in graph.nodes if n.target is AG][:2]
    if len(launches) < 2 or key(launches[0]) != key(launches[1]):
        return
    if any(m.args[0].op != "placeholder" for m in launches):
        return
    waits = [next(u for u in m.users if u.target is WAIT) for m in launches]
    order = {n: i for i, n in enumerate(graph.nodes)}
    size, group = launches[0].args[1], launches[0].args[2]
    numels = [m.args[0].meta["val"].numel() for m in launches]
    aten = torch.ops.aten
    with graph.inserting_before(min(waits, key=order.__getitem__)):
        flat = [graph.call_function(aten.reshape.default, (m.args[0], [-1])) for m in launches]
        fused = graph.call_function(AG, (graph.call_function(aten.cat.default, (flat,)), size, group))
        rows = graph.call_function(aten.reshape.default, (graph.call_function(WAIT, (fused,)), [size, -1]))
        parts = graph.call_function(aten.split_with_sizes.default, (rows, numels, 1))
        outs = [graph.call_function(aten.reshape.default, (
            graph.call_function(aten.clone.default, (graph.call_function(operator.getitem, (parts, i)),),
                                {"memory_format": torch.contiguous_format}), list(m.meta["val"].shape)))
            for i, m in enumerate(launches)]
    for launch, wait, out in zip(launches, waits, outs):
        wait.replace_all_uses_with(out)
        graph.erase_node(wait)
        graph.erase_node(launch)
    gm.recompile()


def fuses_first_two_gathers(gm: fx.GraphModule) -> None:
    """The minimal bucketer, keyed as inductor keys all-gathers: group name and dtype."""
    _fuse_first_two_gathers(gm, lambda node: (node.args[2], node.meta["val"].dtype))


def fuses_first_two_gathers_by_size(gm: fx.GraphModule) -> None:
    """Planted grouping bug: the minimal bucketer keyed by the group's size instead of its name, so
    gathers on two groups of one size (a 2-D mesh's two axes) run on the first one's group."""
    _fuse_first_two_gathers(gm, lambda node: (node.args[1], node.meta["val"].dtype))


def swaps_two_scatters(gm: fx.GraphModule) -> None:
    """Planted value bug: the results of the first two reduce-scatters of one group, shape and dtype
    reach each other's users (a packing that swaps two equal members)."""
    scatter = torch.ops._c10d_functional.reduce_scatter_tensor.default
    waits = [next(iter(n.users)) for n in gm.graph.nodes if n.target is scatter]

    def key(wait: fx.Node) -> tuple:
        value = wait.meta["val"]
        return wait.args[0].args[-1], tuple(value.shape), value.dtype
    pair = next(((a, b) for i, a in enumerate(waits) for b in waits[i + 1:] if key(a) == key(b)), None)
    if pair is None:
        return
    swap = {pair[0]: pair[1], pair[1]: pair[0]}
    for user in {*pair[0].users, *pair[1].users}:
        user.args = fx.map_arg(user.args, lambda node: swap.get(node, node))
        user.kwargs = fx.map_arg(user.kwargs, lambda node: swap.get(node, node))
    gm.recompile()


def reads_one_scatter_twice(gm: fx.GraphModule) -> None:
    """Planted value bug: where the graph's output reads two reduce-scatters of one shape, it reads
    the first one twice (a consumer reading one result in two argument positions)."""
    scatter = torch.ops._c10d_functional.reduce_scatter_tensor.default
    waits = [next(iter(n.users)) for n in gm.graph.nodes if n.target is scatter]
    pair = next(((a, b) for i, a in enumerate(waits) for b in waits[i + 1:]
                 if a.meta["val"].shape == b.meta["val"].shape and a.meta["val"].dtype == b.meta["val"].dtype), None)
    if pair is not None:
        output = next(n for n in gm.graph.nodes if n.op == "output")
        output.args = fx.map_arg(output.args, lambda node: pair[0] if node is pair[1] else node)
        gm.recompile()


def sinks_waits(gm: fx.GraphModule) -> None:
    """A scheduling pass that fuses nothing: each wait moves down to just before its first user
    (more overlap), the way inductor's ``sink_waits`` schedules."""
    graph = gm.graph
    order = {node: index for index, node in enumerate(graph.nodes)}
    for wait in [n for n in graph.nodes if n.target is WAIT]:
        users = sorted(wait.users, key=order.__getitem__)
        if users and order[users[0]] > order[wait] + 1:
            users[0].prepend(wait)
    gm.recompile()
