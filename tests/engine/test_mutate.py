"""Mutation testing: cosmic-ray's mutants of a target's source, each judged by a short campaign."""

from __future__ import annotations

import hashlib
import importlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("cosmic_ray", reason="fsdp-verify mutate needs cosmic-ray (pip install -e '.[mutate]')")

from fsdp_verify.commands.cli import main  # noqa: E402
from fsdp_verify.corpus.files import load as load_entry  # noqa: E402
from fsdp_verify.engine import mutate  # noqa: E402

HELPER = Path(__file__).parents[1] / "helpers" / "mutable_target.py"
TARGET = "helpers.mutable_target:Switched"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_enumeration_names_module_operator_and_line() -> None:
    [mutant] = mutate.enumerate_mutants([str(HELPER)], "ReplaceFalseWithTrue")
    assert mutant.module == "helpers.mutable_target"
    assert mutant.operator == "core/ReplaceFalseWithTrue"
    assert HELPER.read_text().splitlines()[mutant.line - 1].startswith("SKIP_WAIT = False")
    everything = mutate.enumerate_mutants([str(HELPER)])
    assert len(everything) > 10 and mutant in everything
    assert mutate.sample(everything, 5, seed=1) == mutate.sample(everything, 5, seed=1)
    assert len(mutate.sample(everything, 5, seed=1)) == 5


