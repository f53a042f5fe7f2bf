"""Rule cases carry the spec's decision in the file and replay checks it against any planner."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fsdp_verify.corpus import files as corpus
from fsdp_verify.corpus.expectations import check_expected
from fsdp_verify.targets import get_target
from helpers import ROOT

RULES = ROOT / "corpus" / "rules"


def _rule(label: str) -> corpus.Entry:
    for path in sorted(RULES.glob("*.json")):
        entry = corpus.load(path)
        if entry.provenance.get("label") == label:
            return entry
    raise AssertionError(f"no rule case {label}")


def test_every_hand_made_rule_case_states_the_spec_decision():
    entries = [corpus.load(p) for p in sorted(RULES.glob("*.json"))]
    rules = [e for e in entries if str(e.provenance.get("label", "")).startswith("rule:")]
    assert len(rules) >= 40 and all(e.expected for e in rules)


def test_the_reference_makes_every_expected_decision():
    target = get_target("reference")
    for path in sorted(RULES.glob("*.json")):
        assert check_expected(target, corpus.load(path)) == [], path


def test_a_planner_that_names_another_rule_fails_the_expectation():
    entry = _rule("rule:skip:phase_mismatch:phase_mismatch")
    findings = check_expected(get_target("mutant:skip_phase_mismatch_misreported"), entry)
    assert findings and findings[0].checker == "expected" and "phase_mismatch (spec 2.5)" in findings[0].message


def test_a_wrong_expectation_in_the_file_is_reported_not_passed():
    entry = _rule("rule:valid")
    wrong = replace(entry, expected={"skips": {next(iter(entry.expected["together"][0])): "no_consumer"}})
    assert check_expected(get_target("reference"), wrong)


@pytest.mark.parametrize("expected, field", [
    ({"skips": {"no_such_node": "no_consumer"}}, "expected.skips.no_such_node"),
    ({"skips": {"x": "not_a_reason"}}, "expected.skips.x"),
    ({"splits": [{"node": "x", "previous_node": "x", "reason": "capacity "}]}, "expected.splits[0]"),
    ({"together": "x"}, "expected.together"),
    ({"verdict": 1}, "expected"),
])
def test_bad_expectations_name_file_and_field(tmp_path, expected, field):
    doc = json.loads(sorted(RULES.glob("*.json"))[0].read_text())
    doc["expected"] = expected
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(corpus.CorpusError) as info:
        corpus.load(path)
    assert field in str(info.value) and str(path) in str(info.value)
