"""What a post-grad pass needs around it, in torch alone: a world of named process groups, fake
values in ``meta["val"]``, and inductor's post-grad routing to its bucketing passes.

This module imports nothing from fsdp_verify on purpose: ``fsdp-verify repro`` copies its source
into every script it writes, so the standalone script runs the code the harness ran, not a
second version of it (tests/engine/test_repro.py checks the module stays torch-only).
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


# The analytical cost model of the overlap scheduler asks triton for the GPU's DRAM bandwidth; a
# machine without a GPU gets this figure (an H100's, in GB/s): the scheduler then decides as it
# would on that GPU, from the same formulas.
CPU_DRAM_GBPS = 3350
OVERLAP = "aten_distributed_optimizations."


@contextlib.contextmanager
def cost_model() -> Iterator[None]:
    """The overlap scheduler's hardware figures: the GPU's own when there is one, else CPU_DRAM_GBPS."""
    import torch
    import torch._inductor.utils as inductor_utils
    import torch.utils._runtime_estimation as runtime_estimation
    if torch.cuda.is_available():
        yield
        return
    holders = (inductor_utils, runtime_estimation)  # the second imported the function by name
    saved = [holder.get_gpu_dram_gbps for holder in holders]
    for holder in holders:
        holder.get_gpu_dram_gbps = lambda: CPU_DRAM_GBPS
    try:
        yield
    finally:
        for holder, function in zip(holders, saved):
            holder.get_gpu_dram_gbps = function


# Harness options of the manual scheduler (``overlap_manual_scheduling.manual_overlap_bucketing``):
# no inductor option routes to it; frameworks call it themselves (torchtitan's SimpleFSDP
# ``transformer_block_bucketing`` as its fw/bw compiler or a ``post_grad_custom_post_pass``).
MANUAL = "manual_bucket_plans"
MANUAL_DEPS = "manual_insert_overlap_deps"
MANUAL_MODE = "manual_bucket_mode"
# Options of the space that are no ``torch._inductor.config`` name: never patched into the config.
HARNESS_OPTIONS = ("bucket_cap_mb", MANUAL, MANUAL_DEPS, MANUAL_MODE)


def _module_of(node: fx.Node) -> str | None:
    name = node.meta.get("param_name")
    return name.rsplit(".", 1)[0] if isinstance(name, str) and "." in name else None


def param_module_stack(node: fx.Node) -> list[tuple[str, type]]:
    """A node's module for the manual scheduler's graph view: a node tagged with a parameter
    belongs to that parameter's module, as the all-gather of a SimpleFSDP parametrisation runs
    inside the module that owns the parameter; a node without the tag takes the ``module_path``
    it was annotated with in a compile (``torch.fx.traceback.annotate``), else dynamo's
    ``nn_module_stack``, else no module."""
    import torch
    module = _module_of(node)
    if module is not None:
        return [(module, torch.nn.Module)]
    annotated = node.meta.get("custom", {}).get("module_path")  # torch.fx.traceback.annotate
    if isinstance(annotated, str) and annotated:
        return [(annotated, torch.nn.Module)]
    from torch._inductor.fx_passes.graph_view import _clean_stack_name, _get_module_stack
    return [(_clean_stack_name(path), klass) for path, klass in _get_module_stack(node)]


def _unit(module: str) -> str:
    """The FSDP unit a module belongs to: the path through its first numbered part (a repeated
    block, ``layers.3``), else its top-level module (``embed``)."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.isdigit():
            return ".".join(parts[:index + 1])
    return parts[0]


def _launch(node: fx.Node) -> bool:
    return node.op == "call_function" and any(
        op in str(node.target) for op in ("all_gather_into_tensor", "reduce_scatter_tensor"))


def module_bucket_plans(graph: fx.Graph, form: str) -> list:
    """The ``module_bucket_plans`` a user of the manual scheduler writes for this graph, from the
    modules its gathers and reduce-scatters belong to, in graph order: ``blocks`` names each unit
    (torchtitan's per-transformer-block plan), ``pairs`` groups two consecutive units in one list
    entry (the entry form that buckets several modules together)."""
    units: list[str] = []
    for node in graph.nodes:
        stack = param_module_stack(node) if _launch(node) else []
        if stack and stack[-1][0] and _unit(stack[-1][0]) not in units:
            units.append(_unit(stack[-1][0]))
    if form == "pairs":
        return [units[i:i + 2] if len(units[i:i + 2]) > 1 else units[i] for i in range(0, len(units), 2)]
    return units


def manual_route(module: fx.GraphModule, config: dict) -> fx.GraphModule:
    """The manual scheduler as frameworks call it (before inductor's own bucketing, as a
    ``post_grad_custom_post_pass`` runs), with its ordering wrappers inlined."""
    from torch._inductor.fx_passes.overlap_manual_scheduling import manual_overlap_bucketing
    plans = module_bucket_plans(module.graph, config[MANUAL])
    with cost_model():
        module = manual_overlap_bucketing(module, plans, insert_overlap_deps=bool(config.get(MANUAL_DEPS)),
                                          module_stack_fn=param_module_stack, bucket_mode=config.get(MANUAL_MODE))
    inline_control_deps(module)
    return module