def test_the_finder_imports_the_mutant_from_memory_and_writes_nothing(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "mutpkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "values.py").write_text("VALUE = 1\n")
    before = _digest(package / "values.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    finder = mutate._MutantFinder("mutpkg.values", str(package / "values.py"), "VALUE = 2\n")
    sys.meta_path.insert(0, finder)
    try:
        assert importlib.import_module("mutpkg.values").VALUE == 2
        assert finder.loaded
    finally:
        sys.meta_path.remove(finder)
        for name in ("mutpkg.values", "mutpkg"):
            sys.modules.pop(name, None)
    assert _digest(package / "values.py") == before
    assert not (package / "__pycache__").exists() or not list((package / "__pycache__").glob("values*"))


def test_a_killed_mutant_names_its_checker_and_a_claimed_equivalent_is_counted_apart(tmp_path: Path) -> None:
    """Two workers side by side on one file: the file never changes, the wait-skipping mutant is
    killed by a checker (not by a crash), the log-line mutant survives and the file explains it.
    Kept campaigns: the killed mutant's folder holds the case that killed it."""
    before = _digest(HELPER)
    mutants = mutate.enumerate_mutants([str(HELPER)], "ReplaceFalseWithTrue|ReplaceTrueWithFalse")
    assert len(mutants) == 2
    quiet = next(m for m in mutants if m.operator.endswith("ReplaceTrueWithFalse"))
    claim = mutate.Equivalence(quiet.path, quiet.operator, "QUIET = True", "QUIET = False",
                               "QUIET only gates a progress print")
    settings = mutate.Settings(target=TARGET, seconds=6, phases=(mutate.Phase("hazards", "tiny"),), workers=2,
                               aim=False, keep_cases=str(tmp_path / "kept"))
    outcome = mutate.run(mutants, settings, [claim])
    by_operator = {r.mutant.operator: r for r in outcome.results}
    killed = by_operator["core/ReplaceFalseWithTrue"]
    assert killed.outcome is mutate.Outcome.KILLED, killed
    assert killed.checkers and set(killed.checkers) != {"target"}
    assert killed.seconds_to_kill is not None and killed.seconds_to_kill < 6
    saved = list(Path(killed.cases).glob("*.json"))
    assert killed.cases == str(mutate.case_folder(str(tmp_path / "kept"), killed.mutant, 1)) and saved
    assert set(killed.checkers) <= set(load_entry(saved[0]).verdict.checkers), saved[0]
    equivalent = by_operator["core/ReplaceTrueWithFalse"]
    assert equivalent.outcome is mutate.Outcome.EQUIVALENT and equivalent.reason == claim.reason
    assert (equivalent.before, equivalent.after) == ("QUIET = True", "QUIET = False")
    assert outcome.score == 1.0 and outcome.counts()["killed"] == 1
    assert "-QUIET = True" in equivalent.diff and "+QUIET = False" in equivalent.diff
    assert _digest(HELPER) == before
    table = mutate.format_table(outcome)
    assert "mutation score 100.0%" in table and "killed by: " in table


def test_verdicts_tell_incompetent_unreached_and_harness_errors_apart(tmp_path: Path) -> None:
    mutant = mutate.Mutant("x.py", "x", "core/AddNot", 0, 1)
    log = tmp_path / "log"
    assert mutate._verdict(mutant, {"incompetent": "Traceback\nNameError: y"}, log, False)[0] is mutate.Outcome.INCOMPETENT
    assert mutate._verdict(mutant, None, log, False)[0] is mutate.Outcome.HARNESS_ERROR
    assert mutate._verdict(mutant, None, log, True)[0] is mutate.Outcome.HARNESS_ERROR
    quiet = {"examples": 9, "checkers": [], "first_failure": None, "harness_errors": 0, "loaded": False}
    assert mutate._verdict(mutant, quiet, log, False)[0] is mutate.Outcome.UNREACHED
    assert mutate._verdict(mutant, quiet | {"loaded": True}, log, False)[0] is mutate.Outcome.SURVIVED
    assert mutate._verdict(mutant, quiet | {"loaded": True, "harness_errors": 1}, log, False)[0] \
        is mutate.Outcome.HARNESS_ERROR
    outcome, facts = mutate._verdict(mutant, quiet | {"checkers": ["layout"], "first_failure": [3, 1.5]}, log, False)
    assert outcome is mutate.Outcome.KILLED and facts["seconds_to_kill"] == 1.5 and facts["checkers"] == ("layout",)


@pytest.mark.parametrize("text, field", [
    ("[]", "'equivalent'"),
    ('{"equivalent": [1]}', "equivalent[0]"),
    ('{"equivalent": [{"path": "a.py", "operator": "o", "before": "x", "after": "y", "reason": " "}]}',
     "equivalent[0].reason"),
    ("{nope", "not JSON"),
])
def test_a_bad_equivalence_file_is_exit_2_naming_file_and_field(tmp_path: Path, capsys, text: str, field: str) -> None:
    bad = tmp_path / "equivalent.json"
    bad.write_text(text)
    assert main(["mutate", str(HELPER), "--target", TARGET, "--equivalent", str(bad), "--list"]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and field in error


def test_list_shows_the_sample(capsys) -> None:
    assert main(["mutate", str(HELPER), "--target", TARGET, "--sample", "3", "--list"]) == 0
    lines = capsys.readouterr().out.split()
    assert len(lines) == 3 and all("mutable_target.py:" in line for line in lines)
    assert main(["mutate", "no/such/file.py", "--list"]) == 2


def test_the_json_report_and_exit_code_say_a_survivor_is_a_blind_spot(tmp_path: Path) -> None:
    report = tmp_path / "mutants.json"
    code = main(["mutate", str(HELPER), "--target", TARGET, "--operators", "ReplaceTrueWithFalse",
                 "--budget", "3", "--phase", "hazards:tiny", "--no-aim", "--json", str(report)])
    data = json.loads(report.read_text())
    assert code == 1
    assert data["counts"]["survived"] == 1 and data["score"] == 0.0
    assert data["results"][0]["outcome"] == "survived" and data["results"][0]["diff"]


def test_a_mutant_of_annotations_alone_is_equivalent_only_where_they_are_never_read():
    future = "from __future__ import annotations\n"
    body = "def f(x: int | None) -> str | None:\n    return x\n"
    changed = body.replace("str | None", "str + None")
    assert mutate.annotation_only(future + body, future + changed)
    assert not mutate.annotation_only(body, changed)  # evaluated when the function is defined
    assert not mutate.annotation_only(future + body, future + changed.replace("return x", "return -x"))
    reader = "import typing\n" + body + "typing.get_type_hints(f)\n"
    assert not mutate.annotation_only(future + reader, future + reader.replace("str | None", "str + None"))


def test_a_rerun_takes_only_the_survivors_a_results_file_names(tmp_path):
    everything = mutate.enumerate_mutants(["fsdp_verify/reference/driver.py"])
    kept = everything[1]
    results = tmp_path / "night.json"
    results.write_text(json.dumps({"results": [
        {"mutant": {"ident": everything[0].ident}, "outcome": "killed"},
        {"mutant": {"ident": kept.ident}, "outcome": "survived"}]}))
    assert mutate.select(everything, mutate.survivor_idents(str(results)), str(results)) == [kept]
    listed = tmp_path / "bench.json"
    listed.write_text(json.dumps({"survivors": [{"ident": kept.ident}]}))
    assert mutate.select(everything, mutate.survivor_idents(str(listed)), str(listed)) == [kept]
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"survivors": [{"ident": "fsdp_verify/reference/driver.py:999:core/X#0"}]}))
    with pytest.raises(mutate.BadInput, match="stale.json: 1 mutant"):
        mutate.select(everything, mutate.survivor_idents(str(stale)), str(stale))
    with pytest.raises(mutate.BadInput, match=r"survivors\[\].ident \[0\]"):
        listed.write_text(json.dumps({"survivors": [{"ident": 3}]}))
        mutate.survivor_idents(str(listed))


