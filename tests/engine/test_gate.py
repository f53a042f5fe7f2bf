"""The planner-change gate as a CI step reads it: exit 0 pass, 1 violation, 2 usage error before
any case runs; a missing default corpus folder is a note; the Markdown verdict for a pull request."""

from __future__ import annotations

import shutil

from fsdp_verify.commands.cli import main
from helpers import ROOT

RULES = sorted(ROOT.joinpath("corpus", "rules").glob("*.json"))


def test_a_passing_candidate_exits_0_and_a_missing_default_corpus_is_a_note(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["gate", "--baseline", "reference", "--candidate", "reference", "--examples", "2", "--in-process",
                 "--markdown", str(tmp_path / "gate.md")])
    out = capsys.readouterr()
    assert code == 0 and "verdict: pass" in out.out
    assert "note: no corpus/ folder here" in out.out and "error" not in out.err
    markdown = (tmp_path / "gate.md").read_text()
    assert markdown.startswith("## fsdp-verify gate: **pass**") and "| candidate violations | 0 |" in markdown


def test_a_violating_candidate_exits_1_with_its_violations_and_plan_differences_in_markdown(tmp_path, monkeypatch,
                                                                                             capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for rule in RULES[:3]:
        shutil.copy(rule, corpus / rule.name)
    monkeypatch.chdir(tmp_path)
    code = main(["gate", "--baseline", "reference", "--candidate", "mutant:members_unsorted", "--examples", "4",
                 "--in-process", "--markdown", "gate.md"])
    assert code == 1 and "verdict: FAIL" in capsys.readouterr().out
    markdown = (tmp_path / "gate.md").read_text()
    assert "## fsdp-verify gate: **FAIL**" in markdown
    assert "### Violations" in markdown and "| planner | `" in markdown  # checker and rule, per case
    assert "### Plan differences" in markdown and "| case | round | buckets |" in markdown


def test_an_unreadable_corpus_file_is_a_usage_error_before_any_case_runs(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "broken.json").write_text("{not json")
    code = main(["gate", "--baseline", "reference", "--candidate", "mutant:avg_twice", "--examples", "30",
                 "--in-process", "--corpus", str(corpus)])
    out = capsys.readouterr()
    assert code == 2 and "broken.json" in out.err
    assert "gate: baseline" not in out.out and "verdict" not in out.out  # no case ran


def test_a_named_corpus_folder_that_does_not_exist_is_a_usage_error(tmp_path, capsys):
    code = main(["gate", "--baseline", "reference", "--candidate", "reference", "--examples", "1", "--in-process",
                 "--corpus", str(tmp_path / "nowhere")])
    assert code == 2 and "nowhere" in capsys.readouterr().err


def test_an_external_candidate_is_gated_on_the_forms_it_receives_and_its_contract_excuses_are_no_violations(
        monkeypatch):
    # A post-grad pass gated against the reference: the cases were run in the harness's own forms
    # (storage frees, op packets) and every contract mismatch was a violation: inductor's own
    # all-gather bucketing "read after free" on traced modules, and failed every gate.
    from fsdp_verify.engine.gate import generated_cases, run_gate
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.strategies.mutations import double_wait
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    candidate = get_target("fx-pass:helpers.torch_passes:correct")
    plain = Case(render(Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((3, 2))),))))
    launch = next(n.name for n in plain.graph.nodes if "all_gather" in str(n.target))
    two_waits = double_wait(plain, launch)  # make_fx emits one wait per launch
    result = run_gate(get_target("reference"), candidate, [], 0, 0, stored=[*generated_cases(6, 0), two_waits])
    # what is left is what inductor's bucketing does by design and its own target is excused: the
    # pre-gather cast folded into its copy-in, a bucket across other collectives; an arbitrary pass
    # gets no such excuse (the harness cannot know that it does either by design)
    assert {(n.checker, n.rule) for n in result.violations} <= {("dependencies", "node_lost"),
                                                                ("ordering", "fused_window")}, \
        [(n.checker, n.message) for n in result.violations]
    assert all("convert_element_type" in n.message or " span collective " in n.message for n in result.violations)
    assert result.excused and {n.kind for n in result.excused} == {"contract mismatch"}
    assert all(n.why for n in result.excused)
    assert result.outside == {"candidate": 1, "baseline": 0} and result.judged == 6
    assert not result.plans_compared and result.differing == []
    text = result.text()
    assert f"not run against the candidate {candidate.name}: 1 cases it cannot be judged on" in text
    assert "plans not compared" in text
    assert "| candidate failures its contract excuses |" in result.markdown()


def test_a_violation_the_baseline_shows_too_is_marked_shared(monkeypatch):
    from fsdp_verify.engine.gate import generated_cases, run_gate
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    cases = generated_cases(4, 0)
    same = run_gate(get_target("mutant:avg_twice"), get_target("mutant:avg_twice"), [], 0, 0, stored=cases)
    assert same.violations and all(n.shared for n in same.violations)
    assert "the baseline shows too" in same.text()
    # one bug met on several cases is one entry (a report of 26 violations held 4 bugs)
    assert len(same.bugs()) < len(same.violations)
    assert f"{len(same.bugs())} distinct bug" in same.text() and "### Violations, one row per bug" in same.markdown()
    assert same.text().count("[layout/") + same.text().count("[numerics/") == len(same.bugs())
    new = run_gate(get_target("reference"), get_target("mutant:avg_twice"), [], 0, 0, stored=cases)
    assert new.violations and not any(n.shared for n in new.violations)


def test_a_gate_whose_candidate_was_judged_on_no_case_does_not_pass():
    from fsdp_verify.engine.gate import run_gate
    from fsdp_verify.model.case import Case
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.strategies.mutations import double_wait
    from fsdp_verify.targets import get_target
    plain = Case(render(Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((3, 2))),))))
    launch = next(n.name for n in plain.graph.nodes if "all_gather" in str(n.target))
    result = run_gate(get_target("reference"), get_target("torch-inductor"), [], 0, 0,
                      stored=[double_wait(plain, launch)])  # one wait per launch is all make_fx emits
    assert result.judged == 0 and not result.passed and result.violations == []
    assert "the candidate was judged on no case" in result.text() and "verdict: FAIL (no case judged)" in result.text()
    assert "**FAIL**: no case judged" in result.markdown()


def test_a_candidate_that_fuses_nothing_where_the_baseline_fuses_does_not_pass(monkeypatch):
    # A change that switches bucketing off passed the gate: every check passes on a rewrite that
    # changed nothing. The gate says what each target fused and fails a candidate that fused none.
    from fsdp_verify.engine.gate import generated_cases, run_gate
    from fsdp_verify.report.html import gate_html
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    cases = generated_cases(2, 0)
    idle = run_gate(get_target("reference"), get_target("fx-pass:helpers.torch_passes:never_matches"), [], 0, 0,
                    stored=cases)
    assert idle.violations == [] and idle.judged and idle.vacuous and not idle.passed
    assert idle.left_alone and "candidate in 0 of" in idle.text()
    assert "verdict: FAIL (the candidate fused no launch where the baseline fused" in idle.text()
    assert "**FAIL**: the candidate fused no launch" in idle.markdown() and "FAIL: the candidate fused" in gate_html(idle)
    fused = run_gate(get_target("reference"), get_target("fx-pass:helpers.torch_passes:correct"), [], 0, 0,
                     stored=cases)
    assert not fused.vacuous and fused.effect["candidate"]["fused"] > 0
