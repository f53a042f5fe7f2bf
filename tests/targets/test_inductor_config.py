"""torch-inductor's configuration space: drawn per example, recorded in the case, used on replay;
graphs normalised to what inductor receives; failures triaged into defect / mismatch / invalid."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings

from fsdp_verify.checks.findings import Finding
from fsdp_verify.engine import campaign
from fsdp_verify.model.case import case_from_json
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.report.html import campaign_html
from fsdp_verify.report.summary import junit_xml, summary_text
from fsdp_verify.report.tally import Result
from fsdp_verify.targets import get_target
from fsdp_verify.targets.inductor import CONFIG_SPACE
from fsdp_verify.engine.triage import CANDIDATE, INVALID_INPUT, MISMATCH, classify
from helpers.cases import two_block_case
from helpers import ROOT


def _options(**changes):
    return tuple(sorted({**{k: v[0] for k, v in CONFIG_SPACE.items()}, **changes}.items()))


def test_the_name_pins_part_of_the_space_and_the_rest_is_open():
    assert set(get_target("torch-inductor").options()) == set(CONFIG_SPACE)
    pinned = get_target("torch-inductor:custom_ops@fsdp")
    assert pinned.config["bucket_all_gathers_bucket_mode"] == "custom_ops"
    assert pinned.config["bucket_all_gathers_fx"] == "only_fsdp"
    assert "bucket_all_gathers_bucket_mode" not in pinned.options()
    with pytest.raises(ValueError, match="unknown options"):
        get_target("torch-inductor").configure({"bucket_all_gathers_fx": "sometimes"})


def test_a_campaign_draws_a_configuration_per_example_on_normalised_graphs():
    target = get_target("torch-inductor")
    config = campaign.Config(target="torch-inductor", size="tiny", modules=False)
    seen = set()

    @settings(max_examples=25, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(campaign._strategy(config, target))
    def draw(case):
        assert dict(case.target_options).keys() == CONFIG_SPACE.keys()
        targets = [n.target for n in case.graph.nodes]
        assert not any(t.startswith("_c10d_functional.") and t.count(".") == 1 for t in targets)
        assert "fsdp_verify.free_tensor_storage" not in targets
        assert target.contract_mismatches(case) == []
        seen.add(case.target_options)

    draw()
    assert len(seen) > 3


def test_replay_uses_the_recorded_configuration():
    case = get_target("torch-inductor").normalise(two_block_case(overload="default"))
    off = replace(case, target_options=_options(bucket_all_gathers_fx="none", bucket_reduce_scatters_fx="none"))
    on = case_from_json(replace(case, target_options=_options()).to_json())  # the options survive JSON
    _, ctx_off = check_all(get_target("torch-inductor"), off)
    _, ctx_on = check_all(get_target("torch-inductor"), on)
    count = [sum("all_gather_into_tensor" in str(n.target) for n in ctx.run.rewritten[0].graph.nodes)
             for ctx in (ctx_off, ctx_on)]
    assert count[0] == 8 and count[1] < 8


def test_an_upstream_crash_on_accepted_input_is_a_defect_candidate():
    case = get_target("torch-inductor").normalise(two_block_case(overload="default"))
    case = replace(case, target_options=_options(bucket_reduce_scatters_bucket_mode="custom_ops_multidtype"))
    findings, _ = check_all(get_target("torch-inductor"), case)
    assert findings[0].checker == "target" and "multidtype" in findings[0].message
    assert classify(get_target("torch-inductor"), case, ("target",))[0] == CANDIDATE


def test_forms_inductor_never_receives_are_contract_mismatches_and_bad_sizes_invalid_input():
    inductor = get_target("torch-inductor")
    kind, why = classify(inductor, two_block_case(), ("numerics",))
    assert kind == MISMATCH and "op packets" in why[0]
    joint = inductor.normalise(two_block_case(overload="default"))
    boundary = Finding("ordering", "span other-phase node", rule="fused_window", details={"blocker": "other-phase node"})
    assert classify(inductor, joint, ("ordering",), [boundary])[0] == MISMATCH
    assert classify(inductor, joint, ("numerics",))[0] == CANDIDATE
    case = two_block_case()
    node = next(n for n in case.graph.nodes if "all_gather" in n.target)
    bad = replace(case, graph=case.graph.with_nodes([replace(n, args=(n.args[0], 3, n.args[2])) if n is node else n
                                                     for n in case.graph.nodes]))
    assert classify(inductor, bad, ("target",))[0] == INVALID_INPUT


def test_only_bugs_fail_the_junit_report_and_the_summary_counts_each_class():
    result = Result(examples=3, seconds=1.0)
    for kind in ("defect candidate", "contract mismatch", "invalid input"):
        result.failures.append({"file": f"{kind}.json", "checkers": ["target"], "message": "m", "nodes": 3,
                                "class": kind, "class_reasons": [f"because of {kind}"]})
    xml = junit_xml(result, "torch-inductor")
    assert 'failures="1"' in xml and 'skipped="2"' in xml and "[contract mismatch]" in xml
    assert "why contract mismatch: because of contract mismatch" in xml
    text = summary_text(result, "t")
    assert "1 bug (1 defect candidate); not bugs: 1 contract mismatch, 1 invalid input" in text
    assert "by checker      target 1; not bugs: target 2" in text
    # what excused each failure that is not a bug is said under it; a candidate's class is its own
    assert "why contract mismatch: because of contract mismatch" in text and "why invalid input" in text
    assert "why defect candidate" not in text
    page = campaign_html(result, "t")
    assert "Why contract mismatch: because of contract mismatch" in page and "Why defect candidate" not in page


def test_a_planner_target_is_judged_on_malformed_collectives_too():
    # The spec tells a planner to skip a collective whose size argument is not its group's size:
    # a reference-format target failing there has a bug, never "invalid input".
    case = two_block_case()
    node = next(n for n in case.graph.nodes if "all_gather" in n.target)
    bad = replace(case, graph=case.graph.with_nodes([replace(n, args=(n.args[0], 3, n.args[2])) if n is node else n
                                                     for n in case.graph.nodes]))
    assert classify(get_target("mutant:avg_twice"), bad, ("numerics",))[0] == "defect"


PASSES = ("bucketing", "fsdp", "overlap_scheduling", "overlap_preserving_bucketer", "overlap_manual_scheduling")
_AO = "aten_distributed_optimizations."


def _options_read(root=None) -> dict[str, set[str]]:
    """Option -> the fx_passes files (of the installed torch, or of ``root``) that read it (every
    option of the ``aten_distributed_optimizations`` family and every ``bucket_*`` option counts as read)."""
    import re
    from pathlib import Path

    import torch._inductor
    import torch._inductor.config as inductor_config
    root = Path(root) if root is not None else Path(torch._inductor.__file__).parent / "fx_passes"
    read: dict[str, set[str]] = {}
    for name in PASSES:
        text = (root / f"{name}.py").read_text()
        found = {m.group(1) for m in re.finditer(r"(?<!self\.)(?<!\w)(?:config|inductor_config)\.([a-z_]+(?:\.[a-z_]+)?)", text)}
        found = {f for f in found if f != "aten_distributed_optimizations"}
        found |= {_AO + m.group(1) for m in re.finditer(r"\bdist_opts\.([a-z_]+)", text)}
        keys = re.search(r"config_keys = \(([^)]*)\)", text)
        found |= {_AO + key for key in re.findall(r'"([a-z_]+)"', keys.group(1))} if keys else set()
        for option in found:
            read.setdefault(option, set()).add(f"{name}.py")
    for option in inductor_config.get_config_copy():
        if option.startswith((_AO, "bucket_")):
            read.setdefault(option, set()).add("post_grad.py")
    return read


def _unlisted(read: dict[str, set[str]]) -> list[str]:
    """The options read that are neither in the space nor excluded with a reason."""
    from fsdp_verify.targets.inductor import EXCLUDED
    return sorted(option for option in read if option not in CONFIG_SPACE and option not in EXCLUDED)


def test_a_torch_upgrade_s_new_option_is_named_by_the_config_read_check(tmp_path):
    # A planted read of an option nobody listed, in a copy of the installed passes: the scan finds
    # it and the check names it (as it would after a torch upgrade added one).
    import shutil
    from pathlib import Path

    import torch._inductor
    for name in PASSES:
        shutil.copy(Path(torch._inductor.__file__).parent / "fx_passes" / f"{name}.py", tmp_path / f"{name}.py")
    planted = tmp_path / "overlap_scheduling.py"
    planted.write_text(planted.read_text() + "\n\ndef _planted(config):\n    return config.aten_distributed_optimizations"
                       ".planted_option or config.bucket_planted_cap\n")
    read = _options_read(tmp_path)
    assert _unlisted(read) == [_AO + "planted_option", "bucket_planted_cap"]
    assert _unlisted(_options_read()) == []


def test_every_option_the_collective_passes_read_is_drawn_or_excluded_with_a_reason():
    import torch._inductor.config as inductor_config
    from fsdp_verify.targets.inductor import EXCLUDED
    read = _options_read()
    # the scan sees the reads it must (so a new read in a torch upgrade is seen the same way)
    assert "overlap_preserving_bucketer.py" in read[_AO + "overlap_scheduling_autofix_cycles"]
    assert "bucketing.py" in read[_AO + "bucket_mode"]
    assert "overlap_scheduling.py" in read[_AO + "max_in_flight_gb"]
    missing = _unlisted(read)
    assert not missing, f"read by torch's collective passes, neither drawn nor excluded with a reason: {missing}"
    assert all(reason.strip() for reason in EXCLUDED.values())
    known = set(inductor_config.get_config_copy())
    from fsdp_verify.targets.post_grad import HARNESS_OPTIONS
    stale = sorted(o for o in [*CONFIG_SPACE, *EXCLUDED] if o not in HARNESS_OPTIONS and o not in known)
    assert not set(HARNESS_OPTIONS) & known  # a harness option never shadows one of inductor's
    assert not stale, f"not an option of this torch's inductor config: {stale}"
    assert not set(CONFIG_SPACE) & set(EXCLUDED)


def test_the_docs_table_lists_every_option_drawn_or_excluded():
    from pathlib import Path

    from fsdp_verify.targets.inductor import EXCLUDED
    text = (ROOT / "docs" / "inductor-config.md").read_text()
    for option in [*CONFIG_SPACE, *EXCLUDED]:
        assert f"| `{option}` |" in text, option


def test_a_joint_graph_excuses_ordering_findings_only():
    # Inductor compiles forward and backward apart, so the phase boundary's ordering rules do not
    # bind it; a lost node or a broken edge is wrong in any graph and is never excused.
    target = get_target("torch-inductor")
    case = target.normalise(two_block_case(overload="default"))
    boundary = Finding("ordering", "span other-phase node", rule="fused_window", details={"blocker": "other-phase node"})
    assert target.contract_mismatches(case, ("ordering",), [boundary])
    assert target.contract_mismatches(case, ("ordering",)) == []  # the findings decide: none named, none excused
    assert target.contract_mismatches(case, ("dependencies",), [boundary]) == []
    assert target.contract_mismatches(case, ("dependencies", "ordering"), [boundary]) == []


@pytest.mark.parametrize("shape", ["7", [2, "x"], None, [-1]])
def test_the_memory_excuse_sizes_only_static_spec_shapes(shape):
    # a hazard's malformed spec (rule 8 skips it) once crashed triage: math.prod("7") is "7"
    from fsdp_verify.graph import edit
    from fsdp_verify.targets.inductor import _collective_bytes
    case = two_block_case()
    launch = next(n for n in case.graph.nodes if "fsdp_bucket_spec" in n.meta)
    spec = {**launch.meta["fsdp_bucket_spec"], "input_shape": shape}
    broken = replace(case, graph=edit.update_node(case.graph, launch.name, meta={"fsdp_bucket_spec": spec}))
    assert 0 < _collective_bytes(broken) < _collective_bytes(case)
