"""The campaign engine: one saved case per distinct bug, shrinking that stays on its bug, and a
budget that holds (while shrinking and with a hanging target too)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from dataclasses import replace

import pytest

from fsdp_verify.engine import campaign
from fsdp_verify.corpus import files as corpus
from fsdp_verify.checks import Finding


def _config(tmp_path, target: str, **changes) -> campaign.Config:
    base = dict(target=target, budget=campaign.Budget(examples=60), corpus_dir=str(tmp_path), size="tiny",
                modules=False, max_failures=5, profile="ci", seed=1)
    return campaign.Config(**{**base, **changes})


def test_two_distinct_bugs_give_two_saved_minimal_cases(tmp_path):
    result = campaign.run(_config(tmp_path, "helpers.targets:TwoBugs"))
    messages = sorted(f["message"] for f in result.failures)
    assert len(result.failures) == 2, messages
    assert any("bug A" in m for m in messages) and any("bug B" in m for m in messages)
    assert len({str(f["signature"]) for f in result.failures}) == 2
    bug_b = next(f for f in result.failures if "bug B" in f["message"])
    # shrunk to (about) the smallest graph with bug B: three parameters on most seeds; Hypothesis's
    # shrinker may stop at two blocks of two, one deletion short (seed 1 does)
    assert 3 <= len(corpus.load(bug_b["file"]).case.graph.params) <= 4
    # Bug B is met while bug A shrinks; its case as met gives way to the shrunk one, not beside it.
    assert sorted(p.name for p in tmp_path.glob("*.json")) == sorted(Path(f["file"]).name for f in result.failures)


def test_rules_separate_signatures_node_names_and_numbers_do_not():
    def finding(node: str, reason: str, count: int) -> Finding:
        return Finding("planner", f"rank 0: {node} should be skipped as {reason}, not bucketed ({count} members)",
                       nodes=(node,), rule=f"missed_skip_{reason}")
    a = campaign.bug_signature([finding("ag_blocks_0_w1", "phase_mismatch", 2)])
    b = campaign.bug_signature([finding("ag_blocks_3_w0", "phase_mismatch", 5)])
    c = campaign.bug_signature([finding("ag_blocks_0_w1", "unknown_device", 2)])
    assert a == b and a != c


def _crash(collateral: list[Finding], dtype: str) -> list[Finding]:
    trace = ('Traceback (most recent call last):\n  File "/x/torch/_inductor/fx_passes/bucketing.py", line 9, in '
             f'merge\nRuntimeError: expected {dtype} but got float32 for buf{len(collateral)}\n')
    crash = Finding("target", f"target torch-inductor raised RuntimeError: expected {dtype} but got float32",
                    details={"traceback": trace}, rule="raised")
    return [*collateral, crash]


def test_one_crash_with_varying_collateral_findings_is_one_bug():
    """The same upstream crash, met with other collateral findings, dtypes and shapes, is one signature."""
    lost = Finding("dependencies", "rank 0: node 'cast' of the original graph is missing", ("cast",), rule="node_lost")
    differ = Finding("numerics", "rank 1: output 0 (mm) differs: values", ("mm",), details={"differs": "values"},
                     rule="output_differs")
    variants = [_crash([], "bfloat16"), _crash([lost], "float16"), _crash([lost, differ], "float8_e4m3fn"),
                _crash([differ], "int32")]
    assert len({campaign.bug_signature(v) for v in variants}) == 1
    other_frame = _crash([], "bfloat16")
    other_frame[-1] = replace(other_frame[-1], details={"traceback": other_frame[-1].details["traceback"]
                                                         .replace("in merge", "in split")})
    assert campaign.bug_signature(other_frame) != campaign.bug_signature(variants[0])


def test_value_differences_are_named_by_rule_and_what_differs_not_by_message():
    def out(differs: str, name: str) -> Finding:
        return Finding("numerics", f"rank 0: output 3 ({name}) differs: {differs} 1.5 vs 2.5", (name,),
                       details={"differs": differs}, rule="output_differs")
    assert campaign.bug_signature([out("values", "mm_1")]) == campaign.bug_signature([out("values", "add_7")])
    assert campaign.bug_signature([out("values", "mm_1")]) != campaign.bug_signature([out("dtype", "mm_1")])


def test_the_budget_holds_while_shrinking(tmp_path):
    start = time.monotonic()
    result = campaign.run(_config(tmp_path, "helpers.targets:SlowFailing", budget=campaign.Budget(seconds=6)))
    spent = time.monotonic() - start
    assert spent < 6 + 3, spent  # the budget plus one (0.4 s) example plus writing the case
    assert len(result.failures) == 1 and result.shrink_steps >= 0


def test_the_budget_holds_with_a_hanging_target_under_a_deadline(tmp_path):
    start = time.monotonic()
    result = campaign.run(_config(tmp_path, "helpers.targets:Hanging", budget=campaign.Budget(seconds=5),
                                  deadline=600))
    spent = time.monotonic() - start
    assert spent < 5 + 3, spent
    assert result.failures == []  # the example cut by the budget gives no verdict


def test_a_failure_that_does_not_reproduce_is_kept_and_reported(tmp_path):
    # unshrunk: shrinking a target that fails at random wanders (1.5 to 29 s in the suite); the final
    # replay, which may or may not fail again, is what this test is about, and it runs either way
    result = campaign.run(_config(tmp_path, "helpers.targets:Flaky", budget=campaign.Budget(examples=20), shrink=False))
    assert result.failures, "a failure seen once must be saved"
    assert all("sometimes" in f["message"] for f in result.failures)


def test_parallel_progress_sums_the_workers(tmp_path):
    heard = []
    result = campaign.run_parallel(_config(tmp_path, "reference", budget=campaign.Budget(examples=3)), 2,
                                   progress=lambda examples, failures, steps: heard.append((examples, failures)))
    assert heard[-1] == (result.examples, 0) and result.examples >= 6  # each worker ran its 3 examples
    assert [n for n, _ in heard] == sorted(n for n, _ in heard)


def test_progress_counts_shrink_steps_so_a_long_shrink_never_looks_stalled(tmp_path):
    heard = []
    result = campaign.run(_config(tmp_path, "helpers.targets:TwoBugs", budget=campaign.Budget(examples=5),
                                  max_failures=1),
                          progress=lambda examples, failures, steps: heard.append((examples, steps)))
    assert result.shrink_steps > 0
    assert heard[-1][1] == result.shrink_steps
    steps = [s for _, s in heard]
    assert steps == sorted(steps) and len(set(steps)) > 2  # heard while shrinking, not only at the end


def test_a_contract_mismatch_is_saved_as_found_and_never_shrunk_or_counted_as_a_bug(tmp_path):
    from fsdp_verify.report.summary import junit_xml
    # --raw-forms: the campaign hands the target the forms it never receives (else they are filtered out)
    result = campaign.run(_config(tmp_path, "helpers.targets:NeverSeesThese", budget=campaign.Budget(examples=10),
                                  raw_forms=True))
    assert len(result.failures) == 1 and result.failures[0]["class"] == "contract mismatch"
    assert result.shrink_steps == 0 and result.repeats == 9
    assert 'failures="0"' in junit_xml(result, "never-sees-these")


def test_a_failure_first_seen_on_an_excused_graph_is_still_a_bug_on_a_graph_the_target_accepts(tmp_path):
    # The same root cause (one signature) on a small graph is a contract mismatch; it must not hide
    # the larger graphs, where it is the target's bug: the first would otherwise mark the second known.
    result = campaign.run(_config(tmp_path, "helpers.targets:ExcusedOnSmallGraphs",
                                  budget=campaign.Budget(examples=30), shrink=False, raw_forms=True))
    by_class = {f["class"]: f for f in result.failures}
    assert set(by_class) == {"contract mismatch", "defect"}, [f["class"] for f in result.failures]
    assert by_class["defect"]["signature"] == by_class["contract mismatch"]["signature"]
    assert by_class["contract mismatch"]["nodes"] <= 40 < by_class["defect"]["nodes"]
    assert len(result.failures) == 2  # each once: later sightings of either are repeats


def test_a_shrink_step_never_turns_a_bug_into_an_excused_case():
    # Shrinking moves to smaller cases; one the target is excused from would save a bug as a mismatch.
    from fsdp_verify.checks.findings import ERROR
    from helpers.cases import two_block_case
    from helpers.targets import ExcusedOnSmallGraphs
    target = ExcusedOnSmallGraphs()
    runner = campaign.Runner(config=_config("unused", "reference"), target=target, result=campaign.Result())
    errors = [Finding("target", "fails", rule="raised", severity=ERROR)]
    small = two_block_case()
    target.limit = len(small.graph.nodes)
    large = replace(small, graph=replace(small.graph, nodes=small.graph.nodes * 2))
    runner.shrinking = campaign.Shrinking(campaign.bug_signature(errors), large, errors, None)
    assert runner.triage(small, errors) is campaign.Verdict.ASIDE  # smaller, but excused: no step
    assert runner.triage(large, errors) is campaign.Verdict.STEP


def test_the_report_says_what_the_ordering_and_numerics_verdicts_rested_on(tmp_path):
    from fsdp_verify.report.summary import junit_xml, summary_text
    result = campaign.run(_config(tmp_path, "reference", budget=campaign.Budget(examples=8)))
    proofs = result.to_json()["proofs"]
    assert proofs["ordering_segments_lockstep"] + proofs["ordering_segments_z3"] > 0
    assert 0 < proofs["numerics_shared_runs"] + proofs["numerics_plain_runs"] <= result.examples
    assert proofs["planner_rounds_watched"] > 0 and proofs["planner_rounds_replayed"] == 0  # all seen in the run
    assert "proved by       ordering:" in summary_text(result, "reference")
    assert 'name="ordering_segments_z3"' in junit_xml(result, "reference")


def test_a_corpus_folder_that_cannot_be_written_loses_no_failure(tmp_path):
    """The corpus folder stops being writable mid-run (here a file stands where it should be; as
    root, permissions would not stop the write; the command line refuses such a folder up front):
    the failure's case goes to the JSON summary and the printout in full, and the summary counts a
    harness error, so the exit code is 1."""
    from fsdp_verify.report.summary import summary_text
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    result = campaign.run(_config(blocker / "found", "mutant:avg_twice", max_failures=1, shrink=False))
    assert result.failures and result.harness_errors == len(result.failures)
    failure = result.failures[0]
    assert failure["file"] is None and any("cannot be written" in note for note in result.notes)
    saved = tmp_path / "kept.json"
    saved.write_text(json.dumps(failure["case"]))
    assert corpus.load(saved).case.graph.nodes  # the case kept in the summary is whole
    text = summary_text(result, "mutant:avg_twice")
    assert "(NOT SAVED)" in text and '"schema"' in text
    assert json.loads(json.dumps(result.to_json()))["failures"][0]["case"] == failure["case"]
    from fsdp_verify.report.html import campaign_html
    from fsdp_verify.report.summary import junit_xml
    assert "NOT SAVED" in junit_xml(result, "mutant:avg_twice") and "(not saved)" in campaign_html(result, "t")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 64 KiB tmpfs mounted for the test (root only), unmounted after it."""
    import subprocess
    point = tmp_path / "mnt"
    point.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tiny tmpfs needs root and mount(8) (.ci/run runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(point)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"this machine refuses a tmpfs mount: {done.stderr.strip() or done.returncode}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.mark.parametrize("fault", ["full", "read-only"])
def test_a_full_or_read_only_corpus_disk_loses_no_failure_and_leaves_no_half_file(tiny_tmpfs, fault):
    import subprocess
    found = tiny_tmpfs / "found"
    found.mkdir()
    if fault == "full":
        with contextlib.suppress(OSError), open(tiny_tmpfs / "filler", "wb") as filler:  # every block it has
            while True:
                filler.write(b"x" * 4096)
                filler.flush()
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(tiny_tmpfs)], check=True, capture_output=True)
    result = campaign.run(_config(found, "mutant:avg_twice", max_failures=1, shrink=False))
    assert result.failures and result.harness_errors == len(result.failures)
    failure = result.failures[0]
    assert failure["file"] is None and "schema" in failure["case"]  # the case, whole, in the summary
    assert any(("No space left" if fault == "full" else "Read-only") in note for note in result.notes), result.notes
    assert list(found.iterdir()) == []  # no half-written .tmp- file holds the space


