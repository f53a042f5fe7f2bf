"""What a post-grad pass needs around it, in torch alone: a world of named process groups, fake
values in ``meta["val"]``, and inductor's post-grad routing to its bucketing passes.

This module imports nothing from fsdp_verify on purpose: ``fsdp-verify repro`` copies its source
into every script it writes, so the standalone script runs the code the harness ran, not a
second version of it (tests/test_repro.py checks the module stays torch-only).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch.distributed as dist
from torch import fx

# The harness's own effectful calls, by name: fake propagation skips them (they touch storage).
HARNESS_EFFECTS = ("_free_tensor_storage", "effect_barrier")


@contextlib.contextmanager
def fake_world(rank: int, world_size: int, groups: dict) -> Iterator[None]:
    """A fake default process group for ``rank`` with every group registered by name (``groups``:
    name -> subgroups, each a sequence of global ranks); on a real rank whose process registered
    the groups already, the real one."""
    from torch._C._distributed_c10d import _register_process_group, _unregister_process_group
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (rank, world_size):
            raise RuntimeError("a post-grad pass needs an uninitialised default process group, or the "
                               "real one of this rank")
        yield
        return
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        for name in sorted(groups):
            parts = [tuple(part) for part in groups[name]]
            handles = {part: dist.new_group(list(part)) for part in parts}
            _register_process_group(name, handles[next(p for p in parts if rank in p)])
        yield
    finally:
        for name in groups:
            with contextlib.suppress(Exception):
                _unregister_process_group(name)
        dist.destroy_process_group()


def propagate_fake_values(module: fx.GraphModule, inputs: list[Any]) -> None:
    """Fill ``meta["val"]`` with FakeTensors, as inductor's post-grad passes expect (the harness's
    storage frees and barriers are skipped)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    mode = FakeTensorMode(allow_non_fake_inputs=True)

    class Propagate(FakeTensorProp):
        def run_node(self, node: fx.Node) -> Any:
            if node.op == "call_function" and getattr(node.target, "__name__", None) in HARNESS_EFFECTS:
                node.meta["val"] = None
                return None
            return super().run_node(node)

    Propagate(module, mode).propagate(*[mode.from_tensor(t) for t in inputs])


def bucket_cap(cap_mb: Any) -> Callable[[int], float] | None:
    """``bucket_cap_mb`` as both ``*_bucket_size_determinator`` callables take it (None: inductor's caps)."""
    return None if cap_mb is None else (lambda index: cap_mb)


def inductor_route(module: fx.GraphModule, config: dict) -> None:
    """Inductor's post-grad routing (post_grad.py): dedup, then RS, then AG bucketing, then the
    stable topological sort, each pass reading the patched config as it would in a compile.
    ``config`` holds ``torch._inductor.config`` options plus ``bucket_cap_mb``."""
    import torch._inductor.config as inductor_config
    from torch._inductor.fx_passes import bucketing, fsdp
    from torch._inductor.pattern_matcher import stable_topological_sort
    determinator = bucket_cap(config.get("bucket_cap_mb"))
    patch = {name: value for name, value in config.items() if name != "bucket_cap_mb"}
    with inductor_config.patch(patch):
        if config["dedup_reduce_scatters"]:
            fsdp.dedup_fsdp_reduce_scatter(module)
        if config["bucket_reduce_scatters_fx"] != "none":
            rs = fsdp.bucket_fsdp_reduce_scatter if "fsdp" in config["bucket_reduce_scatters_fx"] \
                else bucketing.bucket_reduce_scatter
            rs(module, determinator, config["bucket_reduce_scatters_bucket_mode"])
        if config["bucket_all_gathers_fx"] != "none":
            ag = fsdp.bucket_fsdp_all_gather if "fsdp" in config["bucket_all_gathers_fx"] \
                else bucketing.bucket_all_gather
            ag(module, determinator, config["bucket_all_gathers_bucket_mode"])
        if config["bucket_reduce_scatters_fx"] != "none" or config["bucket_all_gathers_fx"] != "none":
            stable_topological_sort(module.graph)


def run_pass(fn: Callable, module: fx.GraphModule) -> fx.GraphModule:
    """A torch.fx pass as passes are written: graph in, graph out (in place when it returns None;
    a ``PassResult`` hands back its module)."""
    returned = fn(module)
    if returned is None:
        return module
    returned = getattr(returned, "graph_module", returned)
    if not isinstance(returned, fx.GraphModule):
        raise TypeError(f"the pass returned {type(returned).__name__}, not a GraphModule, None or a PassResult")
    return returned
