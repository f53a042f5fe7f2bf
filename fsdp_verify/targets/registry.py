"""Find targets by built-in name, by ``module:callable``, or by the ``fsdp_verify.targets`` entry points."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Callable

from fsdp_verify.targets.base import Target
from fsdp_verify.targets.reference import ReferenceTarget

ENTRY_POINT_GROUP = "fsdp_verify.targets"
MUTANT_PREFIX = "mutant:"
BUILTIN: dict[str, Callable[[], Target]] = {"reference": ReferenceTarget}


class TargetNotFound(LookupError):
    """No target of that name; the message lists what is available."""


def available() -> dict[str, str]:
    """Every target name that resolves without a module path, with a one-line summary."""
    names = {name: factory.summary for name, factory in BUILTIN.items()}
    names["mutant:<name>"] = "a planted bug (fsdp-verify selftest lists them)"
    names["torch-inductor[:mode][@fsdp]"] = ("PyTorch's inductor bucketing passes; modes default, custom_ops, "
                                             "custom_ops_multidtype, coalesced; @fsdp uses fx_passes.fsdp")
    names["fx-pass:MODULE:CALLABLE"] = "any torch.fx pass, graph in, graph out, run as a post-grad pass"
    names["hyper-parallel"] = "the original hyper_parallel planner + rewriters, when installed"
    for point in entry_points(group=ENTRY_POINT_GROUP):
        names.setdefault(point.name, f"entry point {point.value}")
    return names


def _instantiate(obj: object, name: str) -> Target:
    try:
        target = obj() if isinstance(obj, type) or (callable(obj) and not isinstance(obj, Target)) else obj
    except Exception as exc:  # noqa: BLE001 - a broken factory is a usage error, not a harness crash
        raise TargetNotFound(f"target {name!r}: its factory raised {type(exc).__name__}: {exc}") from None
    if not isinstance(target, Target):
        raise TargetNotFound(f"{name!r} did not produce a Target (got {type(target).__name__})")
    return target


def _inductor(name: str) -> Target:
    from fsdp_verify.targets.inductor import make
    try:
        return make(name[len("torch-inductor"):].lstrip(":"))
    except ValueError as exc:
        raise TargetNotFound(str(exc)) from None


def _hyper_parallel() -> Target:
    from fsdp_verify.targets.hyper_parallel import HyperParallelTarget, unavailable_reason
    reason = unavailable_reason()
    if reason:
        raise TargetNotFound(f"target 'hyper-parallel' is unavailable: {reason}")
    return HyperParallelTarget()


def get_target(name: str) -> Target:
    """Resolve a target name; raises TargetNotFound with the list of known targets."""
    if name in BUILTIN:
        return BUILTIN[name]()
    if name == "torch-inductor" or name.startswith(("torch-inductor:", "torch-inductor@")):
        return _inductor(name)
    if name == "hyper-parallel":
        return _hyper_parallel()
    if name.startswith("fx-pass:"):
        from fsdp_verify.targets.fx_pass import PREFIX, make
        try:
            return make(name[len(PREFIX):])
        except LookupError as exc:
            raise TargetNotFound(str(exc)) from None
    if name.startswith(MUTANT_PREFIX):
        from fsdp_verify.targets.mutants import MUTANTS
        if name[len(MUTANT_PREFIX):] in MUTANTS:
            return MUTANTS[name[len(MUTANT_PREFIX):]]
        raise TargetNotFound(f"unknown planted bug {name!r}; available: {', '.join(sorted(MUTANTS))}")
    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name == name:
            return _instantiate(point.load(), name)
    if ":" in name:
        module_name, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module_name), attr)
        except Exception as exc:  # noqa: BLE001 - any failure to load is a usage error
            raise TargetNotFound(f"cannot load target {name!r}: {exc}") from None
        return _instantiate(obj, name)
    known = ", ".join(sorted(available()))
    raise TargetNotFound(f"unknown target {name!r}; available: {known} (or module:callable)")
