"""Repro: torch-inductor on fsdp_graphs (case c7b4d2d170e8ca759d92)

Written by `fsdp-verify repro` (0.1.0) from corpus/found/c7b4d2d170e8ca759d92.json.
Target: torch-inductor. World: 4 rank(s), groups {'fsdp': [[0, 1, 2, 3]], 'fsdp_expert': [[0, 1], [2, 3]]}.
Imports only torch.

What the harness recorded:
  - layout: rewritten graph fails in the simulated world: RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape
  - numerics: rewritten graph fails in the simulated world: RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape

Run: python c7b4d2d170e8ca759d92.py [--config OPTION=VALUE ...] [--json FILE]

It builds the graph with torch.fx, rewrites each rank's copy as the harness did, runs original
and rewritten graphs with real gloo collectives (4 forked rank processes) on the
harness's inputs (exact dyadics; full-mantissa values for the shards all-gathers move), and
compares every output bit for bit.
Exit 1 and REPRODUCED: the rewrite raised, its graph failed to run or hung, an output differs, or
the rewrite moved a global random generator its callers do not restore.
Exit 0 and NOT REPRODUCED: every output is bitwise equal on every rank.
Exit 3 and CANNOT RUN: the original graph itself does not run on real ranks here."""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import multiprocessing.connection
import operator  # noqa: F401 - the graph code may name operator.getitem
import os
import signal
import sys
import tempfile
import time
import traceback
import zlib
from datetime import timedelta
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch import fx
from torch.fx.node import has_side_effect  # noqa: F401

WORLD = [0, 1, 2, 3]
GROUPS = {'fsdp': [[0, 1, 2, 3]], 'fsdp_expert': [[0, 1], [2, 3]]}
SEED = 0
RANK_SEEDS = {0: 2366587899, 1: 1283562555, 2: 3580099130, 3: 351086074}  # where each rank's random generator starts, in every run
# placeholder name -> (shape, dtype, high): this rank's parameter shards and inputs, in graph order
INPUTS = {
    'x': ([4], 'float32', 0),
    'p_blocks_0_w0': ([1], 'float32', 0),
    'p_blocks_0_w1': ([1, 1, 2], 'float32', 0),
}
# nodes whose floating values become exact dyadics, so every summation order gives the same bits
EXACT = ['contiguous', 'contiguous_1']
# parameter shards an all-gather moves (directly or through a cast): full-mantissa values, so a
# rewrite that rounds them on the way (a narrower wire) shows; every other input is an exact dyadic
FULL = ['p_blocks_0_w0', 'p_blocks_0_w1']
# torch._inductor.config options the case was judged under (bucket_cap_mb: both size determinators)
CONFIG = {'aten_distributed_optimizations.bucket_exposed_first': None, 'aten_distributed_optimizations.bucket_mode': None, 'aten_distributed_optimizations.bucket_only_internode_comms': False, 'aten_distributed_optimizations.collective_bucketing': None, 'aten_distributed_optimizations.collective_estimator': 'analytical', 'aten_distributed_optimizations.compute_estimator': 'analytical', 'aten_distributed_optimizations.compute_overlap_multipler': None, 'aten_distributed_optimizations.enable_fusion_regions': True, 'aten_distributed_optimizations.enable_overlap_scheduling': False, 'aten_distributed_optimizations.insert_overlap_deps': None, 'aten_distributed_optimizations.max_coll_distance': None, 'aten_distributed_optimizations.max_compute_pre_fetch': None, 'aten_distributed_optimizations.max_in_flight_gb': None, 'aten_distributed_optimizations.max_memory_increase_gb': None, 'aten_distributed_optimizations.max_memory_increase_ratio': None, 'aten_distributed_optimizations.overlap_scheduling_autofix_cycles': False, 'aten_distributed_optimizations.pre_bucketing_fsdp_collectives': True, 'aten_distributed_optimizations.pre_bucketing_fsdp_collectives_bucket_cap_mb': None, 'aten_distributed_optimizations.pre_bucketing_fsdp_collectives_max_bucket_cap_mb': 500.0, 'aten_distributed_optimizations.pre_bucketing_fsdp_collectives_min_bucket_cap_mb': 10.0, 'aten_distributed_optimizations.pre_bucketing_fsdp_collectives_saturation_calibration_multiplier': 1.0, 'aten_distributed_optimizations.prioritize_bucketing_during_scheduling': True, 'bucket_all_gathers_bucket_mode': 'default', 'bucket_all_gathers_fx': 'all', 'bucket_all_reduces_fx': 'none', 'bucket_cap_mb': None, 'bucket_reduce_scatters_bucket_mode': 'default', 'bucket_reduce_scatters_fx': 'all', 'dedup_reduce_scatters': False, 'manual_bucket_mode': None, 'manual_bucket_plans': 'off', 'manual_insert_overlap_deps': False}
# loggers the harness held at DEBUG while the target ran (one case in four, by seed): code a pass runs
# only when its DEBUG lines are on runs here too
LOGGERS = ['torch._inductor.fx_passes']


