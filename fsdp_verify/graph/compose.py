"""A small DSL that writes GraphSpecs the way the FSDP pass tags graphs (spec section 1.4).

Used by hand-written tests, corpus regression cases and the Hypothesis strategies. Shapes are
tracked with meta tensors, so every node it writes has a known shape and the result builds.
"""

from __future__ import annotations

import builtins
import re
from collections import OrderedDict
from typing import Any, Iterable

import torch

from fsdp_verify.graph.edit import DROP
from fsdp_verify.graph.ops import resolve_target
from fsdp_verify.graph.spec import GraphSpec, InputSpec, NodeSpec, ParamSpec
from fsdp_verify.graph.values import NodeRef, dtype_from_name, map_refs

AG = "_c10d_functional.all_gather_into_tensor"
RS = "_c10d_functional.reduce_scatter_tensor"
WAIT = "_c10d_functional.wait_tensor"
ALL_REDUCE = "_c10d_functional.all_reduce"
FREE = "fsdp_verify.free_tensor_storage"
BARRIER = "fsdp_verify.effect_barrier"
# Reduce-op strings would read as node refs; FX renames nodes that shadow builtins.
_RESERVED = frozenset({"avg", "product", "output", *dir(builtins)})


def _subgroups(ranks: Iterable) -> tuple[tuple[int, ...], ...]:
    ranks = tuple(ranks)
    if ranks and isinstance(ranks[0], (list, tuple)):
        return tuple(tuple(part) for part in ranks)
    return (ranks,)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


# Bounded, least recently used first out: about nine in ten calls hit, and the hot shapes of a
# long campaign fit in a few thousand entries. An unbounded memo grew each worker by ~1.5 MB a
# minute (new shapes keep arriving), which a night's soak reads as a leak.
INFERRED_CAPACITY = 4096
_INFERRED: OrderedDict[str, Any] = OrderedDict()


