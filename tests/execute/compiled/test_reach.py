"""``fsdp-verify coverage --endtoend``: what ``endtoend`` draws, counted without compiling, and every
dimension a run of that size never reaches named (exit 1)."""

from __future__ import annotations

import argparse

from fsdp_verify.capture.model import Layer, ModelDesc
from fsdp_verify.commands.coverage import _endtoend
from fsdp_verify.execute.compiled.reach import MODEL_FEATURES, measure_models, model_features, unreached_models


def test_a_model_s_dimensions_are_counted():
    plain = model_features(ModelDesc((Layer("linear", 8), Layer("linear", 4)), mesh=(4,)))
    assert not plain["uneven_shards"] and not plain["data_dependent"]
    three_rows = model_features(ModelDesc((Layer("linear", 3), Layer("linear", 8, select=True)), mesh=(4,)))
    assert three_rows["uneven_shards"] and three_rows["data_dependent"]
    # sharded on both dims of a 2x2 mesh: 6 rows over 4 ranks is uneven, over HSDP's 2 it is not
    both = model_features(ModelDesc((Layer("linear", 6, bias=False, placement="shard2d"),
                                     Layer("linear", 8, bias=False, placement="shard2d")), mesh=(2, 2)))
    hsdp = model_features(ModelDesc((Layer("linear", 6, bias=False), Layer("linear", 8, bias=False)), mesh=(2, 2)))
    assert both["uneven_shards"] and both["sharded_on_both_dims"] and not hsdp["uneven_shards"]


def test_the_default_run_reaches_every_dimension_and_a_short_one_is_named(capsys):
    reach = measure_models(40, 8, seed=0)
    assert reach.models == 40 and not unreached_models(reach), unreached_models(reach)
    assert set(MODEL_FEATURES) <= set(reach.features)
    assert {"compile_cache='warm'", "dynamic=True"} <= {key for key in reach.values}
    args = argparse.Namespace(models=3, configs=3, seed=0, ranks="real")
    assert _endtoend(args) == 1  # endtoend's own default of 3 configurations misses two values of an option
    err = capsys.readouterr().err
    assert "never reaches: " in err and "option aten_distributed_optimizations.bucket_mode='coalesced'" in err


def test_endtoend_says_which_values_its_configurations_leave_out(monkeypatch, capsys):
    from fsdp_verify.commands import endtoend
    from fsdp_verify.execute.compiled import sweep
    monkeypatch.setattr(sweep, "run", lambda *args, **kwargs: sweep.Outcome())
    args = argparse.Namespace(models=1, configs=3, seed=0, plant=None, shrink=False, ranks="one", json=None)
    endtoend.run(args)
    assert "not drawn with --configs 3 (" in capsys.readouterr().out
    endtoend.run(argparse.Namespace(**{**vars(args), "configs": 8}))
    assert "not drawn" not in capsys.readouterr().out
