"""Typed JSON encoding of FX argument and meta values.

FX args and node meta hold tuples, dtypes and node references that plain JSON cannot
tell apart from lists and strings. Each such value is written as a one-key object whose key
starts with ``$``; everything else is plain JSON. Decoding never evaluates anything: every
tag is looked up in a fixed table and every failure names the path and the reason.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import torch

from fsdp_verify.graph.limits import MAX_DEPTH, MAX_INT

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3fn": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2,
    "float8_e4m3fnuz": torch.float8_e4m3fnuz,  # AMD's float8 formats: no negative zero, NaN at -0's bits
    "float8_e5m2fnuz": torch.float8_e5m2fnuz,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
DTYPE_NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

MEMORY_FORMATS: dict[str, torch.memory_format] = {
    "contiguous_format": torch.contiguous_format,
    "preserve_format": torch.preserve_format,
    "channels_last": torch.channels_last,
}
MEMORY_FORMAT_NAMES = {fmt: name for name, fmt in MEMORY_FORMATS.items()}


class SpecError(ValueError):
    """A description that cannot be decoded or built; names where and why."""

    def __init__(self, path: str, reason: str, file: str | None = None):
        self.path, self.reason, self.file = path, reason, file
        where = f"{file}: " if file else ""
        super().__init__(f"{where}{path or '<root>'}: {reason}")

    def in_file(self, file: str) -> "SpecError":
        """The same error, attributed to a file."""
        return SpecError(self.path, self.reason, file)


@dataclass(frozen=True)
class NodeRef:
    """A reference to another node of the same graph, by name."""

    name: str


@dataclass(frozen=True)
class Opaque:
    """A value the codec cannot represent, kept as its text so nothing is silently lost."""

    text: str


def dtype_from_name(name: str, path: str = "dtype") -> torch.dtype:
    """Resolve a dtype name such as ``"float32"`` (``"torch.float32"`` is accepted too)."""
    key = name[len("torch."):] if isinstance(name, str) and name.startswith("torch.") else name
    if key not in DTYPES:
        raise SpecError(path, f"unknown dtype {name!r}; expected one of {sorted(DTYPES)}")
    return DTYPES[key]


def encode(value: Any, path: str = "") -> Any:
    """Encode a Python value as typed JSON."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, NodeRef):
        return {"$node": value.name}
    if isinstance(value, torch.dtype):
        if value not in DTYPE_NAMES:
            raise SpecError(path, f"cannot encode dtype {value}")
        return {"$dtype": DTYPE_NAMES[value]}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": MEMORY_FORMAT_NAMES[value]}
    if isinstance(value, Opaque):
        return {"$opaque": value.text}
    if isinstance(value, tuple):
        return {"$tuple": [encode(item, f"{path}[{i}]") for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [encode(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SpecError(path, f"dict key {key!r} is not a string")
            out[key] = encode(item, f"{path}.{key}")
        if any(key.startswith("$") for key in out):
            return {"$dict": out}
        return out
    raise SpecError(path, f"cannot encode value of type {type(value).__name__}")


def decode(value: Any, path: str = "", depth: int = 0) -> Any:
    """Decode typed JSON back to Python values; raises SpecError on anything unknown or out of bounds."""
    if depth > MAX_DEPTH:
        raise SpecError(path, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
        raise SpecError(path, f"integer {value} is beyond the limit of +-2**53")
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(path, "non-finite numbers must be written as {\"$float\": \"inf\"|\"-inf\"|\"nan\"}")
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, list):
        return [decode(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
    if not isinstance(value, dict):
        raise SpecError(path, f"unexpected JSON value of type {type(value).__name__}")
    tags = [key for key in value if key.startswith("$")]
    if not tags:
        return {key: decode(item, f"{path}.{key}", depth + 1) for key, item in value.items()}
    if len(value) != 1:
        raise SpecError(path, f"a tagged value must have exactly one key, got {sorted(value)}")
    tag, body = tags[0], value[tags[0]]
    return _decode_tagged(tag, body, path, depth + 1)


def _decode_tagged(tag: str, body: Any, path: str, depth: int) -> Any:
    if tag == "$node":
        if not isinstance(body, str) or not body:
            raise SpecError(path, "$node must name a node")
        return NodeRef(body)
    if tag == "$tuple":
        if not isinstance(body, list):
            raise SpecError(path, "$tuple must hold a list")
        return tuple(decode(item, f"{path}[{i}]", depth) for i, item in enumerate(body))
    if tag == "$dict":
        if not isinstance(body, dict):
            raise SpecError(path, "$dict must hold an object")
        return {key: decode(item, f"{path}.{key}", depth) for key, item in body.items()}
    if tag == "$dtype":
        return dtype_from_name(body, path)
    if tag == "$device":
        if not isinstance(body, str):
            raise SpecError(path, "$device must be a string")
        try:
            return torch.device(body)
        except (RuntimeError, ValueError) as exc:
            raise SpecError(path, f"invalid device {body!r}: {exc}") from None
    if tag == "$memory_format":
        if body not in MEMORY_FORMATS:
            raise SpecError(path, f"unknown memory format {body!r}")
        return MEMORY_FORMATS[body]
    if tag == "$float":
        if body not in ("inf", "-inf", "nan"):
            raise SpecError(path, f"$float must be inf, -inf or nan, got {body!r}")
        return float(body)
    if tag == "$opaque":
        if not isinstance(body, str):
            raise SpecError(path, "$opaque must be a string")
        return Opaque(body)
    raise SpecError(path, f"unknown value tag {tag!r}")


def node_refs(value: Any) -> list[NodeRef]:
    """Every node reference inside an (unencoded) value, in order."""
    if isinstance(value, NodeRef):
        return [value]
    if type(value) in _IMMUTABLE:  # most arguments are leaves: the cheapest answer first
        return []
    if isinstance(value, (list, tuple)):
        return [ref for item in value for ref in node_refs(item)]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in node_refs(item)]
    return []


def map_refs(value: Any, fn) -> Any:
    """Replace every NodeRef inside a value by ``fn(ref)`` (immutable leaves return first and lists
    are built by comprehension: every node of every build passes through here)."""
    if isinstance(value, NodeRef):
        return fn(value)
    if type(value) in _IMMUTABLE:
        return value
    if isinstance(value, tuple):
        return tuple([map_refs(item, fn) for item in value])
    if isinstance(value, list):
        return [map_refs(item, fn) for item in value]
    if isinstance(value, dict):
        return {key: map_refs(item, fn) for key, item in value.items()}
    return value


def fresh_copy(value: Any) -> Any:
    """A copy of nested plain dicts, lists and tuples whose str, int, float, bool, None and dtype
    leaves are shared (they are immutable) and anything else deep-copied: ``copy.deepcopy``'s
    generality cost a fifth of building a graph and a third of a plan's ``to_dict``."""
    kind = type(value)
    if kind is dict:
        return {key: fresh_copy(item) for key, item in value.items()}
    if kind is list or kind is tuple:
        return kind(fresh_copy(item) for item in value)
    if value is None or kind in _IMMUTABLE:
        return value
    return copy.deepcopy(value)


_IMMUTABLE = (str, int, float, bool, torch.dtype, NodeRef)


def nonfinite(value: Any) -> bool:
    """Whether ``value`` is a floating tensor holding a NaN or an infinity (float8 has no isfinite
    of its own; its values are read as float32, which holds each exactly)."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return False
    return not bool((value.float() if value.element_size() == 1 else value).isfinite().all())