def test_a_phase_may_name_one_planted_shape_and_a_size():
    import argparse
    from fsdp_verify.commands.mutate import _phase
    assert _phase("hazards:tiny") == mutate.Phase("hazards", "tiny")
    assert _phase("cases") == mutate.Phase("cases", "default")
    assert _phase("rule:cast_beside_opaque_op:tiny") == mutate.Phase("rule:cast_beside_opaque_op", "tiny")
    assert _phase("skip:phase_mismatch") == mutate.Phase("skip:phase_mismatch", "default")
    # the report names a skip reason's hunt rule:REASON (aim.shape_phases): pasted back, it runs
    assert _phase("rule:phase_mismatch:tiny") == mutate.Phase("rule:phase_mismatch", "tiny")
    for bad in ("rule:no_such_shape", "rule", "nonsense:tiny", "cases:huge", "skip:cast_beside_opaque_op"):
        with pytest.raises(argparse.ArgumentTypeError):
            _phase(bad)


def test_a_line_the_default_phases_seldom_run_is_aimed_at_the_shape_that_runs_it_most() -> None:
    from fsdp_verify.engine import aim
    key = aim._key("x.py")
    reach = aim.Reach(examples={"cases:default": 40, "rule:a:tiny": 20, "rule:b:tiny": 20},
                      hits={"cases:default": {key: {10: 40, 20: 1}}, "rule:a:tiny": {key: {20: 3, 30: 0}},
                            "rule:b:tiny": {key: {20: 6}}},
                      statements={key: [10, 20, 30]})
    assert aim.aim(reach, "x.py", 10, ["cases:default"]) == aim.Aim(1.0)  # run by most default examples
    assert aim.aim(reach, "x.py", 21, ["cases:default"]) == aim.Aim(0.025, "rule:b:tiny", 0.3)  # a continuation line
    assert aim.aim(reach, "x.py", 30, ["cases:default"]) == aim.Aim(0.0)  # no draw runs it: said, not aimed
    assert aim.aim(aim.Reach(error="boom"), "x.py", 20, ["cases:default"]).phase is None
    settings = mutate.Settings()
    mutant = mutate.Mutant("x.py", "x", "core/AddNot", 0, 20)
    assert mutate._aimed(aim.Reach(error="boom"), mutant, settings) == mutate.Aimed(settings)  # no map: nothing said
    aimed = mutate._aimed(reach, mutant, mutate.Settings(phases=(mutate.Phase("cases", "default"),)))
    assert aimed.found.phase == "rule:b:tiny" and aimed.settings.phases[0] == mutate.Phase("rule:b", "tiny")
    assert aim.Reach.from_json(json.loads(json.dumps(reach.to_json()))) == reach


