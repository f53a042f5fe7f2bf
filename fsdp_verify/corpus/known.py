"""Bugs an earlier campaign saved. A failure's file keeps its bug's signature (the root cause,
``engine/signature.py``) and class in its provenance, so a nightly run that meets a bug its corpus
folder already holds counts a sighting of a known bug, naming the file, instead of shrinking and
saving the same bug again under a new name every night.

Only the signature and class are read, as strings: nothing a file says is evaluated, and a file
this cannot read is named and left alone (the campaign writes new files beside it, never over it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from fsdp_verify.model.classes import FailureClass

SIGNATURE_KEY = "signature"  # provenance: [checker, rule, cause]
CLASS_KEY = "failure_class"  # provenance: a FailureClass value


@dataclass(frozen=True)
class KnownBug:
    """One bug a corpus file holds."""

    signature: tuple[str, str, str]
    file: str
    excused: bool  # saved as a contract mismatch, invalid input or harness limitation


@dataclass
class Known:
    """What a corpus folder says about earlier failures against one target."""

    folder: str
    bugs: dict[tuple[str, str, str], KnownBug] = field(default_factory=dict)
    unsigned: int = 0  # failing files without a signature (saved by hand or before signatures were kept)
    unreadable: list[str] = field(default_factory=list)  # files that are not JSON objects


def read_known(folder: str | Path, target: str) -> Known:
    """The signed failures that ``folder``'s files (not its subfolders) hold against ``target``.
    Where two files hold one signature, the first by name is named; a bug file outranks an excused
    one, so an excused sighting never hides the bug."""
    known = Known(str(folder))
    root = Path(folder)
    if not root.is_dir():
        return known
    for path in sorted(root.glob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError):
            known.unreadable.append(path.name)
            continue
        if not isinstance(doc, dict):
            known.unreadable.append(path.name)
            continue
        verdict, provenance = doc.get("verdict"), doc.get("provenance")
        if doc.get("target") != target or not isinstance(verdict, dict) or verdict.get("status") != "fail":
            continue
        provenance = provenance if isinstance(provenance, dict) else {}
        signature, kind = provenance.get(SIGNATURE_KEY), provenance.get(CLASS_KEY)
        if not (isinstance(signature, list) and len(signature) == 3 and all(isinstance(s, str) for s in signature)
                and kind in {c.value for c in FailureClass}):
            known.unsigned += 1
            continue
        bug = KnownBug(tuple(signature), str(path), FailureClass(kind).excused)
        held = known.bugs.get(bug.signature)
        if held is None or (held.excused and not bug.excused):
            known.bugs[bug.signature] = bug
    return known


__all__ = ["CLASS_KEY", "SIGNATURE_KEY", "Known", "KnownBug", "read_known"]
