"""Whether a mutant changes what its module's functions return, example by example: the second
half of aiming.

A line that runs in a third of the default mix's examples says nothing of whether any of them is
one where the mutation matters: ``node.target is convert`` to ``is not`` changes what the dtype walk
returns only for an op with a dtype keyword, one draw in a few hundred. So, while the reach map is
measured, each probed function runs as the mutant would have it, then as it is, on the same
arguments, and an example counts for the mutant when the two results differ (the mutant *infects*
the result: the step between reaching a line and failing a check). A mutant is probed at its own
function and at every function of its module that calls it (its *levels*): the outermost level
whose result ever changed says best where the change reaches the module's output, and the phase
whose examples change it most becomes the mutant's first phase.

Running a mutated copy beside the original is sound for this because:
- a level is probed only where what it writes is its own (fresh locals) or an argument it is
  handed, and such an argument is copied for the copy's call, as deep as the function writes into
  it (``Level.copied``): the copy cannot change what the original, or the rest of the example,
  sees. Calls out of the module are taken as reads: where one is not, the measurement's example
  goes another way, never a verdict;
- the copy runs first, so a memo the original fills (the dtype walk's) does not answer for it;
- the copies live in a namespace of their own (the module's globals with its functions compiled
  from the mutant's source), so they call each other, never a probe; classes and constants are
  the module's own, so ``isinstance`` holds across both;
- the map only orders a mutant's phases: the verdict comes from the mutant's own campaign, on the
  mutated module. A wrong map costs time, never a kill or a survivor.
"""

from __future__ import annotations

import __future__
import ast
import collections
import contextlib
import copy
import functools
import importlib
import inspect
import signal
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

#: Wall seconds a mutated copy may run on one call: a mutant that loops forever counts as infected.
COPY_SECONDS = 1.0

# Methods that change the object they are called on (containers, files, torch.fx graphs and nodes);
# torch's in-place methods (a name ending in one underscore) are matched apart.
_MUTATORS = frozenset({
    "append", "extend", "insert", "remove", "pop", "popitem", "clear", "update", "setdefault", "add", "discard",
    "sort", "reverse", "write", "writelines", "send", "throw", "close", "difference_update",
    "intersection_update", "symmetric_difference_update", "appendleft", "extendleft", "popleft", "rotate",
    "erase_node", "replace_all_uses_with", "replace_input_with", "insert_arg", "update_arg", "update_kwarg",
    "prepend", "create_node", "call_function", "call_method", "call_module", "placeholder", "output", "get_attr",
    "node_copy", "graph_copy", "inserting_before", "inserting_after", "eliminate_dead_code", "recompile",
    "set_", "copy_", "fill_", "zero_", "resize_", "register_buffer", "register_parameter", "setdefault",
})
_FORBIDDEN_CALLS = frozenset({"setattr", "delattr", "exec", "eval", "open", "__import__", "globals", "vars",
                              "input", "breakpoint"})
# A local bound only to one of these holds a fresh object this call made: writing it writes nothing
# the caller can see.
_FRESH_CALLS = frozenset({"list", "dict", "set", "tuple", "frozenset", "sorted", "deque", "defaultdict",
                          "Counter", "OrderedDict", "bytearray", "reversed", "enumerate", "zip", "range"})


@dataclass(frozen=True)
class Level:
    """One function a mutant is probed at (``f`` or ``Class.f``), and the arguments it writes into,
    each with how deep (0: the object itself; 1: also its attributes' or items' objects): those
    are copied that deep for the copy's call. ``shallow`` names arguments written by method calls,
    copied only where they are plain containers (a method of any other object may write what a
    shallow copy still shares)."""

    qualname: str
    copied: tuple[tuple[str, int], ...] = ()
    shallow: tuple[str, ...] = ()


@dataclass(frozen=True)
class Probe:
    """One mutant's probe: its module's mutated source and the levels, innermost first."""

    ident: str
    module: str
    mutated: str
    levels: tuple[Level, ...]


@dataclass(frozen=True)
class Unprobed:
    """Why a mutant is not probed (it is aimed by its line only)."""

    ident: str
    reason: str


MAX_LEVELS = 8  # callers probed beyond the mutant's own function (nearest first)


