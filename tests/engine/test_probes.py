"""Probes: whether a mutant changes its function's result, run beside the original in the reach map."""

from __future__ import annotations

import json
import sys
import textwrap
import types

import pytest

from fsdp_verify.engine import aim, probes

SOURCE = textwrap.dedent('''
    from __future__ import annotations
    import functools

    LIMIT = 3

    def kind(x: int) -> str:
        if x > LIMIT:
            return "big"
        return "small"

    def total(xs):
        seen = []
        for x in xs:
            seen.append(kind(x))
        return seen

    def remember(memo, x):
        memo[x] = kind(x)
        return memo[x]

    def through(x):
        memo = {}
        return remember(memo, x)

    def leaks(memo, x):
        return remember(memo, x)

    CACHE = {}

    def shared(x):
        return remember(CACHE, x)

    def aliased(memo, x):
        seen = memo or {}
        seen[x] = kind(x)
        return seen[x]

    def deep(box, x):
        box.items[0].append(x)
        return x

    def grouped(xs):
        groups = {k: [] for k in ("big", "small")}
        for x in xs:
            groups[kind(x)].append(x)
        return groups

    def spin(x):
        while x > LIMIT:
            pass
        return x

    @functools.cache
    def cached(x):
        return x > LIMIT

    class Box:
        def __init__(self, x):
            self.x = x

        def label(self):
            return kind(self.x)

        def grow(self):
            self.x = self.x + 1
            return self.x
''')


def _probe(function: str, old: str, new: str, nth: int = 1) -> probes.Probe | probes.Unprobed:
    lines = SOURCE.splitlines()
    start = next(i for i, text in enumerate(lines) if text.lstrip().startswith(f"def {function}("))
    line = next(i for i in range(start, len(lines)) if old in lines[i])
    lines[line] = lines[line].replace(old, new)
    return probes.probe_for(f"m.py:{line + 1}", "probed_module", line + 1, SOURCE, "\n".join(lines) + "\n")


@pytest.mark.parametrize("function, old, new, why", [
    ("shared", "remember(CACHE, x)", "remember(CACHE, x + 1)", "passes CACHE to remember, which writes it"),
    ("cached", "x > LIMIT", "x >= LIMIT", "a decorated function"),
    ("aliased", "seen[x] = kind(x)", "seen[x] = kind(x + 1)", "assigns seen[x]"),  # ``memo or {}`` is memo
    ("deep", "box.items[0].append(x)", "box.items[0].append(x + 1)", "writes deep into its argument box"),
])
def test_a_function_that_writes_what_a_copy_cannot_keep_apart_is_not_probed(function, old, new, why) -> None:
    found = _probe(function, old, new)
    assert isinstance(found, probes.Unprobed) and why in found.reason, found


@pytest.mark.parametrize("function, old, new, copied", [
    ("kind", "x > LIMIT", "x >= LIMIT", ()),
    ("total", "kind(x)", "kind(x + 1)", ()),  # appends to a list it made
    ("through", "remember(memo, x)", "remember(memo, x + 1)", ()),  # hands its own dict to a writer
    ("grouped", "kind(x)", "kind(x + 1)", ()),  # appends to lists a comprehension made
    ("label", "kind(self.x)", "kind(self.x + 1)", ()),
    ("remember", "kind(x)", "kind(x + 1)", (("memo", 0),)),  # writes its argument: copied for the copy
    ("leaks", "remember(memo, x)", "remember(memo, x + 1)", (("memo", 0),)),  # through a callee
    ("grow", "self.x + 1", "self.x + 2", (("self", 0),)),
])
def test_a_function_that_writes_only_what_it_made_or_was_handed_is_probed(function, old, new, copied) -> None:
    found = _probe(function, old, new)
    assert isinstance(found, probes.Probe), found
    assert found.levels[0].qualname.endswith(function) and found.levels[0].copied == copied


def test_a_mutant_is_probed_at_its_function_and_every_caller_in_its_module() -> None:
    found = _probe("kind", "x > LIMIT", "x >= LIMIT")
    # nearest first; ``shared`` writes a module global, so it is no level; a method is no caller here
    assert [level.qualname for level in found.levels] == ["kind", "grouped", "remember", "total", "leaks", "through"]


