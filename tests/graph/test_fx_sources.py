"""Compiled graphs' sources are forgotten beyond the newest few, and the newest keep their lines."""

import linecache
import torch
from torch import fx
from torch.fx import graph_module

from fsdp_verify.graph import fx_sources


def _module() -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.relu, (x,)))
    return fx.GraphModule(torch.nn.Module(), graph)


def test_only_the_newest_sources_are_kept_and_their_lines_still_show():
    for _ in range(40):
        _module()
    fx_sources.forget_old_sources(keep=8)
    numbered = [k for k in graph_module._loader.eval_cache if fx_sources._serial(k) is not None]
    assert len(numbered) <= 8
    assert not [k for k in linecache.cache if k.startswith("<eval_with_key>.")
                and fx_sources._serial(k) < graph_module._loader.next_id - 8]
    _module()
    newest = f"<eval_with_key>.{graph_module._loader.next_id - 1}"
    fx_sources.forget_old_sources(keep=8)
    assert "torch.relu" in "".join(linecache.getlines(newest))  # what a traceback shows

def test_a_campaign_keeps_the_loader_bounded(tmp_path, monkeypatch):
    from fsdp_verify.engine import campaign
    monkeypatch.setattr(fx_sources, "KEEP", 0)
    first = graph_module._loader.next_id
    config = campaign.Config(target="reference", budget=campaign.Budget.parse("30"), seed=2, size="default",
                             corpus_dir=str(tmp_path / "corpus"), db=(str(tmp_path / "db"),))
    campaign.run(config)
    compiled = graph_module._loader.next_id - first
    left = [k for k in graph_module._loader.eval_cache if (fx_sources._serial(k) or -1) >= first]
    assert compiled >= 10 and len(left) <= compiled // 4  # only the last case's compiles remain
