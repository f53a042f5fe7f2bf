"""Where Hypothesis keeps examples between runs, so a failure found once is tried first next time.

A ``--db`` value is a folder, a ``redis://host:port/db`` URL (one database shared by every machine
and worker of a campaign) or ``github:owner/repo[@artifact]`` (the example database a CI workflow
uploaded as an artifact: read-only, for PR gates and developers). A remote one is always paired
with a local folder (another ``--db`` folder, else ``.hypothesis-db``), so what a run finds is kept
here even when the remote cannot take it.
"""

from __future__ import annotations

import hashlib
import re
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Optional, Sequence
from urllib.parse import urlparse

from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    ExampleDatabase,
    GitHubArtifactDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
    choices_from_bytes,
)

LOCAL_DEFAULT = ".hypothesis-db"
GITHUB_ARTIFACT = "hypothesis-example-db"  # Hypothesis's default artifact name
_GITHUB = re.compile(r"github:([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)(?:@([A-Za-z0-9_.-]+))?")


@dataclass(frozen=True)
class DbSpec:
    """One parsed ``--db`` value."""

    kind: str  # "folder", "redis" or "github"
    text: str
    host: str = ""
    port: int = 0
    number: int = 0  # the redis database index
    owner: str = ""
    repo: str = ""
    artifact: str = GITHUB_ARTIFACT


def parse(text: str) -> DbSpec:
    """Parse one ``--db`` value; ValueError says what is wrong and what is accepted."""
    if text.startswith("redis://"):
        return _parse_redis(text)
    if text.startswith("github:"):
        match = _GITHUB.fullmatch(text)
        if not match:
            raise ValueError(f"{text!r}: write a GitHub artifact database as github:owner/repo[@artifact]")
        return DbSpec("github", text, owner=match.group(1), repo=match.group(2),
                      artifact=match.group(3) or GITHUB_ARTIFACT)
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text):
        raise ValueError(f"{text!r}: unknown URL scheme; use a folder, redis://host:port/db or "
                         f"github:owner/repo[@artifact]")
    return DbSpec("folder", text)


def _parse_redis(text: str) -> DbSpec:
    url = urlparse(text)
    try:
        port = url.port or 6379
    except ValueError:
        raise ValueError(f"{text!r}: the port must be a number from 0 to 65535") from None
    number = url.path.strip("/") or "0"
    if not url.hostname or not number.isdigit() or url.query or url.fragment:
        raise ValueError(f"{text!r}: write a redis database as redis://host:port/db (db a number)")
    return DbSpec("redis", text, host=url.hostname, port=port, number=int(number))


def _redis_client(spec: DbSpec):
    try:
        import redis
    except ImportError:
        raise ValueError(f"--db {spec.text}: the redis database needs the redis package: "
                         f"pip install 'fsdp-verify[redis]'") from None
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    # One quick retry, not redis-py's default of three with exponential backoff: each call to a
    # server that went away cost 2.5-4.5 s, on every save and fetch of every example.
    return redis.Redis(host=spec.host, port=spec.port, db=spec.number, socket_connect_timeout=5,
                       retry=Retry(NoBackoff(), 1))


def check_reachable(texts: Sequence[str]) -> None:
    """Fail before any work starts when a redis server does not answer (ValueError)."""
    for spec in map(parse, texts):
        if spec.kind == "redis":
            try:
                _redis_client(spec).ping()
            except ValueError:
                raise
            except Exception as exc:  # noqa: BLE001 - any connection failure is the user's to fix
                raise ValueError(f"--db {spec.text}: cannot reach redis: {exc}") from None


def _open(spec: DbSpec) -> ExampleDatabase:
    if spec.kind == "redis":
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
        return SurvivesOutages(RedisExampleDatabase(_redis_client(spec)), spec.text,
                               (redis.exceptions.RedisError, OSError))
    if spec.kind == "github":
        # Cached under Hypothesis's storage folder; GITHUB_TOKEN is read from the environment.
        return ReadOnlyDatabase(GitHubArtifactDatabase(spec.owner, spec.repo, artifact_name=spec.artifact))
    return DirectoryBasedExampleDatabase(spec.text)


