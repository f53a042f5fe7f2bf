"""What the end-to-end verdict does with a difference that is not bucketing's doing: inductor's
vectorized kernels adding in another order (re-judged with scalar kernels, bounded), MKL rounding by
alignment (pinned), and a reduction over ranks whose terms cancel."""

from __future__ import annotations

import subprocess
import sys

import torch

from fsdp_verify.execute.compiled import blas
from fsdp_verify.execute.compiled.builtin import plain
from fsdp_verify.execute.compiled.drawn import VECTOR_ORDER_ULPS, failed, vector_order
from fsdp_verify.execute.compiled.drawn_ranks import OrderFreedom, Rejudged, _reports

ALL = {"bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all"}
OUT = torch.tensor([0.4505, 0.8966, -1.4606, 0.0])  # a forward output of the 4-rank model that showed it
ONE_ULP = OUT.nextafter(torch.full_like(OUT, 9.0))  # each element one unit in the last place up


def test_a_difference_that_scalar_kernels_explain_is_vector_order_within_its_bound():
    base, scalar = {"output": OUT}, {"output": OUT * 2}
    assert vector_order(base, {"output": ONE_ULP}, scalar, dict(scalar), torch.float32)
    # a fault that changes values shows with scalar kernels too: not explained
    assert not vector_order(base, {"output": ONE_ULP}, scalar, {"output": scalar["output"] + 1}, torch.float32)
    # a fault only vector kernels show (scalar runs agree) stays a finding beyond the bound
    rounded = OUT.to(torch.bfloat16).float()
    assert not vector_order(base, {"output": rounded}, scalar, dict(scalar), torch.float32)
    far = OUT + VECTOR_ORDER_ULPS * 4 * torch.finfo(torch.float32).eps * 1.5
    assert not vector_order(base, {"output": far}, scalar, dict(scalar), torch.float32)
    assert not vector_order(base, {"output": ONE_ULP, "extra": OUT}, scalar, dict(scalar), torch.float32)
    assert not vector_order({"output": OUT}, {"output": OUT[:2]}, scalar, dict(scalar), torch.float32)


def test_real_ranks_move_an_explained_difference_to_vector_order_and_keep_the_rest():
    base = plain({"output": OUT, "grad layers.0.weight": torch.ones(3)})
    moved = plain({"output": ONE_ULP, "grad layers.0.weight": torch.ones(3)})
    results = {rank: {"configs": [{"outputs": moved if rank == 0 else base, "launches": {}, "error": None}],
                      "baseline": base, "eager": base, "blas": "pinned"} for rank in (0, 1)}

    def report(entry):
        return _reports(results, [ALL], 2, rejudged=Rejudged({0: entry}, torch.float32))[0]
    agree = {rank: {"baseline": base, "run": {"outputs": base, "launches": {}, "error": None}} for rank in (0, 1)}
    explained = report(agree)
    assert failed(explained) is None and explained["vector_order"] == "rank 0: output", explained
    scalar_wrong = {**agree, 1: {"baseline": base, "run": {"outputs": moved, "launches": {}, "error": None}}}
    kept = report(scalar_wrong)
    assert kept["difference"] == "rank 0: output" and kept["scalar_difference"] == "rank 1: output"
    unjudged = report("failed: died on ranks [1]: ...")
    assert unjudged["difference"] == "rank 0: output" and unjudged["scalar_rejudge"].startswith("failed")
    no_rejudge = _reports(results, [ALL], 2)[0]
    assert no_rejudge["difference"] == "rank 0: output" and no_rejudge["blas"] == "pinned"


def test_a_gradient_whose_terms_cancel_is_judged_at_the_tensor_s_largest_magnitude():
    """Measured on a 4-rank model: an element of about 0.08, summed from terms near 1, moved by one
    unit at magnitude 1 when the bucketed reduce-scatter summed in another order."""
    grad = torch.tensor([1.4359, 0.0831, -1.1823])
    moved = grad.clone()
    moved[1] += 2 ** -23
    order = OrderFreedom(torch.float32, 4)
    assert order.tolerates(grad, moved)
    assert not OrderFreedom(torch.float32, 2).tolerates(grad, moved)  # two ranks sum exactly
    assert not order.tolerates(grad, grad * (1 + 2 ** -10))  # 0.1% is no rounding
    assert order.tolerates(torch.empty(0), torch.empty(0))


def test_blas_is_pinned_before_first_use_and_the_probe_is_the_evidence():
    code = ("from fsdp_verify.execute.compiled import blas; import torch; "
            "first = blas.pin(); print(first.value, blas.probe())")
    pinned = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**_env(), "MKL_CBWR": ""})
    state, sensitive = pinned.stdout.split()
    assert sensitive == "False" and state in {"pinned", "insensitive"}, pinned.stderr
    if torch.backends.mkl.is_available():
        assert state == "pinned"
    assert blas.worst(["pinned", "insensitive"]) == "insensitive" and blas.worst(["pinned", None]) == "sensitive"
    assert blas.worst([]) == "sensitive"  # nothing shown is never a claim
    assert "strict" in blas.said({blas.Blas.PINNED}) and "alignment" in blas.said({blas.Blas.SENSITIVE})


def _env() -> dict:
    import os
    return {k: v for k, v in os.environ.items() if k != "MKL_CBWR"}


def test_fresh_warm_ranks_make_the_cold_ranks_meshes_first_in_the_same_order(monkeypatch):
    """A compiled graph names its process groups, and a group's name is its creation order: the
    warm ranks replay the meshes the cold ranks had made, so a graph loaded from the cache finds
    the groups it names (otherwise a correct warm start would fail only on the harness's pool)."""
    from types import SimpleNamespace

    from fsdp_verify.capture import Layer, ModelDesc
    from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper, WarmLoad, _meshes
    ctx = SimpleNamespace(cache={("device mesh", (4,)): 1, "other": 2, ("device mesh", (2, 2)): 3})
    assert _meshes(ctx) == [[4], [2, 2]]
    base = plain({"output": OUT})
    run = {"outputs": base, "launches": {}, "error": None}
    jobs = []

    class Pool:
        def run(self, sent):
            return {rank: {"eager": base, "baseline": base, "configs": [dict(run)], "meshes": [[4], [2, 2]],
                           "blas": "pinned"} for rank in sent}
    with RankSweeper() as sweeper:
        monkeypatch.setattr(sweeper, "pool", lambda world: Pool())
        monkeypatch.setattr(sweeper, "_load", lambda job, world: jobs.append(job) or WarmLoad(unjudged="not run"))
        sweeper.sweep(ModelDesc((Layer("linear", 4), Layer("norm")), mesh=(2, 2)), [{**ALL, "compile_cache": "warm"}])
    assert [job.meshes for job in jobs] == [[[4], [2, 2]]]
