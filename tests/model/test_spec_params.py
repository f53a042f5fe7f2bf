"""The [I] settings are one object read by the reference and the oracles alike: a pinned or drawn
setting changes the decision on both sides (no false alarm), is recorded in the case, and bad
settings are refused with the field named."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from fsdp_verify.corpus import files as corpus
from fsdp_verify.model import spec_params
from fsdp_verify.model.case import case_from_json
from fsdp_verify.checks.planner_oracle import Expectations, _judge
from fsdp_verify.execute.world import build_world
from fsdp_verify.graph import edit
from fsdp_verify.graph.compose import ALL_REDUCE, WAIT
from fsdp_verify.graph.values import NodeRef
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def _foreign_wait_between():
    """A foreign all-reduce launched before two AG members, its wait between them."""
    case = two_block_case()
    a, b = "ag_blocks_0_w0", "ag_blocks_0_w1"
    source = case.graph.node(a).args[0]
    graph = edit.insert_before(case.graph, a, [edit.call("foreign", ALL_REDUCE, source, "sum", "fsdp")])
    graph = edit.insert_before(graph, b, [edit.call("foreign_wait", WAIT, NodeRef("foreign"))])
    return replace(case, graph=graph), b


@pytest.mark.parametrize("barrier", [False, True])
def test_the_foreign_wait_setting_changes_planner_and_oracle_together(barrier):
    case, b = _foreign_wait_between()
    case = replace(case, spec=spec_params.SpecParams(foreign_waits_are_barriers=barrier))
    findings, ctx = check_all(get_target("reference"), case)
    assert [f for f in findings if f.checker in ("planner", "conformance")] == []
    splits = [d for d in ctx.plans[0][0].decisions if d["node"] == b and d["action"] == "split"]
    assert bool(splits) == barrier
    assert not splits or splits[0]["reason"] == "effect_or_storage_release"


def test_a_planner_that_ignores_the_setting_is_caught():
    case, b = _foreign_wait_between()
    case = replace(case, spec=spec_params.SpecParams(foreign_waits_are_barriers=True))
    module = build_world(case)[0]
    with spec_params.use(spec_params.SpecParams()):  # a planner that reads the default whatever is pinned
        deaf = get_target("reference").plan(case, module, 0).to_dict()
    with spec_params.use(case.spec):
        problems = _judge(Expectations(case.plan_args).report(module, case.group_ranks(0)), deaf, "rank 0 round 1")
    assert problems and problems[0].rule == "bucket_members"
    assert "bucket 0 should hold [['blocks.0.w0', 'fsdp_all_gather']]" in problems[0].message


def test_settings_round_trip_through_a_case_and_defaults_are_not_written():
    case = replace(two_block_case(), spec=spec_params.SpecParams(getitem_views=False))
    doc = case.to_json()
    assert doc["spec_params"] == {"getitem_views": False}
    assert case_from_json(json.loads(json.dumps(doc))).spec == case.spec
    assert "spec_params" not in two_block_case().to_json()


def test_bad_settings_in_a_corpus_file_name_the_field(tmp_path):
    entry = corpus.Entry(two_block_case(), "reference", corpus.Verdict(corpus.PASS))
    doc = entry.to_json()
    doc["case"]["spec_params"] = {"getitem_views": "yes"}
    path = tmp_path / "case.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(corpus.CorpusError, match="case.spec_params"):
        corpus.load(path)


@pytest.mark.parametrize("text", ["getitem_views=maybe", "no_such=true", "getitem_views"])
def test_bad_command_line_settings_exit_2(text):
    done = subprocess.run([sys.executable, "-m", "fsdp_verify", "fuzz", "--spec-param", text],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "--spec-param" in done.stderr


def test_a_campaign_pins_and_draws_settings_per_example():
    from hypothesis import HealthCheck, given, settings

    from fsdp_verify.engine import campaign
    config = campaign.Config(target="reference", size="tiny", modules=False, draw_spec=True,
                             spec=(("getitem_views", False),))
    seen = set()

    @settings(max_examples=30, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(campaign._strategy(config))
    def draw(case):
        assert case.spec.getitem_views is False
        seen.add(case.spec)

    draw()
    assert len(seen) > 1
