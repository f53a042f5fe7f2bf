"""Reliability: clean stops, hostile targets, hostile corpus files, arguments checked up front."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_verify.engine import campaign
from fsdp_verify.commands import cli
from fsdp_verify.corpus import files as corpus
from fsdp_verify.graph.limits import MAX_NODES
from helpers import ROOT

CORPUS_FILE = next((ROOT / "corpus" / "rules").glob("*.json"))


def _fuzz(tmp_path: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    return subprocess.Popen([sys.executable, "-m", "fsdp_verify", "fuzz", "--budget", "10m", "--size", "tiny",
                             "--json", str(tmp_path / "out.json"), "--junit", str(tmp_path / "out.xml"),
                             "--corpus", str(tmp_path / "found"), *extra], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_until_fuzzing(process: subprocess.Popen, workers: int, timeout: float = 120) -> None:
    """Until every worker runs cases: each has forked its isolation child (one worker: the main
    process is the worker), then a moment more, so the stop lands mid-case."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        assert process.poll() is None, process.stdout.read()
        runners = [process.pid] if workers == 1 else _children(process.pid)
        if sum(bool(_forks(pid)) for pid in runners) >= workers:
            time.sleep(1.0)
            assert process.poll() is None, process.stdout.read()
            return
        time.sleep(0.2)
    raise AssertionError(f"the campaign's {workers} workers did not start cases within {timeout:.0f}s")


def _forks(pid: int) -> list[int]:
    """``pid``'s children that are forks of it (an isolation child shares its command line): a
    short-lived subprocess that a slow import starts (seen under load) is no sign of a case."""
    def cmdline(p: int) -> bytes:
        try:
            return Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:
            return b""
    own = cmdline(pid)
    return [child for child in _children(pid) if own and cmdline(child) == own]


def _children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat")
    return not (status.exists() and status.read_text().split()[2] == "Z")


@pytest.mark.parametrize("sig,workers", [(signal.SIGINT, "1"), (signal.SIGTERM, "2")])
def test_a_signal_stops_fuzz_with_every_report_written_and_nothing_left(tmp_path, sig, workers):
    process = _fuzz(tmp_path, "--workers", workers)
    _wait_until_fuzzing(process, int(workers))
    family = _children(process.pid)
    process.send_signal(sig)
    start = time.monotonic()
    out, _ = process.communicate(timeout=60)
    print(f"stopped {time.monotonic() - start:.2f}s after {sig.name}")
    assert process.returncode in (1, 130), out
    assert "STOPPED EARLY by a signal" in out and "examples/s" in out
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["interrupted"] is True
    assert "<testsuite" in (tmp_path / "out.xml").read_text()
    time.sleep(1)
    assert not [p for p in family if _alive(p)], "processes outlived the campaign"


def test_workers_die_with_a_killed_parent(tmp_path):
    process = _fuzz(tmp_path, "--workers", "2")
    _wait_until_fuzzing(process, 2)
    workers = _children(process.pid)
    assert workers
    process.kill()
    process.wait(timeout=30)  # not communicate(): a dying worker may hold the output pipe a moment longer
    deadline = time.monotonic() + 30  # generous: on a loaded machine a worker's death takes a while
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.5)
    process.stdout.close()
    assert not [p for p in workers if _alive(p)]


# -- hostile targets: each is a finding with the case saved, never the harness's end -------------

@pytest.mark.parametrize("name,expected", [
    ("helpers.targets:Segfaulting", "killed by signal SIGSEGV"),
    ("helpers.targets:Exiting", "raised SystemExit: 3"),
    ("helpers.targets:Garbage", "rewrite returned a str"),
    ("helpers.targets:Interrupting", "died"),
    ("helpers.targets:Hanging", "did not finish within 2s"),
])
def test_a_hostile_target_is_a_saved_finding(tmp_path, name, expected):
    config = campaign.Config(target=name, budget=campaign.Budget(examples=3), corpus_dir=str(tmp_path), size="tiny",
                             modules=False, max_failures=1, deadline=2, profile="ci", shrink=False)
    result = campaign.run(config)
    assert len(result.failures) == 1 and result.failures[0]["checkers"] == ["target"]
    assert expected in result.failures[0]["message"]
    saved = corpus.load(result.failures[0]["file"])
    assert saved.verdict.status == corpus.FAIL
    assert oct(os.stat(result.failures[0]["file"]).st_mode & 0o777) == "0o644"


