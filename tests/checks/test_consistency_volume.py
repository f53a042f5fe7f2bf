"""The volume rule: what each group communicates is conserved in the members' elements or in
their bytes, never neither (round two's byte-packed multidtype buckets were false alarms)."""

from __future__ import annotations

from types import SimpleNamespace

from fsdp_verify.checks.consistency import _volume_findings
from fsdp_verify.execute.simulated import CollectiveRecord

AG = "all_gather_into_tensor"


def _run(*records: tuple[tuple[int, ...], str]) -> SimpleNamespace:
    return SimpleNamespace(streams={0: [CollectiveRecord(AG, "fsdp", shape, dtype, None, f"n{i}")
                                        for i, (shape, dtype) in enumerate(records)]})


def _rules(before, after) -> list[str]:
    ctx = SimpleNamespace(original_sim=before, rewritten_sim=after)
    return [f.rule for f in _volume_findings(ctx, 0, False, [])]


def test_a_byte_packed_bucket_conserves_bytes_and_is_no_finding():
    members = _run(((32,), "float32"), ((32,), "bfloat16"))
    assert _rules(members, _run(((96,), "bfloat16"))) == []  # fp32 sent as twice as many bf16 elements


def test_a_wider_wire_conserves_elements_and_is_no_finding():
    members = _run(((32,), "float16"), ((32,), "bfloat16"))
    assert _rules(members, _run(((64,), "float32"))) == []


def test_a_padded_or_lost_member_changes_both_and_is_found():
    members = _run(((32,), "float32"), ((32,), "float32"))
    assert _rules(members, _run(((72,), "float32"))) == ["volume_changed"]  # padded
    assert _rules(members, _run(((32,), "float32"))) == ["volume_changed"]  # a member lost
    # an fp32 member cast down to bf16 conserves elements: its lost precision is for numerics,
    # layout and conformance (the wire dtype) to find, not this rule
    mixed = _run(((32,), "float32"), ((32,), "bfloat16"))
    assert _rules(mixed, _run(((64,), "bfloat16"))) == []


def test_a_dtype_of_unknown_width_conserves_no_bytes():
    before = _run(((32,), "float32"), ((32,), "no_such_dtype"))
    assert _rules(before, _run(((32,), "float32"), ((64,), "no_such_dtype"))) == ["volume_changed"]