@pytest.fixture
def module(monkeypatch):
    mod = types.ModuleType("probed_module")
    exec(compile(SOURCE, "probed_module.py", "exec"), mod.__dict__)  # noqa: S102 - the test's own source
    monkeypatch.setitem(sys.modules, "probed_module", mod)
    user = types.ModuleType("probed_user")
    user.kind = mod.kind  # ``from probed_module import kind`` made before the probe
    monkeypatch.setitem(sys.modules, "probed_user", user)
    probes.take()
    yield mod
    probes.take()


def test_an_example_counts_for_a_level_only_where_its_result_changes(module) -> None:
    """``>`` to ``>=`` changes ``kind`` at 3 only; the original's result is what callers get, a name
    imported before the probe reaches it too, and a caller's copy calls the mutated ``kind``."""
    found = _probe("kind", "x > LIMIT", "x >= LIMIT")
    assert probes.install([found]) == {}
    levels = [level.qualname for level in found.levels]
    assert [module.kind(x) for x in (1, 5)] == ["small", "big"] and probes.take() == set()
    assert sys.modules["probed_user"].kind(3) == "small"  # the original's answer
    assert probes.take() == {(found.ident, 0)}
    assert module.total([3]) == ["small"]
    assert probes.take() == {(found.ident, 0), (found.ident, levels.index("total"))}
    memo = {}
    assert module.remember(memo, 3) == "small" and memo == {3: "small"}  # the copy wrote its own memo
    assert (found.ident, levels.index("remember")) in probes.take()


def test_a_copy_that_raises_or_never_returns_counts_and_the_example_goes_on(module, monkeypatch) -> None:
    monkeypatch.setattr(probes, "COPY_SECONDS", 0.2)
    raising = _probe("kind", "return \"big\"", "return 1 // 0")
    spinning = _probe("spin", "while x > LIMIT", "while x >= LIMIT")
    assert probes.install([raising, spinning]) == {}
    assert module.kind(2) == "small" and probes.take() == set()
    assert module.kind(9) == "big" and (raising.ident, 0) in probes.take()
    assert module.spin(3) == 3 and probes.take() == {(spinning.ident, 0)}  # the copy loops: stopped, counted


def test_results_compare_by_value_tensors_by_dtype_shape_and_values() -> None:
    torch = pytest.importorskip("torch")
    assert probes.same((torch.float32, True), (torch.float32, True))
    assert not probes.same((torch.float32, True), (torch.float32, False))
    assert probes.same(torch.empty(1, device="meta"), torch.empty(1, device="meta"))
    assert not probes.same(torch.empty(1, device="meta"), torch.empty(0, device="meta"))
    assert not probes.same(torch.ones(2), torch.zeros(2)) and probes.same([torch.ones(2)], [torch.ones(2)])
    assert not probes.same(object(), object())  # no equality: different unless the same object


def test_a_line_most_examples_run_is_aimed_by_where_its_result_changes() -> None:
    """The dtype walk's ``is convert`` to ``is not`` runs in a third of the mix's examples but changes
    what the walk hands its caller only for an op with a dtype keyword: aimed at the shape that draws
    one, by the outermost level whose result it ever changed."""
    key = aim._key("x.py")
    reach = aim.Reach(examples={"cases:default": 40, "rule:a:tiny": 20, "rule:b:tiny": 20},
                      hits={"cases:default": {key: {20: 14}}, "rule:a:tiny": {key: {20: 20}},
                            "rule:b:tiny": {key: {20: 20}}},
                      statements={key: [20]},
                      infected={"cases:default": {"m": {0: 12, 2: 1}}, "rule:a:tiny": {"m": {0: 20}},
                                "rule:b:tiny": {"m": {0: 15, 2: 12}}},
                      probed={"m": "", "n": "writes what its caller sees (assigns CACHE[k])"})
    assert reach.telling_level("m") == 2 and reach.telling_level("n") is None
    found = aim.aim(reach, "x.py", 20, ["cases:default"], "m")
    assert found == aim.Aim(0.35, "rule:b:tiny", 0.6, aim.Basis.RESULT, 0.025)
    assert aim.aim(reach, "x.py", 20, ["cases:default"], "n") == aim.Aim(0.35)  # not probed: by line only
    assert aim.Reach.from_json(json.loads(json.dumps(reach.to_json()))) == reach
