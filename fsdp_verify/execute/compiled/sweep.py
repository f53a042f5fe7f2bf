"""End-to-end runs over drawn models: the strategy's model descriptions, each compiled by inductor
under configurations of the ``torch-inductor`` target's space and judged bit for bit
(``execute/compiled/drawn.py``). A failure names the model, the configuration and the first differing
tensor (or the error); with ``shrink`` Hypothesis shrinks the model of the first failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import hypothesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fsdp_verify.capture.model import ModelDesc
from fsdp_verify.execute.compiled.blas import Blas
from fsdp_verify.execute.compiled.blas import worst as blas_worst
from fsdp_verify.execute.compiled.drawn import COMPILE_SPACE, PLANTS, BaselineFailed, configurations, failed, judge, sweep
from fsdp_verify.execute.compiled.drawn_ranks import RankSweeper
from fsdp_verify.execute.compiled.warm import fork_server
from fsdp_verify.strategies.captured import model_descs
from fsdp_verify.targets.inductor import CONFIG_SPACE

# A one-process world has one rank, so meshes and uneven shards do not matter there: 1-D models only;
# two layers at least, so that there is something to bucket. On N real ranks each model runs on its
# own mesh (one process per rank).
E2E_MESHES = ((4,),)
RANK_MESHES = ((2,), (4,), (2, 2))


@dataclass
class Outcome:
    """What an end-to-end run judged and found."""

    models: int = 0
    compiles: int = 0
    seconds: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)
    reports: list[dict[str, Any]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)  # models whose unbucketed compile failed: not judged

    @property
    def not_exercised(self) -> int:
        """Judged configurations that bucketed nothing (launches as unbucketed): their equality is vacuous."""
        return sum(report.get("exercised") is False for report in self.reports)

    @property
    def warm(self) -> tuple[int, int]:
        """Configurations drawn with a warm compile cache, and how many of them ran the warm path
        (every graph loaded from the FX graph cache in a fresh process)."""
        drawn = [r for r in self.reports if r.get("options", {}).get("compile_cache") == "warm"]
        return len(drawn), sum(bool(r.get("warm", {}).get("visited")) for r in drawn)

    @property
    def order_tolerated(self) -> int:
        """Judged configurations whose gradients equal the unbucketed ones only up to the order of
        a reduction over three or more ranks (each report's ``order_tolerated`` names them)."""
        return sum(bool(report.get("order_tolerated")) for report in self.reports)

    @property
    def vector_order(self) -> int:
        """Configurations whose difference scalar kernels explained (each report's ``vector_order``
        names the tensor): inductor's vectorized reduction order, not bucketing (``drawn.vector_order``)."""
        return sum(bool(report.get("vector_order")) for report in self.reports)

    @property
    def blas(self) -> set[Blas]:
        """The BLAS states the judging processes reported (``blas.py``: whether their products could
        round by operand alignment)."""
        return {Blas(blas_worst([report.get("blas")])) for report in self.reports}

    @property
    def data_dependent(self) -> int:
        """Judged configurations of models whose row counts depend on values (``Layer.select``)."""
        return sum(any(layer.get("select") for layer in report["model"]["layers"]) for report in self.reports)

    @property
    def per_second(self) -> float:
        """Judged (model, configuration) examples per second."""
        return self.compiles / self.seconds if self.seconds else 0.0


def planned_configurations(count: int, plant: Optional[str] = None) -> list[dict[str, Any]]:
    """``count`` configurations covering every choice of the target's space; with ``plant``, each
    buckets both kinds and carries the planted fault (so the fault has a merge to act on)."""
    if plant is not None and plant not in PLANTS:
        raise ValueError(f"plant {plant!r}: unknown; known plants are {sorted(PLANTS)}")
    configs = configurations({**CONFIG_SPACE, **COMPILE_SPACE}, count)
    if plant:
        configs = [{**c, "bucket_all_gathers_fx": "all", "bucket_reduce_scatters_fx": "all",
                    "bucket_all_gathers_bucket_mode": "default", "plant": plant} for c in configs[:1]]
    return configs


def _fail(why: str) -> None:
    """The one place the property fails from: Hypothesis tells failures apart by where they are raised."""
    raise AssertionError(why)


def run(models: int, configs: int, seed: int = 0, plant: Optional[str] = None, shrink: bool = False,
        max_layers: int = 3, progress: Optional[Callable[[str], None]] = None, ranks: bool = False) -> Outcome:
    """Draw ``models`` model descriptions and judge each under the planned configurations, in one
    process (a one-rank group) or, with ``ranks``, on one gloo process per rank of its mesh."""
    outcome = Outcome()
    chosen = planned_configurations(configs, plant)
    start = time.monotonic()
    first: dict[str, Any] = {}
    sweeper = RankSweeper() if ranks else None  # its rank pools serve every model of the run
    if ranks or any(c.get("compile_cache") == "warm" for c in chosen):
        fork_server()  # started now, its imports overlap the first compiles instead of delaying a fork

    @settings(max_examples=models, database=None, deadline=None, suppress_health_check=list(HealthCheck),
              phases=[hypothesis.Phase.generate] + ([hypothesis.Phase.shrink] if shrink else []), print_blob=False)
    @hypothesis.seed(seed)
    @given(model_descs(max_layers=max_layers, meshes=RANK_MESHES if ranks else E2E_MESHES, min_layers=2, selects=True),
           st.just(None))
    def prop(desc: ModelDesc, _: None) -> None:
        if first:  # shrinking the first failure: only its configuration is re-judged
            report = (sweeper.sweep(desc, [first["options"]], seed)[0] if sweeper
                      else judge(desc, first["options"], seed))
            why = failed(report)
            if why:
                first.update(model=desc.to_json(), why=why)
                _fail(why)
            return
        outcome.models += 1
        try:
            reports = sweeper.sweep(desc, chosen, seed) if sweeper else sweep(desc, chosen, seed)
        except BaselineFailed as exc:
            outcome.invalid.append(str(exc))
            return
        for report in reports:
            outcome.compiles += 1
            outcome.reports.append({"model": desc.to_json(), **report})
            why = failed(report)
            if progress is not None:
                progress(f"{'FAIL' if why else 'ok  '} {len(desc.layers)} layers {report['options']}: "
                         f"launches {report['launches']}" + (f": {why}" if why else ""))
            if why:
                outcome.failures.append({"model": desc.to_json(), "options": report["options"], "why": why})
                if shrink and not first:
                    first.update(options=report["options"], model=desc.to_json(), why=why)
                    _fail(why)

    try:
        prop()
    except (AssertionError, hypothesis.errors.FlakyFailure):
        if not first:
            raise  # not a judged failure: a harness error, reported as it is
        outcome.failures.append({"model": first["model"], "options": first["options"], "why": first["why"],
                                 "shrunk": True})
    finally:
        if sweeper is not None:
            sweeper.close()
    outcome.seconds = time.monotonic() - start
    return outcome


__all__ = ["E2E_MESHES", "RANK_MESHES", "Outcome", "planned_configurations", "run"]
