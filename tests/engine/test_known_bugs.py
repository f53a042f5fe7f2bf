"""A bug an earlier campaign saved is known to the next one: a nightly run against the same corpus
folder names the file it is in, instead of shrinking and saving it again under a new name."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from fsdp_verify.corpus.known import read_known
from fsdp_verify.engine import campaign
from fsdp_verify.report.summary import summary_text, junit_xml

MUTANT = "mutant:avg_twice"


def _config(folder, seed: int, **changes) -> campaign.Config:
    return campaign.Config(target=MUTANT, budget=campaign.Budget(examples=30), seed=seed,
                           corpus_dir=str(folder), size="tiny", modules=False, max_failures=1, shrink=False,
                           profile="ci", **changes)


def test_a_bug_an_earlier_run_saved_is_a_sighting_of_its_file(tmp_path):
    first = campaign.run(_config(tmp_path / "found", seed=1))
    [saved] = first.failures
    provenance = json.loads(open(saved["file"]).read())["provenance"]
    assert provenance["signature"] == saved["signature"] and provenance["failure_class"] == saved["class"]

    again = campaign.run(_config(tmp_path / "found", seed=2))
    assert not again.failures and again.known_sightings == {saved["file"]: again.repeats} and again.repeats >= 1
    assert sorted(p.name for p in (tmp_path / "found").glob("*.json")) == [saved["file"].rsplit("/", 1)[1]]
    summary = summary_text(again, MUTANT)
    assert "known bugs      1 saved in" in summary and f"sightings of 1 ({saved['file'].rsplit('/', 1)[1]} x" in summary
    assert "none saved against this target" in summary_text(first, MUTANT)
    suite = ET.fromstring(junit_xml(again, MUTANT))
    [known] = [case for case in suite.iter("testcase") if case.get("classname") == "fsdp_verify.fuzz.known"]
    assert known.find("skipped").get("message").startswith("[known]") and suite.get("failures") == "0"
    assert again.to_json()["known_from_corpus"]["sightings"] == {saved["file"]: again.repeats}

    # --rediscover: the file is not read, the bug is found as new, and the summary says why
    fresh = campaign.run(_config(tmp_path / "found", seed=2, rediscover=True))
    assert fresh.failures and not fresh.known_sightings
    assert "not read (--rediscover)" in summary_text(fresh, MUTANT)


def test_the_folder_is_read_for_one_target_and_only_what_can_be_read(tmp_path):
    def write(name: str, doc) -> None:
        (tmp_path / name).write_text(doc if isinstance(doc, str) else json.dumps(doc))

    def failure(target: str, signature, kind: str) -> dict:
        return {"target": target, "verdict": {"status": "fail", "findings": []},
                "provenance": {"signature": signature, "failure_class": kind}}
    write("a.json", failure("reference", ["layout", "output_differs", "view"], "contract mismatch"))
    write("b.json", failure("reference", ["layout", "output_differs", "view"], "defect"))
    write("c.json", failure("other", ["planner", "x", ""], "defect"))
    write("d.json", failure("reference", ["planner", "x"], "defect"))  # a signature of two fields: unsigned
    write("e.json", {"target": "reference", "verdict": {"status": "pass"}, "provenance": {}})
    write("f.json", "{not json")
    write("g.json", "[1, 2]")
    known = read_known(tmp_path, "reference")
    [bug] = known.bugs.values()
    assert bug.file.endswith("b.json") and not bug.excused  # the bug outranks the excused sighting
    assert known.unsigned == 1 and known.unreadable == ["f.json", "g.json"]
    assert read_known(tmp_path / "absent", "reference").bugs == {}
