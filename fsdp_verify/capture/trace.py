"""Capture a described model's forward and backward graphs through ``torch.compile`` (an
aot_autograd backend) on a fake process group, and describe them as ``GraphSpec``s.

Why this shape: it is what inductor's bucketing passes receive from a SimpleFSDP-style model (one
``all_gather_into_tensor`` + ``wait_tensor`` per parameter use in forward, one
``reduce_scatter_tensor`` + ``wait_tensor`` per gradient in backward), on CPU, in well under a
second. The graph is rank 0's; every rank of the simulated world runs it (SPMD), so an uneven
shard is rank 0's (largest) shard on every rank. Captures are cached by description.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import fx, nn

from fsdp_verify.graph import collectives
from fsdp_verify.graph.builder import HEADER_KEY
from fsdp_verify.graph.importer import import_module
from fsdp_verify.graph.spec import GraphSpec, InputSpec, ParamSpec
from fsdp_verify.graph.values import DTYPE_NAMES
from fsdp_verify.capture.model import (VOCAB, ModelDesc, SimpleFSDPModel, check, dtensor_gather, example_input, full_params,
                    param_shapes)
from fsdp_verify.capture import store
from fsdp_verify.capture.tags import add_fsdp_tags

PHASES = ("forward", "backward")


class CaptureError(RuntimeError):
    """A model whose compiled graphs could not be captured or described (names the model and why)."""


@dataclass(frozen=True)
class Captured:
    """Both graphs of one training step, and what the capture cost (seconds, uncached)."""

    forward: GraphSpec
    backward: GraphSpec
    seconds: float

    def phase(self, name: str) -> GraphSpec:
        """The graph of ``forward`` or ``backward``."""
        return self.forward if name == "forward" else self.backward


def mesh_dim_names(mesh: tuple[int, ...]) -> tuple[str, ...]:
    """Group names of a mesh's dimensions (also the group names in the captured graphs)."""
    return ("fsdp",) if len(mesh) == 1 else ("dp_replicate", "dp_shard")


def mesh_groups(mesh: tuple[int, ...]) -> dict[str, tuple[tuple[int, ...], ...]]:
    """Each mesh dimension's subgroups (global ranks), as ``GraphSpec.groups`` holds them."""
    ranks = torch.arange(int(torch.tensor(mesh).prod())).reshape(mesh)
    return {name: tuple(tuple(int(r) for r in row) for row in ranks.movedim(dim, -1).reshape(-1, size))
            for dim, (name, size) in enumerate(zip(mesh_dim_names(mesh), mesh))}