def manual_post_pass(config: dict) -> Any:
    """The manual scheduler as a compile installs it: a ``post_grad_custom_post_pass`` (a
    ``CustomGraphPass``, which inductor hands the graph) that runs ``manual_route`` on the graph's
    module; None when ``config`` does not draw it."""
    if config.get(MANUAL, "off") == "off":
        return None
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class ManualPass(CustomGraphPass):
        def __call__(self, graph: fx.Graph) -> None:
            manual_route(graph.owning_module, config)

        def uuid(self) -> Any:
            return repr(sorted((k, v) for k, v in config.items() if k in HARNESS_OPTIONS))

    return ManualPass()


def inductor_route(module: fx.GraphModule, config: dict) -> fx.GraphModule:
    """Inductor's post-grad routing (post_grad.py): the manual scheduler where drawn (as a custom
    post pass, which runs first), dedup, then RS, AR and AG bucketing, the stable topological sort,
    then the overlap scheduler (which may bucket too), each pass reading the patched config as it
    would in a compile. ``config`` holds ``torch._inductor.config`` options (dotted for
    ``aten_distributed_optimizations``) plus ``HARNESS_OPTIONS``; returns the module the passes
    leave (the overlap scheduler may hand back another)."""
    import torch._inductor.config as inductor_config
    from torch._inductor.fx_passes import bucketing, fsdp
    from torch._inductor.pattern_matcher import stable_topological_sort
    determinator = bucket_cap(config.get("bucket_cap_mb"))
    patch = {name: value for name, value in config.items() if name not in HARNESS_OPTIONS}
    with inductor_config.patch(patch):
        if config.get(MANUAL, "off") != "off":
            module = manual_route(module, config)
        if config["dedup_reduce_scatters"]:
            fsdp.dedup_fsdp_reduce_scatter(module)
        if config["bucket_reduce_scatters_fx"] != "none":
            rs = fsdp.bucket_fsdp_reduce_scatter if "fsdp" in config["bucket_reduce_scatters_fx"] \
                else bucketing.bucket_reduce_scatter
            rs(module, determinator, config["bucket_reduce_scatters_bucket_mode"])
        if config.get("bucket_all_reduces_fx", "none") != "none":
            bucketing.bucket_all_reduce(module, determinator, config["bucket_all_reduces_fx"])
        if config["bucket_all_gathers_fx"] != "none":
            ag = fsdp.bucket_fsdp_all_gather if "fsdp" in config["bucket_all_gathers_fx"] \
                else bucketing.bucket_all_gather
            ag(module, determinator, config["bucket_all_gathers_bucket_mode"])
        if any(config.get(name, "none") != "none"
               for name in ("bucket_reduce_scatters_fx", "bucket_all_reduces_fx", "bucket_all_gathers_fx")):
            stable_topological_sort(module.graph)
        if config.get(OVERLAP + "enable_overlap_scheduling"):
            from torch._inductor.fx_passes.overlap_scheduling import schedule_overlap_bucketing_from_inductor_configs
            deps = config.get(OVERLAP + "insert_overlap_deps")  # inductor inserts them unless told not to
            with inductor_config.patch({OVERLAP + "insert_overlap_deps": True if deps is None else deps}), cost_model():
                module = schedule_overlap_bucketing_from_inductor_configs(module)
            inline_control_deps(module)
    return module


def inline_control_deps(module: fx.GraphModule) -> int:
    """Replace each ``control_deps(deps, subgraph, *args)`` by the one operation its subgraph wraps,
    under the same name; returns how many. Sound because the wrapper only orders: its extra
    inputs are ordering edges for inductor's scheduler, and an FX graph's node order already
    respects every input edge, so running the inlined graph in node order is a schedule the
    deps allow. What remains is the program the checkers and a real run can read."""
    try:
        from torch._inductor.fx_passes.control_dependencies import control_deps
    except ImportError:
        return 0
    graph, inlined = module.graph, 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not control_deps:
            continue
        _, holder, *args = node.args
        subgraph = getattr(module, holder.target)
        placeholders = [n for n in subgraph.graph.nodes if n.op == "placeholder"]
        with graph.inserting_before(node):
            result = graph.graph_copy(subgraph.graph, dict(zip(placeholders, args)))
        if isinstance(result, (tuple, list)):  # the op, then pass-through deps
            result = result[0]
        name = node.name
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        result.name = name
        if not holder.users:
            graph.erase_node(holder)
            delattr(module, holder.target)
        inlined += 1
    if inlined:
        module.recompile()
    return inlined


def post_grad_pass(module: fx.GraphModule, rank: int, world_size: int, groups: dict, inputs: list[Any],
                   apply: Callable[[fx.GraphModule], fx.GraphModule]) -> fx.GraphModule:
    """One rank's graph through ``apply`` as a post-grad pass receives it: in a fake world of that
    rank with the groups registered by name, fake values propagated from ``inputs``; the module
    ``apply`` leaves is linted and recompiled."""
    with fake_world(rank, world_size, groups):
        propagate_fake_values(module, inputs)
        module = apply(module)
    module.graph.lint()
    module.recompile()
    return module


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
