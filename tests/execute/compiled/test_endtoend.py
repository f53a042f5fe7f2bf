"""End to end (issue 20): a drawn model compiled by inductor under a bucketing configuration of the
torch-inductor target's space, on a real one-process gloo world, is bitwise equal to the unbucketed
compile and to eager; a planted wrong merge is reported with its configuration named."""

from __future__ import annotations

import json
import math

import pytest

from fsdp_verify.execute.compiled import sweep as e2e
from fsdp_verify.capture import Layer, ModelDesc
from fsdp_verify.execute.compiled.drawn import configurations, failed, first_difference, sweep
from fsdp_verify.targets.inductor import CONFIG_SPACE

TWO_LAYERS = ModelDesc((Layer("linear", 16), Layer("linear", 8)))
ALL = {"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"}


def test_a_correct_configuration_is_bitwise_equal_to_the_unbucketed_compile_and_to_eager():
    off = {**ALL, "bucket_all_gathers_fx": "none", "bucket_reduce_scatters_fx": "none"}
    good, idle = sweep(TWO_LAYERS, [ALL, off])
    assert good["launches"] == {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}  # 4 + 4 bucketed to 1 + 1
    assert good["difference"] is None and good["eager_difference"] is None and failed(good) is None
    assert good["exercised"] and not idle["exercised"]  # equal because nothing was bucketed: counted apart


def test_the_manual_scheduler_buckets_each_block_in_a_real_compile():
    # installed as post_grad_custom_post_pass; it finds each gather's module by the model's annotation
    off = {"bucket_all_gathers_fx": "none", "bucket_reduce_scatters_fx": "none"}
    blocks, pairs = sweep(TWO_LAYERS, [{**off, "manual_bucket_plans": "blocks"}, {**off, "manual_bucket_plans": "pairs"}])
    assert blocks["launches"] == {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 2}  # weight + bias per layer
    assert pairs["launches"] == {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}
    assert failed(blocks) is None and failed(pairs) is None and blocks["eager_difference"] is None


def test_a_tensor_only_one_run_produced_is_a_difference():
    import torch
    base = {"output": torch.zeros(2), "grad:w": torch.ones(2)}
    assert first_difference(base, {**base, "grad:extra": torch.ones(1)}) == "grad:extra is extra"
    assert first_difference(base, {"output": torch.zeros(2)}) == "grad:w is missing"
    assert first_difference(base, {"output": -torch.zeros(2), "grad:w": torch.ones(2)}) == "output"  # -0 vs +0


def test_configurations_cover_every_choice_of_the_space():
    widest = max(len(choices) for choices in CONFIG_SPACE.values())
    configs = configurations(CONFIG_SPACE, widest)
    for name, choices in CONFIG_SPACE.items():
        assert {c[name] for c in configs} == set(choices), name
    assert configs[0]["bucket_all_gathers_fx"] == "all" and configs[0]["bucket_reduce_scatters_fx"] == "all"
    small = {name: CONFIG_SPACE[name] for name in ("bucket_all_gathers_fx", "bucket_cap_mb", "dedup_reduce_scatters")}
    size = math.prod(len(choices) for choices in small.values())
    whole = configurations(small, size)
    assert len({json.dumps(c, sort_keys=True) for c in whole}) == len(whole) == size  # each configuration once
    some = configurations(CONFIG_SPACE, 40)
    assert len({json.dumps(c, sort_keys=True) for c in some}) == len(some)  # no repeats anywhere


def test_a_planted_wrong_merge_on_a_drawn_model_is_reported_with_its_configuration():
    # A fault only vectorized kernels show: the scalar re-judgement agrees, the bound keeps it a
    # finding (a plain wrong merge is killed on one process and on real ranks below as well).
    outcome = e2e.run(models=1, configs=1, seed=0, plant="ag_merge_rounds_when_vectorized", max_layers=2)
    assert outcome.models == outcome.compiles == 1
    why = outcome.failures[0]["why"] if outcome.failures else ""
    assert "'plant': 'ag_merge_rounds_when_vectorized'" in why and "'bucket_all_gathers_fx': 'all'" in why, \
        outcome.reports
    assert "first differing tensor: output" in why
    # beyond the bound: no re-judgement could explain it, so none ran
    assert not outcome.vector_order and "scalar_difference" not in outcome.reports[0]


