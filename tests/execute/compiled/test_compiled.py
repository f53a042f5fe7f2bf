"""End to end through torch.compile: inductor's own pipeline buckets a SimpleFSDP-style model's
collectives, and the loss and every gradient keep every bit; a planted bad merge is named."""

from __future__ import annotations

import torch

from fsdp_verify.execute.compiled.builtin import judge
from fsdp_verify.strategies.modules import MODELS, WIDTH

OPTIONS = {"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"}


def _mlp():
    torch.manual_seed(0)
    return MODELS["mlp"](), (torch.randn(2, 3, WIDTH),)


def _rounding_merge(monkeypatch):
    """A planted bug in the all-gather merge: the bucket's input is scaled by 1 + 2**-10."""
    from torch._inductor.fx_passes import bucketing
    original = bucketing.bucket_all_gather
    seen: list[str] = []

    def merge(gm, *args, **kwargs):
        original(gm, *args, **kwargs)
        for node in list(gm.graph.nodes):
            if "all_gather_into_tensor" in str(node.target) and isinstance(node.args[0], torch.fx.Node):
                source = node.args[0]
                with gm.graph.inserting_before(node):
                    scaled = gm.graph.call_function(torch.ops.aten.mul.Tensor, (source, 1.0 + 2.0 ** -10))
                scaled.meta["val"] = source.meta["val"]
                node.args = (scaled, *node.args[1:])
                seen.append(node.name)
    monkeypatch.setattr(bucketing, "bucket_all_gather", merge)
    return seen


def test_inductor_buckets_for_real_and_keeps_every_bit_then_a_bad_merge_is_named(monkeypatch):
    model, inputs = _mlp()
    report = judge(model, inputs, OPTIONS)
    assert report["launches"]["unbucketed"]["all_gather_into_tensor"] == 4
    assert report["launches"]["bucketed"]["all_gather_into_tensor"] == 1  # the real pipeline bucketed
    assert report["launches"]["bucketed"]["reduce_scatter_tensor"] == 1
    assert report["difference"] is None
    planted = _rounding_merge(monkeypatch)
    bad = judge(model, inputs, OPTIONS)
    assert planted and bad["difference"] and bad["options"] == OPTIONS
