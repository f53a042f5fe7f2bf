"""Real mode, harness side: the case planned, rewritten and run on real rank processes.

Each rank process (``execute/ranks/rank_side.py``) plans and rewrites its own graph under its own
``PYTHONHASHSEED`` (the harness's seed + rank x 7919) and environment, exchanges plan digests over
the real process group as the pass driver does, and runs its original and rewritten graph with real
collectives on exact inputs. This checker reports what in-process simulation cannot see:

- **rank-dependent planning**: the ranks' digests disagree (or their plans, their number of plans or
  of digest-exchange rounds, or whether the target raised), with each rank's hash seed, digest and
  flight record;
- **a real failure**: a rank dies, raises or hangs past the deadline (``RankFailure``: the rank, its
  last collective; the pool restarts and the next case runs). A death is confirmed by running the
  whole case again: one that recurs is the finding, one that does not (an outside kill such as the
  OOM killer) leaves the rerun's verdict and is counted in the report;
- **real vs simulated**: a real output that differs from the simulated world's on the same graphs;
- **rewritten vs original (real)**, and ranks whose own rewrites do not run together, unless the
  simulated checks already reported that case (``known``), so a real-mode replay keeps their verdicts.

A case the simulated checks found invalid, or whose original outputs are not finite, is planned on
the ranks but its outputs are not compared (NaN payloads may differ between devices): the reason is
recorded, never a pass. A target whose plans carry no digests (no ``to_dict()``) cannot have its
planning compared across ranks: said as the case's reason too.

Pools are kept per world size and reused across cases (a rank costs seconds to start); a pool that
cannot start is not retried for that world size: every later case gets the reason, as the harness's
failure, never a finding against the target. A case is run on real ranks for a ``fraction`` of cases
(chosen by the case's content, so a replay chooses the same; a shrink step always runs, since a
shrunk case has other content); a case with more ranks than this machine runs is skipped with the
reason (replay it under ``torchrun``: ``fsdp_verify.execute.ranks.torchrun``).

This checker is not run inside a case's forked child by ``check_all``: its pools outlive cases, so
the campaign, replay and gate call ``judge`` in their own process after ``check_all``. The
registered ``CHECKER`` gives the name, order and summary (the catalogue's planted bugs name it) and
says so as its skip reason when a shrink step asks ``check_all`` for it.
"""

from __future__ import annotations

import json
import os
import signal
import time
import zlib
from collections import Counter
from dataclasses import dataclass, replace
from typing import Optional

import torch

from fsdp_verify.graph.values import nonfinite
from fsdp_verify.model.case import Case
from fsdp_verify.model.names import RANK_MODES
from fsdp_verify.execute.ranks.pool import PoolStartFailure, RankFailure, RankPool, exit_reason, place, reduce_sources
from fsdp_verify.execute.inputs import exact_override
from fsdp_verify.execute.isolation import Child, ChildDied, Served
from fsdp_verify.execute.simulated import draws
from fsdp_verify.execute.world import build_world, simulate
from fsdp_verify.graph import collectives
from fsdp_verify.graph.builder import build_module
from fsdp_verify.graph.ops import resolve_target
from fsdp_verify.graph.spec import graph_from_json
from fsdp_verify.execute.ranks import rank_side
from fsdp_verify.execute.ranks.collectives import compare_outputs
from fsdp_verify.checks.findings import ERROR, INVALID, CheckContext, Finding
from fsdp_verify.checks.numerics import output_names
from fsdp_verify.checks.real_ranks import NAME
from fsdp_verify.checks.planner_oracle import disagreeing_groups

MODES = RANK_MODES
HASH_STRIDE = 7919  # rank r of a pool runs with PYTHONHASHSEED = seed + r * HASH_STRIDE
DEFAULT_MAX_RANKS = 8


def parse_mode(text: str) -> Optional[str]:
    """``simulated`` -> None; ``real`` -> ``auto``; ``real:gloo`` / ``real:nccl`` -> that backend."""
    if text == "simulated":
        return None
    if text in MODES:
        return text.partition(":")[2] or "auto"
    raise ValueError(f"--ranks {text!r}: expected one of {', '.join(MODES)}")


def chosen(case: Case, fraction: float) -> bool:
    """Whether ``case`` runs on real ranks at ``fraction`` (by its content: a replay chooses the same)."""
    if fraction >= 1:
        return True
    text = json.dumps(case.to_json(), sort_keys=True, default=str)
    return zlib.crc32(text.encode()) / 2 ** 32 < fraction