def test_an_unknown_plant_is_a_usage_error(capsys):
    from fsdp_verify.commands.cli import main
    assert main(["endtoend", "--plant", "bogus"]) == 2
    assert "plant 'bogus': unknown" in capsys.readouterr().err


def test_inductor_campaigns_draw_captured_graphs_by_default():
    from fsdp_verify.engine.campaign import default_strategy
    assert default_strategy("torch-inductor") == default_strategy("torch-inductor:custom_ops@fsdp") == "captured"
    assert default_strategy("reference") == "cases"


def test_on_two_real_ranks_a_correct_configuration_is_bitwise_equal_and_a_plant_is_named():
    from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper
    model = ModelDesc((Layer("linear", 6), Layer("linear", 3)), mesh=(2,))  # 3 rows over 2 ranks: uneven shards
    other = ModelDesc((Layer("linear", 4), Layer("linear", 2)), mesh=(2,))
    warm = {**ALL, "compile_cache": "warm"}
    with RankSweeper() as sweeper:
        good, uneven_warm, scatter = sweeper.sweep(model, [ALL, warm, {**ALL, "plant": "rs_merge_rounds_to_bf16"}])
        ranks = [process.pid for process in sweeper.pools[2].processes]
        bad, even_warm = sweeper.sweep(other, [{**ALL, "plant": "ag_merge_rounds_to_bf16"}, warm])
        # one pool of rank processes serves every model of a run: the start-up is paid once (a warm
        # configuration is loaded by ranks of its own, started for it)
        assert [process.pid for process in sweeper.pools[2].processes] == ranks
        assert sweeper.pools[2].restarts == 0
    assert good["ranks"] == 2 and good["launches"]["all_gather_into_tensor"] < 4
    assert failed(good) is None and good["eager_difference"] is None
    assert "ag_merge_rounds_to_bf16" in failed(bad) and "rank " in bad["difference"]
    # a planted reduce-scatter fault leaves the output equal: the gradient comparison kills it
    assert scatter["difference"].startswith("rank ") and ": grad layers." in scatter["difference"], scatter
    # The warm path on real ranks sharing one cache folder: with even shards every rank loads its
    # graphs and agrees; with uneven ones both ranks compute one AOTAutograd key (a DTensor's key
    # leaves out its local shape), so one rank loads the other's graph: F14, an upstream defect.
    assert even_warm["warm"]["visited"] and even_warm["warm"]["misses"] == 0 and failed(even_warm) is None
    assert "the warm load (fresh ranks on the cache all ranks share) failed: rank " in failed(uneven_warm), uneven_warm


def test_a_warm_start_loads_each_configuration_in_a_fresh_process_and_finds_f11():
    # dynamic sizes and a warm FX graph cache: the fresh process hits the cache (the post-grad passes
    # do not run there) and is bitwise equal; with custom_ops bucketing the loaded code calls an op
    # that only the (skipped) bucketing pass registers: F11, an upstream defect of torch 2.13.
    # The second layer's rows are data-dependent (an unbacked size in the compiled graphs).
    selecting = ModelDesc((Layer("linear", 16), Layer("linear", 8, select=True)))
    warm, custom = sweep(selecting, [{**ALL, "dynamic": True, "compile_cache": "warm"},
                                     {**ALL, "bucket_all_gathers_bucket_mode": "custom_ops", "compile_cache": "warm"}])
    assert warm["launches"] == {"all_gather_into_tensor": 1, "reduce_scatter_tensor": 1}  # the cold compile's passes
    assert warm["warm"]["visited"] and warm["warm"]["misses"] == 0, warm["warm"]
    assert failed(warm) is None
    assert custom["warm"]["visited"] and "_pre_bucket_all_gather" in (custom["error"] or ""), custom


