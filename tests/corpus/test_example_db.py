"""Shared example databases: --db values, and two campaigns sharing a failure through a real redis server."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time

import pytest
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from fsdp_verify.engine import campaign
from fsdp_verify.corpus import example_db

MUTANT = "mutant:fused_meta_dropped"  # a planted bug the tiny cases find within a few examples


def _start_redis(port: int | None = None):
    """A throwaway redis-server on a free (or the given) local port: (url, process)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (Debian: apt-get install -y redis-server)")
    redis = pytest.importorskip("redis", reason="the redis package is not installed (pip install '.[redis]')")
    if port is None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    server = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
                               "no", "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return f"redis://127.0.0.1:{port}/0", server
        except redis.ConnectionError:
            if server.poll() is not None:
                pytest.skip(f"redis-server did not start: {server.stderr.read().decode()[-300:]}")
            time.sleep(0.05)
    server.kill()
    pytest.skip("redis-server did not answer within 5 s")


@pytest.fixture
def redis_url():
    """A throwaway redis-server on a free local port, killed at teardown."""
    url, server = _start_redis()
    try:
        yield url
    finally:
        server.kill()
        server.wait(10)


def test_redis_going_away_mid_run_warns_once_keeps_the_local_folder_and_reconnects(tmp_path, monkeypatch):
    monkeypatch.setattr(example_db.SurvivesOutages, "RETRY_AFTER", 0.0)  # tried on every call: see below
    url, server = _start_redis()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    db = example_db.open_database([url, str(tmp_path / "local")])
    try:
        db.save(b"k", b"one")
        server.kill()
        server.wait(10)
        with pytest.warns(RuntimeWarning, match="cannot be reached") as caught:
            db.save(b"k", b"two")  # the remote is gone: the local folder still gets it
            db.save(b"k", b"three")
            assert sorted(db.fetch(b"k")) == [b"one", b"three", b"two"]
        assert sum("cannot be reached" in str(w.message) for w in caught) == 1  # once per outage
        url, server = _start_redis(port)
        with pytest.warns(RuntimeWarning, match="answers again"):
            db.save(b"k", b"four")
        import redis
        assert redis.Redis(port=port).keys()  # the restarted server began empty: the later save reached it
    finally:
        server.kill()
        server.wait(10)


def test_a_database_that_is_down_is_tried_again_only_after_a_while():
    """A try of a server that is gone may take seconds; a campaign saves and fetches every example."""
    class Gone(example_db.ExampleDatabase):
        calls = 0

        def _touch(self):
            Gone.calls += 1
            raise ConnectionError("refused")

        def fetch(self, key):
            self._touch()

        def save(self, key, value):
            self._touch()

        def delete(self, key, value):
            self._touch()

    now = [100.0]
    db = example_db.SurvivesOutages(Gone(), "redis://gone", (ConnectionError,), clock=lambda: now[0])
    with pytest.warns(RuntimeWarning, match="cannot be reached"):
        db.save(b"k", b"v")
    for _ in range(5):
        db.save(b"k", b"v")
        assert list(db.fetch(b"k")) == []
    assert Gone.calls == 1
    now[0] += db.RETRY_AFTER
    db.save(b"k", b"v")
    assert Gone.calls == 2


