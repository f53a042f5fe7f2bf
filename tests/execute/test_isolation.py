"""The persistent isolation child: one fork serves many cases, and a case that may have broken the
child (a raise, a hang, a death, changed process state) never shares it with a later case."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from fsdp_verify.engine.run_case import check_all, children_started, close_children
from fsdp_verify.execute.isolation import Child, ChildDied, Served
from fsdp_verify.targets import get_target
from helpers.targets import POLLUTED
from helpers.cases import two_block_case

DEADLINE = 60


def _errors(findings):
    return [f.key for f in findings if f.severity == "error"]


def test_one_child_serves_every_case_of_a_correct_target():
    target = get_target("reference")
    for seed in range(4):
        findings, _ = check_all(target, replace(two_block_case(), seed=seed), deadline=DEADLINE)
        assert not _errors(findings)
    assert children_started() == 1


def test_a_case_that_changes_the_process_retires_its_child():
    """Planted: a target that leaves an environment variable set. Served by the same child, the
    second case would raise; the fingerprint retires the child, so it runs in a fresh one."""
    assert POLLUTED not in os.environ
    target = get_target("helpers.targets:Polluting")
    for _ in range(3):
        findings, _ = check_all(target, two_block_case(), deadline=DEADLINE)
        assert not _errors(findings), findings
    assert children_started() == 3


def test_a_case_that_leaves_a_thread_running_retires_its_child():
    target = get_target("helpers.targets:Threading")
    for _ in range(2):
        assert not _errors(check_all(target, two_block_case(), deadline=DEADLINE)[0])
    assert children_started() == 2


def test_a_target_that_raised_does_not_serve_the_next_case():
    target = get_target("helpers.targets:RaisesOnce")
    first, _ = check_all(target, two_block_case(), deadline=DEADLINE)
    assert ("target", "raised") in _errors(first)
    second, _ = check_all(target, two_block_case(), deadline=DEADLINE)
    assert ("target", "raised") in _errors(second)  # a fresh fork of the parent, where it never ran
    assert children_started() == 2


@pytest.mark.parametrize("broken, rule", [("helpers.targets:Hanging", "timeout"),
                                          ("helpers.targets:Segfaulting", "died")])
def test_after_a_hang_or_a_death_the_next_case_is_judged(broken, rule):
    findings, _ = check_all(get_target(broken), two_block_case(), deadline=1.0)
    assert _errors(findings) == [("target", rule)]
    target = get_target("reference")
    assert not _errors(check_all(target, two_block_case(), deadline=DEADLINE)[0])


def _echo(payload, send) -> Served:
    for step in range(payload):
        send(("step", step))
    return Served(("done", payload), fit=payload != 99)


def test_replies_name_their_request_and_an_unfit_child_is_replaced():
    child = Child(_echo)
    try:
        child.submit(2)
        replies = []
        while not replies or not replies[-1].last:
            replies.append(child.receive(10))
        assert [r.message for r in replies] == [("step", 0), ("step", 1), ("done", 2)]
        child.submit(99)  # the child says it is unfit after this one
        while not child.receive(10).last:
            pass
        child.submit(0)
        assert child.receive(10).message == ("done", 0)
        assert child.started == 2
    finally:
        child.kill()


def test_a_straggler_of_an_abandoned_request_is_not_the_next_answer():
    """The parent gave up on request 1 after its first reply (a deadline); its later replies reach
    the pipe before request 2's, and must not be taken for them."""
    child = Child(_echo)
    try:
        child.submit(3)
        assert child.receive(10).message == ("step", 0)
        child.submit(0)
        reply = child.receive(10)
        while reply.message != ("done", 0):
            assert reply.number == 2 or reply.message[0] == "step", reply
            reply = child.receive(10)
        assert reply.number == 2 and reply.last
    finally:
        child.kill()


def _die(payload, send) -> Served:
    os._exit(3)


def test_a_child_that_dies_says_how():
    child = Child(_die)
    child.submit(None)
    with pytest.raises(ChildDied) as died:
        child.receive(10)
    assert died.value.exitcode == 3


