"""A rank's death, a pool's start and its restarts: a death is a finding only when a rerun
shows it again, a pool that cannot be had is the harness's reason, and no rank is left behind."""

from __future__ import annotations

import os
import signal
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import replace

import pytest
import torch

from fsdp_verify.execute.ranks.judge import HASH_STRIDE, RealRanks
from fsdp_verify.execute.ranks.pool import PoolStartFailure
from fsdp_verify.report.summary import junit_xml, summary_text
from fsdp_verify.report.tally import Result
from fsdp_verify.targets import get_target
from fsdp_verify.execute.ranks.rank_side import RealJob
from helpers.cases import two_block_case


def test_ranks_run_with_their_own_hash_seed_and_environment(real):
    pool = real.pool(2)
    seen = pool.run({rank: RealJob("env") for rank in range(2)})
    assert [seen[r]["hashseed"] for r in range(2)] == ["0", str(HASH_STRIDE)]
    assert seen[0]["hash"] != seen[1]["hash"]  # string hashing differs between the rank processes
    assert seen[0]["pid"] != seen[1]["pid"] != os.getpid()


def test_a_rank_whose_target_kills_its_process_is_one_finding_confirmed_by_a_rerun_and_the_pool_heals(real):
    restarts = real.pools[2].restarts if 2 in real.pools else 0
    reproduced = real.deaths["reproduced"]
    findings, _ = real.check(two_block_case(), "helpers.rank_targets:OddRankExits")
    assert [f.details["kind"] for f in findings] == ["rank_died"]
    assert findings[0].details["ranks"] == [1] and "rank 1 died (exit code 3)" in findings[0].message
    assert findings[0].details["rerun"] == "reproduced" and "the same on 2 reruns" in findings[0].message
    assert real.deaths["reproduced"] == reproduced + 1
    assert real.pools[2].restarts == restarts + 3  # after the death, and after each of its two reruns
    assert real.check(two_block_case(), "reference") == ([], None)


def test_sigkill_of_a_rank_between_cases_heals_before_the_next_case(real):
    pool = real.pool(2)
    victim = pool.processes[1]
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(5)
    restarts, dead = pool.restarts, real.report()["dead_between_cases"]
    assert real.check(replace(two_block_case(), seed=3), "reference") == ([], None)
    assert pool.restarts == restarts + 1
    assert real.report()["dead_between_cases"] == dead + 1
    assert "rank 1 died between cases (killed by signal SIGKILL" in pool.events[-1]


def test_an_outside_sigkill_of_a_rank_during_a_case_is_no_finding_the_rerun_judges_it_and_the_report_says(real):
    # The OOM killer's way: one rank dies once. The case is run again and judged; the death is counted.
    pool = real.pool(2)
    victim = pool.processes[1].pid
    timer = threading.Timer(1.0, lambda: os.kill(victim, signal.SIGKILL))
    timer.start()
    start, cases = time.monotonic(), real.cases
    try:
        findings, why = real.check(two_block_case(), "helpers.rank_targets:Slow")
    finally:
        timer.cancel()
    assert time.monotonic() - start < 60
    assert findings == [] and why is None
    assert real.cases == cases + 1  # one case, planned twice
    report = real.report()
    assert report["rank_deaths"]["not_reproduced"] >= 1
    assert "rank 1" in report["deaths_not_reproduced"][-1] and "SIGKILL" in report["deaths_not_reproduced"][-1]
    assert "last collective entered" in report["deaths_not_reproduced"][-1]
    assert real.check(two_block_case(), "reference") == ([], None)


def test_a_rank_killed_between_planning_and_running_reruns_the_case_never_a_finding(real, monkeypatch):
    # The restarted ranks would lack the case's plans: every rank would raise, a false "error".
    pool = real.pool(2)
    run, calls = pool.run, []

    def kill_after_planning(jobs):
        calls.append(next(iter(jobs.values())).phase)
        out = run(jobs)
        if calls == ["plan"]:
            victim = pool.processes[1]
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(5)
        return out

    monkeypatch.setattr(pool, "run", kill_after_planning)
    before = real.deaths["not_reproduced"]
    assert real.check(replace(two_block_case(), seed=11), "reference") == ([], None)
    assert calls == ["plan", "execute", "plan", "execute"]
    assert real.deaths["not_reproduced"] == before + 1
    assert "between planning and running" in real.unreproduced[-1]