def probe_for(ident: str, module: str, line: int, source: str, mutated: str) -> Probe | Unprobed:
    """The probe of the function holding ``line`` of the mutated module and of its callers in the
    module, or why there is none."""
    try:
        before, after = ast.parse(source), ast.parse(mutated)
    except SyntaxError:
        return Unprobed(ident, "the mutated module does not parse")
    found = _enclosing(after, line)
    if found is None:
        return Unprobed(ident, "not inside a module-level function or method")
    path, definition = found
    original = _named(before, path)
    if original is None or ast.dump(original) == ast.dump(definition):
        return Unprobed(ident, "the mutation is not inside the function's body")
    own = _level(after, path, definition)
    if isinstance(own, str):
        return Unprobed(ident, own)
    levels = [own]
    if len(path) == 1:
        for caller in _callers(after, path[0]):
            level = _level(after, [caller], _named(after, [caller]))
            if isinstance(level, Level) and len(levels) <= MAX_LEVELS:
                levels.append(level)
    return Probe(ident, module, mutated, tuple(levels))


def _level(tree: ast.Module, path: list[str], definition: ast.FunctionDef) -> Level | str:
    """The level of one function, or why it cannot be one."""
    if definition.decorator_list:
        return "a decorated function"
    if isinstance(definition, ast.AsyncFunctionDef) or any(
            isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in ast.walk(definition)):
        return "a generator or coroutine: its result is not a value to compare"
    if any(isinstance(n, ast.Name) and n.id in ("super", "__class__") for n in ast.walk(definition)):
        return "a method that calls super(): a copy outside its class cannot"
    effects = _effects(tree, path, definition, {})
    if effects.reason:
        return f"writes what its caller sees ({effects.reason})"
    deep = sorted(name for name, depth in effects.params.items() if depth > 1)
    if deep:
        return f"writes deep into its argument {deep[0]}"
    return Level(".".join(path), tuple(sorted(effects.params.items())), tuple(sorted(effects.shallow)))


def _callers(tree: ast.Module, name: str) -> list[str]:
    """The module-level functions that call ``name``, directly or through others, nearest first."""
    calls: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            calls[node.name] = {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call)
                                and isinstance(n.func, ast.Name)}
    found, frontier = [], [name]
    while frontier:
        nearest = sorted(caller for caller, callees in calls.items() if set(frontier) & callees
                         and caller not in found and caller != name)
        found.extend(nearest)
        frontier = nearest
    return found


def _enclosing(tree: ast.Module, line: int) -> Optional[tuple[list[str], ast.FunctionDef]]:
    """The module-level function, or method of a module-level class, whose lines hold ``line``."""
    def holds(node: ast.AST) -> bool:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        return first <= line <= (node.end_lineno or node.lineno)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and holds(node):
            return [node.name], node
        if isinstance(node, ast.ClassDef) and holds(node):
            for member in node.body:
                if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and holds(member):
                    return [node.name, member.name], member
    return None


def _named(tree: ast.Module, path: Sequence[str]) -> Optional[ast.FunctionDef]:
    scope: list[ast.stmt] = tree.body
    found = None
    for name in path:
        found = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.name == name), None)
        if found is None:
            return None
        scope = found.body
    return found if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _fresh_locals(definition: ast.FunctionDef) -> set[str]:
    """Names every binding of which, in ``definition``, is a new container (a display, a
    comprehension, or a call of a constructor): writing such a name writes only this call's object.
    A parameter, a loop variable or anything bound to another value may alias the caller's."""
    params = set(_params(definition))
    fresh: dict[str, bool] = {}

    def bind(target: ast.AST, value: Optional[ast.AST]) -> None:
        if isinstance(target, ast.Name):
            fresh[target.id] = fresh.get(target.id, True) and value is not None and _is_fresh(value)
        elif isinstance(target, (ast.Tuple, ast.List)):
            values = value.elts if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts) \
                else [None] * len(target.elts)
            for t, v in zip(target.elts, values):
                bind(t, v)
        elif isinstance(target, ast.Starred):
            bind(target.value, None)

    for node in ast.walk(definition):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)):
            bind(node.target, node.value)
        elif isinstance(node, (ast.For, ast.comprehension)):
            bind(node.target, None)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(node.optional_vars, None)
    return {name for name, ok in fresh.items() if ok and name not in params}


