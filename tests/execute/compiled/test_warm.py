"""The warm path's fresh process: a fork server preloaded with what every warm start imports, never
with a bucketing pass (whose import registers the ops F11 needs), and stopped and waited at exit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from fsdp_verify.capture import Layer, ModelDesc
from fsdp_verify.execute.compiled.warm import PASS_MODULES, held_passes, read_reply


def test_a_warm_process_that_already_holds_a_bucketing_pass_judges_nothing(tmp_path):
    # Planted: the process imported inductor's bucketing pass before loading, so the custom ops a
    # cache hit needs are registered where a user's warm start has none (F11 would pass unseen).
    request, reply = tmp_path / "request.json", tmp_path / "reply.json"
    desc = ModelDesc((Layer("linear", 8), Layer("linear", 8)))
    request.write_text(json.dumps({"desc": desc.to_json(), "seed": 0, "options": {
        "bucket_all_gathers_fx": "all", "bucket_all_gathers_bucket_mode": "custom_ops", "compile_cache": "warm"}}))
    code = textwrap.dedent(f"""
        import sys
        import torch._inductor.fx_passes.bucketing
        from fsdp_verify.execute.compiled.warm import main
        sys.exit(main([{str(request)!r}, {str(reply)!r}]))
    """)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    doc = json.loads(reply.read_text())
    assert doc["held_passes"] == ["torch._inductor.fx_passes.bucketing"] and "outputs" not in doc
    warm = read_reply(doc, 1.0)
    assert warm.unjudged and "torch._inductor.fx_passes.bucketing" in warm.unjudged and not warm.visited


def test_what_the_fork_server_preloads_holds_no_bucketing_pass():
    code = textwrap.dedent("""
        import sys
        from fsdp_verify.execute.compiled import warm
        for name in warm._PRELOAD:
            __import__(name)
        print(",".join(warm.held_passes(sys.modules)))
    """)
    found = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert found.stdout.strip() == ""
    assert held_passes({PASS_MODULES[0]: None, "torch": None}) == [PASS_MODULES[0]]


def test_the_fork_server_is_stopped_and_waited_at_exit():
    # A waited server's CPU (and its children's) counts in the run's; an unwaited one is lost to it.
    # The handler registered first runs last: it sees what the server's stop left at exit.
    code = textwrap.dedent("""
        import atexit
        import multiprocessing.forkserver as forkserver
        from fsdp_verify.execute.compiled import warm
        atexit.register(lambda: print(forkserver._forkserver._forkserver_pid, flush=True))
        warm._PRELOAD = ["os"]
        warm.fork_server()
        print(forkserver._forkserver._forkserver_pid, flush=True)
    """)
    found = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    pid, after = found.stdout.split()
    assert after == "None"
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError(f"the fork server {pid} outlived its stop")


def test_the_fork_server_starts_without_the_job_keyed_cache_settings():
    # torch reads them when the server imports it: a child could no longer drop them.
    code = textwrap.dedent("""
        import os
        import multiprocessing.forkserver as forkserver
        from fsdp_verify.execute.compiled import warm
        os.environ["TORCH_COMPILE_JOB_ID"] = "another-job"
        warm._PRELOAD = ["os"]
        warm.fork_server()
        with open(f"/proc/{forkserver._forkserver._forkserver_pid}/environ", "rb") as handle:
            server = handle.read().split(b"\\0")
        print(any(entry.startswith(b"TORCH_COMPILE_JOB_ID=") for entry in server), os.environ["TORCH_COMPILE_JOB_ID"])
    """)
    found = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=120)
    assert found.stdout.split() == ["False", "another-job"], found.stdout + found.stderr


def test_a_warm_process_that_cannot_start_is_the_harness_s_failure_not_inductor_s(monkeypatch, tmp_path):
    from fsdp_verify.execute.compiled import warm

    class Refused:
        def __init__(self, **_: object) -> None:
            pass

        def start(self) -> None:
            raise OSError("Resource temporarily unavailable")

    monkeypatch.setattr(warm, "fork_server", lambda: type("Context", (), {"Process": Refused})())
    found = warm.warm_outputs({"layers": []}, {}, 0, tmp_path)
    assert found.unjudged and "did not start" in found.unjudged and found.error is None


def test_ranks_forked_by_the_server_read_the_environment_the_pool_gives_each():
    # A fork server's children start with the server's environment: the pool hands each rank its own.
    from fsdp_verify.execute.compiled.warm import fork_server
    from fsdp_verify.execute.ranks.pool import RankPool
    from helpers.rank_targets import environment_handler, tqdm_lock_handler
    with RankPool(2, backend="gloo", deadline=60, handler=environment_handler,
                  env=lambda rank: {"FSDP_VERIFY_RANK_PROBE": f"rank {rank}"}, context=fork_server()) as pool:
        found = pool.run({rank: "FSDP_VERIFY_RANK_PROBE" for rank in range(2)})
    assert [found[rank][0] for rank in range(2)] == ["rank 0", "rank 1"]
    with RankPool(2, backend="gloo", deadline=60, handler=tqdm_lock_handler, context=fork_server()) as pool:
        locks = pool.run({rank: "lock" for rank in range(2)})
    # tqdm's default lock is a named semaphore: a rank killed after a failed case would leak it
    assert all("multiprocessing" not in locks[rank] and "tqdm" not in locks[rank] for rank in range(2)), locks
    assert all(found[rank][1] != os.getpid() for rank in range(2))  # the server's children, not this process's


def test_warm_ranks_that_already_hold_a_bucketing_pass_judge_nothing(monkeypatch):
    # Planted: rank 1 is not fresh (a stand-in for the pass module, loaded in that rank only) beside a
    # fresh rank 0. The ranks agree before loading, so rank 0 does not load alone into collectives
    # rank 1 never joins (a hang, then a failure reported against inductor).
    from fsdp_verify.execute.compiled import drawn_ranks
    from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper, WarmJob
    from helpers.rank_targets import held_on_rank_one_handler
    monkeypatch.setattr(drawn_ranks, "run_warm_job", held_on_rank_one_handler)
    load = RankSweeper(timeout=60)._load(WarmJob({"layers": []}, {}, 0, "", []), 2)
    assert load.unjudged and "torch._inductor.fx_passes.bucketing" in load.unjudged and not load.failure
    assert load.summary(2) == {"visited": False, "unjudged": load.unjudged}


def test_a_forked_pool_refuses_what_only_an_interpreter_s_start_reads():
    # PYTHONHASHSEED per rank is real mode's way to give ranks different set orders: a forked rank
    # would keep the server's seed and every rank would agree, silently.
    import multiprocessing

    import pytest

    from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankPool
    pool = RankPool(2, backend="gloo", env=lambda rank: {"PYTHONHASHSEED": str(rank)},
                    context=multiprocessing.get_context("forkserver"))
    with pytest.raises(PoolStartFailure, match="PYTHONHASHSEED is read when an interpreter starts"):
        pool.start()
    assert pool.processes == []


def test_ranks_whose_fork_server_dies_are_the_harness_s_loss_not_a_death_of_their_own():
    # A fork server's child reports its exit status through the server: with the server gone, every
    # rank reads as exit code 255 whatever it did, which a sweep would report as the configuration's
    # death (planted: rank 0 kills its parent, the server, during a job).
    import time
    from multiprocessing import forkserver

    import pytest

    from fsdp_verify.execute.compiled.warm import fork_server
    from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankPool, ServerLost
    from helpers.rank_targets import server_killing_handler
    with RankPool(2, backend="gloo", deadline=60, handler=server_killing_handler, context=fork_server()) as pool:
        ranks = pool.run({0: 0.0, 1: 0.0})
        server = forkserver._forkserver._forkserver_pid
        started = time.monotonic()
        with pytest.raises(ServerLost, match=f"fork server the ranks started from \\(pid {server}\\) died") as lost:
            pool.run({0: 30.0, 1: 30.0})
        assert isinstance(lost.value, PoolStartFailure) and time.monotonic() - started < 20
        assert pool.processes == []

        def gone(pid: int) -> bool:  # dead with their parent, the server: absent, or a zombie of init's
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    return stat.read().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
            except FileNotFoundError:
                return True
        deadline = time.monotonic() + 20
        while not all(gone(pid) for pid in ranks.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(gone(pid) for pid in ranks.values()), ranks  # none outlives the lost case
        fork_server()  # restarted as the warm path starts it
        assert forkserver._forkserver._forkserver_pid != server
        assert sorted(pool.run({0: 0.0, 1: 0.0})) == [0, 1]  # the next run heals the pool
    assert any("died" in event and "fork server" in event for event in pool.events)


def test_a_sweep_job_whose_fork_server_was_lost_runs_once_more_and_a_warm_load_judges_nothing(monkeypatch, tmp_path):
    import pytest

    from fsdp_verify.execute.compiled import drawn_ranks
    from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper, SweepJob, WarmJob
    from fsdp_verify.execute.ranks.pool import RankFailure, ServerLost
    failures, servers = [], []

    class Pool:  # raises the next of ``failures`` on each run, while any are left
        def __init__(self, world, **_):
            self.world = world

        def start(self):
            pass

        def run(self, jobs):
            if failures:
                raise failures.pop(0)
            return {rank: {"ok": rank} for rank in jobs}

        def close(self):
            pass
    lost = ServerLost("lost", "the fork server the ranks started from (pid 1) died", {}, {}, (0, 1))
    monkeypatch.setattr(drawn_ranks, "RankPool", Pool)
    monkeypatch.setattr(drawn_ranks, "fork_server", lambda: servers.append(1))
    monkeypatch.setattr(drawn_ranks, "_renewed", lambda folder: (tmp_path / "renewed").write_text(folder))
    sweeper, job = RankSweeper(), SweepJob({"layers": []}, [], 0, {0: "cache-of-config-0"})
    failures[:] = [lost]
    assert sweeper._run(2, job) == {0: {"ok": 0}, 1: {"ok": 1}} and not failures
    # the server asked for before each attempt (restarted as the warm path starts it), and the
    # warm configurations' cache folders emptied before the retry (the lost attempt may have stored)
    assert len(servers) == 2 and (tmp_path / "renewed").read_text() == "cache-of-config-0"
    failures[:] = [lost, lost]
    with pytest.raises(RuntimeError, match="lost their fork server twice"):
        sweeper._run(2, job)
    failures[:] = [RankFailure("died", "rank 0 died (exit code 3)", {}, {}, (0,))]  # the target's: no retry
    with pytest.raises(RankFailure):
        sweeper._run(2, job)
    failures[:] = [lost]
    load = sweeper._load(WarmJob({"layers": []}, {}, 0, "", []), 2)
    assert load.unjudged and "lost their fork server" in load.unjudged and not load.failure


def test_a_renewed_cache_folder_holds_no_graph_a_lost_attempt_stored(tmp_path):
    from fsdp_verify.execute.compiled.drawn_ranks import _renewed
    folder = tmp_path / "config0"
    (folder / "fxgraph").mkdir(parents=True)
    (folder / "fxgraph" / "entry").write_text("stored by the lost attempt")
    _renewed(str(folder))
    assert folder.is_dir() and not (folder / "fxgraph" / "entry").exists()
    assert all(entry.is_symlink() for entry in folder.iterdir())  # only the shared kernel code, linked


def test_a_failed_sweep_s_configurations_compile_again_into_emptied_folders(monkeypatch):
    # The sweep that failed may have stored some warm configurations' compiles; each configuration's
    # own job after it must compile (and store) anew, not load what the failed sweep left.
    import pytest

    from fsdp_verify.capture import Layer, ModelDesc
    from fsdp_verify.execute.compiled import drawn_ranks
    from fsdp_verify.execute.ranks.pool import RankFailure
    said = []

    class Stop(Exception):
        pass

    def one_by_one(self, desc, configs, seed, caches, world):
        said.append(("one by one", sorted(caches)))
        raise Stop

    def failed(self, world, job):
        said.append(("sweep", sorted(job.caches)))
        raise RankFailure("died", "rank 1 died (exit code 3)", {}, {}, (1,))
    monkeypatch.setattr(drawn_ranks.RankSweeper, "_run", failed)
    monkeypatch.setattr(drawn_ranks.RankSweeper, "_one_by_one", one_by_one)
    monkeypatch.setattr(drawn_ranks, "_renewed", lambda folder: said.append(("renewed", folder.rsplit("/", 1)[1])))
    desc = ModelDesc((Layer("linear", 8), Layer("linear", 8)))
    with pytest.raises(Stop):
        drawn_ranks.RankSweeper().sweep(desc, [{"compile_cache": "cold"}, {"compile_cache": "warm"}], 0)
    assert said == [("renewed", "config1"), ("sweep", [1]), ("renewed", "config1"), ("one by one", [1])]