def test_a_campaign_whose_redis_is_gone_runs_on_the_local_folder(tmp_path):
    import warnings
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here
    pytest.importorskip("redis", reason="the redis package is not installed (pip install '.[redis]')")
    config = _config(tmp_path, "run", (f"redis://127.0.0.1:{port}/0", str(tmp_path / "local")), seed=5,
                     examples=40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = campaign.run(config)
    assert result.failures and result.harness_errors == 0
    assert any("cannot be reached" in str(w.message) for w in caught)
    assert any((tmp_path / "local").rglob("*")) and list((tmp_path / "run" / "found").glob("*.json"))


@pytest.mark.parametrize("text,message", [
    ("redis://host:port/0", "port must be a number"),
    ("redis:///0", "redis://host:port/db"),
    ("redis://host:1/x", "db a number"),
    ("github:owner", "github:owner/repo[@artifact]"),
    ("github:owner/repo@", "github:owner/repo[@artifact]"),
    ("s3://bucket/db", "unknown URL scheme"),
])
def test_bad_values_say_what_is_accepted(text, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        example_db.parse(text)


def test_a_remote_is_paired_with_a_local_folder_and_an_artifact_is_read_only(tmp_path):
    db = example_db.open_database(["github:pytorch/pytorch@nightly-db"]).inner
    assert isinstance(db, MultiplexedDatabase)
    remote, local = db._wrapped  # noqa: SLF001 - the structure is the point
    assert isinstance(remote, ReadOnlyDatabase) and isinstance(remote._wrapped, GitHubArtifactDatabase)
    assert remote._wrapped.artifact_name == "nightly-db"
    assert isinstance(local, DirectoryBasedExampleDatabase) and str(local.path) == example_db.LOCAL_DEFAULT
    folder = example_db.open_database([str(tmp_path)]).inner
    assert isinstance(folder, DirectoryBasedExampleDatabase) and example_db.open_database([]) is None


def test_a_corrupted_or_truncated_entry_is_skipped_with_one_warning(tmp_path):
    from hypothesis.database import choices_to_bytes
    db = example_db.open_database([str(tmp_path)])
    good = choices_to_bytes([1, 2.5, b"x", True])
    db.save(b"key", good)
    db.save(b"key", good[:6])  # truncated inside a choice
    db.save(b"key", b"\xff\x00garbage")
    with pytest.warns(RuntimeWarning, match=r"skipped 2 unreadable entries"):
        assert list(db.fetch(b"key")) == [good]
    assert list(db.fetch(b"key")) == [good]  # one warning per key


def test_a_campaign_over_a_database_with_corrupted_entries_runs(tmp_path):
    """Garbage files in the example database's folder under the campaign's own key: the campaign
    skips them (with a warning) and runs its examples."""
    import warnings
    config = _config(tmp_path, "run", (str(tmp_path / "db"),), seed=3, examples=5)
    key = campaign.database_key(config)
    raw = example_db.open_database([str(tmp_path / "db")]).inner
    raw.save(key, b"\x00\x01not choices")
    raw.save(key, b"")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = campaign.run(config)
    assert result.examples >= 1 and result.harness_errors == 0


def _config(tmp_path, name: str, db: tuple, seed: int, examples: int) -> campaign.Config:
    return campaign.Config(target=MUTANT, budget=campaign.Budget(examples=examples), seed=seed, db=db,
                           corpus_dir=str(tmp_path / name / "found"), size="tiny", modules=False, max_failures=1,
                           shrink=False, profile="ci")


def test_a_second_campaign_replays_the_first_ones_failure_from_redis(tmp_path, redis_url):
    import redis
    first = campaign.run(_config(tmp_path, "first", (redis_url, str(tmp_path / "first" / "db")), 1, 60))
    assert first.failures, "the planted bug was not found"
    stored = redis.Redis.from_url(redis_url).keys(b"hypothesis-example:*")
    assert stored, "nothing was saved to redis"
    # Another machine: its own seed stream and an empty local folder; one example is all it may run.
    control = campaign.run(_config(tmp_path, "control", (str(tmp_path / "control" / "db"),), 2, 1))
    assert not control.failures, "this seed finds the bug at once by itself: the test proves nothing"
    second = campaign.run(_config(tmp_path, "second", (redis_url, str(tmp_path / "second" / "db")), 2, 1))
    assert second.failures and second.first_failure[0] == 1
    assert list((tmp_path / "second" / "db").iterdir()), "the local folder keeps a copy"


def test_a_gate_reads_what_a_default_campaign_stored(tmp_path):
    from hypothesis import HealthCheck, Phase, given, settings

    from fsdp_verify.engine import gate
    from fsdp_verify.strategies import cases
    database = DirectoryBasedExampleDatabase(tmp_path)

    @settings(database=database, max_examples=1, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
              deadline=None)
    @given(cases("default", modules=True))
    def nightly_finds_a_bug(case):
        raise AssertionError("found")  # what a default campaign's property does on a failure

    nightly_finds_a_bug._hypothesis_internal_database_key = gate.STORED_KEY
    with pytest.raises(AssertionError):
        nightly_finds_a_bug()
    assert gate.STORED_KEY == campaign.database_key(campaign.Config())  # the key of a default campaign
    stored = gate.stored_cases(database)
    assert len(stored) == 1 and stored[0].graph.nodes
    assert len(gate.stored_cases(database)) == 1  # read only: replaying kept it
