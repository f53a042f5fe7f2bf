"""The call targets a graph description may name, and the project's own effectful functions.

Targets are resolved from a fixed allow-list (operator namespaces and a few named Python
functions); nothing in a description is imported or evaluated.
"""

from __future__ import annotations

import importlib
import operator
from typing import Any, Callable

import torch
from torch.fx.node import has_side_effect

from fsdp_verify.graph.values import SpecError

OP_NAMESPACES = ("aten", "_c10d_functional", "c10d_functional", "prims", "bucketing")
# Namespaces whose operators exist only once a fixed module registered them.
_REGISTERING_MODULES = {"bucketing": "torch._inductor.fx_passes.bucketing",
                        "c10d_functional": "torch.distributed._functional_collectives"}  # the legacy packet


def registering_modules(targets: Any) -> list[str]:
    """The modules that must be imported before ``targets`` (names) resolve, in sorted order."""
    return sorted({_REGISTERING_MODULES[name.split(".")[0]] for name in targets
                   if isinstance(name, str) and name.split(".")[0] in _REGISTERING_MODULES})


def _free_tensor_storage(tensor: Any) -> None:
    """Release a tensor's storage (FSDP reshard free); idempotent and safe on non-tensors."""
    if isinstance(tensor, torch.Tensor) and tensor.untyped_storage().size() != 0:
        tensor.untyped_storage().resize_(0)


def effect_barrier(*args: Any) -> None:
    """An opaque side-effecting call (logging, an RNG step, a host sync) the planner must not cross."""
    del args


has_side_effect(_free_tensor_storage)
has_side_effect(effect_barrier)

FUNCTIONS: dict[str, Callable] = {
    "fsdp_verify.free_tensor_storage": _free_tensor_storage,
    "fsdp_verify.effect_barrier": effect_barrier,
    "operator.getitem": operator.getitem,
    # Python's operators on tensors, as torch.fx's symbolic trace records ``-x``, ``x + y`` and
    # ``x * y``: calls with no operator schema (a view test must not take them for views).
    "operator.neg": operator.neg,
    "operator.add": operator.add,
    "operator.mul": operator.mul,
}
FUNCTION_NAMES = {fn: name for name, fn in FUNCTIONS.items()}
PYTHON_OPERATORS = ("operator.neg", "operator.add", "operator.mul")  # no schema: arithmetic a trace records


def is_free_target(target: Any) -> bool:
    """The project's free, or any function named ``_free_tensor_storage`` (the original's)."""
    return target is _free_tensor_storage or getattr(target, "__name__", None) == "_free_tensor_storage"


_RESOLVED: dict[str, Callable] = {}


def resolve_target(name: str, path: str = "target") -> Callable:
    """Turn a target name (``aten.view.default``, ``_c10d_functional.wait_tensor``) into a callable
    (a name once resolved is remembered: graphs are built many times per case)."""
    if isinstance(name, str) and name in _RESOLVED:
        return _RESOLVED[name]
    found = _resolve(name, path)
    _RESOLVED[name] = found
    return found


def _resolve(name: str, path: str) -> Callable:
    if not isinstance(name, str) or not name:
        raise SpecError(path, "target must be a non-empty string")
    if name in FUNCTIONS:
        return FUNCTIONS[name]
    parts = name.split(".")
    if parts[0] not in OP_NAMESPACES or len(parts) not in (2, 3):
        raise SpecError(path, f"unknown target {name!r}: expected <namespace>.<op>[.<overload>] "
                              f"with namespace in {OP_NAMESPACES}, or one of {sorted(FUNCTIONS)}")
    if any(not part.isidentifier() or part.startswith("__") for part in parts[1:]):
        raise SpecError(path, f"unknown operator {name!r}: operator and overload names are plain identifiers")
    if parts[0] in _REGISTERING_MODULES:
        importlib.import_module(_REGISTERING_MODULES[parts[0]])
    # The dispatcher's operator registry decides what exists: (namespace::op, overload) pairs.
    overloads = {schema.overload_name or "default"
                 for schema in torch._C._jit_get_schemas_for_operator(f"{parts[0]}::{parts[1]}")}
    if not overloads or (len(parts) == 3 and parts[2] not in overloads):
        raise SpecError(path, f"unknown operator {name!r}: not a registered operator")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        found = packet if len(parts) == 2 else getattr(packet, parts[2])
    except (AttributeError, RuntimeError):
        raise SpecError(path, f"unknown operator {name!r}") from None
    # Only registered operators: never a Python attribute that happens to live on a namespace.
    if not isinstance(found, torch._ops.OpOverload if len(parts) == 3 else torch._ops.OpOverloadPacket):
        raise SpecError(path, f"unknown operator {name!r}: not a registered operator")
    return found


def target_name(target: Any) -> str:
    """The description name of an FX call target; raises SpecError for targets outside the allow-list."""
    if target in FUNCTION_NAMES:
        return FUNCTION_NAMES[target]
    if is_free_target(target):
        return "fsdp_verify.free_tensor_storage"
    if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = str(target)
        if name.split(".")[0] in OP_NAMESPACES:
            return name
    raise SpecError("target", f"target {target!r} is not representable in a graph description")


C10D = torch.ops._c10d_functional
