"""The collector's settings for a campaign: frozen and tuned for the block, everything handed back."""

from __future__ import annotations

import gc
import weakref

from fsdp_verify.engine import collector


class _Cycle:
    pass


def _cycle() -> tuple[_Cycle, weakref.ref]:
    node = _Cycle()
    node.self = node  # only the cyclic collector frees it
    return node, weakref.ref(node)


def test_a_campaign_block_freezes_collects_its_own_garbage_and_hands_the_old_back(monkeypatch):
    monkeypatch.setattr(collector, "_owed", 0)  # the process's first block (a later one collects first)
    before = gc.get_threshold()
    old, old_ref = _cycle()
    gc.collect()  # survives into the oldest generation
    del old  # garbage there now: the block's young collection leaves it, frozen with the rest
    with collector.tuned():
        assert gc.get_freeze_count() > 0 and gc.get_threshold() == collector.THRESHOLDS
        young, young_ref = _cycle()
        del young
        gc.collect()
        assert young_ref() is None  # what the block allocates is collected in the block
        assert old_ref() is not None  # frozen: no walk of the block's collections sees it
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    gc.collect()
    assert old_ref() is None  # handed back, and collected


def test_what_blocks_leave_in_the_oldest_generation_is_collected_within_full_every_blocks(monkeypatch):
    """Else later blocks freeze it for good: campaigns run one after another (self-test hunts, a
    mutant's phases) would pile up their garbage. The walk over everything loaded is paid once per
    ``FULL_EVERY`` blocks; a process that runs one block and exits never pays it."""
    monkeypatch.setattr(collector, "_owed", 0)
    with collector.tuned():
        kept, kept_ref = _cycle()
        gc.collect(1)
        gc.collect(1)  # promoted to the oldest generation
        del kept  # garbage there, which the block's young collections never walk
        assert kept_ref() is not None
    gc.disable()  # no automatic collection between the blocks: only a block's start may free it
    try:
        assert kept_ref() is not None  # the block's end walks nothing
        for _ in range(collector.FULL_EVERY - 1):
            with collector.tuned():
                pass
        assert kept_ref() is not None  # no full walk yet
        with collector.tuned():
            assert kept_ref() is None  # collected before the FULL_EVERY-th block's freeze
    finally:
        gc.enable()