def test_a_mutant_of_what_a_planted_bug_replaces_is_aimed_at_that_bug_s_hunt() -> None:
    """A keyword helper runs most in shapes that never pass the keyword it looks for, and a constant
    runs only at import: the hunt of the planted bug that replaces either tells, the line's reach
    does not (``is "device"`` in ``_on_meta`` survived 60 s aimed by its line)."""
    from fsdp_verify.engine import aim, hunts
    path, module = "fsdp_verify/reference/rewrite.py", "fsdp_verify.reference.rewrite"
    source = Path(path).read_text()
    lines = source.splitlines()
    helper = next(i for i, text in enumerate(lines, 1) if 'if key == "device"' in text)
    constant = next(i for i, text in enumerate(lines, 1) if text.startswith("_PROBE_SIZE ="))
    assert hunts.named_at(source, helper) == ("_on_meta",) and hunts.named_at(source, constant) == ("_PROBE_SIZE",)
    # each planted bug's own hunt, its variant kept: the map measures the reason (``aim.measured``)
    assert hunts.hunts_for(module, source, helper) == ("rule:cast_beside_opaque_op/cast_copied_to_device:tiny",
                                                       "rule:scaled_cast_forms/gain_drawn_without_device:tiny",
                                                       "rule:scaled_cast_forms/gain_by_standard_deviation:tiny")
    assert hunts.hunts_for(module, source, constant) == ("rule:per_row_gains/gain_squeezed_per_channel:tiny",)
    assert aim.measured("rule:per_row_gains/gain_squeezed_per_channel:tiny") == "rule:per_row_gains:tiny"
    assert aim.measured("skip:unsupported_wait_users/wait_in_legacy_namespace+spec:tiny") == \
        "rule:unsupported_wait_users+spec:tiny"
    assert aim.measured("rule:every_member_cast@full_precision:tiny") == "rule:every_member_cast:tiny"
    assert aim.measured("uneven:tiny") == "uneven:tiny"
    planner = Path("fsdp_verify/reference/planner.py").read_text()
    method = next(i for i, text in enumerate(planner.splitlines(), 1) if "def size_bytes" in text) + 1
    assert "rule:capacity:tiny" in hunts.hunts_for("fsdp_verify.reference.planner", planner, method)  # by qualname
    assert hunts.named_at("x = 1\nfor i in range(2):\n    pass\n", 3) == ()  # neither a definition nor a constant
    key = aim._key(path)
    shapes = {"rule:cast_beside_opaque_op:tiny": {helper: 5}, "rule:cast_scaled_twice:tiny": {helper: 20},
              "rule:scaled_cast_forms:tiny": {helper: 2}, "rule:per_row_gains:tiny": {}}
    reach = aim.Reach(examples={"cases:default": 40, **{shape: 20 for shape in shapes}},
                      hits={"cases:default": {key: {}}, **{shape: {key: hit} for shape, hit in shapes.items()}},
                      statements={key: sorted({helper, constant})})
    assert aim.aim(reach, path, helper, ["cases:default"]).phase == "rule:cast_scaled_twice:tiny"  # by line
    found = aim.aim(reach, path, helper, ["cases:default"], hunts=hunts.hunts_for(module, source, helper))
    assert (found.phase, found.basis, found.phase_rate) == ("rule:cast_beside_opaque_op/cast_copied_to_device:tiny",
                                                            aim.Basis.CATALOGUE, 0.25)
    assert aim.aim(reach, path, constant, ["cases:default"]).phase is None  # no phase runs an import-time line
    found = aim.aim(reach, path, constant, ["cases:default"], hunts=hunts.hunts_for(module, source, constant))
    assert (found.phase, found.basis) == ("rule:per_row_gains/gain_squeezed_per_channel:tiny", aim.Basis.CATALOGUE)
    assert aim.aim(reach, path, helper, ["cases:default"], hunts=("rule:not_measured:tiny",)).basis is aim.Basis.LINE
    mutant = mutate.Mutant(path, module, "core/ReplaceComparisonOperator_Eq_Is", 3, helper)
    aimed = mutate._aimed(reach, mutant, mutate.Settings(phases=(mutate.Phase("cases", "default"),)))
    assert aimed.settings.phases[0] == mutate.Phase("rule:cast_beside_opaque_op/cast_copied_to_device", "tiny")
    other = mutate._aimed(reach, mutant, mutate.Settings(target="mutant:avg_twice",
                                                         phases=(mutate.Phase("cases", "default"),)))
    assert other.found.basis is aim.Basis.LINE  # the catalogue's bugs are the reference's: others aim by line