@contextlib.contextmanager
def fake_mesh(mesh: tuple[int, ...]) -> Iterator[Any]:
    """Rank 0 of a fake process group over the whole mesh (no data moves; shapes are exact)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if dist.is_initialized():
        raise CaptureError("capture needs an uninitialised default process group (it makes a fake one)")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=int(torch.tensor(mesh).prod()))
    try:
        yield init_device_mesh("cpu", mesh, mesh_dim_names=mesh_dim_names(mesh))
    finally:
        dist.destroy_process_group()


def placements(desc: ModelDesc) -> dict[str, list]:
    """Each parameter's DTensor placements: ``Shard(0)`` on a 1-D mesh; HSDP ``(Replicate, Shard(0))``
    or ``(Shard(0), Shard(0))`` on a 2-D mesh, per layer."""
    from torch.distributed.tensor import Replicate, Shard
    out = {}
    for fqn in param_shapes(desc):
        layer = desc.layers[int(fqn.split(".")[1])]
        if len(desc.mesh) == 1:
            out[fqn] = [Shard(0)]
        else:
            out[fqn] = [Shard(0) if layer.placement == "shard2d" else Replicate(), Shard(0)]
    return out


def _build(desc: ModelDesc, mesh: Any) -> SimpleFSDPModel:
    from torch.distributed.tensor import distribute_tensor
    where = placements(desc)
    params = {fqn: nn.Parameter(distribute_tensor(value, mesh, where[fqn]))
              for fqn, value in full_params(desc).items()}
    return SimpleFSDPModel(desc, params, dtensor_gather(desc, where))


def _compile(model: SimpleFSDPModel, example: torch.Tensor) -> tuple[fx.GraphModule, fx.GraphModule, list[str]]:
    """Run one step under torch.compile with an aot_autograd backend that keeps both graphs; returns
    them and, per forward placeholder that is a parameter shard, its FQN (else "")."""
    import torch._dynamo
    from torch._functorch.aot_autograd import aot_module_simplified
    owners = {id(model.params[key]): fqn for fqn, key in model.names.items()}
    kept: dict[str, Any] = {}

    def keep(name: str):
        def compiler(gm: fx.GraphModule, inputs: Any) -> Any:
            kept[name] = gm
            return gm.forward
        return compiler

    def backend(gm: fx.GraphModule, inputs: list) -> Any:
        kept["inputs"] = [owners.get(id(x), "") for x in inputs]
        return aot_module_simplified(gm, inputs, fw_compiler=keep("forward"), bw_compiler=keep("backward"))

    torch._dynamo.reset()  # a fresh model must not meet the recompile limit of the one before
    compiled = torch.compile(model, backend=backend, fullgraph=True, dynamic=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(example).sum().backward()
    if "forward" not in kept or "backward" not in kept:
        raise CaptureError("torch.compile produced no forward/backward graph pair")
    return kept["forward"], kept["backward"], kept["inputs"]


def _primal_owners(forward: fx.GraphModule, inputs: list[str]) -> dict[str, str]:
    """Forward placeholder name -> FQN: tensor placeholders follow dynamo's inputs in order (a
    DTensor flattens to its local tensor plus opaque objects, which are skipped)."""
    tensors = [n for n in forward.graph.find_nodes(op="placeholder") if isinstance(n.meta.get("val"), torch.Tensor)]
    if len(tensors) != len(inputs):
        raise CaptureError(f"{len(tensors)} tensor placeholders for {len(inputs)} compiled inputs")
    return {node.name: fqn for node, fqn in zip(tensors, inputs) if fqn}


def _clean(gm: fx.GraphModule, groups: dict[str, str]) -> None:
    """Keep only ``val`` meta, drop opaque (non-tensor) placeholders, name groups by mesh dimension."""
    graph = gm.graph
    for node in graph.nodes:
        node.meta = {"val": node.meta["val"]} if "val" in node.meta else {}
    output = next(iter(graph.find_nodes(op="output")))
    for node in list(graph.find_nodes(op="placeholder")):
        if isinstance(node.meta.get("val"), torch.Tensor):
            continue
        if any(user is not output for user in node.users):
            raise CaptureError(f"opaque placeholder {node.name} is read by a computation")
        output.args = (tuple(None if item is node else item for item in output.args[0]),)
        graph.erase_node(node)
    for node in graph.nodes:
        if node.op == "call_function" and collectives.op_name(node.target, (collectives.NAMESPACE,)) and node.args \
                and isinstance(node.args[-1], str) and node.args[-1] in groups:
            node.args = (*node.args[:-1], groups[node.args[-1]])
        if node.kwargs.get("layout") is torch.strided:  # the default; the codec has no layouts
            node.kwargs = {k: v for k, v in node.kwargs.items() if k != "layout"}
    graph.lint()
    gm.recompile()


def _describe(gm: fx.GraphModule, desc: ModelDesc, phase: str, owners: dict[str, str],
              groups: dict[str, tuple[tuple[int, ...], ...]]) -> GraphSpec:
    fqns = list(param_shapes(desc))
    params, inputs = [], []
    for node in gm.graph.find_nodes(op="placeholder"):
        val = node.meta["val"]
        shape, dtype = tuple(int(d) for d in val.shape), DTYPE_NAMES[val.dtype]
        if node.name in owners:
            group = next((u.args[-1] for u in node.users if "all_gather" in str(u.target)), mesh_dim_names(desc.mesh)[-1])
            params.append(ParamSpec(owners[node.name], node.name, shape, dtype, "cpu", fqns.index(owners[node.name]),
                                    group, _padding(desc, owners[node.name], shape, groups.get(group, ()))))
        else:
            high = VOCAB if desc.tokens and not val.dtype.is_floating_point else 0
            inputs.append(InputSpec(node.name, shape, dtype, high))
    gm.meta[HEADER_KEY] = {"groups": groups, "params": params, "inputs": inputs, "version": 1,
                           "attrs": {"state_fqns": fqns, "num_state_inputs": len(fqns),
                                     "state_is_param": [True] * len(fqns), "captured_phase": phase,
                                     "captured_model": desc.to_json()}}
    return import_module(gm)


def _padding(desc: ModelDesc, fqn: str, shard: tuple[int, ...],
             parts: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, int], ...]:
    """The ranks whose shard of ``fqn`` is short, and by how many rows: DTensor's ``Shard(0)`` gives
    each position of a group ``ceil(rows / degree)`` rows while any are left, and a short rank pads
    before its all-gather. The graph was traced on rank 0, which is never short; the others' graphs
    are that graph with their pad (``builder.localize``). A parameter sharded on both dims of a
    2-D mesh gathers twice and is left even."""
    full = param_shapes(desc).get(fqn)
    layer = desc.layers[int(fqn.split(".")[1])]
    if not full or not shard or not parts or (len(desc.mesh) > 1 and layer.placement == "shard2d"):
        return ()
    degree, chunk = len(parts[0]), shard[0]
    if chunk != -(-full[0] // degree):
        return ()  # not the layout this models
    return tuple(sorted((rank, chunk - max(0, min(chunk, full[0] - position * chunk)))
                        for part in parts for position, rank in enumerate(part)
                        if full[0] - position * chunk < chunk))


def capture(desc: ModelDesc) -> Captured:
    """The forward and backward graphs of one training step of ``desc``, FSDP-tagged (cached)."""
    return _capture(desc)


@functools.lru_cache(maxsize=128)
def _capture(desc: ModelDesc) -> Captured:
    """The memo of this process over the store of this machine (``capture/store.py``) over a fresh
    capture."""
    check(desc)
    doc = desc.to_json()
    stored = store.load(doc)
    if stored is not None:
        return Captured(*stored)
    captured = capture_fresh(desc)
    store.save(doc, captured.forward, captured.backward, captured.seconds)
    return captured


def capture_fresh(desc: ModelDesc) -> Captured:
    """``desc`` compiled and described now, neither memo nor store asked (benchmarks time this)."""
    check(desc)
    if desc.data_dependent:
        # The graph format holds concrete shapes, which every simulated check needs; an unbacked row
        # count has none until the step runs. Such models are judged end to end (``endtoend``).
        raise CaptureError(f"capturing {desc}: a selecting layer makes row counts data-dependent; "
                           "the graph format holds static shapes (endtoend judges these models)")
    start = time.perf_counter()
    quiet = logging.getLogger("torch.distributed.tensor._redistribute")  # "2 sequential all_gathers": wanted here
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    with fake_mesh(desc.mesh) as mesh, contextlib.ExitStack() as restore:
        restore.callback(quiet.setLevel, level)
        model = _build(desc, mesh)
        fake_groups = {mesh.get_group(dim).group_name: name for dim, name in enumerate(mesh_dim_names(desc.mesh))}
        try:
            forward, backward, inputs = _compile(model, example_input(desc))
        except CaptureError:
            raise
        except Exception as exc:  # noqa: BLE001 - a model torch.compile refuses is named, with why
            raise CaptureError(f"capturing {desc}: {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    owners = _primal_owners(forward, inputs)
    order = [n.name for n in forward.graph.find_nodes(op="placeholder")]
    grads = {index: owners[name] for index, name in enumerate(order) if name in owners}
    state_idx = {fqn: index for index, fqn in enumerate(param_shapes(desc))}
    groups = mesh_groups(desc.mesh)
    specs = {}
    for phase, gm in (("forward", forward), ("backward", backward)):
        _clean(gm, fake_groups)
        present = {n.name: owners[n.name] for n in gm.graph.find_nodes(op="placeholder") if n.name in owners}
        add_fsdp_tags(gm.graph, backward=phase == "backward", params=present, state_idx=state_idx, primals=grads)
        untagged = [n.name for n in gm.graph.nodes if n.op == "call_function" and "comm_type" not in n.meta
                    and collectives.is_launch(n.target) and collectives.op_name(n.target, (collectives.NAMESPACE,))]
        if untagged:  # an untagged collective is one the reference ignores: its checks would pass vacuously
            raise CaptureError(f"{desc}: {phase} graph: the tag adapter found no parameter for collectives "
                               f"{untagged}")
        specs[phase] = _describe(gm, desc, phase, present, groups)
    return Captured(specs["forward"], specs["backward"], time.perf_counter() - start)


__all__ = ["PHASES", "CaptureError", "Captured", "capture", "capture_fresh", "fake_mesh", "mesh_dim_names", "mesh_groups",
           "placements"]