def _fresh_item_locals(definition: ast.FunctionDef, fresh: set[str]) -> set[str]:
    """Fresh locals whose every item is fresh too: ``{k: [] for k in ks}`` or ``defaultdict(list)``
    (so ``wire[group].append(x)`` writes a list this call made)."""
    items: dict[str, bool] = {}
    for node in ast.walk(definition):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(target, ast.Name):
                    value = node.value
                    made = (isinstance(value, ast.DictComp) and _is_fresh(value.value)) or \
                        (isinstance(value, ast.ListComp) and _is_fresh(value.elt)) or \
                        (isinstance(value, ast.Call) and getattr(value.func, "id", getattr(value.func, "attr", ""))
                         == "defaultdict" and len(value.args) == 1 and getattr(value.args[0], "id", "") in _FRESH_CALLS)
                    empty = isinstance(value, (ast.Dict, ast.List)) and not (
                        value.keys if isinstance(value, ast.Dict) else value.elts)
                    items[target.id] = items.get(target.id, True) and (made or (empty and _puts_fresh(definition,
                                                                                                     target.id)))
    return {name for name, ok in items.items() if ok and name in fresh}


def _puts_fresh(definition: ast.FunctionDef, name: str) -> bool:
    """Whether every item put into local ``name`` is a new object: only ``name.setdefault(k, [])``
    and ``name[k] = []`` (so ``seen.setdefault(k, set()).add(x)`` fills sets this call made)."""
    for node in ast.walk(definition):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                isinstance(node.func.value, ast.Name) and node.func.value.id == name:
            if node.func.attr == "setdefault" and not (len(node.args) == 2 and _is_fresh(node.args[1])):
                return False
            if node.func.attr in _MUTATORS - {"setdefault", "pop", "popitem", "clear", "remove", "discard"}:
                return False
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)
                                                and t.value.id == name for t in node.targets) \
                and not _is_fresh(node.value):
            return False
    return True


def _loop_fresh(definition: ast.FunctionDef, items: frozenset[str]) -> set[str]:
    """Loop variables every binding of which takes items of a fresh-items local (``for k, v in
    seen.items()``, ``for v in seen.values()``): each is an object this call made."""
    bound: dict[str, bool] = {}
    for node in ast.walk(definition):
        if not isinstance(node, (ast.For, ast.comprehension)):
            continue
        source = node.iter
        method = source.func.attr if isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) else ""
        owner = source.func.value if method else source
        over = isinstance(owner, ast.Name) and owner.id in items
        target = node.target
        if method == "items" and isinstance(target, ast.Tuple) and len(target.elts) == 2:
            names = [target.elts[1]]
        elif method in ("values", ""):
            names = [target]
        else:
            names, over = _leaves(target), False
        for leaf in names:
            if isinstance(leaf, ast.Name):
                bound[leaf.id] = bound.get(leaf.id, True) and over
    return {name for name, ok in bound.items() if ok}


def _is_fresh(value: ast.AST) -> bool:
    # not a BoolOp or IfExp: ``memo or {}`` is the caller's memo when it has one
    if isinstance(value, (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp, ast.Tuple,
                          ast.Constant, ast.JoinedStr, ast.BinOp, ast.Compare, ast.UnaryOp)):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        return name in _FRESH_CALLS
    return False


def _owned(value: ast.AST, fresh: set[str], items: frozenset[str] = frozenset()) -> bool:
    """Whether writing into ``value`` writes only this call's object: a fresh local itself, or an item
    of one whose items are fresh (``items``), not an item or attribute of any other
    (``stack[-1].meta[k] = v`` writes a node the stack only points to)."""
    if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and value.value.id in items:
        return True
    if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "setdefault" \
            and len(value.args) == 2 and _is_fresh(value.args[1]):
        return _owned(value.func.value, fresh, items)  # ``groups.setdefault(k, []).append(x)``: a list it made
    return isinstance(value, ast.Name) and value.id in fresh


def _leaves(target: ast.AST) -> list[ast.AST]:
    """The single targets of an assignment, tuples and starred targets unpacked."""
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _leaves(element)]
    if isinstance(target, ast.Starred):
        return _leaves(target.value)
    return [target]


@dataclass(frozen=True)
class _Effects:
    """What a function writes that its caller could see: something outside every argument (``reason``,
    then it is never probed), or its parameters' objects, each with how deep it writes into them
    (fine where the caller made them, or where a copy of that depth is handed to a copy); ``shallow``:
    parameters written by a method call on them."""

    reason: str = ""
    params: dict = field(default_factory=dict)
    shallow: frozenset[str] = frozenset()


