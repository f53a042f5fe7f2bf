"""The corpus: counterexamples and regression cases as JSON files, one case per file.

A file holds a schema version, the case (graph, planner arguments, input seed), the target it
was judged against, the verdict and provenance. Files are named by a content hash of case and
target, so an equal case is stored once; writes are atomic and never replace a different case.
Loading validates every field and never evaluates or imports anything the file names: the
target to replay against comes from the caller, the recorded one is information only.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

from fsdp_verify.model.case import Case, case_from_json
from fsdp_verify.graph.values import SpecError
from fsdp_verify.reference.planner import SKIP_REASONS, SPLIT_REASONS

SCHEMA = "fsdp-verify/case"
VERSION = 1
PASS, FAIL, INVALID = "pass", "fail", "invalid"  # invalid: the case cannot be judged
STATUSES = (PASS, FAIL, INVALID)


class CorpusError(ValueError):
    """A corpus file that cannot be used; names the file, the field and the reason."""

    def __init__(self, file: str, field_path: str, reason: str):
        self.file, self.field, self.reason = file, field_path, reason
        super().__init__(f"{file}: {field_path or '<root>'}: {reason}")


@dataclass(frozen=True)
class Verdict:
    """Pass, fail with the checker ids and messages that fired, or invalid (cannot be judged)."""

    status: str
    findings: tuple[tuple[str, str], ...] = ()

    @property
    def checkers(self) -> tuple[str, ...]:
        """The distinct checker ids that fired, sorted."""
        return tuple(sorted({checker for checker, _ in self.findings}))

    def to_json(self) -> dict:
        return {"status": self.status, "findings": [{"checker": c, "message": m} for c, m in self.findings]}

    @staticmethod
    def of(findings: Iterable[Any]) -> "Verdict":
        """The verdict of a list of findings: any error fails; else any invalid finding makes the
        case invalid (never a pass); drift alone passes."""
        findings = list(findings)
        errors = tuple((f.checker, f.message) for f in findings if f.severity == "error")
        if errors:
            return Verdict(FAIL, errors)
        invalid = tuple((f.checker, f.message) for f in findings if f.severity == "invalid")
        return Verdict(INVALID, invalid) if invalid else Verdict(PASS)


@dataclass(frozen=True)
class Entry:
    """One corpus file's content."""

    case: Case
    target: str
    verdict: Verdict
    provenance: dict = field(default_factory=dict)
    expected: Optional[dict] = None  # the spec's decision for this case (see ``EXPECTED_KEYS``)

    def to_json(self) -> dict:
        doc = {"schema": SCHEMA, "version": VERSION, "target": self.target, "case": self.case.to_json(),
               "verdict": self.verdict.to_json(), "provenance": self.provenance}
        return doc if self.expected is None else {**doc, "expected": self.expected}

    @property
    def key(self) -> str:
        """Content hash of case and target: the file name stem."""
        body = json.dumps({"case": self.case.to_json(), "target": self.target}, sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:20]


def provenance(seed: Optional[int] = None, **extra: Any) -> dict:
    """Where a case came from: seed, library versions and the date."""
    import hypothesis
    import torch

    from fsdp_verify import __version__
    return {"seed": seed, "hypothesis": hypothesis.__version__, "torch": torch.__version__,
            "fsdp_verify": __version__, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            **extra}


