"""Captures kept on disk, so a model is compiled once per machine, not once per process.

A capture costs about half a CPU-second (dynamo and aot_autograd on a fake process group), and a
campaign's workers, its shrinker and the next night's run ask for the same small models again and
again. The in-process memo (``trace._capture``) serves one process; this store serves every
process that shares its folder.

Why a stored capture may stand in for a fresh one: a file is found only under a key that hashes
the model description with everything that shapes its graphs: torch's version and the source of
the harness code that builds, tags and describes them (``capture/`` and ``graph/``). A file that
cannot be read, or that fails the graph format's own validation, is a miss: the model is captured
again and the file rewritten, never trusted. Files are JSON (graph documents), written whole
under a temporary name and renamed, so a reader never sees half of one.

The folder is ``$FSDP_VERIFY_CAPTURE_STORE``, else ``$XDG_CACHE_HOME/fsdp-verify/captures`` (or
``~/.cache/...``); ``off`` turns the store off.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch

from fsdp_verify.graph.spec import SpecError, graph_from_json

ENV = "FSDP_VERIFY_CAPTURE_STORE"
OFF = "off"
FORMAT = 1
# The harness code a capture's graphs depend on: the model, its capture and tags, and the graph
# format they are described in (import, values, collectives).
_SOURCES = ("capture", "graph")


def folder() -> Optional[Path]:
    """Where captures are kept, or None when the store is off."""
    chosen = os.environ.get(ENV)
    if chosen is not None:
        return None if chosen.strip().lower() in ("", OFF) else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fsdp-verify" / "captures"


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """A digest of torch's version and the source that shapes a capture."""
    digest = hashlib.sha256(f"format {FORMAT}; torch {torch.__version__} {torch.version.git_version} "
                            f"{Path(torch.__file__).resolve().parent}".encode())
    package = Path(__file__).resolve().parent.parent
    for sub in _SOURCES:
        for path in sorted((package / sub).glob("*.py")):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def key(desc_json: dict) -> str:
    """The file key of one model description."""
    text = json.dumps({"desc": desc_json, "code": code_digest()}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _path(root: Path, name: str) -> Path:
    return root / name[:2] / f"{name}.json"


def load(desc_json: dict) -> Optional[tuple[Any, Any, float]]:
    """The stored (forward, backward, seconds) of a description, or None (absent, off, unreadable
    or invalid: each a miss)."""
    root = folder()
    if root is None:
        return None
    name = key(desc_json)
    try:
        doc = json.loads(_path(root, name).read_text())
        if doc.get("key") != name or doc.get("desc") != desc_json:
            return None
        return graph_from_json(doc["forward"]), graph_from_json(doc["backward"]), float(doc["seconds"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError, SpecError):
        return None


def save(desc_json: dict, forward: Any, backward: Any, seconds: float) -> None:
    """Keep a capture; a store that cannot be written is skipped (the capture stands, uncached)."""
    root = folder()
    if root is None:
        return
    name = key(desc_json)
    path = _path(root, name)
    doc = {"schema": "fsdp-verify/capture", "key": name, "desc": desc_json, "torch": torch.__version__,
           "seconds": seconds, "forward": forward.to_json(), "backward": backward.to_json()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        return
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(doc, out, sort_keys=True, allow_nan=False)
        os.replace(temporary, path)
    except (OSError, ValueError):
        with contextlib.suppress(OSError):
            os.unlink(temporary)

__all__ = ["ENV", "OFF", "code_digest", "folder", "key", "load", "save"]