def test_a_worker_killed_mid_campaign_is_named_its_failures_kept_and_it_is_restarted(tmp_path, monkeypatch):
    """One worker is SIGKILLed (as the OOM killer would) after a failure was saved: the parent says
    which worker died and when, keeps the failures it had streamed, restarts it, and counts a
    harness error (exit 1)."""
    corpus_dir = tmp_path / "found"
    monkeypatch.setenv("FSDP_TEST_DIE_MARKER", str(tmp_path / "died"))
    monkeypatch.setenv("FSDP_TEST_DIE_CORPUS", str(corpus_dir))
    # unshrunk, so the failure is saved at once and the death comes however slow the machine is
    config = _config(corpus_dir, "helpers.targets:dies_once", budget=campaign.Budget(examples=40), max_failures=3,
                     deadline=None, shrink=False)
    result = campaign.run_parallel(config, 2)
    assert (tmp_path / "died").exists()
    deaths = [note for note in result.notes if "died" in note]
    assert len(deaths) == 1 and "SIGKILL" in deaths[0] and "restarted as worker 2" in deaths[0], result.notes
    assert result.harness_errors == 1 and result.failures
    assert all(Path(f["file"]).exists() for f in result.failures if f["file"])


def test_a_worker_cut_off_mid_message_garbles_only_its_own_pipe():
    """A worker SIGKILLed while it sends: its pipe holds half a message and then closes. The parent
    reads that as the worker's end, without waiting, and the other worker's messages still arrive
    (one shared queue's write lock, held by the dead worker, once stalled every other writer)."""
    import multiprocessing
    import struct
    inbox = campaign._Inbox(multiprocessing.get_context("spawn"))
    cut, whole = inbox.open(0), inbox.open(1)
    os.write(cut.fileno(), struct.pack("!i", 1000) + b"\x80\x05half")  # a header for 1000 bytes, 7 sent
    cut.close()
    whole.send(("tick", 1, (3, 0, 0)))
    began = time.monotonic()
    messages = inbox.receive(1.0, []) + inbox.drain(0)
    assert messages == [("tick", 1, (3, 0, 0))] and time.monotonic() - began < 1.0
    whole.send(("done", 1, None))
    assert inbox.receive(1.0, []) == [("done", 1, None)]
    inbox.close()