def _describe(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("T", tuple(value.shape), value.dtype, value.stride())
    if isinstance(value, (list, tuple)):
        return tuple(_describe(v) for v in value)
    return repr(value)


def _infer(target: str, fn: Any, args: tuple, kwargs: dict) -> Any:
    """The op's meta-tensor result, memoised on argument shapes (generation calls it per node)."""
    key = repr((target, _describe(args), _describe(sorted(kwargs.items()))))
    if key in _INFERRED:
        _INFERRED.move_to_end(key)
        return _INFERRED[key]
    value = _INFERRED[key] = fn(*args, **kwargs)
    if len(_INFERRED) > INFERRED_CAPACITY:
        _INFERRED.popitem(last=False)
    return value


def _annotated(degree: int, bucket_spec: dict) -> dict:
    """The launch's ``fsdp_bucket_spec`` as the spec annotator writes it: only where the degree is
    above 1 (spec 1.4 step 8), so a one-rank group's launches carry none."""
    return {"fsdp_bucket_spec": bucket_spec} if degree > 1 else {}


class Composer:
    """Append nodes in order; ``finish(outputs)`` returns the GraphSpec."""

    def __init__(self, groups: dict[str, Iterable], *, overload: str = "") -> None:
        self.groups = {name: _subgroups(ranks) for name, ranks in groups.items()}
        self.overload = overload  # "" uses op packets as the FSDP pass does, "default" the overloads
        self.nodes: list[NodeSpec] = []
        self.params: list[ParamSpec] = []
        self.inputs: list[InputSpec] = []
        self.vals: dict[str, Any] = {}
        self._names: set[str] = set()

    # -- naming and plumbing -------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        """A node name not used yet, derived from ``prefix``."""
        base = _slug(prefix) or "n"
        if base[0].isdigit():
            base = f"n_{base}"
        name, index = base, 1
        while name in self._names or (name in _RESERVED and prefix != "output"):
            name, index = f"{base}_{index}", index + 1
        self._names.add(name)
        return name

    def _op(self, target: str) -> str:
        return f"{target}.{self.overload}" if self.overload and target.startswith("_c10d") else target

    def _append(self, name: str, op: str, target: str, args: tuple, kwargs: dict, meta: dict, val: Any) -> str:
        self.nodes.append(NodeSpec(name, op, target, args, kwargs, {k: v for k, v in meta.items() if v is not DROP}))
        self.vals[name] = val
        return name

    @staticmethod
    def _meta(backward: bool, extra: dict | None) -> dict:
        meta = {"autograd_backward": True} if backward else {}
        meta.update(extra or {})
        return meta

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of a tensor-valued node."""
        return tuple(self.vals[name].shape)

    # -- placeholders --------------------------------------------------------------------
    def input(self, name: str, shape: tuple[int, ...], dtype: str = "float32") -> str:
        """A non-parameter input (activation or tangent)."""
        name = self.fresh(name)
        self.inputs.append(InputSpec(name, tuple(shape), dtype))
        return self._append(name, "placeholder", "", (), {}, {},
                            torch.empty(shape, dtype=dtype_from_name(dtype), device="meta"))

    def param(self, fqn: str, shard_shape: tuple[int, ...], *, state_idx: int, dtype: str = "float32",
              device: str = "cuda:0", group: str = "fsdp") -> str:
        """A sharded parameter placeholder, tagged as FSDP step 1 tags it."""
        name = self.fresh(f"p_{fqn}")
        self.params.append(ParamSpec(fqn, name, tuple(shard_shape), dtype, device, state_idx, group))
        meta = {"param_name": fqn, "state_idx": state_idx, "fsdp_degree": len(self.groups[group][0]),
                "is_param": True, "fsdp_sharded": True}
        return self._append(name, "placeholder", "", (), {}, meta,
                            torch.empty(shard_shape, dtype=dtype_from_name(dtype), device="meta"))

    def param_spec(self, fqn: str) -> ParamSpec:
        """The ParamSpec of ``fqn``."""
        return next(p for p in self.params if p.fqn == fqn)

    # -- compute and views ---------------------------------------------------------------
    def call(self, target: str, *args: Any, name: str | None = None, backward: bool = False,
             meta: dict | None = None, **kwargs: Any) -> str:
        """Any allow-listed op; its value is inferred by running it on meta tensors."""
        fn = resolve_target(target)
        refs = tuple(NodeRef(a) if isinstance(a, str) and a in self.vals else a for a in args)
        refs = tuple([NodeRef(x) if isinstance(x, str) and x in self.vals else x for x in a]
                     if isinstance(a, list) else a for a in refs)
        val_args = map_refs(refs, lambda r: self.vals[r.name])
        val = _infer(target, fn, val_args, kwargs)
        op_name = target.split(".")[-2] if target.count(".") >= 2 else target.split(".")[-1]
        return self._append(name or self.fresh(op_name), "call_function", target, refs, dict(kwargs),
                            self._meta(backward, meta), val)

    # -- collectives ---------------------------------------------------------------------
    def all_gather(self, fqn: str, *, backward: bool = False, source: str | None = None,
                   launch_meta: dict | None = None, wait_meta: dict | None = None) -> tuple[str, str]:
        """The forward (or backward re-) gather of ``fqn``'s shard, tagged with its spec."""
        param = self.param_spec(fqn)
        degree = len(self.groups[param.group][0])
        src = source or param.placeholder
        shard = self.vals[src]
        kind = "fsdp_all_gather_backward" if backward else "fsdp_all_gather"
        shape = tuple(param.shard_shape)
        meta = {"comm_type": kind, "comm_group": param.group, "param_node": param.placeholder,
                "param_name": fqn, "state_idx": param.state_idx, "fsdp_degree": degree,
                **_annotated(degree, {"input_shape": shape, "output_shape": (shape[0] * degree, *shape[1:]),
                                      "dtype": dtype_from_name(param.dtype), "device": param.device})}
        meta.update(launch_meta or {})
        out = torch.empty((shard.shape[0] * degree, *shard.shape[1:]), dtype=shard.dtype, device="meta")
        launch = self._append(self.fresh(f"ag{'_bw' if backward else ''}_{fqn}"), "call_function", self._op(AG),
                              (NodeRef(src), degree, param.group), {}, self._meta(backward, meta), out)
        wait = self._append(self.fresh(f"{launch}_wait"), "call_function", self._op(WAIT), (NodeRef(launch),), {},
                            self._meta(backward, {"wait_for": launch, **(wait_meta or {})}), out)
        return launch, wait

    def reduce_scatter(self, grad: str, fqn: str, *, reduce_op: str = "avg", launch_meta: dict | None = None,
                       wait_meta: dict | None = None) -> tuple[str, str]:
        """The gradient reduce-scatter of ``fqn``, tagged backward with identity and spec."""
        param = self.param_spec(fqn)
        degree = len(self.groups[param.group][0])
        gval = self.vals[grad]
        full = tuple(gval.shape)
        meta = {"comm_type": "fsdp_reduce_scatter", "comm_group": param.group, "param_name": fqn,
                "state_idx": param.state_idx, "fsdp_degree": degree,
                **_annotated(degree, {"input_shape": full, "output_shape": (full[0] // degree, *full[1:]),
                                      "dtype": gval.dtype, "device": param.device})}
        meta.update(launch_meta or {})
        out = torch.empty((full[0] // degree, *full[1:]), dtype=gval.dtype, device="meta")
        launch = self._append(self.fresh(f"rs_{fqn}"), "call_function", self._op(RS),
                              (NodeRef(grad), reduce_op, degree, param.group), {}, self._meta(True, meta), out)
        wait_extra = {"wait_for": launch, "param_name": fqn, "state_idx": param.state_idx, **(wait_meta or {})}
        wait = self._append(self.fresh(f"{launch}_wait"), "call_function", self._op(WAIT), (NodeRef(launch),), {},
                            self._meta(True, wait_extra), out)
        return launch, wait

    # -- effects -------------------------------------------------------------------------
    def free(self, tensor: str, *, backward: bool = False, fqn: str | None = None, tagged: bool = True) -> str:
        """A reshard free of ``tensor`` (tagged), or an untagged storage release (a barrier)."""
        meta = {}
        if tagged:
            meta = {"comm_type": "fsdp_reshard_free_backward" if backward else "fsdp_reshard_free"}
            if fqn:
                meta["param_name"] = fqn
        return self._append(self.fresh(f"free_{tensor}"), "call_function", FREE, (NodeRef(tensor),), {},
                            self._meta(backward, meta), None)

    def finish(self, outputs: list[str], attrs: dict | None = None) -> GraphSpec:
        """Close the graph with an output node returning ``outputs`` in order."""
        name = self.fresh("output")
        self.nodes.append(NodeSpec(name, "output", "", ([NodeRef(o) for o in outputs],), {}, {}))
        return GraphSpec(dict(self.groups), tuple(self.params), tuple(self.inputs), tuple(self.nodes),
                         dict(attrs or {}))


__all__ = ["AG", "ALL_REDUCE", "BARRIER", "Composer", "DROP", "FREE", "RS", "WAIT"]