def _params(definition: ast.FunctionDef) -> list[str]:
    args = definition.args
    return [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)] + \
        [a.arg for a in (args.vararg, args.kwarg) if a is not None]


def _depth(node: ast.AST) -> tuple[Optional[str], int]:
    """The name an attribute or subscript chain starts from, and how many steps it takes."""
    steps = 0
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        steps += not isinstance(node, ast.Starred)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), steps


def _effects(tree: ast.Module, path: Sequence[str], definition: ast.FunctionDef, seen: dict) -> _Effects:
    """``definition``'s writes, also through the functions of its own module it calls by name and its
    own class's methods called on ``self`` (a call that passes a fresh local is the caller's own
    business; one that passes a parameter writes that parameter)."""
    key = tuple(path)
    if key in seen:
        return seen[key] or _Effects()  # None: being worked out (recursion): its other writes count
    seen[key] = None
    fresh, params = _fresh_locals(definition), set(_params(definition))
    items = frozenset(_fresh_item_locals(definition, fresh))
    fresh = fresh | _loop_fresh(definition, items)  # a loop over items this call made
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    written: dict[str, int] = {}
    shallow: set[str] = set()

    def write(value: ast.AST, what: str, below: int = 0, method: bool = False) -> str:
        """Record a write ``below`` steps into ``value`` (by a method call on it: ``method``); the
        reason it is visible outside every argument, or ""."""
        if _owned(value, fresh, items):
            return ""
        if isinstance(value, (ast.BoolOp, ast.IfExp)):  # ``walk or DtypeWalk(...)``: either
            operands = value.values if isinstance(value, ast.BoolOp) else [value.body, value.orelse]
            return next((r for r in (write(v, what, below, method) for v in operands) if r), "")
        if isinstance(value, ast.Call) and (_is_fresh(value) or getattr(value.func, "id", None) in classes):
            return ""  # a new object (a class of the module makes its containers per instance)
        root, steps = _depth(value)
        if root in params:
            written[root] = max(written.get(root, 0), steps + below)
            if method or below:
                shallow.add(root)
            return ""
        return what

    def judged() -> _Effects:
        for node in ast.walk(definition):
            if isinstance(node, (ast.Global, ast.Nonlocal)):
                return _Effects("global or nonlocal names")
            targets: list[ast.AST] = []
            if isinstance(node, (ast.Assign, ast.Delete)):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            elif isinstance(node, ast.AugAssign):  # ``x += y`` extends a list in place
                targets = [node.target]
                if isinstance(node.target, ast.Name) and node.target.id not in fresh:
                    reason = write(node.target, f"updates {node.target.id} in place")
                    if reason:
                        return _Effects(reason)
            for target in targets:
                for leaf in _leaves(target):
                    if isinstance(leaf, (ast.Attribute, ast.Subscript)):
                        reason = write(leaf.value, f"assigns {ast.unparse(leaf)}")
                        if reason:
                            return _Effects(reason)
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Name) and func.id in _FORBIDDEN_CALLS:
                return _Effects(f"calls {func.id}")
            callee_path: list[str] = []
            if isinstance(func, ast.Attribute):
                if func.attr in _MUTATORS or (func.attr.endswith("_") and not func.attr.startswith("_")):
                    reason = write(func.value, f"calls {ast.unparse(func)}", method=True)
                    if reason:
                        return _Effects(reason)
                if len(path) == 2 and isinstance(func.value, ast.Name) and func.value.id == "self":
                    callee_path = [path[0], func.attr]
            elif isinstance(func, ast.Name):
                callee_path = [func.id]
            callee = _named(tree, callee_path) if callee_path else None
            if callee is None:
                continue  # out of the module: taken as a read (see the module's docstring)
            inner = _effects(tree, callee_path, callee, seen)
            if inner.reason:
                return _Effects(f"{inner.reason}, in {callee_path[-1]}")
            for name, depth in inner.params.items():
                given = _argument(callee, node, name, bound_self=len(callee_path) == 2)
                reason = "" if given is _UNGIVEN else write(
                    given, f"passes {ast.unparse(given)} to {callee_path[-1]}, which writes it", depth,
                    name in inner.shallow) if given is not None \
                    else f"calls {callee_path[-1]} with arguments it cannot match"
                if reason:
                    return _Effects(reason)
        return _Effects(params=written, shallow=frozenset(shallow))

    seen[key] = judged()
    return seen[key]