# --- copied from fsdp_verify/targets/debug_logs.py: the loggers held as the harness held them ---
import logging  # noqa: E402
from typing import Sequence  # noqa: E402


@contextlib.contextmanager
def debug_logs(names: Sequence[str]) -> Iterator[None]:
    """Each logger of ``names`` at DEBUG into a null handler while the block runs, then as it was."""
    saved = []
    for name in names:
        logger = logging.getLogger(name)
        handler = logging.NullHandler()
        saved.append((logger, logger.level, logger.propagate, handler))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, level, propagate, handler in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


# --- copied from fsdp_verify/execute/inputs.py: the harness's input values, bit for bit ---
def _generator(seed: int, rank: int, name: str) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(f"{seed}:{rank}:{name}".encode()))


def input_tensor(shape: tuple, dtype: torch.dtype, seed: int, rank: int, name: str, high: int = 0,
                 mode: str = "exact", device: str | torch.device = "cpu") -> torch.Tensor:
    """The value of placeholder ``name`` on ``rank``: integers in [0, high or 8), floats k/8."""
    gen = _generator(seed, rank, name)
    if not dtype.is_floating_point:
        return torch.randint(0, high or 8, shape, generator=gen).to(dtype).to(device)
    if mode == "exact":
        base = torch.randint(-8, 9, shape, generator=gen).to(torch.float64) / 8
    else:
        base = torch.randn(shape, generator=gen, dtype=torch.float64)
    return base.to(dtype).to(device)


def exact_tensor(seed: int, rank: int, name: str, value: torch.Tensor) -> torch.Tensor:
    """Exact dyadics (k/8, |k| <= 8) in place of node ``name``'s floating ``value``."""
    gen = _generator(seed, rank, f"exact:{name}")
    codes = torch.randint(-8, 9, tuple(value.shape), generator=gen).to(torch.float64) / 8
    return codes.to(value.dtype).to(value.device)


# --- copied from fsdp_verify/targets/post_grad.py: the set-up a post-grad pass gets ---
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


# --- copied from fsdp_verify/targets/generators.py: the global random generators around the rewrite ---
import random
import sys
from enum import Enum
from typing import Any

import torch


class Generator(str, Enum):
    """A global generator a target may draw from."""

    TORCH = "torch"  # the CPU default generator: torch.rand, randn, randperm, dropout on CPU
    TORCH_CUDA = "torch.cuda"  # every device's default generator, when CUDA is initialised already
    PYTHON = "random"  # the ``random`` module's shared instance
    NUMPY = "numpy.random"  # numpy's legacy global RandomState, when numpy is loaded already