def test_a_warm_output_that_differs_is_named_as_the_warm_compiles(monkeypatch):
    import torch

    from fsdp_verify.execute.compiled import drawn
    from fsdp_verify.execute.compiled.warm import Warm
    base = {"output": torch.zeros(2), "grad w": torch.ones(2)}

    def cold_then_warm(desc, options, seed):  # the cold compile agrees, the loaded one does not
        return dict(base), {"all_gather_into_tensor": 1}, Warm({**base, "grad w": torch.full((2,), 2.0)}, hits=2)
    monkeypatch.setattr(drawn, "_cold_then_warm", cold_then_warm)
    report = drawn.judge(TWO_LAYERS, {**ALL, "compile_cache": "warm"}, 0, base, base, {})
    assert report["difference"] == "grad w (warm compile, from the FX graph cache)"
    assert "first differing tensor: grad w (warm compile" in failed(report)


def test_real_ranks_judge_what_fresh_ranks_loaded_and_say_what_they_could_not():
    import torch

    from fsdp_verify.execute.compiled.builtin import plain
    from fsdp_verify.execute.compiled.drawn_ranks import WARM_NOT_LOADED, WarmLoad, _reports
    base = plain({"output": torch.zeros(2), "grad w": torch.ones(2)})
    run = {"outputs": base, "launches": {}, "error": None}
    results = {rank: {"configs": [run], "baseline": base, "eager": base} for rank in (0, 1)}
    warm = [{**ALL, "compile_cache": "warm"}]

    def report(load):
        return _reports(results, warm, 2, {0: load} if load else {})[0]
    loaded = {rank: {"outputs": base, "hits": 3, "misses": 0} for rank in (0, 1)}
    assert failed(report(WarmLoad(ranks=loaded))) is None and report(WarmLoad(ranks=loaded))["warm"]["visited"]
    wrong = {**loaded, 1: {**loaded[1], "outputs": plain({"output": torch.zeros(2), "grad w": torch.zeros(2)})}}
    assert report(WarmLoad(ranks=wrong))["difference"] == "rank 1: grad w (warm load, from the cache all ranks share)"
    missed = {**loaded, 0: {**loaded[0], "misses": 1}}
    assert not report(WarmLoad(ranks=missed))["warm"]["visited"]  # a miss compiled: the warm path was not run
    died = report(WarmLoad(failure="rank 1: rank 1 died (killed by signal SIGSEGV)"))
    assert "warm load" in failed(died) and "SIGSEGV" in failed(died)
    unjudged = report(WarmLoad(unjudged="the warm ranks did not start: ..."))
    assert failed(unjudged) is None and unjudged["warm"]["unjudged"]  # the harness's failure: no finding
    assert report(None)["warm"] == {"visited": False, "why": WARM_NOT_LOADED}


def test_endtoend_draws_the_compile_dimensions():
    configs = e2e.planned_configurations(4)
    assert {c["dynamic"] for c in configs} == {False, True}
    assert {c["compile_cache"] for c in configs} == {"cold", "warm"}
    assert configs[0]["dynamic"] is False and configs[0]["compile_cache"] == "cold"


def test_a_warm_check_the_harness_could_not_run_is_no_finding(monkeypatch):
    import torch

    from fsdp_verify.execute.compiled import drawn
    from fsdp_verify.execute.compiled.warm import Warm
    base = {"output": torch.zeros(2)}
    monkeypatch.setattr(drawn, "_cold_then_warm", lambda desc, options, seed: (
        dict(base), {}, Warm(unjudged="the warm compile's process exited -9 without a reply: ")))
    report = drawn.judge(TWO_LAYERS, {**ALL, "compile_cache": "warm"}, 0, base, base, {})
    assert failed(report) is None and report["warm"]["unjudged"] and not report["warm"]["visited"]


