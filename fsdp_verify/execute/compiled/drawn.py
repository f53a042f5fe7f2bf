"""End to end on drawn models: the model a captured case came from, compiled by inductor under one
bucketing configuration and run on a real gloo world, compared bit for bit (forward output, then
every gradient) with the same compile without bucketing, and with eager (reported).

Why the unbucketed compile decides: bucketing moves data, it must not change one bit, whereas
inductor's own kernels may round differently from eager (norms). Why random weights: a planted
merge that rounds a member through another dtype must show (small dyadics survive bf16).

A real one-process world has a one-rank group, on which DTensor issues no collective at all, so the
model gathers with the autograd-aware functional all-gather (SimpleFSDP's shape, same graphs for
inductor); every parameter is then its own full shard.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
import tempfile
from typing import Any, Callable, Iterator, Optional

import torch
from torch import fx, nn

from fsdp_verify.targets.post_grad import cost_model
from fsdp_verify.capture.model import ModelDesc, SimpleFSDPModel, dtype, example_input, funcol_gather, param_shapes
from fsdp_verify.execute.compiled import blas
from fsdp_verify.execute.compiled.builtin import OFF, _counting, _same, config_patch, gloo_world
from fsdp_verify.execute.compiled.warm import Warm, link_kernel_caches, warm_outputs

Outputs = dict[str, torch.Tensor]  # "output", then "grad <fqn>" in parameter order
GRAD = "grad "


def is_gradient(name: str) -> bool:
    """Whether an ``Outputs`` key names a parameter's gradient (the keys are this module's own)."""
    return name.startswith(GRAD)

# How the model is compiled, drawn beside inductor's options (harness options, never patched into
# inductor's config). ``dynamic``: ``torch.compile(dynamic=True)``, so the passes see symbolic
# sizes. ``compile_cache``: ``warm`` compiles with inductor's FX graph cache into a fresh folder,
# then loads it in a fresh process (``warm.py``), where a hit skips the post-grad passes.
COMPILE_SPACE: dict[str, tuple] = {"dynamic": (False, True), "compile_cache": ("cold", "warm")}


# A harness option, never drawn: the compile's C++ kernels are scalar (``cpp.simdlen = 1``), so every
# reduction adds in index order. Used only to re-judge a difference (``vector_order``).
SCALAR = "scalar_kernels"
# How far a vectorized difference that scalar kernels explain may go, in units in the last place of
# the compute dtype at the tensor's largest magnitude: reordering a short sum moves a few units; a
# wrong, stale or rounded member moves far more.
VECTOR_ORDER_ULPS = 64


def vector_bound(base: Outputs, other: Outputs, compute: torch.dtype, tolerate: Optional["Tolerance"] = None) -> bool:
    """Whether every tensor of ``other`` is within ``VECTOR_ORDER_ULPS`` of ``base`` (units in the
    last place of the compute dtype at the tensor's largest magnitude), or passed by ``tolerate``:
    the most a reordered short sum moves. Checked before any re-judgement, which cannot explain
    more."""
    if set(base) != set(other):
        return False
    for name, a in base.items():
        b = other[name]
        if (tolerate is not None and tolerate(name, a, b)) or _same(a, b):
            continue
        if not a.is_floating_point() or not within_ulps(a, b, VECTOR_ORDER_ULPS, compute):
            return False
    return True


def within_ulps(a: torch.Tensor, b: torch.Tensor, units: int, dtype: torch.dtype) -> bool:
    """Whether every element of ``b`` is within ``units`` units in the last place of ``dtype`` (or of
    the tensors' own dtype, if coarser) of ``a``'s, measured at the larger tensor's largest
    magnitude: a reordered sum errs by units of its largest partial sum, not of each result."""
    if a.shape != b.shape or a.dtype != b.dtype or not a.is_floating_point():
        return False
    if a.numel() == 0:
        return True
    a64, b64 = a.double(), b.double()
    if not (torch.isfinite(a64).all() and torch.isfinite(b64).all()):
        return False
    coarse = max((torch.finfo(a.dtype), torch.finfo(dtype)), key=lambda info: info.eps)
    magnitude = max(float(torch.maximum(a64.abs(), b64.abs()).max()), coarse.smallest_normal)
    ulp = coarse.eps * 2.0 ** math.floor(math.log2(magnitude))
    return bool(((a64 - b64).abs() <= units * ulp).all())


def vector_order(base: Outputs, other: Outputs, scalar_base: Outputs, scalar_other: Outputs,
                 compute: torch.dtype, tolerate: Optional["Tolerance"] = None) -> bool:
    """Whether ``other`` differs from ``base`` only by the order inductor's vectorized kernels add in.

    Why this is sound: a bucketed graph may fuse a bucket's unpacking into the kernel that reads a
    member, which then loads it through an index expression and reduces in scalar order where the
    unbucketed kernel used vector lanes: the same sum, other last bits. With scalar kernels both
    compiles add in index order, so bucketing that moved the data right gives equal bits, and a
    fault that changes values (wrong member, stale or rounded data) still differs there. The bound
    (``vector_bound``) keeps a fault that only vectorized kernels show (an alignment a vector load
    assumes) a finding unless it moves values by less than ``VECTOR_ORDER_ULPS``. ``tolerate`` is
    the verdict's own freedom (a gradient's reduction order over ranks), granted on both sides."""
    return (first_difference(scalar_base, scalar_other, tolerate) is None
            and vector_bound(base, other, compute, tolerate))


def _model(desc: ModelDesc, group: Any, seed: int) -> SimpleFSDPModel:
    gen = torch.Generator().manual_seed(seed)
    params = {fqn: nn.Parameter(torch.randn(shape, generator=gen)) for fqn, shape in param_shapes(desc).items()}
    return SimpleFSDPModel(desc, params, funcol_gather(desc, group))


def _step(module: Callable, model: SimpleFSDPModel, x: torch.Tensor) -> Outputs:
    for p in model.parameters():
        p.grad = None
    out = module(x)
    out.sum().backward()
    found = {"output": out.detach().clone()}
    for fqn, key in model.names.items():
        grad = model.params[key].grad
        if grad is not None:
            found[f"{GRAD}{fqn}"] = grad.detach().clone()
    return found


def _first_merged_rounds_through_bf16(op: str, gm: fx.GraphModule, before: set) -> None:
    """Planted fault: the first ``op`` collective a bucketing pass created (a node not in ``before``)
    rounds its input through bfloat16. On an all-gather the output moves; on a reduce-scatter only
    the gradients do, the forward output stays equal."""
    for node in list(gm.graph.nodes):
        if node not in before and op in str(node.target) and isinstance(node.args[0], fx.Node):
            source = node.args[0]
            dtype = source.meta["val"].dtype
            if dtype == torch.bfloat16:
                continue
            with gm.graph.inserting_before(node):
                low = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (source, torch.bfloat16))
                back = gm.graph.call_function(torch.ops.prims.convert_element_type.default, (low, dtype))
            low.meta["val"] = source.meta["val"].to(torch.bfloat16)
            back.meta["val"] = source.meta["val"]
            node.args = (back, *node.args[1:])
            return


def _only_vectorized(plant: Callable[[fx.GraphModule, set], None], gm: fx.GraphModule, before: set) -> None:
    """Planted fault: ``plant``, in vectorized compiles only. It stands for a fault that only vector
    kernels show (a vector load that assumes an alignment a bucket does not give), which the scalar
    re-judgement cannot see: the bound of ``vector_order`` must keep it a finding."""
    import torch._inductor.config as inductor_config
    if inductor_config.cpp.simdlen != 1:
        plant(gm, before)


_AG_ROUNDS = functools.partial(_first_merged_rounds_through_bf16, "all_gather_into_tensor")
# Each plant edits what the bucketing entry points of its kind merged.
PLANTS: dict[str, Callable[[fx.GraphModule, set], None]] = {
    "ag_merge_rounds_to_bf16": _AG_ROUNDS,
    "rs_merge_rounds_to_bf16": functools.partial(_first_merged_rounds_through_bf16, "reduce_scatter_tensor"),
    "ag_merge_rounds_when_vectorized": functools.partial(_only_vectorized, _AG_ROUNDS),
}
_AG_PASSES = (("bucketing", "bucket_all_gather"), ("fsdp", "bucket_fsdp_all_gather"))
_PLANTED_PASSES = {"ag_merge_rounds_to_bf16": _AG_PASSES, "ag_merge_rounds_when_vectorized": _AG_PASSES,
                   "rs_merge_rounds_to_bf16": (("bucketing", "bucket_reduce_scatter"),
                                               ("fsdp", "bucket_fsdp_reduce_scatter"))}


@contextlib.contextmanager
def _planted(name: Optional[str]) -> Iterator[None]:
    """Wrap inductor's bucketing entry points of the plant's kind so that ``PLANTS[name]`` edits what
    they merged."""
    if not name:
        yield
        return
    if name not in PLANTS:
        raise ValueError(f"plant {name!r}: unknown; known plants are {sorted(PLANTS)}")
    from torch._inductor.fx_passes import bucketing, fsdp
    modules = {"bucketing": bucketing, "fsdp": fsdp}
    originals = {(modules[module], attr): getattr(modules[module], attr) for module, attr in _PLANTED_PASSES[name]}

    def wrap(original: Callable) -> Callable:
        def planted(gm: fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
            before = set(gm.graph.nodes)
            result = original(gm, *args, **kwargs)
            PLANTS[name](gm, before)
            return result
        return planted
    for (module, attr), original in originals.items():
        setattr(module, attr, wrap(original))
    try:
        yield
    finally:
        for (module, attr), original in originals.items():
            setattr(module, attr, original)


def compiled_outputs(desc: ModelDesc, options: dict[str, Any], seed: int = 0,
                     cache: bool = False) -> tuple[Outputs, dict[str, int]]:
    """One step of ``desc`` compiled by inductor under ``options`` (``torch._inductor.config`` names;
    ``bucket_cap_mb`` sets both size determinators; ``plant`` names a planted fault; ``dynamic``
    compiles with symbolic sizes), and the collectives inductor's post-grad passes left (none
    counted on an FX graph cache hit: the passes do not run). ``cache`` turns the FX graph cache on."""
    launches: dict[str, int] = {}
    with gloo_world() as group, inductor(options, launches, cache):
        model = _model(desc, group, seed)
        outputs = _step(torch.compile(model, backend="inductor", fullgraph=True, dynamic=bool(options.get("dynamic"))),
                        model, example_input(desc, seed))
    return outputs, launches


@contextlib.contextmanager
def inductor(options: dict[str, Any], launches: dict[str, int], cache: bool = False) -> Iterator[None]:
    """Inductor configured by ``options`` (``bucket_cap_mb`` sets both size determinators; ``plant``
    names a planted fault), with a fresh dynamo and the launches after post-grad passes counted;
    the FX graph cache is off unless ``cache`` (then its folder is the caller's to choose)."""
    import torch._dynamo
    import torch._inductor.config as inductor_config
    patch = config_patch(options, skip=("plant", SCALAR, *COMPILE_SPACE))
    if options.get(SCALAR):
        patch["cpp.simdlen"] = 1  # no vector ISA has one lane: inductor emits scalar loops
    if cache:
        patch["fx_graph_cache"] = True
    if options.get("plant"):
        patch["emulate_precision_casts"] = True  # else a fused kernel keeps a bf16 round trip in fp32
    torch._dynamo.reset()
    # A selecting layer (``Layer.select``) indexes by a mask: with this on, dynamo keeps the data-
    # dependent size as an unbacked symbol in one graph, as a user's fullgraph compile of it must.
    # No other drawn model has an op whose output size depends on values, so they compile as before.
    with inductor_config.patch(patch), torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True), \
            cost_model(), _counting(launches), _planted(options.get("plant")):
        yield