class SurvivesOutages(ExampleDatabase):
    """A remote database (redis) that may go away mid-run. While it cannot be reached its fetches
    find nothing and its saves are dropped, with one warning per outage; the local folder that
    ``open_database`` pairs with every remote keeps every example meanwhile. When it answers again
    (said once too), later saves reach it. While it is down it is tried again at most once every
    RETRY_AFTER seconds: a try of a server that is gone may take seconds, and a campaign calls it
    for every example."""

    RETRY_AFTER = 5.0

    def __init__(self, inner: ExampleDatabase, name: str, errors: tuple[type[BaseException], ...],
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.inner, self.name, self.errors, self.clock = inner, name, errors, clock
        self.down = False
        self.tried = 0.0  # when it was last tried while down

    def _call(self, work, default):
        if self.down and self.clock() - self.tried < self.RETRY_AFTER:
            return default
        try:
            result = work()
        except self.errors as exc:
            self.tried = self.clock()
            if not self.down:
                self.down = True
                warnings.warn(f"example database {self.name} cannot be reached ({type(exc).__name__}: {exc}); "
                              f"going on with the local folder", RuntimeWarning, stacklevel=3)
            return default
        if self.down:
            self.down = False
            warnings.warn(f"example database {self.name} answers again: later saves reach it", RuntimeWarning,
                          stacklevel=3)
        return result

    def fetch(self, key: bytes):
        return iter(self._call(lambda: list(self.inner.fetch(key)), []))

    def save(self, key: bytes, value: bytes) -> None:
        self._call(lambda: self.inner.save(key, value), None)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call(lambda: self.inner.delete(key, value), None)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call(lambda: self.inner.move(src, dest, value), None)

    def __repr__(self) -> str:
        return f"SurvivesOutages({self.inner!r})"


class SkipsUnreadable(ExampleDatabase):
    """A database whose corrupted or truncated entries are skipped with one warning per key, never
    handed on (a crash of a night's run over one bad file is a loss the nightly cannot afford)."""

    def __init__(self, inner: ExampleDatabase) -> None:
        super().__init__()
        self.inner = inner
        self.warned: set[bytes] = set()

    def fetch(self, key: bytes):
        skipped = 0
        for value in self.inner.fetch(key):
            if choices_from_bytes(value) is None:
                skipped += 1
                continue
            yield value
        if skipped and key not in self.warned:
            self.warned.add(key)
            warnings.warn(f"example database: skipped {skipped} unreadable entr{'y' if skipped == 1 else 'ies'} "
                          f"under key {key[:40]!r} (corrupted or truncated)", RuntimeWarning, stacklevel=2)

    def save(self, key: bytes, value: bytes) -> None:
        self.inner.save(key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self.inner.delete(key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.inner.move(src, dest, value)

    def __repr__(self) -> str:
        return f"SkipsUnreadable({self.inner!r})"


def open_database(texts: Sequence[str]) -> Optional[ExampleDatabase]:
    """The database of the ``--db`` values: None for none, several multiplexed (every save goes to
    each writable one, a fetch reads them all), a remote one paired with a local folder; entries
    that do not decode are skipped with a warning."""
    specs = [parse(text) for text in texts]
    if not specs:
        return None
    if all(spec.kind != "folder" for spec in specs):
        specs.append(DbSpec("folder", LOCAL_DEFAULT))
    databases = [_open(spec) for spec in specs]
    return SkipsUnreadable(databases[0] if len(databases) == 1 else MultiplexedDatabase(*databases))


def database_key(strategy: str, size: str, modules: bool, spec: tuple = (), draw_spec: bool = False) -> bytes:
    """The key examples are stored under: what they are drawn from, not the target, so a campaign, a
    later campaign on another target and a gate share the examples they can decode."""
    parts = repr((strategy, size, modules, tuple(spec), draw_spec)).encode()
    return b"fsdp-verify:" + hashlib.sha256(parts).hexdigest()[:32].encode()

