"""A model description (what Hypothesis draws and shrinks) and the SimpleFSDP-style module built
from it.

The description is plain frozen data, so a drawn model is hashable (captures are cached by it),
JSON-recordable (a captured case names the model it came from) and shrinks by shrinking its fields.
The module keeps every parameter sharded on dim 0 and gathers it where it is used, as SimpleFSDP
does: either as a DTensor redistributed to ``Replicate()`` with ``Partial()`` gradients (what
capture on a fake process group uses) or with the autograd-aware functional all-gather (what a
real one-process world runs: DTensor issues no collective on a one-rank mesh).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

KINDS = ("linear", "norm", "embed")
MESHES = ((4,), (2, 2), (2,))
PLACEMENTS = ("shard", "shard2d")  # 2-D meshes: HSDP (Replicate, Shard) or sharded on both dims
FLOAT_DTYPES = ("float32", "bfloat16")
VOCAB = 12


@dataclass(frozen=True)
class Layer:
    """One layer. ``width`` is its output width (linear), its vocabulary width (embed: the
    embedding width), or ignored (norm: the width it receives). ``tie`` names an earlier layer
    whose weight this linear reuses (tied weights), -1 for none. ``select`` keeps, before the layer,
    only the rows whose first feature is positive: the row count is then data-dependent (an unbacked
    size in the compiled graphs) and differs between ranks, whose batches differ."""

    kind: str
    width: int = 8
    bias: bool = True
    tie: int = -1
    checkpoint: bool = False
    placement: str = "shard"
    select: bool = False


@dataclass(frozen=True)
class ModelDesc:
    """A whole model: its layers, the mesh it is sharded on, and its mixed-precision dtypes."""

    layers: tuple[Layer, ...]
    in_width: int = 8
    mesh: tuple[int, ...] = (4,)
    param_dtype: str = "float32"  # the dtype parameters are gathered (and computed) in
    reduce_dtype: str = "float32"  # the dtype gradients are reduce-scattered in
    batch: int = 2

    def to_json(self) -> dict:
        """Plain JSON (recorded in a captured case's attrs)."""
        doc = asdict(self)
        # ``select`` is written only where set, so descriptions recorded before it existed still read
        # as they were written.
        doc["layers"] = [{k: v for k, v in asdict(layer).items() if k != "select" or v} for layer in self.layers]
        doc["mesh"] = list(self.mesh)
        return doc

    @property
    def data_dependent(self) -> bool:
        """Some layer's row count depends on the values (``Layer.select``)."""
        return any(layer.select for layer in self.layers)

    @property
    def tokens(self) -> bool:
        """The input is token ids (the first layer is an embedding)."""
        return bool(self.layers) and self.layers[0].kind == "embed"


def desc_from_json(doc: Any, path: str = "model") -> ModelDesc:
    """Decode a description; a bad one raises ValueError naming the field."""
    if not isinstance(doc, dict) or not isinstance(doc.get("layers"), list):
        raise ValueError(f"{path}: must be an object with a 'layers' list")
    layer_keys = set(Layer.__dataclass_fields__)
    layers = []
    for index, item in enumerate(doc["layers"]):
        if not isinstance(item, dict) or set(item) - layer_keys:
            raise ValueError(f"{path}.layers[{index}]: must be an object with keys among {sorted(layer_keys)}")
        _types(item, Layer(kind=""), f"{path}.layers[{index}]")
        layers.append(Layer(**item))
    rest = {k: v for k, v in doc.items() if k != "layers"}
    unknown = set(rest) - set(ModelDesc.__dataclass_fields__)
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    if "mesh" in rest:
        if not isinstance(rest["mesh"], list) or not all(type(d) is int for d in rest["mesh"]):
            raise ValueError(f"{path}.mesh: must be a list of integers")
        rest["mesh"] = tuple(rest["mesh"])
    _types({k: v for k, v in rest.items() if k != "mesh"}, ModelDesc(()), path)
    desc = ModelDesc(tuple(layers), **rest)
    check(desc, path)
    return desc


def _types(doc: dict, default: Any, path: str) -> None:
    """Each field of ``doc`` has the type of ``default``'s value (bool and int kept apart)."""
    for key, value in doc.items():
        want = type(getattr(default, key))
        if type(value) is not want:
            raise ValueError(f"{path}.{key}: must be a {want.__name__}, got {type(value).__name__}")


def check(desc: ModelDesc, path: str = "model") -> None:
    """Refuse a description no model can be built from (names the field and the reason)."""
    if desc.mesh not in MESHES:
        raise ValueError(f"{path}.mesh: {list(desc.mesh)} is not one of {[list(m) for m in MESHES]}")
    for name in ("param_dtype", "reduce_dtype"):
        if getattr(desc, name) not in FLOAT_DTYPES:
            raise ValueError(f"{path}.{name}: must be one of {FLOAT_DTYPES}")
    if not 1 <= desc.batch <= 8 or not 1 <= desc.in_width <= 64:
        raise ValueError(f"{path}: batch must be in 1..8 and in_width in 1..64")
    if not 1 <= len(desc.layers) <= 8:
        raise ValueError(f"{path}.layers: 1 to 8 layers")
    width = desc.in_width
    for index, layer in enumerate(desc.layers):
        where = f"{path}.layers[{index}]"
        if layer.kind not in KINDS or layer.placement not in PLACEMENTS:
            raise ValueError(f"{where}: kind must be one of {KINDS}, placement one of {PLACEMENTS}")
        if layer.kind == "embed" and index != 0:
            raise ValueError(f"{where}: an embedding can only be the first layer")
        if layer.select and layer.kind == "embed":
            raise ValueError(f"{where}.select: an embedding takes token ids, which have no features to select by")
        if not 1 <= layer.width <= 64:
            raise ValueError(f"{where}.width: must be in 1..64")
        if layer.tie >= 0:
            if (layer.kind != "linear" or layer.tie >= index or desc.layers[layer.tie].kind == "norm"
                    or desc.layers[layer.tie].tie >= 0):
                raise ValueError(f"{where}.tie: a linear can tie only to an earlier untied linear or embedding")
            if weight_shape(desc, layer.tie)[1] != width:
                raise ValueError(f"{where}.tie: layer {layer.tie}'s weight does not take width {width}")
        width = _out_width(desc, index, width)


def weight_shape(desc: ModelDesc, index: int) -> tuple[int, int]:
    """(rows, cols) of an untied linear's or an embedding's weight."""
    layer = desc.layers[index]
    if layer.kind == "embed":
        return (VOCAB, layer.width)
    return (layer.width, widths(desc)[index])


def widths(desc: ModelDesc) -> list[int]:
    """The width each layer receives."""
    out, width = [], desc.in_width
    for layer in desc.layers:
        out.append(width)
        if layer.tie >= 0 and 0 <= layer.tie < len(out):
            tied = desc.layers[layer.tie]
            width = VOCAB if tied.kind == "embed" else tied.width
        elif layer.kind != "norm":
            width = layer.width
    return out


def _out_width(desc: ModelDesc, index: int, width: int) -> int:
    return widths(desc)[index + 1] if index + 1 < len(desc.layers) else _last_width(desc, width)


def _last_width(desc: ModelDesc, width: int) -> int:
    layer = desc.layers[-1]
    if layer.kind == "norm":
        return width
    if layer.tie >= 0:
        tied = desc.layers[layer.tie]
        return VOCAB if tied.kind == "embed" else tied.width
    return layer.width


def param_shapes(desc: ModelDesc) -> dict[str, tuple[int, ...]]:
    """Every parameter's full shape, by FQN (``layers.I.weight``), in registration order."""
    shapes: dict[str, tuple[int, ...]] = {}
    for index, (layer, width) in enumerate(zip(desc.layers, widths(desc))):
        if layer.kind == "norm":
            shapes[f"layers.{index}.weight"] = (width,)
            if layer.bias:
                shapes[f"layers.{index}.bias"] = (width,)
            continue
        if layer.tie < 0:
            shapes[f"layers.{index}.weight"] = weight_shape(desc, index)
        if layer.kind == "linear" and layer.bias:
            shapes[f"layers.{index}.bias"] = (_out_width(desc, index, width),)
    return shapes


Gather = Callable[[str, torch.Tensor], torch.Tensor]


class SimpleFSDPModel(nn.Module):
    """The described model; ``gather(fqn, param)`` turns a sharded parameter into the full tensor in
    the param dtype at every use (so a tied weight is gathered once per use, as SimpleFSDP does)."""

    def __init__(self, desc: ModelDesc, params: dict[str, nn.Parameter], gather: Gather):
        super().__init__()
        self.desc, self.gather = desc, gather
        self.params = nn.ParameterDict({name.replace(".", "_"): p for name, p in params.items()})
        self.names = {name: name.replace(".", "_") for name in params}

    def _full(self, fqn: str) -> torch.Tensor:
        # SimpleFSDP gathers in the parametrisation of the module that owns the parameter; the
        # annotation is that module's path on every node the gather traces to (``meta["custom"]``),
        # which a compile keeps through to post-grad graphs, where the manual scheduler reads it.
        from torch.fx.traceback import annotate
        with annotate({"module_path": fqn.rsplit(".", 1)[0]}):
            return self.gather(fqn, self.params[self.names[fqn]])

    def _layer(self, index: int, x: torch.Tensor) -> torch.Tensor:
        layer = self.desc.layers[index]
        bias = self._full(f"layers.{index}.bias") if layer.bias and layer.kind != "embed" else None
        if layer.kind == "embed":
            return F.embedding(x, self._full(f"layers.{index}.weight"))
        if layer.kind == "norm":
            weight = self._full(f"layers.{index}.weight")
            return F.layer_norm(x.to(weight.dtype), (x.shape[-1],), weight, bias)
        weight = self._full(f"layers.{layer.tie if layer.tie >= 0 else index}.weight")
        return torch.relu(F.linear(x.to(weight.dtype), weight, bias))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint
        for index, layer in enumerate(self.desc.layers):
            if layer.select:
                x = x[x[:, 0] > 0]
            if layer.checkpoint:
                x = checkpoint(self._layer, index, x, use_reentrant=False)
            else:
                x = self._layer(index, x)
        return x.float()


def full_params(desc: ModelDesc, seed: int = 0) -> dict[str, torch.Tensor]:
    """Deterministic full (unsharded) float32 parameter values, small dyadics so sums stay exact."""
    gen = torch.Generator().manual_seed(seed)
    return {name: (torch.randint(-8, 9, shape, generator=gen).to(torch.float32) / 16)
            for name, shape in param_shapes(desc).items()}


def example_input(desc: ModelDesc, seed: int = 0) -> torch.Tensor:
    """The model's input: token ids, or a (batch, in_width) float32 tensor of small dyadics."""
    gen = torch.Generator().manual_seed(seed + 1)
    if desc.tokens:
        return torch.randint(0, VOCAB, (desc.batch,), generator=gen)
    return torch.randint(-8, 9, (desc.batch, desc.in_width), generator=gen).to(torch.float32) / 8


def dtype(name: str) -> torch.dtype:
    """torch dtype of a description's dtype name."""
    return getattr(torch, name)


def dtensor_gather(desc: ModelDesc, placements: dict[str, Any]) -> Gather:
    """SimpleFSDP's gather: redistribute the DTensor to all-``Replicate()`` in the param dtype, with
    ``Partial()`` gradients reduced in the reduce dtype; returns the local full tensor."""
    from torch.distributed.tensor import Partial, Replicate

    def gather(fqn: str, param: torch.Tensor) -> torch.Tensor:
        ndim = len(placements[fqn])
        full = param.redistribute(placements=[Replicate()] * ndim, forward_dtype=dtype(desc.param_dtype),
                                  backward_dtype=dtype(desc.reduce_dtype))
        return full.to_local(grad_placements=[Partial()] * ndim)
    return gather


def funcol_gather(desc: ModelDesc, group: Any) -> Gather:
    """The same gather with the autograd-aware functional all-gather on ``group`` (its backward is a
    reduce-scatter, in the param dtype: this path has no separate reduce dtype): what runs on a real
    world, where a one-rank DTensor mesh would issue no collective at all."""
    from torch.distributed._functional_collectives import all_gather_tensor_autograd
    param_dtype = dtype(desc.param_dtype)

    def gather(fqn: str, param: torch.Tensor) -> torch.Tensor:
        return all_gather_tensor_autograd(param.to(param_dtype), 0, group)
    return gather


__all__ = ["FLOAT_DTYPES", "KINDS", "MESHES", "PLACEMENTS", "VOCAB", "Layer", "ModelDesc", "SimpleFSDPModel",
           "check", "desc_from_json", "dtensor_gather", "example_input", "full_params", "funcol_gather",
           "param_shapes", "weight_shape", "widths"]