def test_a_factory_that_raises_is_a_usage_error(capsys):
    assert cli.main(["fuzz", "--target", "helpers.targets:broken_factory", "--budget", "1"]) == 2
    assert "factory raised RuntimeError: factory exploded on purpose" in capsys.readouterr().err


# -- arguments ------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,expected", [
    (["fuzz", "--size", "bogus"], "invalid choice: 'bogus'"),
    (["fuzz", "--workers", "0"], "'0' must be at least 1"),
    (["fuzz", "--budget", "0"], "must be positive"),
    (["fuzz", "--deadline", "0"], "must be a positive number"),
    (["fuzz", "--deadline", "-1"], "must be a positive number"),
    (["fuzz", "--json", "/no/such/folder/out.json"], "does not exist"),
    (["show", "x.json", "--svg", "/no/such/folder/x.svg"], "does not exist"),
    (["gate", "--baseline", "reference", "--candidate", "reference", "--examples", "0"], "must be at least 1"),
    (["selftest", "--mutant", "nope"], "invalid choice: 'nope'"),
])
def test_bad_arguments_exit_2_before_any_work(argv, expected, capsys):
    start = time.monotonic()
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2 and expected in capsys.readouterr().err
    assert time.monotonic() - start < 5


# -- hostile corpus files --------------------------------------------------------------------

def _doc() -> dict:
    return json.loads(CORPUS_FILE.read_text())


def _with(change) -> str:
    doc = _doc()
    change(doc)
    return json.dumps(doc)


def _deep(levels: int):
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def _set_arg(doc: dict, value) -> None:
    node = next(n for n in doc["case"]["graph"]["nodes"] if n["op"] == "call_function")
    node["args"] = [value]


ATTACKS = {
    "namespace attribute": (lambda d: next(n for n in d["case"]["graph"]["nodes"] if n["op"] == "call_function")
                            .update(target="aten.__init__"), "plain identifiers"),
    "registered-looking attribute": (lambda d: next(n for n in d["case"]["graph"]["nodes"]
                                                    if n["op"] == "call_function").update(target="aten.view.overloads"),
                                     "not a registered operator"),
    "deep nesting": (lambda d: _set_arg(d, _deep(200)), "nested deeper than 32 levels"),
    "huge integer": (lambda d: d["case"]["plan_args"].update(pp_degree=10 ** 20), "beyond the limit"),
    "huge shape": (lambda d: d["case"]["graph"]["inputs"][0].update(shape=[2 ** 20, 2 ** 20]), "the limit is"),
    "too many ranks": (lambda d: d["case"]["graph"]["groups"].update(fsdp=list(range(100))), "ranks must be below"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_hostile_corpus_file_is_refused_naming_the_field(attack):
    change, expected = ATTACKS[attack]
    with pytest.raises(corpus.CorpusError) as refused:
        corpus.parse(_with(change), "attack.json")
    assert expected in str(refused.value) and str(refused.value).startswith("attack.json: case.")


def test_json_constants_and_extreme_nesting_are_refused():
    text = CORPUS_FILE.read_text().replace('"seed": 0', '"seed": Infinity', 1)
    with pytest.raises(corpus.CorpusError, match="Infinity is not JSON"):
        corpus.parse(text if "Infinity" in text else text.replace("{", '{"x": Infinity, ', 1), "const.json")
    with pytest.raises(corpus.CorpusError, match="nested too deeply"):
        corpus.parse("[" * 100_000 + "]" * 100_000, "deep.json")


def test_an_oversized_graph_is_refused_before_it_is_read():
    doc = _doc()
    doc["case"]["graph"]["nodes"] = [{"name": f"n{i}", "op": "placeholder"} for i in range(MAX_NODES + 1)]
    start = time.monotonic()
    with pytest.raises(corpus.CorpusError, match=f"the limit is {MAX_NODES}"):
        corpus.parse(json.dumps(doc), "big.json")
    assert time.monotonic() - start < 10


def test_a_directory_replay_reports_every_file_whatever_one_holds(tmp_path, capsys):
    (tmp_path / "bad.json").write_text(_with(lambda d: _set_arg(d, _deep(200))))
    (tmp_path / "good.json").write_text(CORPUS_FILE.read_text())
    assert cli.main(["replay", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "bad.json: case.graph.nodes" in captured.err and "1 cases replayed" in captured.out


def test_a_corrupt_file_in_the_campaigns_way_is_left_and_reported(tmp_path):
    entry = corpus.load(CORPUS_FILE)
    (tmp_path / f"{entry.key}.json").write_text("{corrupt")
    path, written = corpus.save(entry, tmp_path)
    assert written and path.name == f"{entry.key}-1.json"
    assert (tmp_path / f"{entry.key}.json").read_text() == "{corrupt"


# -- the reader under fuzzing -------------------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=30)


def _mutations(draw_doc: dict, path: list, value) -> str:
    target = draw_doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return json.dumps(draw_doc)


def _paths(doc, prefix=()) -> list[tuple]:
    found = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc[:6]):
            found += _paths(value, (*prefix, index))
    return found


PATHS = _paths(_doc())


def _read_in_bounds(text: str) -> None:
    start = time.monotonic()
    try:
        corpus.parse(text, "fuzzed.json")
    except corpus.CorpusError:
        pass
    assert time.monotonic() - start < 5


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSON)
def test_arbitrary_json_is_read_or_refused_with_the_documented_error(doc):
    _read_in_bounds(json.dumps(doc))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), JSON)
