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