def snapshot() -> dict[Generator, Any]:
    """Each global generator's state now. Reading a state draws nothing and initialises nothing:
    CUDA's and numpy's are read only where the process holds them already."""
    states: dict[Generator, Any] = {Generator.TORCH: torch.random.get_rng_state(),
                                    Generator.PYTHON: random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states[Generator.TORCH_CUDA] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states[Generator.NUMPY] = numpy.random.get_state(legacy=False)
    return states


def _same(before: Any, after: Any) -> bool:
    if isinstance(before, torch.Tensor):
        return isinstance(after, torch.Tensor) and torch.equal(before, after)
    if isinstance(before, (list, tuple)):
        return isinstance(after, (list, tuple)) and len(before) == len(after) and \
            all(_same(a, b) for a, b in zip(before, after))
    if isinstance(before, dict):
        return isinstance(after, dict) and before.keys() == after.keys() and \
            all(_same(before[key], after[key]) for key in before)
    if type(before).__module__ == "numpy":  # an array of a numpy state
        return type(after) is type(before) and bool((before == after).all())
    return before == after


def drawn(before: dict[Generator, Any]) -> tuple[Generator, ...]:
    """The generators of ``before`` whose state differs now (a reseed counts: the stream moved)."""
    after = snapshot()
    return tuple(name for name, state in before.items() if name not in after or not _same(state, after[name]))


__all__ = ["Generator", "drawn", "snapshot"]


# generators the target's real callers restore around it (inductor's compile restores torch's): a draw
# from one of them is no bug
RESTORED = ['torch', 'torch.cuda']


def build_graph(rank: int) -> fx.GraphModule:
    """The case's graph as rank ``rank`` sees it."""
    graph = fx.Graph()
    n_x = graph.placeholder('x')
    n_p_blocks_0_w0 = graph.placeholder('p_blocks_0_w0')
    n_p_blocks_0_w0.meta.update({'fsdp_degree': 4, 'fsdp_sharded': True, 'is_param': True, 'param_name': 'blocks.0.w0', 'state_idx': 0})
    n_p_blocks_0_w1 = graph.placeholder('p_blocks_0_w1')
    n_p_blocks_0_w1.meta.update({'fsdp_degree': 4, 'fsdp_sharded': True, 'is_param': True, 'param_name': 'blocks.0.w1', 'state_idx': 1})
    n_ag_blocks_0_w0 = graph.create_node("call_function", torch.ops._c10d_functional.all_gather_into_tensor.default, (n_p_blocks_0_w0, 4, 'fsdp',), {}, name='ag_blocks_0_w0')
    n_ag_blocks_0_w0.meta.update({'comm_group': 'fsdp', 'comm_type': 'fsdp_all_gather', 'fsdp_bucket_spec': {'device': 'cuda:0', 'dtype': torch.float32, 'input_shape': (1,), 'output_shape': (4,)}, 'fsdp_degree': 4, 'param_name': 'blocks.0.w0', 'param_node': 'p_blocks_0_w0', 'state_idx': 0})
    n_ag_blocks_0_w0.meta["fsdp_bucket_spec"]["device"] = f"cuda:{rank}"
    n_ag_blocks_0_w0_wait = graph.create_node("call_function", torch.ops._c10d_functional.wait_tensor.default, (n_ag_blocks_0_w0,), {}, name='ag_blocks_0_w0_wait')
    n_ag_blocks_0_w0_wait.meta.update({'wait_for': 'ag_blocks_0_w0'})
    n_ag_blocks_0_w1 = graph.create_node("call_function", torch.ops._c10d_functional.all_gather_into_tensor.default, (n_p_blocks_0_w1, 4, 'fsdp',), {}, name='ag_blocks_0_w1')
    n_ag_blocks_0_w1.meta.update({'comm_group': 'fsdp', 'comm_type': 'fsdp_all_gather', 'fsdp_bucket_spec': {'device': 'cuda:0', 'dtype': torch.float32, 'input_shape': (1, 1, 2,), 'output_shape': (4, 1, 2,)}, 'fsdp_degree': 4, 'param_name': 'blocks.0.w1', 'param_node': 'p_blocks_0_w1', 'state_idx': 1})
    n_ag_blocks_0_w1.meta["fsdp_bucket_spec"]["device"] = f"cuda:{rank}"
    n_ag_blocks_0_w1_wait = graph.create_node("call_function", torch.ops._c10d_functional.wait_tensor.default, (n_ag_blocks_0_w1,), {}, name='ag_blocks_0_w1_wait')
    n_ag_blocks_0_w1_wait.meta.update({'wait_for': 'ag_blocks_0_w1'})
    n_sum_1 = graph.create_node("call_function", torch.ops.aten.sum.default, (n_x,), {}, name='sum_1')
    n_mul = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_ag_blocks_0_w0_wait, n_sum_1,), {}, name='mul')
    n_sum_2 = graph.create_node("call_function", torch.ops.aten.sum.default, (n_mul,), {}, name='sum_2')
    n_add = graph.create_node("call_function", torch.ops.aten.add.Tensor, (n_sum_1, n_sum_2,), {}, name='add')
    n_view = graph.create_node("call_function", torch.ops.aten.view.default, (n_ag_blocks_0_w1_wait, [-1],), {}, name='view')
    n_mul_1 = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_view, n_add,), {}, name='mul_1')
    n_sum_3 = graph.create_node("call_function", torch.ops.aten.sum.default, (n_mul_1,), {}, name='sum_3')
    n_add_1 = graph.create_node("call_function", torch.ops.aten.add.Tensor, (n_add, n_sum_3,), {}, name='add_1')
    n_add_2 = graph.create_node("call_function", torch.ops.aten.add.Tensor, (n_add_1, n_add_1,), {}, name='add_2')
    n_add_2.meta.update({'autograd_backward': True})
    n_view_1 = graph.create_node("call_function", torch.ops.aten.view.default, (n_ag_blocks_0_w1_wait, [-1],), {}, name='view_1')
    n_view_1.meta.update({'autograd_backward': True})
    n_mul_2 = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_view_1, n_add_2,), {}, name='mul_2')
    n_mul_2.meta.update({'autograd_backward': True})
    n_sum_4 = graph.create_node("call_function", torch.ops.aten.sum.default, (n_mul_2,), {}, name='sum_4')
    n_sum_4.meta.update({'autograd_backward': True})
    n_mul_3 = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_ag_blocks_0_w1_wait, n_add_2,), {}, name='mul_3')
    n_mul_3.meta.update({'autograd_backward': True})
    n_add_3 = graph.create_node("call_function", torch.ops.aten.add.Tensor, (n_add_2, n_sum_4,), {}, name='add_3')
    n_add_3.meta.update({'autograd_backward': True})
    n_mul_4 = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_ag_blocks_0_w0_wait, n_add_3,), {}, name='mul_4')
    n_mul_4.meta.update({'autograd_backward': True})
    n_sum_5 = graph.create_node("call_function", torch.ops.aten.sum.default, (n_mul_4,), {}, name='sum_5')
    n_sum_5.meta.update({'autograd_backward': True})
    n_mul_5 = graph.create_node("call_function", torch.ops.aten.mul.Tensor, (n_ag_blocks_0_w0_wait, n_add_3,), {}, name='mul_5')
    n_mul_5.meta.update({'autograd_backward': True})
    n_add_4 = graph.create_node("call_function", torch.ops.aten.add.Tensor, (n_add_3, n_sum_5,), {}, name='add_4')
    n_add_4.meta.update({'autograd_backward': True})
    n_contiguous = graph.create_node("call_function", torch.ops.aten.contiguous.default, (n_mul_5,), {}, name='contiguous')
    n_contiguous.meta.update({'fsdp_bucket_prepare': 'prep:blocks.0.w0', 'fsdp_reduce_scatter_prepare': 'prep:blocks.0.w0'})
    n_rs_blocks_0_w0 = graph.create_node("call_function", torch.ops._c10d_functional.reduce_scatter_tensor.default, (n_contiguous, 'avg', 4, 'fsdp',), {}, name='rs_blocks_0_w0')
    n_rs_blocks_0_w0.meta.update({'autograd_backward': True, 'comm_group': 'fsdp', 'comm_type': 'fsdp_reduce_scatter', 'fsdp_bucket_id': 'prep:blocks.0.w0', 'fsdp_bucket_spec': {'device': 'cuda:0', 'dtype': torch.float32, 'input_shape': (4,), 'output_shape': (1,)}, 'fsdp_degree': 4, 'param_name': 'blocks.0.w0', 'state_idx': 0})
    n_rs_blocks_0_w0.meta["fsdp_bucket_spec"]["device"] = f"cuda:{rank}"
    n_rs_blocks_0_w0_wait = graph.create_node("call_function", torch.ops._c10d_functional.wait_tensor.default, (n_rs_blocks_0_w0,), {}, name='rs_blocks_0_w0_wait')
    n_rs_blocks_0_w0_wait.meta.update({'autograd_backward': True, 'param_name': 'blocks.0.w0', 'state_idx': 0, 'wait_for': 'rs_blocks_0_w0'})
    n_contiguous_1 = graph.create_node("call_function", torch.ops.aten.contiguous.default, (n_mul_3,), {}, name='contiguous_1')
    n_contiguous_1.meta.update({'fsdp_bucket_prepare': 'prep:blocks.0.w1', 'fsdp_reduce_scatter_prepare': 'prep:blocks.0.w1'})
    n_rs_blocks_0_w1 = graph.create_node("call_function", torch.ops._c10d_functional.reduce_scatter_tensor.default, (n_contiguous_1, 'avg', 4, 'fsdp',), {}, name='rs_blocks_0_w1')
    n_rs_blocks_0_w1.meta.update({'autograd_backward': True, 'comm_group': 'fsdp', 'comm_type': 'fsdp_reduce_scatter', 'fsdp_bucket_id': 'prep:blocks.0.w1', 'fsdp_bucket_spec': {'device': 'cuda:0', 'dtype': torch.float32, 'input_shape': (4, 1, 2,), 'output_shape': (1, 1, 2,)}, 'fsdp_degree': 4, 'param_name': 'blocks.0.w1', 'state_idx': 1})
    n_rs_blocks_0_w1.meta["fsdp_bucket_spec"]["device"] = f"cuda:{rank}"
    n_rs_blocks_0_w1_wait = graph.create_node("call_function", torch.ops._c10d_functional.wait_tensor.default, (n_rs_blocks_0_w1,), {}, name='rs_blocks_0_w1_wait')
    n_rs_blocks_0_w1_wait.meta.update({'autograd_backward': True, 'param_name': 'blocks.0.w1', 'state_idx': 1, 'wait_for': 'rs_blocks_0_w1'})
    graph.output([n_add_1, n_rs_blocks_0_w0_wait, n_rs_blocks_0_w1_wait])
    graph.lint()
    module = fx.GraphModule(torch.nn.Module(), graph)
    module.num_state_inputs = 2
    module.state_fqns = ['blocks.0.w0', 'blocks.0.w1']
    module.state_is_param = [True, True]
    return module