def save(entry: Entry, directory: str | os.PathLike, refresh: bool = False) -> tuple[Path, bool]:
    """Write ``entry`` atomically, 0644; returns (path, written). An existing equal case is kept
    (``refresh``: rewritten with this entry's verdict and expectation, for hand-made cases). A
    file in the way (unreadable, corrupt, or another case) is never replaced: the entry goes to the
    next free name ``<key>-<n>.json``, so the caller can report it (``path.stem != entry.key``)."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{entry.key}.json"
    for attempt in range(1, 1000):
        if not path.exists():
            break
        try:
            existing = load(path)
        except CorpusError:
            existing = None
        if existing is not None and existing.case.to_json() == entry.case.to_json() \
                and existing.target == entry.target:
            if refresh and (existing.verdict, existing.expected) != (entry.verdict, entry.expected):
                break
            return path, False
        path = folder / f"{entry.key}-{attempt}.json"
    else:
        raise CorpusError(str(path), "", "999 files already hold this case's names; nothing was replaced")
    _write(entry, path)
    return path, True


def restate(entry: Entry, path: str | os.PathLike) -> bool:
    """Write ``entry`` over ``path`` where that file holds the same case against the same target (a
    later judgement of a saved failure, its class after the standalone repro ran, say); False, and
    nothing written, where the file is gone, unreadable or holds another case."""
    try:
        existing = load(path)
    except (CorpusError, OSError):
        return False
    if existing.case.to_json() != entry.case.to_json() or existing.target != entry.target:
        return False
    _write(entry, Path(path))
    return True


def _write(entry: Entry, path: Path) -> None:
    """``entry`` to ``path`` atomically, 0644."""
    text = json.dumps(entry.to_json(), indent=1, sort_keys=True, allow_nan=False)
    handle, temp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text + "\n")
        os.chmod(temp, 0o644)  # mkstemp makes 0600; corpus files are shared
        os.replace(temp, path)
    except BaseException:  # a full disk: no half-written file left to take the space the next save needs
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _require(doc: dict, key: str, kind: type, file: str, where: str = "") -> Any:
    path = f"{where}.{key}" if where else key
    if key not in doc:
        raise CorpusError(file, path, "missing")
    if not isinstance(doc[key], kind) or (kind is int and isinstance(doc[key], bool)):
        raise CorpusError(file, path, f"must be a {kind.__name__}, got {type(doc[key]).__name__}")
    return doc[key]


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON; write non-finite numbers as {{\"$float\": \"inf\"}}")


def parse(text: str, file: str) -> Entry:
    """Decode one corpus document; every problem is a CorpusError naming file, field and reason."""
    try:
        doc = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise CorpusError(file, "", f"not valid JSON ({exc})") from None
    except RecursionError:
        raise CorpusError(file, "", "nested too deeply to read") from None
    except ValueError as exc:
        raise CorpusError(file, "", str(exc)) from None
    if not isinstance(doc, dict):
        raise CorpusError(file, "", "a corpus file must hold a JSON object")
    if doc.get("schema") != SCHEMA:
        raise CorpusError(file, "schema", f"expected {SCHEMA!r}, got {doc.get('schema')!r}")
    if doc.get("version") != VERSION:
        raise CorpusError(file, "version", f"unsupported version {doc.get('version')!r}; this build reads {VERSION}")
    target = _require(doc, "target", str, file)
    verdict_doc = _require(doc, "verdict", dict, file)
    status = _require(verdict_doc, "status", str, file, "verdict")
    if status not in STATUSES:
        raise CorpusError(file, "verdict.status", f"must be one of {', '.join(STATUSES)}, got {status!r}")
    findings = []
    items = verdict_doc.get("findings", [])
    if not isinstance(items, list):
        raise CorpusError(file, "verdict.findings", f"must be a list, got {type(items).__name__}")
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("checker"), str) \
                or not isinstance(item.get("message"), str):
            raise CorpusError(file, f"verdict.findings[{index}]", "must be {checker: str, message: str}")
        findings.append((item["checker"], item["message"]))
    prov = doc.get("provenance", {})
    if not isinstance(prov, dict):
        raise CorpusError(file, "provenance", "must be an object")
    try:
        case = case_from_json(_require(doc, "case", dict, file), "case")
    except SpecError as exc:
        raise CorpusError(file, exc.path, exc.reason) from None
    expected = _expected(doc["expected"], case, file) if "expected" in doc else None
    return Entry(case, target, Verdict(status, tuple(findings)), prov, expected)


EXPECTED_KEYS = {
    "skips": "{launch: reason}: each launch is skipped for exactly this rule (spec 2.5)",
    "splits": "[{node, previous_node, reason}]: each split decision is made (spec 2.7)",
    "singletons": "[launch]: each gets an oversized singleton decision (spec 2.7)",
    "together": "[[launch, ...]]: each list is exactly one bucket's members",
    "error": "text the planner's ValueError must contain (spec 2.1-2.3)",
}


def _expected(doc: Any, case: Case, file: str) -> dict:
    """Validate the ``expected`` decisions: known keys, known reasons, launches the graph has."""
    if not isinstance(doc, dict) or set(doc) - set(EXPECTED_KEYS):
        raise CorpusError(file, "expected", f"must be an object with keys among {', '.join(EXPECTED_KEYS)}")
    names = {node.name for node in case.graph.nodes}

    def launch(value: Any, where: str) -> None:
        if not isinstance(value, str) or value not in names:
            raise CorpusError(file, f"expected.{where}", f"{value!r} is not a node of the case's graph")
    skips = doc.get("skips", {})
    if not isinstance(skips, dict):
        raise CorpusError(file, "expected.skips", "must be an object {launch: reason}")
    for node, reason in skips.items():
        launch(node, f"skips.{node}")
        if reason not in SKIP_REASONS:
            raise CorpusError(file, f"expected.skips.{node}", f"{reason!r} is not a skip reason")
    splits = doc.get("splits", [])
    for index, split in enumerate(splits if isinstance(splits, list) else [None]):
        if not isinstance(split, dict) or split.get("reason") not in SPLIT_REASONS:
            raise CorpusError(file, f"expected.splits[{index}]", "must be {node, previous_node, reason: a split reason}")
        launch(split.get("node"), f"splits[{index}].node")
        launch(split.get("previous_node"), f"splits[{index}].previous_node")
    for where in ("singletons", "together"):
        items = doc.get(where, [])
        if not isinstance(items, list):
            raise CorpusError(file, f"expected.{where}", "must be a list")
        for index, item in enumerate(items):
            for member in (item if where == "together" and isinstance(item, list) else [item]):
                launch(member, f"{where}[{index}]")
    if not isinstance(doc.get("error", ""), str):
        raise CorpusError(file, "expected.error", "must be a string")
    return doc


def load(path: str | os.PathLike) -> Entry:
    """Read and decode one corpus file."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CorpusError(str(path), "", f"cannot be read ({exc})") from None
    return parse(text, str(path))


def discover(paths: Iterable[str | os.PathLike]) -> Iterator[Path]:
    """Every ``*.json`` file named, or found below a named folder, in sorted order."""
    for path in paths:
        path = Path(path)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*.json") if not p.name.startswith(".tmp-"))
        else:
            yield path
