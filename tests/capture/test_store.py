"""The capture store: a model is compiled once per machine; what it hands back is what a fresh
capture gives, and a stale, damaged or foreign file is a miss, never trusted."""

from __future__ import annotations

import json

import pytest

from fsdp_verify.capture import Layer, ModelDesc, store
from fsdp_verify.capture import trace

SMALL = ModelDesc((Layer("linear", 8, checkpoint=True), Layer("norm", 8)), mesh=(2, 2), param_dtype="bfloat16")


@pytest.fixture
def kept(tmp_path, monkeypatch):
    """A fresh store folder and an empty in-process memo, both undone afterwards."""
    monkeypatch.setenv(store.ENV, str(tmp_path))
    trace._capture.cache_clear()
    yield tmp_path
    trace._capture.cache_clear()


def _no_fresh_capture(monkeypatch) -> None:
    def refused(desc):
        raise AssertionError(f"captured afresh: {desc}")
    monkeypatch.setattr(trace, "capture_fresh", refused)


def test_a_stored_capture_is_what_a_fresh_capture_gives(kept, monkeypatch):
    fresh = trace.capture_fresh(SMALL)
    first = trace.capture(SMALL)
    assert list(kept.rglob("*.json")), "the capture was not stored"
    trace._capture.cache_clear()
    _no_fresh_capture(monkeypatch)
    again = trace.capture(SMALL)
    for phase in ("forward", "backward"):
        assert again.phase(phase) == fresh.phase(phase) == first.phase(phase)
        assert again.phase(phase).dumps() == fresh.phase(phase).dumps()
    assert again.seconds == first.seconds  # the capture's own cost, not the read's


@pytest.mark.parametrize("damage", ["not json", "truncated", "other model", "invalid graph"])
def test_a_damaged_or_foreign_file_is_a_miss_and_is_rewritten(kept, damage):
    trace.capture(SMALL)
    path = next(kept.rglob("*.json"))
    doc = json.loads(path.read_text())
    if damage == "not json":
        path.write_text("{")
    elif damage == "truncated":
        path.write_text(path.read_text()[:100])
    elif damage == "other model":
        path.write_text(json.dumps({**doc, "desc": {**doc["desc"], "batch": 7}}))
    else:
        doc["forward"]["nodes"][0]["op"] = "no_such_op"
        path.write_text(json.dumps(doc))
    assert store.load(SMALL.to_json()) is None
    trace._capture.cache_clear()
    trace.capture(SMALL)  # captured again
    assert store.load(SMALL.to_json()) is not None


def test_a_change_to_the_capture_code_misses_every_old_file(kept, monkeypatch):
    # The bug this guards against: a stale graph served after the harness's capture changed.
    trace.capture(SMALL)
    assert store.load(SMALL.to_json()) is not None
    monkeypatch.setattr(store, "code_digest", lambda: "another build")
    assert store.load(SMALL.to_json()) is None


def test_the_digest_covers_the_capture_and_graph_sources():
    from pathlib import Path
    package = Path(store.__file__).resolve().parent.parent
    for source in ("capture/trace.py", "capture/model.py", "capture/tags.py", "graph/importer.py", "graph/spec.py"):
        assert (package / source).exists()
        assert source.split("/")[0] in store._SOURCES


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(store.ENV, store.OFF)
    trace._capture.cache_clear()
    try:
        trace.capture(SMALL)
        assert store.folder() is None and store.load(SMALL.to_json()) is None
    finally:
        trace._capture.cache_clear()
    assert not list(tmp_path.rglob("*.json"))


def test_an_unwritable_folder_leaves_the_capture_standing(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(store.ENV, str(blocker / "below"))  # a folder under a file cannot be made
    trace._capture.cache_clear()
    try:
        assert trace.capture(SMALL).forward.nodes
    finally:
        trace._capture.cache_clear()