def test_a_survivor_no_probe_saw_change_gets_its_planted_bug_s_hunt_whatever_its_line_s_rate() -> None:
    """``_fuse_ag`` writes the graph its caller holds, so no probe watches it; its view loop runs in a
    fifth of the mix's examples, too often for an aim by line, and a mutant that never moves a view
    survived 60 s. In round two the hunt of the planted bug that replaces ``_fuse_ag`` comes first; so
    it does for a probed survivor whose probes never saw a result change (the packet namespace
    mutants of ``_evaluable``: the map's forty examples of the opaque-op shape missed the packet), and
    for one whose result the mix changes often to no effect (``_anchor`` one node late)."""
    from fsdp_verify.engine import aim, hunts
    path, module = "fsdp_verify/reference/rewrite.py", "fsdp_verify.reference.rewrite"
    source = Path(path).read_text()
    loop = next(i for i, text in enumerate(source.splitlines(), 1)
                if text.strip().startswith("for view in sorted(set(moved)"))
    assert hunts.named_at(source, loop) == ("_fuse_ag",)
    found_hunts = hunts.hunts_for(module, source, loop)
    assert "rule:view_moved_past_source:tiny" in found_hunts
    key = aim._key(path)
    reach = aim.Reach(examples={"cases:default": 40, "rule:view_moved_past_source:tiny": 20},
                      hits={"cases:default": {key: {loop: 9}}, "rule:view_moved_past_source:tiny": {key: {loop: 20}}},
                      statements={key: [loop]})
    ident = f"{path}:{loop}:core/ZeroIterationForLoop#3"
    assert aim.aim(reach, path, loop, ["cases:default"], ident, found_hunts).phase is None  # round one: 22% runs it
    changed = replace(reach, probed={ident: ""}, infected={"rule:view_moved_past_source:tiny": {ident: {0: 3}},
                                                           "cases:default": {ident: {0: 8}}})
    # the mix changes its result in a fifth of its examples, and it survived them: they tell nothing
    found = aim.aim(changed, path, loop, ["cases:default"], ident, found_hunts)
    assert (found.phase, found.basis, found.default_infected) == ("rule:view_moved_past_source:tiny",
                                                                  aim.Basis.HARMLESS, 0.2)
    assert set(found.more) == set(found_hunts) - {found.phase}  # every hunt of its function, only those
    assert aim.aim(changed, path, loop, ["cases:default"], ident).phase is None  # no planted bug: nothing to add
    unchanged = replace(reach, probed={ident: ""})  # probed, and no example changed what it returns
    assert aim.aim(unchanged, path, loop, ["cases:default"], ident, found_hunts).basis is aim.Basis.UNSEEN
    unwatched = replace(reach, probed={ident: "writes what its caller sees (calls node.meta.update, in _new)"})
    found = aim.aim(unwatched, path, loop, ["cases:default"], ident, found_hunts)
    assert (found.phase, found.basis) == ("rule:view_moved_past_source:tiny", aim.Basis.UNSEEN)