class RealRanks:
    """Rank pools by world size, the real-mode check of one case, and what they did (``report``)."""

    def __init__(self, backend: str = "auto", seed: int = 0, deadline: float = 60.0, fraction: float = 1.0,
                 max_ranks: Optional[int] = None):
        self.backend, self.seed, self.deadline, self.fraction = backend, seed, deadline, fraction
        self.max_ranks = max_ranks or int(os.environ.get("FSDP_VERIFY_MAX_RANKS", DEFAULT_MAX_RANKS))
        self.pools: dict[int, RankPool] = {}
        self.cases = 0  # cases planned on real ranks
        self.executed = 0  # of those, run with real collectives
        self.seconds = 0.0
        self.not_run: Counter = Counter()  # why a case was not (fully) run on real ranks
        self.findings: Counter = Counter()  # real-mode finding kinds
        self.placements: dict[int, str] = {}
        self.placed: dict = {}
        self.broken: dict[int, str] = {}  # world size -> why its pool could not start (not retried)
        self.deaths: Counter = Counter()  # ranks that died during a case: the same on every rerun or not
        self.unreproduced: list[str] = []  # deaths during a case that its rerun did not show again
        self.events: list[str] = []  # failed pool starts and restarts, and what was done about them
        self.retired: Counter = Counter()  # restarts and deaths of pools dropped since: still counted
        self._simulator: Optional[Child] = None

    def __enter__(self) -> "RealRanks":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def env(self, world: int):
        def for_rank(rank: int) -> dict[str, str]:
            return {"PYTHONHASHSEED": str(self.seed + rank * HASH_STRIDE), "RANK": str(rank),
                    "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world)}
        return for_rank

    def pool(self, world: int) -> RankPool:
        """The started pool of ``world`` ranks (ValueError when the backend cannot be had,
        PoolStartFailure or OSError when its ranks cannot start)."""
        if world not in self.pools:
            placement = place(self.backend, world)
            pool = RankPool(world, placement=placement, deadline=self.deadline, handler=rank_side.handle,
                            env=self.env(world))
            self.placements[world] = placement.describe()
            self.placed[world] = placement
            try:
                pool.start()
            except BaseException:
                pool.close()
                raise
            self.pools[world] = pool
        return self.pools[world]

    def simulator(self) -> Child:
        """The session's persistent simulation child (forked on first use)."""
        if self._simulator is None:
            self._simulator = simulation_child()
        return self._simulator

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
        if self._simulator is not None:
            self._simulator.kill()

    def report(self) -> dict:
        """What real mode did, for the summary and JUnit: backend, device and ranks per world size."""
        return {"mode": "real", "requested_backend": self.backend, "fraction": self.fraction,
                "placements": {str(w): text for w, text in sorted(self.placements.items())},
                "hash_seeds": f"{self.seed} + rank x {HASH_STRIDE}",
                "backend": ",".join(sorted({p.backend for p in self.placed.values()})) or "none started",
                "device": ",".join(sorted({p.device for p in self.placed.values()})) or "none started",
                "rank_counts": sorted(self.placed),
                "cases": self.cases, "executed": self.executed, "seconds": round(self.seconds, 3),
                "restarts": self.retired["restarts"] + sum(p.restarts for p in self.pools.values()),
                "dead_between_cases": self.retired["dead_between_cases"]
                + sum(p.dead_between_cases for p in self.pools.values()),
                "events": [*self.events, *(e for p in self.pools.values() for e in p.events)][-20:],
                "rank_deaths": {"reproduced": self.deaths["reproduced"],
                                "not_reproduced": self.deaths["not_reproduced"]},
                "deaths_not_reproduced": self.unreproduced[-20:],
                "not_run": dict(self.not_run), "findings": dict(self.findings),
                "pools_not_started": {str(w): why for w, why in sorted(self.broken.items())}}

    def check(self, case: Case, target: str, known: frozenset = frozenset(), invalid: bool = False,
              force: bool = False) -> tuple[list[Finding], Optional[str]]:
        """The real-mode findings for ``case`` and ``target`` (a name the ranks resolve themselves), and
        why it was not (fully) run, if so. ``known``: checkers that already reported errors for it;
        ``invalid``: the simulated checks found it cannot be judged (planned, never compared);
        ``force``: run it whatever ``fraction`` chooses (a shrink step)."""
        start = time.monotonic()
        try:
            findings, why = self._check_restarting(case, target, known, invalid, force)
            if _died(findings):
                findings, why = self._rerun(case, target, known, invalid, findings)
        finally:
            self.seconds += time.monotonic() - start
        if why:
            self.not_run[why] += 1
        for finding in findings:
            self.findings[finding.details.get("kind", "?")] += 1
        return findings, why

    def _check_restarting(self, case: Case, target: str, known: frozenset, invalid: bool,
                          force: bool) -> tuple[list[Finding], Optional[str]]:
        """``_check``, begun again when the pool could not restart before a phase was sent (a rank
        died between cases and its restart failed): the fresh pool gets ``START_ATTEMPTS`` tries."""
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self._check(case, target, known, invalid, force)
            except _Restart as restart:
                world = len(case.graph.world())
                if attempt == START_ATTEMPTS:
                    return [], self._broken(world, restart.failure)
                self._drop(world)
                self.cases -= 1  # the same case, begun again
                self.events.append(f"pool of {world} ranks could not restart during a case (seed {case.seed}) "
                                   f"({str(restart.failure)[:200]}): the case begins again on a fresh pool")
        raise AssertionError("unreachable")

    def _rerun(self, case: Case, target: str, known: frozenset, invalid: bool,
               first: list[Finding]) -> tuple[list[Finding], Optional[str]]:
        """A rank died during the case: run the whole case again on the restarted pool (plan and
        execute again, since a rank's plan state died with it), up to ``RERUNS`` times. A death that
        every rerun shows again is the target's finding; one that a rerun does not is an outside kill
        (the OOM killer, an operator) or a flaky target: that rerun's verdict stands and the death is
        counted and said, never dropped. Two reruns, so that two outside kills in a row (a busy
        node's OOM killer) are not yet a finding."""
        death = next(f for f in first if f.details.get("kind") == DIED)
        for _ in range(RERUNS):
            self.cases -= 1  # the same case, planned again: counted once
            findings, why = self._check_restarting(case, target, known, invalid, force=True)
            again = next((f for f in findings if f.details.get("kind") == DIED), None)
            if again is None:
                self.deaths["not_reproduced"] += 1
                self.unreproduced.append(f"a case (seed {case.seed}): {death.message[:300]}; a rerun judged the "
                                         f"case, the death did not recur (an outside kill or a flaky target)")
                return findings, why
        self.deaths["reproduced"] += 1
        return [replace(f, message=f"{f.message} (the same on {RERUNS} reruns of the case)",
                        details={**f.details, "rerun": "reproduced"}) if f is again else f
                for f in findings], why

    def _pool_or_why(self, world: int) -> tuple[Optional[RankPool], Optional[str]]:
        """The pool of ``world`` ranks, or why there is none. A start that fails is tried again
        (a rank killed from outside while it joins is a passing fault); ``START_ATTEMPTS`` failures
        in a row are remembered, so a pool that cannot start is not retried on every case."""
        if world in self.broken:
            return None, self.broken[world]
        for attempt in range(1, START_ATTEMPTS + 1):
            try:
                return self.pool(world), None
            except ValueError as exc:  # the backend cannot be had here: no retry helps
                return None, self._broken(world, exc)
            except (RankFailure, OSError) as exc:  # the harness's resource, not the target
                self._drop(world)
                self.events.append(f"pool of {world} ranks: start attempt {attempt} of {START_ATTEMPTS} failed "
                                   f"({type(exc).__name__}: {str(exc)[:200]})")
                last = exc
        return None, self._broken(world, last)

    def _drop(self, world: int) -> None:
        pool = self.pools.pop(world, None)
        if pool is not None:
            pool.close()
            self.retired.update(restarts=getattr(pool, "restarts", 0),
                                dead_between_cases=getattr(pool, "dead_between_cases", 0))
            self.events.extend(getattr(pool, "events", []))

    def _broken(self, world: int, exc: Exception) -> str:
        """Remember why the pool of ``world`` ranks cannot start, and drop it."""
        self._drop(world)
        self.broken[world] = (f"no pool of {world} real ranks could start ({type(exc).__name__}: "
                              f"{str(exc)[:160]})")
        return self.broken[world]

    def _check(self, case: Case, target: str, known: frozenset, invalid: bool = False,
               force: bool = False) -> tuple[list[Finding], Optional[str]]:
        world = sorted(case.graph.world())
        if world != list(range(len(world))):
            return [], f"ranks {world} are not 0..N-1"
        if len(world) > self.max_ranks:
            return [], (f"needs {len(world)} ranks, this machine runs at most {self.max_ranks}: replay it under "
                        f"torchrun across nodes")
        if not force and not chosen(case, self.fraction):
            return [], f"not chosen (--real-fraction {self.fraction:g})"
        pool, why = self._pool_or_why(len(world))
        if pool is None:  # the harness's resource, not the target: said, never the run's end
            return [], why
        self.cases += 1
        exact = reduce_sources(case)
        job = rank_side.RealJob("plan", target, case.to_json(), case.seed, "exact", exact)
        try:
            planned = pool.run({rank: job for rank in world})
        except PoolStartFailure as exc:
            raise _Restart(exc) from exc
        except RankFailure as exc:
            return [_rank_failure("while planning", exc)], None
        findings = planning(case, planned, pool.flight_record())
        statuses = {rank: planned[rank]["status"] for rank in world}
        if findings and _disagreed_as_the_spec_does(case, planned):
            return [], ("not executed: the ranks' plans disagree as the spec's plans of their graphs do "
                        "(spec 3.6 stops the round)")
        if findings:
            return findings, None
        if set(statuses.values()) != {"ok"}:
            return [], "not executed: the target raised on every rank (the simulated checks judge that)"
        undigested = _undigested(planned)
        if invalid:
            return [], ("planned on real ranks, not executed: the simulated checks found the case cannot be judged "
                        "(invalid)" + (f"; {undigested}" if undigested else ""))
        findings, why = self._execute(case, pool, planned, known, exact)
        return findings, "; ".join(w for w in (why, undigested) if w) or None

    def _execute(self, case: Case, pool: RankPool, planned: dict, known: frozenset,
                 exact: tuple) -> tuple[list[Finding], Optional[str]]:
        """Run the ranks' own original and rewritten graphs with real collectives and compare."""
        world = sorted(planned)
        unrunnable = unrunnable_collectives(case, {rank: case.graph for rank in world})
        if unrunnable:
            return [], f"not executed: the original graphs hold collectives no real group can run ({unrunnable[0]})"
        unmovable = gloo_unmovable(case) if pool.backend == "gloo" else None
        if unmovable:
            return [], f"not executed: gloo cannot move {unmovable} (NCCL can; the simulated checks judge it)"
        specs = {rank: graph_from_json(planned[rank]["rewritten"]) for rank in world}
        exact = kept_in_every(exact, specs.values())
        unrunnable = unrunnable_collectives(case, specs)
        if unrunnable:
            if known:
                return [], "not executed: the rewritten graphs hold unrunnable collectives (the simulated checks reported it)"
            return [Finding(NAME, f"the ranks' rewritten graphs hold collectives no real group can run: "
                                  f"{'; '.join(unrunnable[:3])}", details={"kind": "unrunnable_rewrite"},
                            rule="unrunnable_rewrite")], None
        stage, original, rewritten, problem = simulate_isolated(case, specs, exact, self.deadline, self.simulator())
        if stage == "original":  # a case whose originals cannot run is not executed
            return [], f"not executed: the original graphs do not run in the simulated world ({problem})"
        if stage == "rewritten":  # the ranks' own rewrites do not run together (or not within the deadline)
            if known:
                return [], "not executed: the rewritten graphs do not run (the simulated checks reported it)"
            return [Finding(NAME, f"the ranks' own rewritten graphs do not run together (simulated on what each "
                                  f"rank process produced; a real run would hang or fail): {problem}",
                            details={"kind": "rank_rewrites_disagree", "hashseeds": _hashseeds(planned)},
                            rule="rank_rewrites_disagree")], None
        try:
            ran = pool.run({rank: rank_side.RealJob("execute", seed=case.seed, exact_sources=exact) for rank in world})
        except PoolStartFailure as exc:
            raise _Restart(exc) from exc
        except RankFailure as exc:
            if pool.fresh:
                return [_between_phases(pool)], None
            if known:  # the simulated checks already judged this rewrite wrong
                return [], f"not executed cleanly: real ranks failed ({exc.kind}; the simulated checks reported the case)"
            return [_rank_failure("running the graphs", exc)], None
        if pool.fresh:
            return [_between_phases(pool)], None
        self.executed += 1
        nonfinite = _nonfinite(original, "simulated") or _nonfinite({r: ran[r]["original"] for r in world}, "real")
        if nonfinite:  # NaN payloads carry no comparable meaning (and may differ between devices)
            return [Finding(NAME, f"the original graph's {nonfinite} output is not finite, so real outputs cannot be "
                                  f"compared", severity=INVALID, details={"kind": "non_finite"}, rule="non_finite")], \
                "executed, not compared: non-finite original outputs"
        findings = []
        # CUDA's generator draws other numbers than the CPU's the simulated world runs: random ops'
        # results compare between the real runs only
        drawn_apart = pool.device.startswith("cuda") and _draws_random(case, specs)
        for rank in world:
            names = output_names(build_module(specs[rank]))
            pairs = [] if drawn_apart else [
                ("real_vs_simulated", original[rank], ran[rank]["original"], "real vs simulated (original)"),
                ("real_vs_simulated", rewritten[rank], ran[rank]["rewritten"], "real vs simulated (rewritten)")]
            if not known:
                pairs.append(("rewritten_vs_original", ran[rank]["original"], ran[rank]["rewritten"],
                              "rewritten vs original (real)"))
            for kind, expected, actual, what in pairs:
                findings += [Finding(NAME, f.message, f.nodes, {**f.details, "kind": kind}, f.rank, rule=kind)
                             for f in compare_outputs(expected, actual, names, rank, what)]
        return findings, ("executed, not compared with the simulated world: random ops draw from CUDA's generator"
                          if drawn_apart else None)


def _draws_random(case: Case, specs: dict) -> bool:
    """Whether the original graph or a rank's rewritten one holds a random op (read from the specs:
    every rank's original calls the ops the case names)."""
    return any(node.op == "call_function" and draws(resolve_target(node.target))
               for graph in (case.graph, *specs.values()) for node in graph.nodes)


def kept_in_every(names: tuple, graphs) -> tuple:
    """The exact-value sources still present (by name) in every rewritten graph: a source the rewrite
    renamed or replaced would be exact in the original run only, so both runs leave it as it is."""
    present = [{node.name for node in graph.nodes} for graph in graphs]
    return tuple(name for name in names if all(name in names_of for names_of in present))


# dtypes gloo's collectives refuse ("Invalid scalar type"); NCCL moves them as bytes
GLOO_UNMOVABLE = frozenset({"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"})


def gloo_unmovable(case: Case) -> Optional[str]:
    """A dtype of ``case`` that gloo cannot move, when one appears: a parameter or input of it, or
    a cast to it (a float8 all-gather casts its parameter first). Judged on the case, not on a
    rewrite, so that a case is run on real ranks or not whatever the target does."""
    for spec in (*case.graph.params, *case.graph.inputs):
        if spec.dtype in GLOO_UNMOVABLE:
            return spec.dtype
    for node in case.graph.nodes:
        for value in (*node.args, *node.kwargs.values()):
            name = str(value).removeprefix("torch.") if isinstance(value, torch.dtype) else None
            if name in GLOO_UNMOVABLE:
                return name
    return None


def unrunnable_collectives(case: Case, graphs: dict) -> list[str]:
    """Launches no real group can run (an unknown group, a size argument that is not the group's
    size), per rank: the rule of ``collectives.invalid_launches``, on each rank's own graph rather than
    the case's. The simulated world resolves groups by name alone, so only real ranks trip on these."""
    found = []
    for rank, graph in sorted(graphs.items()):
        groups = case.graph.group_ranks(rank)
        for node in graph.nodes:
            if node.op != "call_function" or not collectives.is_sized(node.target):
                continue
            group = collectives.group_of(node)
            why = collectives.unrunnable(node, groups.get(group) if isinstance(group, str) else None, rank)
            if why:
                found.append(f"rank {rank}: {node.name}: {why}")
    return found


@dataclass(frozen=True)
class SimulationRequest:
    """The simulated worlds a real-mode case is compared with: its original graphs, and the ranks'
    own rewritten graphs (``specs``), on exact values at ``exact``."""

    case: Case
    specs: dict
    exact: tuple


def simulate_isolated(case: Case, specs: dict, exact: tuple, deadline: float,
                      child: Optional[Child] = None) -> tuple:
    """The simulated world of the original graphs and of the ranks' own rewritten graphs ``specs``,
    run in a forked child under ``deadline`` seconds per stage: a rank-produced graph that hangs,
    exhausts memory or kills its process fails its stage, never the harness. Returns ``(stage,
    original outputs, rewritten outputs, problem)``: stage ``ok``, or the stage that failed
    (``original`` or ``rewritten``) with what happened. ``child``: a persistent child to serve it
    (a session keeps one, so a case costs no fork); without one, a child forked for this call."""
    mine = child is None
    child = child or simulation_child()
    child.submit(SimulationRequest(case, specs, exact))
    got: dict = {}
    answered = False
    try:
        for stage in ("original", "rewritten"):
            reply = child.receive(deadline)
            if reply is None:
                return stage, None, None, f"did not finish within {deadline:g}s"
            answered = reply.last
            status, payload = reply.message
            if status != "ok":
                return stage, None, None, payload
            got[stage] = {rank: [_unpack(v) for v in values] for rank, values in payload.items()}
    except ChildDied as died:
        answered = True
        return ("rewritten" if got else "original"), None, None, \
            f"the simulating process died ({exit_reason(died.exitcode)})"
    finally:
        if mine or not answered:
            child.kill()  # a hang or a death: this child serves no other case
    return "ok", got["original"], got["rewritten"], ""


def simulation_child() -> Child:
    """A persistent child that simulates real-mode cases. Simulation is pure (fresh modules, fresh
    world per request), so one child may serve many cases; it is replaced after a hang or death,
    and by the isolation's own rules (request count, growth, changed process state)."""
    return Child(_serve_simulation, _simulation_setup)


def _simulation_setup() -> None:
    torch.set_num_threads(1)  # a forked child must not enter the parent's OpenMP team (libgomp is not fork-safe)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops (and kills) this child on a stop


def _serve_simulation(request: SimulationRequest, send) -> Served:
    case = request.case
    override = exact_override(request.exact, case.seed)
    stages = (("original", lambda: build_world(case)),
              ("rewritten", lambda: {rank: build_module(spec) for rank, spec in request.specs.items()}))
    for stage, modules in stages:
        try:
            outputs = simulate(case, modules(), override=override).outputs
        except Exception as exc:  # noqa: BLE001 - said to the harness as this stage's failure
            return Served(("error", f"{type(exc).__name__}: {str(exc)[:1000]}"))
        message = ("ok", {rank: [_pack(v) for v in values] for rank, values in outputs.items()})
        if stage == "rewritten":
            return Served(message)
        send(message)
    raise AssertionError("unreachable")


def _pack(value):
    """A tensor as (dtype, shape, bytes): plain data across the pipe (no shared-memory handles)."""
    if not isinstance(value, torch.Tensor):
        return value
    flat = value.detach().contiguous().cpu().reshape(-1)
    return ("tensor", str(flat.dtype).split(".")[-1], tuple(value.shape), flat.view(torch.uint8).numpy().tobytes())


def _unpack(value):
    if not (isinstance(value, tuple) and len(value) == 4 and value[0] == "tensor"):
        return value
    _, dtype, shape, data = value
    dtype = getattr(torch, dtype)
    if not data:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(dtype).reshape(shape)


def _nonfinite(outputs: dict, where: str) -> str:
    """``"real rank R #I"`` of the first output holding a NaN or an infinity, else ""."""
    for rank, values in sorted(outputs.items()):
        for index, value in enumerate(values):
            if nonfinite(value):
                return f"{where} rank {rank} #{index}"
    return ""


def _undigested(planned: dict) -> str:
    """Why the ranks' plans could not be compared: the target returned plans without digests."""
    plans = sum(result.get("undigested", 0) for result in planned.values())
    if not plans:
        return ""
    return (f"planning not compared across ranks: {plans} plan(s) carry no digests (no to_dict(); each rank's "
            f"rewrite still runs)")


def _hashseeds(planned: dict) -> dict:
    return {rank: result.get("hashseed") for rank, result in sorted(planned.items())}


DIED = "rank_died"
RERUNS = 2  # a rank's death during a case is the target's finding only when it recurs on this many reruns
START_ATTEMPTS = 3  # failed starts in a row before a world size's pool counts as unable to start


class _Restart(Exception):
    """The pool's restart failed before a phase of a case was sent: the case begins again."""

    def __init__(self, failure: PoolStartFailure):
        super().__init__(str(failure))
        self.failure = failure


def _died(findings: list[Finding]) -> bool:
    return any(f.details.get("kind") == DIED for f in findings)


def _between_phases(pool: RankPool) -> Finding:
    """A rank died after planning and the pool restarted before the graphs ran: the fresh ranks
    lack the case's plans, so what they did is no verdict. A death, so the case reruns whole."""
    return Finding(NAME, f"real ranks failed between planning and running the graphs (died): {pool.fresh}",
                   details={"kind": DIED, "ranks": [], "when": "between phases"}, rule=DIED)


def _rank_failure(when: str, exc: RankFailure) -> Finding:
    ranks = ", ".join(map(str, exc.ranks)) or "?"
    return Finding(NAME, f"real ranks failed {when} ({exc.kind}; rank {ranks}): {exc}",
                   details={"kind": f"rank_{exc.kind}", "ranks": list(exc.ranks),
                            "last_collective": {str(r): c for r, c in exc.last_collective.items()},
                            "errors": {str(r): e[-2000:] for r, e in exc.errors.items()}},
                   rule=f"rank_{exc.kind}")


def _disagreed_as_the_spec_does(case: Case, planned: dict) -> bool:
    """Every rank's exchange refused the round for a group whose ranks' graphs the spec itself plans
    differently (uneven shards): the refusal is right, not rank-dependent planning."""
    groups = {result.get("group") for result in planned.values() if result["status"] == "disagree"}
    if not case.graph.uneven or not groups or len(groups) > 1 or \
            any(result["status"] != "disagree" for result in planned.values()):
        return False
    return groups <= set(disagreeing_groups(case, build_world(case)))


def planning(case: Case, planned: dict, flight: dict) -> list[Finding]:
    """Rank-dependent planning: a digest mismatch in the exchange, a target that raised on some ranks
    only, ranks that ran different numbers of exchange rounds (one left while a peer waited in another
    round), ranks of one group that returned different numbers of plans, or plans whose digests differ."""
    statuses = {rank: result["status"] for rank, result in sorted(planned.items())}
    seeds = _hashseeds(planned)
    flights = {str(rank): result.get("flight") or flight.get(rank, "") for rank, result in sorted(planned.items())}
    details = {"statuses": statuses, "hashseeds": seeds, "last_collective": flights}
    disagree = [result for _, result in sorted(planned.items()) if result["status"] == "disagree"]
    if disagree:
        first = disagree[0]
        return [Finding(NAME, f"rank-dependent planning: {first['message']} (digest per rank "
                              f"{_short(first['seen'])}; PYTHONHASHSEED per rank {seeds}; last entered: "
                              f"{'; '.join(flights.values())}): on a cluster every rank stops here, or hangs "
                              f"without the digest exchange",
                        details={**details, "kind": "rank_dependent_planning", "group": first["group"],
                                 "round": first["round"], "digests": first["seen"],
                                 "exchanged": first.get("exchanged", [])},
                        rule="digest_exchange_disagrees")]
    raised = sorted(rank for rank, status in statuses.items() if status == "target_error")
    if raised and len(raised) < len(statuses):
        result = planned[raised[0]]
        return [Finding(NAME, f"rank-dependent planning: the target raised on ranks {raised} only "
                              f"({result.get('error_type')}: {result.get('message')}); PYTHONHASHSEED per rank {seeds}",
                        details={**details, "kind": "rank_dependent_outcome",
                                 "traceback": result.get("traceback", "")},
                        rule="rank_dependent_outcome")]
    if raised:
        return []
    stopped = sorted(rank for rank, status in statuses.items() if status == "peer_stopped")
    if stopped:
        result = planned[stopped[0]]
        return [Finding(NAME, f"rank-dependent planning: the ranks ran different numbers of digest-exchange rounds "
                              f"({result.get('message')}; ranks {stopped} were left in a round; PYTHONHASHSEED per "
                              f"rank {seeds}; last entered: {'; '.join(flights.values())}): on a cluster the ranks "
                              f"hang in mismatched collectives",
                        details={**details, "kind": "rank_dependent_planning", "stopped": stopped},
                        rule="exchange_rounds_differ")]
    members_of: dict[tuple, set] = {}  # (group, its ranks as a rank sees them) -> the ranks that planned it
    for rank, result in sorted(planned.items()):
        for rnd in result["digests"]:
            for group in rnd:
                members = tuple(case.graph.group_ranks(rank).get(group, ()))
                members_of.setdefault((group, members), set()).add(rank)
    for (group, members), ranks in sorted(members_of.items()):
        counts = {rank: sum(group in rnd for rnd in planned[rank]["digests"])  # plans for this group, per rank
                  for rank in sorted(set(members) | ranks) if rank in planned}
        if len(set(counts.values())) > 1:
            return [Finding(NAME, f"rank-dependent planning: the ranks of group {group} returned different numbers "
                                  f"of plans (per rank {counts}; PYTHONHASHSEED per rank {seeds})",
                            details={**details, "kind": "rank_dependent_planning", "group": group,
                                     "plans": {str(r): n for r, n in counts.items()}},
                            rule="plan_counts_differ")]
    for index in range(max((len(r["digests"]) for r in planned.values()), default=0)):
        by_group: dict[tuple, dict[int, str]] = {}  # (group, its ranks as this rank sees them): one subgroup
        for rank, result in sorted(planned.items()):
            for group, digest in (result["digests"][index] if index < len(result["digests"]) else {}).items():
                members = tuple(case.graph.group_ranks(rank).get(group, ()))
                by_group.setdefault((group, members), {})[rank] = digest
        for (group, _), digests in sorted(by_group.items()):
            if len(set(digests.values())) > 1:
                return [Finding(NAME, f"rank-dependent planning: round {index + 1}: the plans the ranks returned "
                                      f"for group {group} disagree (digest per rank {_short(digests)}; "
                                      f"PYTHONHASHSEED per rank {seeds})",
                                details={**details, "kind": "rank_dependent_planning", "group": group,
                                         "round": index + 1, "digests": digests},
                                rule="plan_digests_differ")]
    return []


def _short(digests: dict) -> dict:
    return {rank: (digest or "none")[:12] for rank, digest in digests.items()}


def open_session(mode: str, seed: int = 0, deadline: Optional[float] = None,
                 fraction: float = 1.0) -> Optional[RealRanks]:
    """A real-mode session for ``--ranks MODE`` (None for ``simulated``); pools start on first use."""
    backend = parse_mode(mode)
    if backend is None:
        return None
    return RealRanks(backend, seed, min(deadline or REAL_DEADLINE, REAL_DEADLINE), fraction)


def session_report(session: Optional[RealRanks]) -> dict:
    """What the summary and JUnit say about ranks: real mode's report, or that the run was simulated."""
    if session is not None:
        return session.report()
    return {"mode": "simulated", "note": "every rank's target ran in the harness's one process (real rank "
                                         "processes, each with its own hash seed: --ranks real)"}


def session_line(session: Optional[RealRanks]) -> str:
    """One line for a replay or gate report: simulated only, or what real mode ran on and did."""
    if session is None:
        return "ranks: simulated in one process (no real rank processes; --ranks real runs them)"
    r = session.report()
    placements = "; ".join(r["placements"].values()) or "no pool started"
    not_run = "; ".join(f"{why}: {n}" for why, n in sorted(r["not_run"].items()))
    return (f"ranks: real ({placements}; hash seeds {r['hash_seeds']}): {r['cases']} cases planned on rank processes, "
            f"{r['executed']} run with real collectives, pool restarts {r['restarts']}"
            + (f"; not on real ranks: {not_run}" if not_run else ""))


def judge(session: RealRanks, case: Case, target: str, findings: list, ctx: Optional[CheckContext] = None,
          only: Optional[tuple] = None) -> list[Finding]:
    """Real-mode findings for one example after the simulated checks gave ``findings`` (while a
    failure shrinks with ``only`` its checkers, the real ranks run only when they are among them,
    and on every shrink step whatever ``--real-fraction`` chooses); a case not (fully) run on real
    ranks has the reason in ``ctx.skipped``. A case the simulated checks found invalid is planned on
    the ranks, never compared."""
    if only is not None and NAME not in only:
        return []
    known = frozenset(f.checker for f in findings if f.severity == ERROR)
    invalid = any(f.severity == INVALID for f in findings)
    if ctx is not None:
        ctx.skipped.pop(NAME, None)  # what check_all's registered stand-in said: judged here instead
    try:
        extra, why = session.check(case, target, known, invalid=invalid, force=only is not None)
    except Exception as exc:  # noqa: BLE001 - as a crashing checker is: a finding, and the run goes on
        return [Finding(NAME, f"checker {NAME} crashed: {type(exc).__name__}: {exc}", details={"kind": "checker_crash"},
                        rule="checker_crash")]
    if why and ctx is not None:
        ctx.skipped[NAME] = why
    return extra


REAL_DEADLINE = 60.0  # seconds a real-mode phase may take before its ranks count as hung

__all__ = ["MODES", "NAME", "RealRanks", "chosen", "judge", "open_session", "parse_mode", "session_report"]