def eager_outputs(desc: ModelDesc, seed: int = 0) -> Outputs:
    """The same step without compiling."""
    with gloo_world() as group:
        model = _model(desc, group, seed)
        return _step(model, model, example_input(desc, seed))


def failed(report: dict[str, Any]) -> Optional[str]:
    """Why a judged configuration is wrong (a differing tensor or an error, with the configuration
    named), or None."""
    if report.get("error"):
        return f"configuration {report['options']} failed: {report['error']}"
    if report.get("difference"):
        return f"configuration {report['options']}: first differing tensor: {report['difference']}"
    return None


Tolerance = Callable[[str, torch.Tensor, torch.Tensor], bool]


def first_difference(base: Outputs, other: Outputs, tolerate: Optional[Tolerance] = None,
                     tolerated: Optional[list[str]] = None) -> Optional[str]:
    """The first tensor (output, then gradients in parameter order) whose bits differ, or None; a
    tensor only one of the two runs produced is a difference too. ``tolerate(name, base, other)``
    may pass a tensor whose bits differ; each one it passes is appended to ``tolerated``."""
    for name, tensor in base.items():
        if name not in other:
            return f"{name} is missing"
        if not _same(tensor, other[name]):
            if tolerate is None or not tolerate(name, tensor, other[name]):
                return name
            if tolerated is not None:
                tolerated.append(name)
    extra = [name for name in other if name not in base]
    return f"{extra[0]} is extra" if extra else None