def make_inputs(rank: int) -> list:
    return [input_tensor(tuple(shape), getattr(torch, dtype), SEED, rank, name, high,
                         "random" if name in FULL else "exact")
            for name, (shape, dtype, high) in INPUTS.items()]


def rewrite_world(args: argparse.Namespace) -> dict:
    """Each rank's graph through inductor's post-grad passes, in a fake world of its
    own, as the harness ran it."""
    config = dict(CONFIG)
    for item in args.config:
        key, _, value = item.partition("=")
        config[key] = json.loads(value) if value[:1] in "0123456789-[{tn" or value in ("true", "false") else value

    def apply(module: fx.GraphModule) -> fx.GraphModule:
        return inductor_route(module, config)

    with debug_logs(LOGGERS):
        return {rank: post_grad_pass(build_graph(rank), rank, len(WORLD), GROUPS, make_inputs(rank), apply)
                for rank in WORLD}


def run_graph(module: fx.GraphModule, rank: int, exact: set) -> list:
    """The module's outputs on this rank's inputs (``exact`` nodes replaced by exact values)."""
    class Run(fx.Interpreter):
        def run_node(self, node: fx.Node) -> Any:
            value = super().run_node(node)
            if node.name in exact and isinstance(value, torch.Tensor) and value.is_floating_point():
                value = exact_tensor(SEED, rank, node.name, value)
            return value

    # each run starts the rank's generator afresh (as the harness's simulated rank does), so random
    # ops draw the same numbers wherever a rewrite keeps their order
    torch.manual_seed(RANK_SEEDS[rank])
    outputs = Run(module).run(*make_inputs(rank))
    return [t.detach().clone() if isinstance(t, torch.Tensor) else t for t in torch.utils._pytree.tree_flatten(outputs)[0]]


