"""End to end through inductor's real pipeline: a SimpleFSDP-style model compiled by
``torch.compile`` with a bucketing configuration set in ``torch._inductor.config``, on a real gloo
world, compared bit for bit with the same compile without bucketing.

Each parameter is all-gathered in ``forward`` with the autograd-aware functional collective (its
backward is a reduce-scatter), so the forward graph inductor receives holds one all-gather per
parameter and the backward graph one reduce-scatter per parameter: the shapes inductor's bucketing
is written for. Bucketing must not change a single bit of the loss or of any gradient; comparing
with the unbucketed compile (not with eager) keeps inductor's own kernel choices out of the verdict,
and eager is reported beside it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn
from torch.func import functional_call

from fsdp_verify.targets.post_grad import HARNESS_OPTIONS, cost_model, manual_post_pass
from fsdp_verify.graph import collectives

OFF = {"bucket_all_gathers_fx": "none", "bucket_reduce_scatters_fx": "none"}


@contextlib.contextmanager
def gloo_world() -> Iterator[dist.ProcessGroup]:
    """A one-process gloo world (a real backend: its collectives run), made here if none exists."""
    made = not dist.is_initialized()
    if made:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        if made:
            dist.destroy_process_group()


class Gathered(nn.Module):
    """``inner`` with every parameter all-gathered along dim 0 before use (SimpleFSDP's forward)."""

    def __init__(self, inner: nn.Module, group: dist.ProcessGroup):
        super().__init__()
        self.inner, self.group = inner, group

    def forward(self, *args: Any) -> Any:
        from torch.distributed._functional_collectives import all_gather_tensor_autograd
        full = {name: all_gather_tensor_autograd(p, 0, self.group) for name, p in self.inner.named_parameters()}
        return functional_call(self.inner, full, args)


@dataclass
class Run:
    """The loss and every parameter's gradient of one training step, and the collectives launched
    by the graphs inductor compiled (after its post-grad passes: bucketing shows here)."""

    loss: torch.Tensor
    grads: dict[str, torch.Tensor] = field(default_factory=dict)
    launches: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def _counting(launches: dict[str, int]) -> Iterator[None]:
    """Count the collective launches of each graph as inductor's post-grad passes leave it (bucketing
    is among them), by wrapping the function inductor's compile calls for those passes."""
    import torch._inductor.compile_fx as compile_fx
    original = compile_fx.post_grad_passes

    def counted(gm: torch.fx.GraphModule, is_inference: bool) -> None:
        original(gm, is_inference)
        for node in gm.graph.nodes:
            name = str(node.target)
            if collectives.op_name(name, (collectives.NAMESPACE,)) and not collectives.is_wait(name):
                op = name.split(".")[1].removesuffix("_out")
                launches[op] = launches.get(op, 0) + 1

    compile_fx.post_grad_passes = counted
    try:
        yield
    finally:
        compile_fx.post_grad_passes = original


def _step(module: nn.Module, inputs: tuple, params: nn.Module) -> Run:
    for p in params.parameters():
        p.grad = None
    out = module(*inputs)
    loss = out.float().sum()
    loss.backward()
    return Run(loss.detach().clone(), {n: p.grad.detach().clone() for n, p in params.named_parameters()
                                       if p.grad is not None})


def _fixed_cap(cap: float, bucket_index: int) -> float:
    """Every bucket's cap, in MB."""
    return cap


def config_patch(options: dict[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """``options`` as a ``torch._inductor.config.patch``: harness options (and ``skip``) left out,
    ``bucket_cap_mb`` as the three bucket-size determinators, the manual scheduler installed as
    a ``post_grad_custom_post_pass`` where drawn (as torchtitan installs it), and no FX graph
    cache, so every compile runs the passes again."""
    patch = {k: v for k, v in options.items() if k not in HARNESS_OPTIONS and k not in skip}
    manual = manual_post_pass(options)
    if manual is not None:
        patch["post_grad_custom_post_pass"] = manual
    cap = options.get("bucket_cap_mb")
    if cap is not None:
        # a partial of a module-level function, not a lambda: the FX graph cache pickles its key
        # (config included), and a lambda would make every such compile bypass the cache
        determinator = functools.partial(_fixed_cap, cap)
        patch["bucket_all_gathers_fx_bucket_size_determinator"] = determinator
        patch["bucket_reduce_scatters_fx_bucket_size_determinator"] = determinator
        patch["bucket_all_reduces_fx_bucket_size_determinator"] = determinator
    patch["fx_graph_cache"] = False
    return patch


def compiled_step(model: nn.Module, inputs: tuple, options: dict[str, Any]) -> Run:
    """One step of ``model`` compiled by inductor under ``options`` (``config_patch``)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    patch = config_patch(options)
    launches: dict[str, int] = {}
    torch._dynamo.reset()
    with gloo_world() as group, inductor_config.patch(patch), cost_model(), _counting(launches):
        run = _step(torch.compile(Gathered(model, group), backend="inductor", fullgraph=True), inputs, model)
    run.launches = launches
    return run


def eager_step(model: nn.Module, inputs: tuple) -> Run:
    """The same step without compiling."""
    with gloo_world() as group:
        return _step(Gathered(model, group), inputs, model)


def plain(outputs: dict[str, torch.Tensor]) -> dict[str, tuple[str, list[int], bytes]]:
    """Tensors as (dtype, shape, bytes): plain data another process can hand back bit for bit."""
    return {name: (str(t.dtype).removeprefix("torch."), list(t.shape), t.contiguous().view(torch.uint8).numpy().tobytes())
            for name, t in outputs.items()}


def tensors(found: dict[str, tuple[str, list[int], bytes]]) -> dict[str, torch.Tensor]:
    """What ``plain`` gave, as tensors again."""
    return {name: torch.frombuffer(bytearray(data), dtype=torch.uint8).view(getattr(torch, dtype)).reshape(shape)
            if data else torch.empty(shape, dtype=getattr(torch, dtype)) for name, (dtype, shape, data) in found.items()}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def first_difference(base: Run, other: Run) -> Optional[str]:
    """The first tensor (loss, then gradients by name) whose bits differ, or None."""
    if not _same(base.loss, other.loss):
        return f"loss {base.loss.item()!r} vs {other.loss.item()!r}"
    for name in sorted(base.grads):
        if name not in other.grads:
            return f"gradient of {name} is missing"
        if not _same(base.grads[name], other.grads[name]):
            return f"gradient of {name}"
    return None


def judge(model: nn.Module, inputs: tuple, options: dict[str, Any]) -> dict[str, Any]:
    """Bucketed vs unbucketed compile (the verdict) and vs eager (reported): what differs, if anything."""
    bucketed = compiled_step(model, inputs, options)
    plain = compiled_step(model, inputs, OFF)
    return {"options": dict(options), "difference": first_difference(plain, bucketed),
            "eager_difference": first_difference(eager_step(model, inputs), bucketed),
            "launches": {"unbucketed": plain.launches, "bucketed": bucketed.launches}}