def test_a_configuration_whose_ranks_die_is_its_own_finding_not_the_harness_s_end(monkeypatch):
    """F13 on a real compile: the overlap scheduler's ranks part ways and gloo aborts them. The sweep
    then runs each configuration alone, so the death is that configuration's error and the others
    are judged; a death in the eager or unbucketed steps leaves the model unjudged."""
    import torch

    from fsdp_verify.execute.compiled.builtin import plain
    from fsdp_verify.execute.compiled.drawn import BaselineFailed
    from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper
    from fsdp_verify.execute.ranks.pool import RankFailure
    base = plain({"output": torch.zeros(2)})

    class Pool:
        def __init__(self, deadly):
            self.deadly, self.jobs = deadly, []

        def run(self, jobs):
            job = jobs[0]
            self.jobs.append(len(job.configs))
            if any(options.get("deadly") for options in job.configs) or (self.deadly == "baseline"):
                raise RankFailure("died", "rank 1 died (killed by signal SIGABRT)", {0: "", 1: ""},
                                  {1: "rank 1 died (killed by signal SIGABRT)"}, (1,))
            run = {"outputs": base, "launches": {"all_gather_into_tensor": 1}, "error": None}
            return {rank: {"eager": base, "baseline": base, "configs": [dict(run) for _ in job.configs]}
                    for rank in jobs}

    model = ModelDesc((Layer("linear", 3), Layer("norm")), mesh=(2,))
    deadly = {**ALL, "deadly": True}
    with RankSweeper() as sweeper:
        pool = Pool(None)
        monkeypatch.setattr(sweeper, "pool", lambda world: pool)
        good, dead, other = sweeper.sweep(model, [ALL, deadly, ALL])
        assert pool.jobs == [3, 0, 1, 1, 1]  # the whole sweep, the steps alone, then each configuration
        assert failed(good) is None and failed(other) is None
        assert "died on ranks [1]: rank 1: rank 1 died (killed by signal SIGABRT)" in failed(dead)
        monkeypatch.setattr(sweeper, "pool", lambda world: Pool("baseline"))
        with pytest.raises(BaselineFailed, match="the eager step or the unbucketed compile failed on real ranks"):
            sweeper.sweep(model, [ALL])


def test_gradients_of_groups_of_three_or_more_ranks_are_judged_up_to_their_reduction_order():
    """A bucketed bf16 reduce-scatter over 4 gloo ranks sums in another order than the unbucketed
    one and moves a gradient by one bf16 unit in the last place (measured on a drawn 4-rank model):
    not a bug, and said in the report. Groups of two sum exactly in any order, an output comes from
    no reduction over ranks, and a gradient wrong by more than the order explains stays a finding."""
    import torch

    from fsdp_verify.execute.compiled.builtin import plain
    from fsdp_verify.execute.compiled.drawn_ranks import OrderFreedom, _reports
    grad = torch.tensor([-1.8715858459472656e-05])  # the measured pair: one bf16 ulp apart
    moved = torch.tensor([-1.8596649169921875e-05])
    base = {"output": torch.ones(2), "grad layers.0.bias": grad}

    def report(other, group, reduce=torch.bfloat16):
        run = {"outputs": plain(other), "launches": {}, "error": None}
        results = {0: {"configs": [run], "baseline": plain(base), "eager": plain(base)}}
        return _reports(results, [ALL], 1, order=OrderFreedom(reduce, group))[0]
    tolerated = report({**base, "grad layers.0.bias": moved}, 4)
    assert failed(tolerated) is None and tolerated["order_tolerated"] == ["rank 0: grad layers.0.bias"]
    assert "grad layers.0.bias" in failed(report({**base, "grad layers.0.bias": moved}, 2))  # two ranks: exact
    assert failed(report({**base, "output": torch.ones(2).nextafter(torch.full((2,), 2.0))}, 4))  # outputs: bitwise
    assert failed(report({**base, "grad layers.0.bias": grad * (1 + 2 ** -10)}, 4, torch.float32))  # fp32: 3 ulps
    assert failed(report({**base, "grad layers.0.bias": grad * 1.05}, 4))  # bf16: 5% is no rounding