_UNGIVEN = ast.Constant(None)  # a parameter left to its default: the callee's own object


def _argument(callee: ast.FunctionDef, call: ast.Call, name: str, bound_self: bool) -> Optional[ast.AST]:
    """The expression ``call`` passes as ``callee``'s parameter ``name`` (None: a starred argument
    hides which; _UNGIVEN: left to its default)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    positional = [a.arg for a in (*callee.args.posonlyargs, *callee.args.args)]
    if bound_self:
        if positional and positional[0] == name:
            return call.func.value
        positional = positional[1:]
    for keyword in call.keywords:
        if keyword.arg == name:
            return keyword.value
    if name in positional and positional.index(name) < len(call.args):
        return call.args[positional.index(name)]
    if callee.args.vararg is not None and callee.args.vararg.arg == name:
        return None
    return _UNGIVEN


# --- in the measuring child -----------------------------------------------------------------------


class _Overran(BaseException):
    """A mutated copy ran past COPY_SECONDS (a BaseException, so the copy's own handlers miss it)."""


_infected: set[tuple[str, int]] = set()  # (mutant, level) whose result changed in this example
_in_copy = False


def take() -> set[tuple[str, int]]:
    """The mutants, each with the level, that changed a level's result since the last call."""
    found = set(_infected)
    _infected.clear()
    return found


def install(probed: Sequence[Probe]) -> dict[str, str]:
    """Wrap each level's function (in its module or class, and wherever a loaded module imported it
    by name); returns, per mutant whose probe could not be installed, why."""
    failed: dict[str, str] = {}
    snapshots: dict[str, dict] = {}
    for probe in probed:
        with contextlib.suppress(Exception):
            snapshots.setdefault(probe.module, dict(vars(importlib.import_module(probe.module))))
    entries: dict[tuple[str, str], list[tuple[str, int, Callable, Level]]] = {}
    for probe in probed:
        if probe.module not in snapshots:
            failed[probe.ident] = "its module does not import"
            continue
        try:
            copies = _copies(probe, snapshots[probe.module])
        except Exception as exc:  # noqa: BLE001 - a mutant whose copies cannot be made is not probed
            failed[probe.ident] = f"its copies do not compile ({type(exc).__name__})"
            continue
        for index, level in enumerate(probe.levels):
            entries.setdefault((probe.module, level.qualname), []).append((probe.ident, index, copies[index], level))
    for (module_name, qualname), probes_here in entries.items():
        module = sys.modules[module_name]
        owner: Any = module
        for part in qualname.split(".")[:-1]:
            owner = vars(owner).get(part)
        name = qualname.rsplit(".", 1)[-1]
        original = vars(owner).get(name) if owner is not None else None
        if not callable(original) or isinstance(original, (staticmethod, classmethod)):
            failed.update({ident: "not a plain function at run time" for ident, index, _, _ in probes_here if index == 0})
            continue
        wrapper = _wrapped(original, probes_here)
        setattr(owner, name, wrapper)
        if owner is module:
            for other in list(sys.modules.values()):
                space = getattr(other, "__dict__", None)
                if isinstance(space, dict) and other is not module and space.get(name) is original:
                    space[name] = wrapper  # a ``from module import name`` made before the probe
    return failed


def _copies(probe: Probe, snapshot: dict) -> list[Callable]:
    """Each level's mutated function: the module's functions compiled from the mutant's source into
    a namespace of their own (so they call each other), a method compiled alone."""
    tree = ast.parse(probe.mutated)
    functions = [n for n in tree.body if isinstance(n, ast.FunctionDef) and not n.decorator_list]
    space = dict(snapshot)  # the module's globals before any probe: classes and constants shared
    flags = __future__.annotations.compiler_flag  # annotations stay strings, as in the module
    exec(compile(ast.Module(body=functions, type_ignores=[]), f"<probe {probe.ident}>", "exec",  # noqa: S102
                 flags=flags, dont_inherit=True), space)
    copies = []
    for level in probe.levels:
        path = level.qualname.split(".")
        if len(path) == 1:
            copies.append(space[path[0]])
            continue
        method = _named(tree, path)
        method.name = "__probe_copy__"
        own: dict = dict(space)
        exec(compile(ast.Module(body=[method], type_ignores=[]), f"<probe {probe.ident}>", "exec",  # noqa: S102
                     flags=flags, dont_inherit=True), own)
        copies.append(own["__probe_copy__"])
    return copies


_IMMUTABLE = (type(None), bool, int, float, complex, str, bytes, tuple, frozenset, type)
_PLAIN = (dict, list, set, collections.deque, collections.OrderedDict, collections.defaultdict, collections.Counter)


def _isolated(value: Any, depth: int, plain_only: bool) -> Any:
    """A copy of ``value`` as deep as a function writes into it; TypeError where none can be made
    that a write of that kind cannot reach through (``plain_only``: written by a method call)."""
    if isinstance(value, _IMMUTABLE):
        return value
    if plain_only and not isinstance(value, _PLAIN) and not (depth and hasattr(value, "__dict__")):
        raise TypeError("a method call may write what a copy shares")
    copied = copy.copy(value)
    if depth < 1:
        return copied
    inner = copied.items() if isinstance(copied, dict) else vars(copied).items() if hasattr(copied, "__dict__") \
        else enumerate(copied) if isinstance(copied, list) else None
    if inner is None:
        raise TypeError("no items to copy")
    for key, item in list(inner):
        if isinstance(item, _IMMUTABLE) or callable(item):
            continue
        if plain_only and not isinstance(item, _PLAIN):
            raise TypeError("a method call may write what a copy shares")
        if isinstance(copied, (dict, list)):
            copied[key] = copy.copy(item)
        else:
            object.__setattr__(copied, key, copy.copy(item))
    return copied


def _wrapped(original: Callable, probes_here: list[tuple[str, int, Callable, Level]]) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if _in_copy:
            return original(*args, **kwargs)
        outcomes = []
        for ident, index, copied, level in probes_here:
            if (ident, index) in _infected:
                continue
            try:
                call_args, call_kwargs = _arguments(signature, args, kwargs, level)
            except (TypeError, ValueError, RecursionError):  # noqa: BLE001 - this call says nothing
                continue
            outcomes.append((ident, index, _run_copy(copied, call_args, call_kwargs)))
        try:
            result, raised = original(*args, **kwargs), None
        except Exception as exc:  # noqa: BLE001 - compared with what the copies did, then raised again
            result, raised = None, exc
        for ident, index, (value, error) in outcomes:
            if _differs(result, raised, value, error):
                _infected.add((ident, index))
        if raised is not None:
            raise raised
        return result
    return probe


def _arguments(signature: inspect.Signature, args: tuple, kwargs: dict, level: Level) -> tuple[tuple, dict]:
    """The call's arguments, each the level writes into copied as deep as it writes."""
    if not level.copied:
        return args, kwargs
    bound = signature.bind(*args, **kwargs)
    for name, depth in level.copied:
        if name in bound.arguments:
            bound.arguments[name] = _isolated(bound.arguments[name], depth, name in level.shallow)
    return bound.args, bound.kwargs


def _run_copy(copied: Callable, args: tuple, kwargs: dict) -> tuple[Any, Optional[BaseException]]:
    """What the copy returns, or raises (a copy past COPY_SECONDS raises _Overran)."""
    global _in_copy
    timed = threading.current_thread() is threading.main_thread()  # signals reach the main thread only
    if timed:
        previous = signal.signal(signal.SIGALRM, _overran)
        signal.setitimer(signal.ITIMER_REAL, COPY_SECONDS)
    _in_copy = True
    try:
        return copied(*args, **kwargs), None
    except (Exception, _Overran, RecursionError) as exc:  # noqa: BLE001 - the copy's behaviour, compared
        return None, exc
    finally:
        _in_copy = False
        if timed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def _differs(result: Any, raised: Optional[BaseException], value: Any, error: Optional[BaseException]) -> bool:
    if raised is not None or error is not None:
        return raised is None or error is None or type(raised) is not type(error)
    return not same(result, value)


def _overran(signum: int, frame: Any) -> None:
    raise _Overran()


def same(a: Any, b: Any) -> bool:
    """Whether two results are the same value: containers by their items, tensors by dtype, shape,
    device and (where they hold data) values, anything else by ``==`` (identity where it has none)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(a, torch.Tensor):
        if (a.dtype, a.shape, a.device) != (b.dtype, b.shape, b.device):
            return False
        return a.device.type == "meta" or bool(torch.equal(a, b))
    try:
        equal = a == b
    except Exception:  # noqa: BLE001 - no comparison: different unless the same object
        return False
    return equal if isinstance(equal, bool) else False