def _raised(trace: str) -> list[Finding]:
    return [Finding("target", "target raised", details={"traceback": trace}, rule="raised")]


def test_a_message_over_several_lines_is_not_taken_for_the_exception_type():
    """F9 and F10 raise messages that end in advice or a graph listing: the type is the first line at
    column 0 after the frames, so the same crash with another listing is one signature."""
    frames = ('Traceback (most recent call last):\n  File "/x/torch/_inductor/fx_passes/overlap.py", line 9, in '
              'check\n    raise RuntimeError(msg)\n')
    one = _raised(frames + "RuntimeError: detected 1 cyclic extra dep(s)\nTo unblock, set autofix = True\n")
    two = _raised(frames + "RuntimeError: detected 3 cyclic extra dep(s) among 7 nodes\n    return (relu, x)\n")
    assert campaign.bug_signature(one) == campaign.bug_signature(two)
    assert campaign.bug_signature(one).cause == "RuntimeError at overlap.py:check"


def test_the_origin_is_the_target_s_frame_not_the_op_dispatcher_s():
    def crash(caller: str) -> list[Finding]:
        return _raised('Traceback (most recent call last):\n'
                       f'  File "/x/torch/_inductor/fx_passes/bucketing.py", line 5, in {caller}\n    op(x)\n'
                       '  File "/x/torch/fx/experimental/proxy_tensor.py", line 9, in __torch_dispatch__\n    f()\n'
                       '  File "/x/torch/utils/_stats.py", line 2, in wrapper\n    g()\n'
                       '  File "/x/torch/_subclasses/fake_tensor.py", line 3, in dispatch\n    h()\n'
                       '  File "/x/torch/_ops.py", line 841, in __call__\n    return self._op(*args)\n'
                       'RuntimeError: shape is invalid for input of size 6\n')
    assert campaign.bug_signature(crash("merge")).cause == "RuntimeError at bucketing.py:merge"
    assert campaign.bug_signature(crash("merge")) != campaign.bug_signature(crash("split"))