def differences(expected: list, actual: list) -> list[dict]:
    """What differs between two output lists: count, dtype, shape, or bits (NaN-safe, -0.0 is not 0.0)."""
    if len(expected) != len(actual):
        return [{"what": "count", "output": None, "expected": len(expected), "actual": len(actual)}]
    found = []
    for index, (want, got) in enumerate(zip(expected, actual)):
        if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
            if type(want) is not type(got) or want != got:
                found.append({"what": "value", "output": index, "expected": repr(want), "actual": repr(got)})
            continue
        if want.dtype != got.dtype:
            found.append({"what": "dtype", "output": index, "expected": str(want.dtype), "actual": str(got.dtype)})
        elif tuple(want.shape) != tuple(got.shape):
            found.append({"what": "shape", "output": index, "expected": list(want.shape), "actual": list(got.shape)})
        elif not torch.equal(want.contiguous().view(-1).view(torch.uint8), got.contiguous().view(-1).view(torch.uint8)):
            flat_w, flat_g = want.reshape(-1), got.reshape(-1)
            bad = [i for i in range(flat_w.numel())
                   if not torch.equal(flat_w[i:i + 1].view(torch.uint8), flat_g[i:i + 1].view(torch.uint8))]
            found.append({"what": "values", "output": index, "elements": len(bad), "first": bad[0],
                          "expected": flat_w[bad[0]].item(), "actual": flat_g[bad[0]].item()})
    return found


