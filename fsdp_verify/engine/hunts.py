"""The planted bugs' hunts, as aims for source mutants of the functions and constants they replace.

A planted bug of the catalogue replaces a function or a constant of the reference and names the
shape that tells it (its ``hunt``, ``rule:REASON``). A source mutant of the same function is a bug
in the same place, so that shape is where it shows first, even where the line-reach map points
elsewhere: a keyword helper runs on every op the dtype walk evaluates, most often in the shapes
that never pass the keyword it looks for. A module-level constant runs once, at import, so the map
never sees a phase run it; only the catalogue knows which shape reads it.
"""

from __future__ import annotations

import ast
import functools
import inspect
from typing import TYPE_CHECKING, Iterable

from fsdp_verify.engine.aim import HUNT_STRATEGIES, SHAPE_SIZE
from fsdp_verify.model.names import strategy_name

if TYPE_CHECKING:
    from fsdp_verify.targets.mutants.base import Mutant


@functools.lru_cache(maxsize=1)
def catalogue_hunts() -> dict[tuple[str, str], tuple[str, ...]]:
    """(module, qualified name) -> the phases (``rule:REASON/VARIANT:tiny``, ``uneven:tiny``) of the
    planted bugs that replace it: each bug's own hunt, variant and focus kept, since a reason's other
    variants may never tell (the cast of an unfollowable value is one draw in seven of its reason).
    Only shape hunts count: a bug hunted by the default mix (``hazards``) names no shape; a strategy of
    ``aim.HUNT_STRATEGIES`` is one. ``aim.measured`` names the phase the map measured for each."""
    from fsdp_verify.targets.mutants.catalogue import MUTANTS
    found: dict[tuple[str, str], list[str]] = {}
    for mutant in MUTANTS.values():
        if mutant.hunt in HUNT_STRATEGIES or strategy_name(mutant.hunt).rule:
            phase = f"{mutant.hunt}:{SHAPE_SIZE}"
        else:
            continue
        for owner, name in _replaced(mutant):
            if phase not in found.setdefault((owner, name), []):
                found[(owner, name)].append(phase)
    return {key: tuple(phases) for key, phases in found.items()}


def _replaced(mutant: "Mutant") -> Iterable[tuple[str, str]]:
    """What ``mutant``'s patches replace, as (module, qualified name); patches of objects that are
    neither a module nor a class (a function's defaults) name nothing a source mutant is in."""
    for patch in mutant.patches():
        owner, name = patch[0], patch[1]
        if inspect.ismodule(owner):
            yield owner.__name__, name
        elif isinstance(owner, type):
            yield owner.__module__, f"{owner.__qualname__}.{name}"


def named_at(source: str, line: int) -> tuple[str, ...]:
    """The qualified name of the innermost function or class holding ``line`` of ``source``; at module
    level, the names a statement there assigns (a constant). Empty where neither applies."""
    return _named_at(_parsed(source), line)


@functools.lru_cache(maxsize=8)
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)  # a run's mutants share a few modules


def _named_at(tree: ast.Module, line: int) -> tuple[str, ...]:
    path: list[str] = []
    body: list[ast.stmt] = tree.body
    while True:
        holder = next((node for node in body if node.lineno <= line <= (node.end_lineno or node.lineno)), None)
        if isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            path.append(holder.name)
            body = holder.body
            continue
        if path:
            return (".".join(path),)
        if isinstance(holder, (ast.Assign, ast.AnnAssign)):
            targets = holder.targets if isinstance(holder, ast.Assign) else [holder.target]
            return tuple(target.id for target in targets if isinstance(target, ast.Name))
        return ()


def hunts_for(module: str, source: str, line: int) -> tuple[str, ...]:
    """The hunts of the planted bugs that replace what holds ``line`` of ``module`` (or, in a method,
    its class's), nearest first."""
    names = named_at(source, line)
    table = catalogue_hunts()
    found: list[str] = []
    for name in names:
        parts = name.split(".")
        for depth in range(len(parts), 0, -1):  # the method, then its class
            for phase in table.get((module, ".".join(parts[:depth])), ()):
                if phase not in found:
                    found.append(phase)
    return tuple(found)


__all__ = ["catalogue_hunts", "hunts_for", "named_at"]