def test_a_chained_exception_is_named_by_its_last_traceback():
    trace = ('Traceback (most recent call last):\n  File "/x/a.py", line 1, in first\n    f()\nKeyError: 3\n\n'
             'During handling of the above exception, another exception occurred:\n\n'
             'Traceback (most recent call last):\n  File "/x/b.py", line 2, in second\n    g()\nValueError: bad\n')
    assert campaign.bug_signature(_raised(trace)).cause == "ValueError at b.py:second"


def test_frames_quoted_by_a_message_and_generated_forwards_name_nothing():
    trace = ('Traceback (most recent call last):\n'
             '  File "C:\\\\x\\\\torch\\\\_inductor\\\\pass.py", line 5, in run\n    gm(x)\n'
             '  File "<eval_with_key>.41", line 7, in forward\n    mm = torch.ops.aten.mm(a, b)\n'
             'RuntimeError: mat1 and mat2 shapes cannot be multiplied\n\nfrom user code:\n'
             '  File "/y/model.py", line 3, in f\n    return a @ b\n\nSet TORCHDYNAMO_VERBOSE=1 for more\n')
    cause = campaign.bug_signature(_raised(trace)).cause
    assert cause == "RuntimeError at pass.py:run"
    assert campaign.bug_signature(_raised(trace.replace(".41", ".97"))).cause == cause