def test_the_reach_map_aims_by_line_and_probes_what_a_mutant_changes() -> None:
    """One measurement on the reference's rewriter. By line: the default phases' six examples never
    run ``_holds`` (a bucket whose members move several dtypes; the cast shapes make one), so a
    mutant there gets the phase of the shape that runs it most. By probe: ``is convert`` to
    ``is not`` in the dtype walk runs in a third of the mix's examples, but what ``moved_dtype``
    returns changes only beside a cast form with a dtype keyword or an op the walk cannot follow,
    so the probe aims it at such a shape (it survived 60 s before)."""
    from fsdp_verify.engine import aim, probes
    path = "fsdp_verify/reference/rewrite.py"
    lines = Path(path).read_text().splitlines()
    call = next(i for i, text in enumerate(lines, 1) if "if narrow == wide:" in text)
    [mutant] = [m for m in mutate.enumerate_mutants([path], "Is_IsNot$")
                if "is torch.ops.prims.convert_element_type.default:" in lines[m.line - 1]]
    source, mutated = mutate.mutated_source(mutant)
    probe = probes.probe_for(mutant.ident, mutant.module, mutant.line, source, mutated)
    assert [level.qualname for level in probe.levels][-1] == "moved_dtype"
    shapes = ["rule:cast_beside_opaque_op:tiny", "rule:scaled_cast_forms:tiny"]
    reach = aim.measure([path], "reference", [("hazards", "tiny")], seed=0, workers=2, default_examples=6,
                        shape_examples=20, shapes=shapes, probed=[probe])
    assert not reach.error and reach.probed == {mutant.ident: ""}, reach.error or reach.probed
    assert reach.examples == {"hazards:tiny": 6, **{shape: 20 for shape in shapes}}
    found = aim.aim(reach, path, call, ["hazards:tiny"])
    assert found.default_rate == 0 and found.basis is aim.Basis.LINE and found.phase in shapes, found
    assert found.phase_rate == max(reach.rate(shape, path, call) for shape in shapes) > 0
    found = aim.aim(reach, path, mutant.line, ["hazards:tiny"], mutant.ident)
    assert found.default_rate >= aim.AIM_BELOW and found.default_infected == 0, found  # by line: not aimed
    assert (found.basis, found.level) == (aim.Basis.RESULT, "moved_dtype") and found.phase in shapes, found
    assert found.more == ()  # no planted bug's hunt given: the result's shape, then the defaults
    own = ("rule:cast_beside_opaque_op/cast_of_unfollowable_value:tiny",
           "rule:scaled_cast_forms/gain_summed_with_dtype:tiny")
    hunted = aim.aim(reach, path, mutant.line, ["hazards:tiny"], mutant.ident, own)
    # the result's shape first, then the planted bugs' own hunts (the map measured their reasons)
    assert hunted.phase == found.phase and hunted.basis is aim.Basis.RESULT and set(hunted.more) == set(own)


def test_children_running_at_once_never_share_a_report_file(monkeypatch) -> None:
    """Each mutant's child writes its own report: with two at a time, a shared file would hand one
    mutant the other's verdict."""
    import os
    import time

    def child(mutant, source, settings, out, log, round_=1):
        late = mutant.occurrence % 2 == 0  # writes first and exits last: a sharer would overwrite it
        time.sleep(0 if late else 0.1)
        out.write_text(json.dumps({"examples": 100 + mutant.occurrence, "checkers": [], "harness_errors": 0,
                                   "excused": 0, "loaded": True}))
        time.sleep(0.3 if late else 0)
        os._exit(0)
    monkeypatch.setattr(mutate, "_child", child)
    mutants = [mutate.Mutant(str(HELPER), "helpers.mutable_target", "core/ReplaceFalseWithTrue", 0, 1)]
    mutants = [mutate.Mutant(m.path, m.module, m.operator, i, m.line) for m in mutants for i in range(4)]
    sources = {m.ident: ("x = 1\n", "x = 2\n") for m in mutants}
    done: dict = {}
    settings = mutate.Settings(workers=2, seconds=5)
    assert not mutate._judge([(m, mutate.Aimed(settings)) for m in mutants], settings, [], None, sources, done)
    assert {ident: r.examples for ident, r in done.items()} == {m.ident: 100 + m.occurrence for m in mutants}


