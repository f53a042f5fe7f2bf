"""Memory: a liveness walk over each graph, honouring frees, on the sizes a simulated run saw.

Fusing holds extra memory for one bucket at a time: its packed buffer (the AG output or the RS
copy-in) and, for AG, the members' independent copies, which copy-out materialises together
and earlier than the original gathers did. So the rewritten peak may exceed the original's by
at most ``SLACK`` times the largest packed buffer; with copy-out, 2 is the tight factor (1 would
flag every correct AG rewrite whose copy-out moment is the peak). Both peaks are reported.
"""

from __future__ import annotations

import torch
from torch import fx

from fsdp_verify.execute.simulated import WorldRun
from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.registry import Checker
from fsdp_verify.checks.graph_facts import aliases_input, by_name, is_free, is_launch, storage_root

NAME = "memory"
SLACK = 2
# Ops whose schema declares no alias but whose result is a view of their input at run time:
# inductor's bucketing copies each member out as ``_unsafe_view(clone(...))``, and counting the
# view as a second buffer doubled every copy-out (a captured campaign's false alarm).
_RUNTIME_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})


def _is_view(node: fx.Node) -> bool:
    return aliases_input(node) or (node.op == "call_function" and node.target in _RUNTIME_VIEWS)


def _root(node: fx.Node) -> fx.Node:
    """The node that owns the storage ``node`` shares, through declared and run-time views."""
    return storage_root(node, _is_view)


def _sizes(run: WorldRun, module: fx.GraphModule, rank: int) -> dict[str, int]:
    """Bytes of each storage-owning node's result on ``rank``, from the numerics checker's run."""
    seen = run.sizes.get(rank, {})
    return {node.name: seen[node.name] for node in module.graph.nodes
            if node.name in seen and not _is_view(node)}


def peak_live_bytes(module: fx.GraphModule, sizes: dict[str, int]) -> int:
    """Peak of the bytes held by storages that are defined, not yet freed and still to be read."""
    nodes = list(module.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    last_use: dict[fx.Node, int] = {}
    freed_at: dict[fx.Node, int] = {}
    for node in nodes:
        root = _root(node)
        for user in node.users:
            if is_free(user):
                freed_at[root] = min(freed_at.get(root, index[user]), index[user])
            else:
                last_use[root] = max(last_use.get(root, index[node]), index[user])
    end = {root: freed_at.get(root, last_use.get(root, index[root])) for root in nodes}
    delta = [0] * (len(nodes) + 1)
    for node in nodes:
        size = sizes.get(node.name, 0)
        if size and _root(node) is node:
            delta[index[node]] += size
            delta[end[node] + 1] -= size
    peak = live = 0
    for change in delta:
        live += change
        peak = max(peak, live)
    return peak


def check_memory(ctx: CheckContext) -> list[Finding]:
    """Rewritten peak <= original peak + the largest fused buffer (on the first rank)."""
    original, rewritten = ctx.original, ctx.rewritten
    rank = min(rewritten)
    if not isinstance(ctx.original_sim, WorldRun) or not isinstance(ctx.rewritten_sim, WorldRun):
        return []  # runs that fail are reported by the numerics checker
    before, after = _sizes(ctx.original_sim, original[rank], rank), _sizes(ctx.rewritten_sim, rewritten[rank], rank)
    old, new = peak_live_bytes(original[rank], before), peak_live_bytes(rewritten[rank], after)
    known = by_name(original[rank])
    fused = [n for n in rewritten[rank].graph.nodes if is_launch(n) and n.name not in known]
    buffers = [after.get(_root(n).name, 0) for launch in fused
               for n in (*launch.users, *launch.all_input_nodes)]
    largest = max(buffers, default=0)
    ctx.metrics["memory"] = {"original_peak_bytes": old, "rewritten_peak_bytes": new, "largest_bucket_bytes": largest}
    if new > old + SLACK * largest:
        return [Finding(NAME, f"rank {rank}: peak live bytes {new} exceed the original's {old} by "
                                 f"{new - old}, more than {SLACK}x the largest fused buffer ({largest} bytes)",
                        details=dict(ctx.metrics["memory"]), rank=rank, rule="peak_memory")]
    return []


CHECKER = Checker(NAME, check_memory, after=("numerics",), summary='peak live bytes within 2x the largest fused buffer')
