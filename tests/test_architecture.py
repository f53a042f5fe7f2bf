"""The layer rule of docs/architecture.md: every module imports only from lower layers (or its own
unit), the checker registry finds every checker, and pyproject installs every package folder."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from fsdp_verify.checks import Checker, CheckerError, registered

ROOT = Path(__file__).resolve().parents[1]

def _layers() -> dict[str, int]:
    """unit -> layer, read from the tree in docs/architecture.md (the one place the layering lives).
    A unit is a folder of the package; the root package holds only ``__version__`` (layer 0) and
    ``__main__`` runs the command line (above everything)."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    block = text.split("```text\n", 1)[1].split("```", 1)[0].splitlines()[1:]
    layers = {"fsdp_verify": 0}
    for line in block:
        layer, folder = line.split()[:2]
        layers["fsdp_verify." + folder.rstrip("/").replace("/", ".")] = int(layer)
    layers["fsdp_verify.__main__"] = max(layers.values()) + 1
    return layers


LAYERS = _layers()
ROOT_MODULES = {"__init__.py", "__main__.py"}


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
    assert best is not None, f"{module} is in no folder of the tree in docs/architecture.md (add it there)"
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
    bad.write_text("from ..engine.run_case import check_all\n\ndef f():\n    from fsdp_verify.commands.cli import main\n")
    upward = _upward({"fsdp_verify.checks.bad": bad}, _modules())
    assert len(upward) == 2 and "imports fsdp_verify.engine.run_case" in upward[0] and "fsdp_verify.commands.cli" in upward[1]