def test_a_child_that_raises_never_returns_into_the_parent(monkeypatch) -> None:
    """A forked child that raises (a harness bug, a signature out of step) exits there: returning, it
    would run the rest of the parent's work, a second pytest session included."""
    def child(*args, **kwargs):
        raise RuntimeError("the child's own failure")
    monkeypatch.setattr(mutate, "_child", child)
    mutant = mutate.Mutant(str(HELPER), "helpers.mutable_target", "core/ReplaceFalseWithTrue", 0, 1)
    done: dict = {}
    settings = mutate.Settings(workers=1, seconds=5)
    assert not mutate._judge([(mutant, mutate.Aimed(settings))], settings, [], None,
                             {mutant.ident: ("x = 1\n", "x = 2\n")}, done)
    assert done[mutant.ident].outcome is mutate.Outcome.HARNESS_ERROR, done


def test_the_map_measures_a_phase_that_draws_the_spec_settings_and_the_cli_takes_it():
    """A line run only under an [I] setting other than its default is run by that phase alone."""
    from fsdp_verify.commands.mutate import _phase
    from fsdp_verify.engine import aim
    from fsdp_verify.model.names import StrategyName, strategy_name
    assert aim.phase_name("hazards+spec", aim.SHAPE_SIZE) in aim.shape_phases()
    assert strategy_name("hazards+spec") == StrategyName("hazards", True)
    assert strategy_name("rule:capacity") == StrategyName("rule:capacity", False, "rule", "capacity")
    assert _phase("hazards+spec:tiny") == mutate.Phase("hazards+spec", "tiny")
    assert _phase("skip:unsupported_wait_users/wait_in_legacy_namespace+spec:tiny").strategy == \
        "skip:unsupported_wait_users/wait_in_legacy_namespace+spec"
    assert _phase("rule:every_member_cast@full_precision").size == "default"
    with pytest.raises(Exception):
        _phase("rule:every_member_cast@no_such_focus")
    with pytest.raises(Exception):
        _phase("rule:every_member_cast/no_such_variant")
    with pytest.raises(Exception):
        _phase("nonsense+spec")


def test_a_survivor_no_probe_saw_change_runs_every_hunt_of_its_function() -> None:
    """Four planted bugs replace the dtype walk's ``_walk``, each with its hunt. The mutant that reads
    any ``dtype`` keyword as a cast tells only on a gain summed with ``dtype=float32`` (the scaled-cast
    shape), but its line runs most in the opaque-op shape: aimed by that one hunt it survived both
    rounds. With no probe's word, round two runs every hunt and nothing else."""
    from fsdp_verify.engine import aim, hunts
    path, module = "fsdp_verify/reference/rewrite.py", "fsdp_verify.reference.rewrite"
    source = Path(path).read_text()
    line = next(i for i, text in enumerate(source.splitlines(), 1)
                if text.strip().startswith("if node.target is aten._to_copy.default and"))
    found_hunts = hunts.hunts_for(module, source, line)
    assert {"rule:scaled_cast_forms/gain_summed_with_dtype:tiny",
            "rule:cast_beside_opaque_op/cast_of_unfollowable_value:tiny"} <= set(found_hunts)
    key = aim._key(path)
    reasons = list(dict.fromkeys(aim.measured(hunt) for hunt in found_hunts))  # the map measures each reason once
    examples = {"cases:default": 40, **{reason: 20 for reason in reasons}}
    hits = {"cases:default": {key: {line: 8}}, **{reason: {key: {line: 5 + i}} for i, reason in enumerate(reasons)}}
    [mutant] = [m for m in mutate.enumerate_mutants([path], "Is_NotEq$") if m.line == line]
    mutant = replace(mutant, module=module)
    ident = mutant.ident  # its occurrence number moves with every ``is`` written above it
    reach = aim.Reach(examples=examples, hits=hits, statements={key: [line]}, probed={ident: ""})
    found = aim.aim(reach, path, line, ["cases:default"], ident, found_hunts)
    assert found.basis is aim.Basis.UNSEEN
    assert {found.phase, *found.more} == set(found_hunts)
    # most runs first: of the reason whose examples run the line most, its planted bugs' hunts in turn
    assert found.phase == next(hunt for hunt in found_hunts if aim.measured(hunt) == reasons[-1])
    settings = mutate.Settings(phases=(mutate.Phase("hazards", "tiny"), mutate.Phase("cases", "default")))
    aimed = mutate._aimed(reach, mutant, settings)
    assert {f"{p.strategy}:{p.size}" for p in aimed.settings.phases} == set(found_hunts)