def test_a_mutated_real_corpus_file_is_read_or_refused_with_the_documented_error(path, value):
    _read_in_bounds(_mutations(_doc(), list(path), value))


@pytest.mark.parametrize("setup", ["none", "unshared_bar_lock"])
def test_a_killed_worker_leaves_no_semaphore_behind(setup, tmp_path):
    # A spawned worker's first torch.fx Interpreter run makes tqdm's default lock, a named semaphore
    # there; the worker killed at its stop's grace never released it, and the resource tracker
    # warned of it when the campaign ended. ``none`` is the planted bug: the warning is what is seen.
    code = f"""
import multiprocessing, signal, sys, time

def worker(ready):
    if {setup!r} != "none":
        from fsdp_verify.execute.isolation import unshared_bar_lock
        unshared_bar_lock()
    import torch
    from torch import fx
    fx.Interpreter(fx.symbolic_trace(torch.nn.ReLU())).run(torch.ones(2))
    ready.set()
    time.sleep(60)

if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    process = context.Process(target=worker, args=(ready,))
    process.start()
    assert ready.wait(300)
    process.kill()
    process.join()
"""
    script = tmp_path / "worker.py"  # a spawned process imports its parent's main module by path
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=360, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert ("leaked semaphore" in done.stderr) == (setup == "none"), done.stderr


def test_a_campaign_worker_gives_tqdm_an_unshared_lock_before_it_runs(monkeypatch):
    # what the test above plants, at the place it applies: a spawned worker, before its campaign
    said = []
    monkeypatch.setattr(campaign, "die_with_parent", lambda *args: None)
    monkeypatch.setattr(campaign, "install_stop_handlers", lambda **kwargs: None)
    monkeypatch.setattr(campaign, "unshared_bar_lock", lambda: said.append("lock"))
    monkeypatch.setattr(campaign, "run", lambda config, tick, on_failure: said.append("run") or "result")
    monkeypatch.setattr(signal, "signal", lambda *args: None)

    class Pipe:
        def send(self, message):
            said.append(message[0])
    campaign._worker(campaign.Config(), Pipe(), os.getppid())
    assert said == ["lock", "run", "done"]
