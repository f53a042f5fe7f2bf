"""Find targets by built-in name, by ``module:callable``, or by the ``fsdp_verify.targets`` entry points."""

from __future__ import annotations

import importlib
import pkgutil
from importlib.metadata import entry_points

from fsdp_verify import targets as _package
from fsdp_verify.targets.base import BUILTINS, FAMILIES, Target, TargetNotFound

ENTRY_POINT_GROUP = "fsdp_verify.targets"
_discovered = False


def _discover() -> None:
    """Import every module of the targets package once: each registers its own targets and
    families next to their definitions (``base.builtin``, ``base.family``)."""
    global _discovered
    if not _discovered:
        for info in pkgutil.walk_packages(_package.__path__, _package.__name__ + "."):
            importlib.import_module(info.name)
        _discovered = True


def available() -> dict[str, str]:
    """Every target name that resolves without a module path, with a one-line summary."""
    _discover()
    names = {name: factory.summary for name, factory in BUILTINS.items()}
    names.update({family.pattern: family.summary for family in FAMILIES})
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


def get_target(name: str) -> Target:
    """Resolve a target name; raises TargetNotFound with the list of known targets."""
    _discover()
    if name in BUILTINS:
        return BUILTINS[name]()
    for family in FAMILIES:
        if family.claims(name):
            return family.make(name)
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