def test_a_rewrite_that_cannot_run_is_one_bug_whatever_rule_broke_on_the_way():
    # Round two's re-run met F2 (a member view that cannot run) twice: alone, and beside a span
    # finding that the ordering checker, earlier in checker order, reported first.
    fails = [Finding("layout", "rewritten graph fails in the simulated world: RuntimeError: view size",
                     details={"kind": "crash", "error_type": "RuntimeError"}, rule="run_failed"),
             Finding("numerics", "rewritten graph fails in the simulated world: RuntimeError: view size",
                     details={"kind": "crash", "error_type": "RuntimeError"}, rule="run_failed")]
    span = Finding("ordering", "rank 0: fused launch has no legal insertion point", details={"rule": "fused_window"},
                   rule="fused_window")
    assert campaign.bug_signature([span, *fails]) == campaign.bug_signature(fails)
    assert campaign.bug_signature([span]) != campaign.bug_signature(fails)
    other = [Finding("layout", "rewritten graph fails in the simulated world: KeyError: 'x'",
                     details={"kind": "crash", "error_type": "KeyError"}, rule="run_failed")]
    assert campaign.bug_signature(other) != campaign.bug_signature(fails)  # another crash, another bug


def test_a_desync_names_the_bug_before_the_ordering_rule_broken_on_the_way():
    # F13 (the overlap scheduler orders a short rank's gathers otherwise) was two findings in one
    # campaign: a group-order finding first in one case, a span finding in another, each with the
    # same desync behind it. A desync is a rewrite that cannot run, named by the kinds of collective
    # the ranks part on, whatever their shapes or dtypes.
    from fsdp_verify.checks.numerics import run_failure
    from fsdp_verify.execute.simulated import CollectiveRecord, Desync

    def gather(shape, dtype="float32", op="all_gather_into_tensor"):
        return CollectiveRecord(op, "fsdp", shape, dtype, None, "ag")

    def desync(*records):
        return Desync("fsdp", 0, dict(enumerate(records)))
    swapped = [run_failure(name, desync(gather((2,)), gather((2, 6)))) for name in ("layout", "numerics")]
    other_dtype = [run_failure("layout", desync(gather((4,)), gather((4,), "bfloat16")))]
    order = Finding("ordering", "issues b before a", rule="group_order")
    span = Finding("ordering", "no legal insertion point", rule="fused_window")
    assert campaign.bug_signature([order, *swapped]) == campaign.bug_signature([span, *swapped]) \
        == campaign.bug_signature([span, *other_dtype])
    scatter = [run_failure("layout", desync(gather((4,)), gather((4,), op="reduce_scatter_tensor")))]
    missing = [run_failure("layout", desync(gather((4,)), None))]
    assert len({campaign.bug_signature(f) for f in (swapped, scatter, missing)}) == 3