def judge(desc: ModelDesc, options: dict[str, Any], seed: int = 0,
          baseline: Optional[Outputs] = None, eager: Optional[Outputs] = None,
          baseline_launches: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """Bucketed vs unbucketed compile (the verdict) and vs eager (reported). ``baseline``/``eager``
    may be passed in when several configurations of one model are judged. ``exercised`` says
    whether bucketing changed the launches at all: an equal verdict of a configuration that
    bucketed nothing proves nothing, and is counted apart."""
    if baseline is None:
        baseline, baseline_launches = compiled_outputs(desc, OFF, seed)
    eager = eager if eager is not None else eager_outputs(desc, seed)
    warm: Optional[Warm] = None
    try:
        if options.get("compile_cache") == "warm":
            bucketed, launches, warm = _cold_then_warm(desc, options, seed)
        else:
            bucketed, launches = compiled_outputs(desc, options, seed)
    except Exception as exc:  # noqa: BLE001 - a configuration that cannot compile is a finding, named
        message = str(exc).strip().splitlines()
        return {"options": dict(options), "difference": None, "eager_difference": None, "launches": {},
                "error": f"{type(exc).__name__}: {message[0] if message else ''}", "exercised": True}
    report = {"options": dict(options), "difference": first_difference(baseline, bucketed),
              "eager_difference": first_difference(eager, bucketed), "launches": launches, "error": None,
              "exercised": baseline_launches is None or launches != baseline_launches}
    if report["difference"] and vector_bound(baseline, bucketed, dtype(desc.param_dtype)):
        _rejudge_scalar(report, desc, options, seed, baseline, bucketed)
    if warm is not None:
        report["warm"] = warm.summary()
        if warm.unjudged:  # the harness's failure: said in the report's "warm", never one of inductor's
            return report
        if warm.error:
            report["error"] = f"the warm compile (a fresh process loading the FX graph cache) failed: {warm.error}"
        elif not report["difference"]:
            # The loaded graph is the cold compile's: it must give the cold run's bits exactly.
            differs = first_difference(bucketed, warm.outputs)
            report["difference"] = f"{differs} (warm compile, from the FX graph cache)" if differs else None
    return report


def _rejudge_scalar(report: dict[str, Any], desc: ModelDesc, options: dict[str, Any], seed: int,
                    baseline: Outputs, bucketed: Outputs) -> None:
    """Judge a differing configuration again with scalar kernels on both sides; where that explains
    the difference (``vector_order``) it moves to the report's ``vector_order``, never silently."""
    try:
        scalar_base, _ = compiled_outputs(desc, {**OFF, SCALAR: True}, seed)
        scalar, _ = compiled_outputs(desc, {**options, SCALAR: True}, seed)
    except Exception as exc:  # noqa: BLE001 - no re-judgement: the difference stands
        report["scalar_rejudge"] = f"failed: {type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
        return
    if vector_order(baseline, bucketed, scalar_base, scalar, dtype(desc.param_dtype)):
        report["vector_order"], report["difference"] = report["difference"], None
    else:
        report["scalar_difference"] = first_difference(scalar_base, scalar)


def _cold_then_warm(desc: ModelDesc, options: dict[str, Any], seed: int) -> tuple[Outputs, dict[str, int], Warm]:
    """The configuration compiled with the FX graph cache into a fresh folder (the cold compile:
    the passes run and are counted), then loaded from that folder in a fresh process."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    with tempfile.TemporaryDirectory(prefix="fsdp-verify-inductor-cache-") as folder:
        link_kernel_caches(folder)  # fresh graph caches, shared kernel code
        with temporary_cache_dir(folder):
            cold, launches = compiled_outputs(desc, options, seed, cache=True)
        return cold, launches, warm_outputs(desc.to_json(), options, seed, folder)


def configurations(space: dict[str, tuple], count: int) -> list[dict[str, Any]]:
    """``count`` configurations of ``space`` (option -> choices) that together take every choice of
    every option (the i-th configuration takes choice i mod len(choices), options shifted so
    combinations vary); the first buckets everything at the defaults."""
    names = sorted(space)
    if count >= math.prod(len(space[name]) for name in names):  # the whole space, each once
        return [dict(zip(names, values)) for values in itertools.product(*(space[name] for name in names))]
    chosen: dict[tuple, None] = {}
    for index in range(count):
        chosen.setdefault(tuple((name, space[name][(index + shift * (index // max(len(space[name]), 1)))
                                                   % len(space[name])]) for shift, name in enumerate(names)))
    return [dict(c) for c in chosen]  # repeats dropped wherever they fall


def sweep(desc: ModelDesc, configs: list[dict[str, Any]], seed: int = 0) -> list[dict[str, Any]]:
    """Judge ``desc`` under each configuration (one baseline and one eager run shared)."""
    state = blas.pin().value  # this process's products; a warm child starts with ``blas.ENV``
    try:
        baseline, launches = compiled_outputs(desc, OFF, seed)
    except Exception as exc:  # noqa: BLE001 - no unbucketed compile, nothing to judge against
        message = (str(exc).strip().splitlines() or [""])[0]
        raise BaselineFailed(f"model {desc.to_json()}: the unbucketed compile failed, so no configuration "
                             f"can be judged: {type(exc).__name__}: {message}") from exc
    eager = eager_outputs(desc, seed)
    reports = [judge(desc, options, seed, baseline, eager, launches) for options in configs]
    for report in reports:  # a warm child that replied judged with its own products: it counts too
        report["blas"] = blas.worst([state, *filter(None, [report.get("warm", {}).get("blas")])])
    return reports


class BaselineFailed(RuntimeError):
    """The unbucketed compile of a model failed: its configurations cannot be judged (invalid)."""


__all__ = ["BaselineFailed", "COMPILE_SPACE", "PLANTS", "SCALAR", "VECTOR_ORDER_ULPS", "vector_bound", "vector_order", "within_ulps", "compiled_outputs", "inductor", "configurations", "eager_outputs", "failed", "first_difference", "judge", "sweep"]
