"""The layer rule of docs/architecture.md: every module imports only from lower layers (or its own
unit), the checker registry finds every checker, and pyproject installs every package folder."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

from fsdp_verify.checks import Checker, registered

ROOT = Path(__file__).resolve().parents[1]

# unit -> layer, lowest first; a unit is a package or a top-level module of fsdp_verify.
LAYERS = {
    "fsdp_verify": 0,  # the package root holds only __version__
    "fsdp_verify.graph": 0, "fsdp_verify.spec_params": 0, "fsdp_verify.names": 0, "fsdp_verify.collector": 0,
    "fsdp_verify.case": 1, "fsdp_verify.capture": 1, "fsdp_verify.profiles": 1, "fsdp_verify.example_db": 1,
    "fsdp_verify.reference": 1,
    "fsdp_verify.execute": 2, "fsdp_verify.strategies": 2,
    "fsdp_verify.targets": 3,
    "fsdp_verify.checks": 4,
    "fsdp_verify.orchestrate": 5, "fsdp_verify.corpus": 5,
    "fsdp_verify.coverage": 6, "fsdp_verify.report": 6, "fsdp_verify.expectations": 6, "fsdp_verify.triage": 6,
    "fsdp_verify.replay": 7, "fsdp_verify.campaign": 7, "fsdp_verify.fuzz_properties": 7, "fsdp_verify.gate": 7,
    "fsdp_verify.torchrun_replay": 7, "fsdp_verify.e2e": 7,
    "fsdp_verify.selftest": 8,
    "fsdp_verify.cli": 9, "fsdp_verify.pytest_plugin": 9,
    "fsdp_verify.__main__": 10,
}


def _modules() -> dict[str, Path]:
    found = {}
    for path in (ROOT / "fsdp_verify").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        found[".".join(p for p in parts if p != "__init__")] = path
    for path in (ROOT / "strategies").rglob("*.py"):
        parts = ("fsdp_verify", "strategies", *path.relative_to(ROOT / "strategies").with_suffix("").parts)
        found[".".join(p for p in parts if p != "__init__")] = path
    return found


def _unit(module: str) -> str:
    best = max((u for u in LAYERS if module == u or module.startswith(u + ".")), key=len, default=None)
    assert best is not None, f"{module} is in no layer of LAYERS (add it, and to docs/architecture.md)"
    return best


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((name, node.lineno))
            found += [(f"{name}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line) for name, line in found if name == "fsdp_verify" or name.startswith("fsdp_verify.")]


def _upward(modules: dict[str, Path], known: dict[str, Path]) -> list[str]:
    """Imports by ``modules`` of a unit on the same or a higher layer than their own."""
    upward = set()
    for module, path in sorted(modules.items()):
        unit = _unit(module)
        for name, line in _imports(module, path):
            if name not in known and name.rpartition(".")[0] in known:
                name = name.rpartition(".")[0]  # ``from package import symbol``
            if name not in known:
                continue
            other = _unit(name)
            if other != unit and LAYERS[other] >= LAYERS[unit]:
                upward.add(f"{path.name}:{line}: {unit} (layer {LAYERS[unit]}) imports {name} (layer {LAYERS[other]})")
    return sorted(upward)


def test_every_import_goes_downward():
    modules = _modules()
    upward = _upward(modules, modules)
    assert not upward, "\n".join(upward)


def test_an_upward_import_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ..orchestrate import check_all\n\ndef f():\n    from fsdp_verify.cli import main\n")
    upward = _upward({"fsdp_verify.checks.bad": bad}, _modules())
    assert len(upward) == 2 and "imports fsdp_verify.orchestrate" in upward[0] and "fsdp_verify.cli" in upward[1]


def test_checks_and_execute_never_import_the_orchestration():
    for module, path in _modules().items():
        if _unit(module) in ("fsdp_verify.checks", "fsdp_verify.execute"):
            assert not any(n.startswith("fsdp_verify.orchestrate") for n, _ in _imports(module, path)), module


def test_pyproject_installs_every_package_folder():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = set(config["packages"])
    on_disk = {m for m, p in _modules().items() if p.name == "__init__.py"}
    assert packages == on_disk
    assert config["package-dir"] == {"fsdp_verify.strategies": "strategies"}


def test_registry_finds_every_checker_module():
    names = set(registered())
    assert {"planner", "dependencies", "ordering", "layout", "numerics", "consistency", "memory"} <= names
    assert all(isinstance(c, Checker) and c.summary for c in registered().values())
    orders = [(c.hands_back, c.order) for c in registered().values()]
    assert orders == sorted(orders) and registered()["planner"].order == min(order for _, order in orders)


def test_a_checker_from_an_entry_point_is_registered(monkeypatch):
    from fsdp_verify.checks import registry

    class Point:
        name, value = "always_fine", "tests:ALWAYS_FINE"

        @staticmethod
        def load():
            return Checker("always_fine", lambda ctx: [], order=500, summary="finds nothing")

    monkeypatch.setattr(registry, "entry_points", lambda group: [Point()] if group == registry.ENTRY_POINT_GROUP else [])
    registry.registered.cache_clear()
    try:
        assert "always_fine" in registry.registered()
        # by its order, before the checkers that hand the rewrite back to the target
        assert list(registry.registered())[-2:] == ["always_fine", "consistency"]
    finally:
        monkeypatch.undo()
        registry.registered.cache_clear()


def test_an_entry_point_that_is_not_a_checker_is_refused(monkeypatch):
    from fsdp_verify.checks import registry

    class Point:
        name, value = "bogus", "tests:BOGUS"

        @staticmethod
        def load():
            return lambda ctx: []

    monkeypatch.setattr(registry, "entry_points", lambda group: [Point()])
    registry.registered.cache_clear()
    try:
        with pytest.raises(registry.CheckerError, match="not an fsdp_verify Checker"):
            registry.registered()
    finally:
        monkeypatch.undo()
        registry.registered.cache_clear()