def test_an_import_from_another_folder_of_the_same_layer_is_caught(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from fsdp_verify.report.tally import Result\n")
    upward = _upward({"fsdp_verify.corpus.bad": bad}, _modules())
    assert len(upward) == 1 and "fsdp_verify.corpus (layer 6) imports fsdp_verify.report.tally (layer 6)" in upward[0]


def _loose(root: Path) -> list[str]:
    """Modules at the package root other than ``__init__`` and ``__main__``, and folders of the
    package that hold modules but are not in the tree."""
    loose = sorted(p.name for p in root.glob("*.py") if p.name not in ROOT_MODULES)
    for folder in sorted(p for p in root.rglob("*") if p.is_dir() and any(p.glob("*.py"))):
        unit = ".".join(("fsdp_verify",) + folder.relative_to(root).parts)
        if not any(unit == u or unit.startswith(u + ".") for u in LAYERS if u != "fsdp_verify"):
            loose.append(str(folder.relative_to(root)) + "/")
    return loose


def test_the_package_root_holds_only_init_and_main():
    assert _loose(ROOT / "fsdp_verify") == []
    assert "__version__" in (ROOT / "fsdp_verify" / "__init__.py").read_text()


def test_a_module_dropped_at_the_root_or_a_folder_outside_the_tree_is_caught(tmp_path):
    root = tmp_path / "fsdp_verify"
    (root / "checks").mkdir(parents=True)
    (root / "misc").mkdir()
    for path in ("__init__.py", "__main__.py", "helpers.py", "checks/x.py", "misc/y.py"):
        (root / path).write_text("")
    assert _loose(root) == ["helpers.py", "misc/"]


# Tests of the project as a whole sit at the root of tests/; every other test sits in the folder
# of the package it tests, and helpers/ holds what tests share (no tests).
WHOLE_PROJECT_TESTS = {"test_architecture.py", "test_readme.py", "test_workflows.py", "test_findings_repros.py"}


def _unmirrored(tests: Path) -> list[str]:
    """Test files and folders under ``tests`` that do not mirror a package folder."""
    folders = {path.relative_to(ROOT / "fsdp_verify").as_posix() for path in (ROOT / "fsdp_verify").rglob("*")
               if path.is_dir() and (path / "__init__.py").exists()} | {"strategies"}
    wrong = [path.name for path in tests.glob("test_*.py") if path.name not in WHOLE_PROJECT_TESTS]
    for path in tests.rglob("test_*.py"):
        folder = path.parent.relative_to(tests).as_posix()
        if folder != "." and folder not in folders:
            wrong.append(path.relative_to(tests).as_posix())
    return sorted(wrong)


def test_tests_mirror_the_package():
    assert _unmirrored(ROOT / "tests") == []
    assert not list((ROOT / "tests" / "helpers").glob("test_*.py"))


def test_a_test_outside_the_mirror_is_caught(tmp_path):
    (tmp_path / "checks").mkdir()
    (tmp_path / "misc").mkdir()
    for path in ("test_readme.py", "test_loose.py", "checks/test_ordering.py", "misc/test_y.py"):
        (tmp_path / path).write_text("")
    assert _unmirrored(tmp_path) == ["misc/test_y.py", "test_loose.py"]


def test_checks_and_execute_never_import_the_engine():
    for module, path in _modules().items():
        if _unit(module) in ("fsdp_verify.checks", "fsdp_verify.execute"):
            assert not any(n.startswith("fsdp_verify.engine") for n, _ in _imports(module, path)), module


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
    order = list(registered())
    assert order[0] == "planner" and order[-1] == "consistency" and registered()["consistency"].hands_back
    assert all(order.index(before) < order.index(c.name) for c in registered().values() for before in c.after)


def test_checker_order_comes_from_named_declarations_and_refuses_cycles_and_unknown_names():
    from fsdp_verify.checks.registry import run_order

    def make(name, after=(), hands_back=False):
        return Checker(name, lambda ctx: [], after=after, hands_back=hands_back)
    got = run_order([make("b", ("a",)), make("a"), make("z", hands_back=True), make("c", ("a",))], [make("p")])
    assert [c.name for c in got] == ["a", "b", "c", "p", "z"]  # the project's own first, then plugins, then hand-backs
    with pytest.raises(CheckerError, match="a cycle"):
        run_order([make("a", ("b",)), make("b", ("a",))], [])
    with pytest.raises(CheckerError, match="which no checker is called"):
        run_order([make("a", ("nope",))], [])
    with pytest.raises(CheckerError, match="mark it hands_back too"):
        run_order([make("a", ("z",)), make("z", hands_back=True)], [])


def test_a_checker_from_an_entry_point_is_registered(monkeypatch):
    from fsdp_verify.checks import registry

    class Point:
        name, value = "always_fine", "tests:ALWAYS_FINE"

        @staticmethod
        def load():
            return Checker("always_fine", lambda ctx: [], summary="finds nothing")

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


def test_old_root_names_are_the_moved_modules(recwarn):
    import importlib

    import sys

    import fsdp_verify
    sys.modules.pop("fsdp_verify.orchestrate", None)
    for old, new in fsdp_verify.MOVED.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    assert any("moved to fsdp_verify.engine.run_case" in str(w.message) for w in recwarn.list)


def test_an_old_root_name_still_runs_with_python_m():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "fsdp_verify.torchrun_replay", "--help"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0 and "--hash-seed" in out.stdout


# A finding's message is for people: code that branches on it breaks when a sentence is reworded,
# and two bugs that read alike merge. These shapes read a message for control flow.
MESSAGE_READS = re.compile(
    r"\bin\s+[\w.\[\]]*\bmessage\b(?!\s*for\b)"  # "... in f.message"
    r"|\bmessage\s*\.\s*(split|rsplit|partition|rpartition|startswith|endswith|find|index|count|strip)\b"
    r"|\bmessage\s*(==|!=)|(==|!=)\s*[\w.]*\bmessage\b"
    r"|\bre\.\w+\([^)]*\bmessage\b")
MESSAGE_ALLOWED: set[str] = set()  # modules allowed to read messages (none: checks/findings.py only writes them)


def _message_reads(text: str) -> list[int]:
    return [number for number, line in enumerate(text.splitlines(), 1)
            if not line.lstrip().startswith("#") and MESSAGE_READS.search(line)]


def test_no_code_reads_a_findings_message_for_control_flow():
    found = []
    for module, path in sorted(_modules().items()):
        if module == "fsdp_verify.checks.findings" or module in MESSAGE_ALLOWED:
            continue
        found += [f"{path.relative_to(ROOT)}:{line}" for line in _message_reads(path.read_text())]
    assert not found, "reads a finding's message (key on (checker, rule) and details instead):\n" + "\n".join(found)


def test_a_message_read_is_caught():
    assert _message_reads("if missing in f.message:\n    pass\n") == [1]
    assert _message_reads("kind = f.message.split(': ')[1]\n") == [1]
    assert _message_reads("x = re.sub(r'\\d', '#', finding.message)\n") == [1]
    assert _message_reads("lines.append(f'[{f.checker}] {f.message}')\n") == []
