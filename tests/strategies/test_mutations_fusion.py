"""The fusion mutation that puts one bucket's insertion point on a node another bucket's fusion
erases: the reference fuses it right, a rewriter fusing the earlier bucket first breaks the graph."""

from __future__ import annotations

from fsdp_verify.engine.run_case import check_all
from fsdp_verify.reference import rewrite
from fsdp_verify.strategies import mutations
from fsdp_verify.targets import get_target
from helpers.cases import two_block_case


def _case():
    base = two_block_case(reshard_after_forward=False)  # gathered before the forward: room to move a wait
    pair = next(p for p in mutations.sibling_pairs(base.graph)
                if mutations.anchor_on_foreign_wait(base, *p) is not None)
    return mutations.anchor_on_foreign_wait(base, *pair)


def test_the_reference_fuses_both_buckets_right():
    assert check_all(get_target("reference"), _case())[0] == []


def test_fusing_the_earlier_bucket_first_loses_the_insertion_point(monkeypatch):
    real = sorted
    monkeypatch.setattr(rewrite, "sorted", lambda jobs, key, reverse: real(jobs, key=key), raising=False)
    findings, _ = check_all(get_target("reference"), _case())
    assert ("target", "raised") in {f.key for f in findings}


def test_graphs_that_reshard_after_forward_have_no_room():
    base = two_block_case(reshard_after_forward=True)
    assert all(mutations.anchor_on_foreign_wait(base, *p) is None for p in mutations.sibling_pairs(base.graph))