def register_groups(rank: int) -> None:
    """Every group of the case under its name, as a real job's process groups are found by name."""
    from torch._C._distributed_c10d import _register_process_group
    handles = {}
    for name in sorted(GROUPS):
        for part in GROUPS[name]:
            if tuple(part) not in handles:
                handles[tuple(part)] = dist.new_group(list(part))  # a collective of the world: every rank, same order
        _register_process_group(name, handles[next(tuple(p) for p in GROUPS[name] if rank in p)])


def on_rank(rank: int, store_path: str, rewritten: fx.GraphModule, results: Any) -> None:
    """Run this rank's original and rewritten graphs with real collectives; report what differs
    (``results.send``: first the stage it reached, so that a death after it is the rewritten graph's)."""
    report: dict = {"rank": rank}
    try:
        dist.init_process_group("gloo", init_method=f"file://{store_path}", rank=rank, world_size=len(WORLD),
                                timeout=timedelta(seconds=120))
        register_groups(rank)
        # a source the rewrite renamed or replaced is left as it is in both runs (else only one is exact)
        exact = set(EXACT) & {node.name for node in rewritten.graph.nodes}
        report["inexact"] = sorted(set(EXACT) - exact)
        expected = run_graph(build_graph(rank), rank, exact)
        results.send({"rank": rank, "stage": "rewritten"})
        try:
            actual = run_graph(rewritten, rank, exact)
        except Exception as exc:  # noqa: BLE001 - the rewritten graph failing to run is the failure
            report.update(kind="rewritten_raised", error=f"{type(exc).__name__}: {exc}",
                          traceback=traceback.format_exc()[-3000:])
        else:
            found = differences(expected, actual)
            report.update(kind="outputs_differ" if found else "equal", differences=found)
    except Exception as exc:  # noqa: BLE001 - the original graph or the world failing: the case cannot be run here
        report.update(kind="cannot_run", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
    results.send(report)
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def _exit_status(code: int | None) -> str:
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def _died(rank: int, code: int | None, stage: str | None) -> dict:
    """A rank whose process ended without a report: after it began the rewritten graph, that graph's
    failure; before, the original graph or the world could not run here."""
    if stage == "rewritten":
        return {"rank": rank, "kind": "rewritten_died",
                "error": f"the rank's process ended ({_exit_status(code)}) while running the rewritten graph"}
    return {"rank": rank, "kind": "cannot_run",
            "error": f"the rank's process ended ({_exit_status(code)}) before the rewritten graph ran"}


def run_world(rewritten: dict, timeout: float, peer_wait: float = 15.0) -> list[dict]:
    """Every rank in its own forked process (it inherits the rewritten modules; one rank too, so that
    a graph that ends its process ends a rank's, not this script). Each rank has its own pipe, and
    its process is polled beside it (a child it left behind may hold the pipe, and the process's
    sentinel, open), so a rank that dies, even half-way through a message, is named at once and
    never holds up the others' reports."""
    store = tempfile.NamedTemporaryFile(prefix="repro-store-", delete=False)
    store.close()
    os.unlink(store.name)
    try:
        return _run_ranks(rewritten, timeout, peer_wait, store.name)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(store.name)  # the ranks' rendezvous file: a script run a hundred times leaves none


def _run_ranks(rewritten: dict, timeout: float, peer_wait: float, store: str) -> list[dict]:
    context = multiprocessing.get_context("fork")
    pipes, procs = {}, {}
    for rank in WORLD:
        reader, writer = context.Pipe(duplex=False)
        procs[rank] = context.Process(target=on_rank, args=(rank, store, rewritten[rank], writer), daemon=True)
        procs[rank].start()
        writer.close()  # the rank holds the only writing end: its death closes the pipe
        pipes[rank] = reader
    reports: dict[int, dict] = {}
    stages: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    waiting = timeout

    def settle(rank: int, report: dict) -> None:
        nonlocal waiting, deadline
        reports[rank] = report
        if report["kind"] != "equal" and waiting > peer_wait:  # peers may wait in a collective it left
            waiting, deadline = peer_wait, min(deadline, time.monotonic() + peer_wait)

    while len(reports) < len(WORLD) and time.monotonic() < deadline:
        open_pipes = {pipes[rank]: rank for rank in WORLD if rank not in reports}
        for conn in multiprocessing.connection.wait(list(open_pipes), timeout=min(0.5, deadline - time.monotonic())):
            rank = open_pipes[conn]
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the pipe closed without a report: the rank's process ended
                procs[rank].join(timeout=5)
                settle(rank, _died(rank, procs[rank].exitcode, stages.get(rank)))
                continue
            if "stage" in message:
                stages[rank] = message["stage"]
            else:
                settle(rank, message)
        for rank in WORLD:  # ended, with nothing left to read: no report will come
            if rank not in reports and procs[rank].exitcode is not None and not pipes[rank].poll(0):
                settle(rank, _died(rank, procs[rank].exitcode, stages.get(rank)))
    reports.update({rank: {"rank": rank, "kind": "hung", "error": f"no result within {waiting:.0f} s"}
                    for rank in WORLD if rank not in reports})
    for proc in procs.values():
        proc.join(timeout=5)
        if proc.is_alive():
            proc.kill()
    return [reports[rank] for rank in sorted(reports)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", action="append", default=[], metavar="OPTION=VALUE",
                        help="override one inductor option (try a corrected configuration)")
    parser.add_argument("--json", metavar="FILE", help="also write the outcome as JSON")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds the ranks may take")
    parser.add_argument("--peer-wait", type=float, default=15.0,
                        help="seconds the other ranks may take once one has failed (they may wait in a "
                             "collective it never joins)")
    args = parser.parse_args(argv)
    outcome: dict = {"reproduced": False, "kind": "equal", "ranks": []}
    states = snapshot()
    try:
        rewritten = rewrite_world(args)
    except Exception as exc:  # noqa: BLE001 - the target raising is the failure
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        outcome.update(reproduced=True, kind="target_raised", error=f"{type(exc).__name__}: {exc}",
                       frame=f"{frame.filename}:{frame.lineno} in {frame.name}")
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        print(f"REPRODUCED: the rewrite raised {type(exc).__name__}: {first}")  # one line, always the last
    else:
        if any(set(EXACT) - {node.name for node in module.graph.nodes} for module in rewritten.values()):
            FULL.clear()  # a renamed reduction source sums what it gets: dyadic shards keep its sums exact
        moved = [str(name.value) for name in drawn(states) if name.value not in RESTORED]
        if moved:
            outcome["generators"] = moved
            print(f"the rewrite moved the global random generator(s) {moved}: the step's later random numbers shift")
        outcome["ranks"] = run_world(rewritten, args.timeout, args.peer_wait)
        for report in outcome["ranks"]:
            if report.get("inexact") and len(WORLD) > 2:
                print(f"rank {report['rank']}: the rewrite renamed reduction sources {report['inexact']}: they were "
                      f"compared without exact values, and with 3+ ranks a sum may differ in its last bit")
            for diff in report.get("differences", []):
                print(f"rank {report['rank']}: output {diff['output']}: {diff['what']} differ: "
                      f"expected {diff['expected']}, got {diff['actual']}"
                      + (f" (element {diff['first']}, {diff['elements']} elements differ)" if "first" in diff else ""))
            if report["kind"] not in ("equal", "outputs_differ"):
                print(f"rank {report['rank']}: {report['kind']}: {report.get('error', '')}")
                if report.get("traceback"):
                    print(report["traceback"], file=sys.stderr)
        kinds = {report["kind"] for report in outcome["ranks"]}
        # a rank that died, then what a rank saw first in its own run, outrank a peer left waiting for it
        failing = [kind for kind in ("rewritten_died", "rewritten_raised", "outputs_differ", "hung")
                   if kind in kinds] + \
            (["generator_drawn"] if moved else [])
        if failing:
            outcome.update(reproduced=True, kind=failing[0])
            print(f"REPRODUCED: {', '.join(failing)}")
        elif "cannot_run" in kinds:
            outcome.update(kind="cannot_run")
            print("CANNOT RUN: the original graph does not run on real ranks here (see above)")
        else:
            print("NOT REPRODUCED: every output is bitwise equal on every rank")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(outcome, handle, indent=1, default=str)
    return 1 if outcome["reproduced"] else (3 if outcome["kind"] == "cannot_run" else 0)


if __name__ == "__main__":
    sys.exit(main())