def test_a_childs_output_is_kept_per_case_and_attached_to_a_target_crash(capfd, monkeypatch):
    # A campaign's log once held 1,300 lines of inductor's logs in 30 minutes; a child's output now
    # goes to its own file, emptied at each case, and a crash of the target carries its last words.
    from fsdp_verify.execute.isolation import SHOW_OUTPUT_ENV
    monkeypatch.delenv(SHOW_OUTPUT_ENV, raising=False)
    close_children()
    target = get_target("helpers.targets:Chatty")
    quiet, _ = check_all(target, two_block_case(), deadline=DEADLINE)
    assert not _errors(quiet)
    crashed, _ = check_all(target, replace(two_block_case(), seed=1), deadline=DEADLINE)
    assert _errors(crashed) == [("target", "died")]
    output = crashed[0].details["output"]
    assert "about to crash" in output and "planning seed 1" in output  # Python's and C's writes
    assert "planning seed 0" not in output  # the earlier case's output was emptied
    assert "chatty" not in capfd.readouterr().err + capfd.readouterr().out
    # the file is unlinked from the start: a process that ends without closing it (a test runner's
    # worker, a killed campaign) left one empty file in /tmp per child, 150 in a day of test runs
    import os
    from fsdp_verify.engine.run_case import _children
    assert _children and all(os.fstat(child.output).st_nlink == 0 for _, child in _children.values())
    close_children()
    monkeypatch.setenv(SHOW_OUTPUT_ENV, "1")
    shown, _ = check_all(target, two_block_case(), deadline=DEADLINE)
    assert "chatty: planning" in capfd.readouterr().out


def test_what_a_case_imported_in_its_child_is_imported_in_the_parent_for_the_next_fork():
    # A target that raised retires its child; the next child forks from the parent, and imported
    # again all the target imports lazily (inductor's passes: 2-4 CPU-s per shrink step of a crash).
    import sys
    sys.modules.pop("helpers.lazily_imported", None)
    findings, _ = check_all(get_target("helpers.targets:LazyRaising"), two_block_case(), deadline=DEADLINE)
    assert ("target", "raised") in _errors(findings)
    assert "helpers.lazily_imported" in sys.modules


def test_inductor_on_harness_graphs_keeps_one_child_for_every_case():
    # A round-two campaign forked 2,130 children for 2,128 cases: a child's first case started
    # tqdm's monitor thread (torch.fx's Interpreter makes a bar) and set TORCHINDUCTOR_CACHE_DIR,
    # and either change retires the child.
    close_children()
    target = get_target("torch-inductor")
    case = target.normalise(two_block_case())
    for _ in range(3):
        findings, _ = check_all(target, case, deadline=DEADLINE)
    assert children_started() == 1


def test_a_report_that_does_not_pickle_still_carries_the_verdict():
    """A plan holding a graph node (planted bug reduce_op_as_node) does not pickle, so the child's
    report could not be sent and every such case was invalid (21 of 30 in a campaign): the report
    goes again with such values described, the planner's finding reaches the parent, and the child
    that held the node serves no other case."""
    before = children_started()
    findings, ctx = check_all(get_target("mutant:reduce_op_as_node"), two_block_case(), deadline=DEADLINE)
    assert ("planner", "plan_buckets") in [f.key for f in findings], [f.key for f in findings]
    from fsdp_verify.checks.findings import INVALID
    assert not [f for f in findings if f.severity == INVALID]
    reduce_ops = [m["reduce_op"] for rounds in ctx.run.plans.values() for plan in rounds
                  for bucket in plan.to_dict()["buckets"] for m in bucket["members"] if m.get("reduce_op")]
    assert reduce_ops and all(op.startswith("<Node ") for op in reduce_ops), reduce_ops
    check_all(get_target("mutant:reduce_op_as_node"), two_block_case(), deadline=DEADLINE)
    assert children_started() == before + 2  # the first child retired after its plain report