def test_the_budget_is_each_mutant_s_whole_over_both_rounds(monkeypatch) -> None:
    """A gate of 60 s per mutant must kill within 60 s whichever round kills: round one runs two
    thirds of the budget and a survivor's aimed rerun the rest, so a round-two kill counts round one's
    share, not a whole budget, in its time. Without a map there is no round two: round one has it all."""
    from fsdp_verify.commands.mutate import _fraction
    from fsdp_verify.engine import aim
    assert mutate.Settings(seconds=60).round_budgets() == (40, 20)
    assert mutate.Settings(seconds=60, aim=False).round_budgets() == (60, 0)
    assert mutate.Settings(seconds=60, again=0).round_budgets() == (60, 0)
    assert _fraction("1/4") == 0.25 and _fraction("0") == 0
    for bad in ("1", "3/2", "x", "1/0", "-0.1"):
        with pytest.raises(Exception):
            _fraction(bad)
    mutant = mutate.Mutant(str(HELPER), "helpers.mutable_target", "core/ReplaceFalseWithTrue", 0, 1)
    budgets: list[tuple[int, float]] = []

    def judge(items, settings, equivalences, progress, sources, done, round_=1):
        budgets.append((round_, settings.seconds))
        assert all(aimed.settings.seconds == settings.seconds for _, aimed in items)  # each campaign runs its round's
        killed = round_ == 2
        done[mutant.ident] = mutate.MutantResult(mutant, mutate.Outcome.KILLED if killed else mutate.Outcome.SURVIVED,
                                                 seconds_to_kill=3.0 if killed else None, round=round_)
        return False
    line = aim.Reach(examples={"hazards:tiny": 1, "rule:x:tiny": 1}, hits={}, statements={})
    probed = aim.Reach(examples={"hazards:tiny": 1, "rule:x:tiny": 1}, probed={mutant.ident: "no probe"})
    monkeypatch.setattr(mutate, "warm_up", lambda: None)
    monkeypatch.setattr(mutate, "_judge", judge)
    monkeypatch.setattr(mutate, "_reach", lambda mutants, settings: line)
    monkeypatch.setattr(mutate, "_probed", lambda survivors, settings, sources: probed)
    monkeypatch.setattr(mutate, "_hunts", lambda m: ("rule:x/y:tiny",))
    outcome = mutate.run([mutant], mutate.Settings(seconds=60, phases=(mutate.Phase("hazards", "tiny"),)))
    assert budgets == [(1, 40), (2, 20)]
    assert outcome.results[0].seconds_to_kill == 43.0 and outcome.results[0].round == 2
    budgets.clear()
    monkeypatch.setattr(mutate, "_reach", lambda mutants, settings: aim.Reach(error="boom"))
    mutate.run([mutant], mutate.Settings(seconds=60, phases=(mutate.Phase("hazards", "tiny"),)))
    assert budgets == [(1, 60)]  # no map: no round two, and round one is not cut short for one