def test_a_pool_start_killed_from_outside_is_tried_again_and_the_case_runs(real, monkeypatch):
    started, failed = real.pool, []

    def killed_once(world):
        if not failed:
            failed.append(world)
            raise PoolStartFailure("died", "the pool did not start: rank 1 died (killed by signal SIGKILL)", {}, {})
        return started(world)

    monkeypatch.setattr(real, "pool", killed_once)
    assert real.check(replace(two_block_case(), seed=5), "reference") == ([], None)
    assert failed == [2] and 2 not in real.broken
    assert "start attempt 1 of 3 failed" in real.report()["events"][-1]


def test_a_pool_that_fails_every_start_is_given_up_after_three_tries_as_the_harness_failure():
    session = RealRanks(backend="gloo", seed=0, deadline=20)
    tries = []

    def never(world):
        tries.append(world)
        raise PoolStartFailure("died", "the pool did not start: rank 0 died (killed by signal SIGKILL)", {}, {})

    session.pool = never
    findings, why = session.check(two_block_case(), "reference")
    assert findings == [] and "no pool of 2 real ranks could start" in why
    assert tries == [2, 2, 2]
    assert session.check(two_block_case(), "reference") == ([], why) and tries == [2, 2, 2]  # not retried per case


def test_a_flaky_rank_death_is_not_dropped_from_the_summary_or_junit():
    result = Result(ranks={"mode": "real", "rank_deaths": {"reproduced": 1, "not_reproduced": 2},
                           "deaths_not_reproduced": ["case 7: real ranks failed (died)"]})
    text = summary_text(result, "reference")
    assert "1 the same on every rerun" in text and "2 not" in text and "case 7: real ranks failed" in text
    props = {p.get("name"): p.get("value") for p in ET.fromstring(junit_xml(result, "reference")).iter("property")}
    assert props["real_rank_deaths_reproduced"] == "1" and props["real_rank_deaths_not_reproduced"] == "2"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA device")
def test_a_pool_that_cannot_be_had_is_the_harness_s_reason_once_never_a_finding_or_a_crash():
    session = RealRanks(backend="nccl")
    first = session.check(two_block_case(), "reference")
    assert first[0] == [] and "no pool of 2 real ranks could start (ValueError" in first[1]
    assert session.check(replace(two_block_case(), seed=5), "reference") == first  # remembered, not retried
    assert session.report()["pools_not_started"] == {"2": first[1]} and session.cases == 0


def test_a_pool_that_does_not_start_in_time_kills_its_ranks_and_says_so():
    from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankPool
    pool = RankPool(2, backend="gloo", start_timeout=0.01)
    with pytest.raises(PoolStartFailure, match="the pool did not start"):
        pool.start()
    assert pool.processes == []  # killed and reaped


class _PoolThatCannotRestart:
    """A pool whose ranks died and cannot be started again (what heal() raises then)."""

    restarts, events = 0, []

    def run(self, jobs):
        from fsdp_verify.execute.ranks.pool import PoolStartFailure
        raise PoolStartFailure("hang", "the pool did not start: ranks [0, 1] did not finish within 120s", {}, {})

    def close(self):
        pass


def test_a_pool_that_cannot_restart_is_the_harness_s_reason_not_a_finding_against_the_target():
    from fsdp_verify.checks import CheckContext
    from fsdp_verify.execute.ranks.collectives import check_collectives
    from fsdp_verify.checks.findings import INVALID
    from fsdp_verify.engine.run_case import run_target
    session = RealRanks(backend="gloo")
    session.pool = lambda world: session.pools.setdefault(world, _PoolThatCannotRestart())
    findings, why = session.check(two_block_case(), "reference")
    assert findings == [] and why.startswith("no pool of 2 real ranks could start (PoolStartFailure")
    assert 2 in session.broken and 2 not in session.pools
    assert sum("could not restart during a case" in e for e in session.events) == 2  # begun again twice
    assert session.check(two_block_case(), "reference") == ([], why)  # not retried
    target = get_target("reference")
    findings = check_collectives(CheckContext(run_target(target, two_block_case()), target), _PoolThatCannotRestart())
    assert [(f.severity, f.details["kind"]) for f in findings] == [(INVALID, "pool_not_started")]


def test_a_rank_whose_harness_is_already_gone_exits_before_importing_torch():
    import subprocess
    import sys
    code = ("import sys; from fsdp_verify.execute.ranks import pool; pool.die_with_parent(parent=1); "
            "print('alive', 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == -signal.SIGKILL and "alive" not in out.stdout