def test_a_finding_the_contract_excuses_alone_does_not_name_a_bug_found_beside_it():
    # A post-grad pass never receives a joint forward+backward graph, so a fused window across the
    # phase boundary alone is a contract mismatch; a pass's layout or numerics bug on such a graph
    # is its bug. Named by the excused finding (ordering, first in checker order), every bug met on
    # joint graphs was one signature: the second a repeat, never saved (a user's naive all-gather
    # bucketer showed it: its cast bug was saved as "ordering fused_window").
    from fsdp_verify.engine.triage import classify
    from fsdp_verify.model.case import Case
    from fsdp_verify.model.classes import FailureClass
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    target = get_target("fx-pass:helpers.torch_passes:correct")
    case = target.normalise(Case(render(Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((3, 2))),)))))
    span = Finding("ordering", "rank 0: fused launch has no legal insertion point: its members span other-phase "
                               "node add_2", rule="fused_window", details={"blocker": "other-phase node"})
    assert FailureClass(classify(target, case, ("ordering",), [span])[0]) is FailureClass.MISMATCH  # a joint graph
    misplaced = Finding("layout", "rank 0: consumer 'mul_1' received value 0.5", rule="element_misplaced",
                        details={"differs": "values"})
    crashed = Finding("layout", "rewritten graph fails in the simulated world: KeyError: 'x'",
                      details={"kind": "crash", "error_type": "KeyError"}, rule="run_failed")
    with_span = [campaign.bug_signature([span, bug], target, case) for bug in (misplaced, crashed)]
    assert with_span == [campaign.bug_signature([bug], target, case) for bug in (misplaced, crashed)]
    assert with_span[0] != with_span[1]
    assert campaign.bug_signature([span], target, case).rule == "fused_window"  # excused alone: still its name
    record = campaign._described(corpus.Entry(case, target.name, corpus.Verdict.of([span, misplaced])),
                                 [span, misplaced], "defect candidate", [], (span,))
    assert (record["rule"], record["message"]) == ("element_misplaced", misplaced.message)
    assert record["collateral"] == [{"checker": "ordering", "rule": "fused_window"}]
    # without the target, as before: the first error in checker order
    assert campaign.bug_signature([span, misplaced]).rule == "fused_window"


def test_a_target_without_a_planner_is_never_drawn_a_launch_no_world_runs(monkeypatch):
    # About one default case in eleven holds a launch whose size argument is not its group's size.
    # A target without a reference-format planner cannot be judged there: a failure is invalid
    # input, and a pass was counted as a pass of a case nobody could run.
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from fsdp_verify.engine.triage import invalid_collectives
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))

    def drawn(target_name: str) -> list:
        found = []

        @settings(max_examples=120, database=None, phases=[Phase.generate], deadline=None,
                  suppress_health_check=list(HealthCheck))
        @seed(1)
        @given(campaign._strategy(campaign.Config(target=target_name, strategy="cases"), get_target(target_name)))
        def collect(case) -> None:
            found.append(bool(invalid_collectives(case)))
        collect()
        return found

    assert any(drawn("reference"))  # a planner must skip them: they stay in its draws
    assert not any(drawn("fx-pass:helpers.torch_passes:correct"))


def test_a_joint_graph_excuses_only_the_ordering_findings_about_its_phase_boundary(monkeypatch):
    # "inductor compiles the two as separate graphs" excused every ordering-only failure on a joint
    # graph: a user's reduce-scatter bucketer whose window spans another collective read as a
    # contract mismatch about phases, and so would ranks whose collective streams differ.
    from fsdp_verify.engine.triage import classify
    from fsdp_verify.model.case import Case
    from fsdp_verify.model.classes import FailureClass
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    for name in ("fx-pass:helpers.torch_passes:correct", "torch-inductor"):
        target = get_target(name)
        case = target.normalise(Case(render(Blueprint(blocks=((ParamDraw((2, 3)), ParamDraw((3, 2))),)))))

        def kind(*findings: Finding) -> FailureClass:
            return FailureClass(classify(target, case, ("ordering",), list(findings))[0])
        boundary = Finding("ordering", "span other-phase node add_2", rule="fused_window",
                           details={"blocker": "other-phase node"})
        phase = Finding("ordering", "backward before forward", rule="phase")
        collective = Finding("ordering", "span collective rs_w1", rule="fused_window", details={"blocker": "collective"})
        streams = Finding("ordering", "ranks issue different streams", rule="streams")
        assert kind(boundary) is kind(phase) is kind(boundary, phase) is FailureClass.MISMATCH, name
        assert kind(collective) is kind(streams) is kind(boundary, collective) is FailureClass.CANDIDATE, name


def test_a_rule_hunt_whose_every_case_no_world_runs_is_refused_for_a_target_without_a_planner(monkeypatch):
    from fsdp_verify.targets import get_target
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    target = get_target("fx-pass:helpers.torch_passes:correct")
    with pytest.raises(ValueError, match="cannot be judged on"):
        campaign._strategy(campaign.Config(target=target.name, strategy="rule:group_size_mismatch"), target)
    campaign._strategy(campaign.Config(target="reference", strategy="rule:group_size_mismatch"),
                       get_target("reference"))  # a planner must skip them
