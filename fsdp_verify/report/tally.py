"""The tally of a campaign (or one worker of it): counts, failures and decision coverage."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Optional

from fsdp_verify.graph.collectives import BUCKETED
from fsdp_verify.model.classes import FailureClass


@dataclass
class ReproTally:
    """What the standalone repros of a campaign's defect candidates showed (engine/repro.py)."""

    reproduced: int = 0      # failed on torch alone: upstream defects
    not_reproduced: int = 0  # bitwise equal on real ranks: harness limitations
    unjudged: int = 0        # the script could not run, broke or timed out: still candidates
    skipped: str = ""        # why the repros did not run at all (a weakened run says so)

    @property
    def ran(self) -> int:
        return self.reproduced + self.not_reproduced + self.unjudged

    def to_json(self) -> dict:
        return {"reproduced": self.reproduced, "not_reproduced": self.not_reproduced, "unjudged": self.unjudged,
                "skipped": self.skipped}

_EXCUSED = frozenset(c.value for c in FailureClass if c.excused)


@dataclass
class Result:
    """What a campaign saw: counts, per-checker failures, decision coverage, saved cases."""

    examples: int = 0  # generated examples judged (shrink steps are counted apart)
    shrink_steps: int = 0
    seconds: float = 0.0
    by_checker: Counter = field(default_factory=Counter)
    decisions: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    invalid: int = 0
    first_failure: Optional[tuple[int, float]] = None  # (examples, seconds) when the first failure appeared
    repeats: int = 0  # failing examples whose bug signature was already shrunk and saved
    signatures: set = field(default_factory=set)  # of every saved failure
    bug_signatures: set = field(default_factory=set)  # of those saved on input the target accepts
    skipped: Counter = field(default_factory=Counter)  # "checker: why" -> cases it could not judge
    output_elements: int = 0  # output elements of the cases run
    judged_elements: int = 0  # of those, the elements the numerics oracle compared
    # Graph nodes times ranks over the examples judged: what a campaign's CPU grows with, so two
    # runs whose draws differ in size compare per node-rank, not per example.
    node_ranks: int = 0
    proofs: Counter = field(default_factory=Counter)  # what each verdict rested on (PROOFS), summed over cases
    interrupted: bool = False  # stopped early by SIGINT/SIGTERM
    harness_errors: int = 0  # the harness itself failed (a lost worker, an accounting error): never a pass
    notes: list[str] = field(default_factory=list)  # things the user should know (files left alone, ...)
    ranks: dict = field(default_factory=dict)  # simulated or real ranks: backend, device, rank counts (real mode)
    repro: ReproTally = field(default_factory=ReproTally)
    shrunk: bool = True  # failures were shrunk before saving (not --no-shrink)
    isolated: bool = True  # each case's target and checkers ran in a killable child (not --in-process)
    forks: int = 0  # child processes the isolation forked (one, plus one per case that retired its child)
    output_kept: bool = True  # the children's output was kept per case, not printed (--show-target-output)
    cpu_by_stage: dict = field(default_factory=dict)  # CPU seconds by stage (engine/stages.py), all processes
    # Bugs the corpus folder held before the run (corpus/known.py): signature -> (file, excused),
    # what was read (folder, --rediscover, files unsigned or unreadable; None: no campaign read
    # one), and how often each file's bug was met again.
    known: dict = field(default_factory=dict)
    known_read: Optional[dict] = None
    known_sightings: Counter = field(default_factory=Counter)
    effect: Counter = field(default_factory=Counter)  # what the rewrites did to the collectives (EFFECT)
    has_planner: Optional[bool] = None  # the target plans in the reference's format (None: not said)

    @property
    def vacuous(self) -> bool:
        """No judged case was fused, though at least ``MIN_FUSABLE`` held two launches of one kind on
        one group: the checks judged no bucket, so the run proved nothing of the target's bucketing.
        Such a pair may be one the spec forbids fusing (across phases, a dependency between them), so
        a few of them are no evidence: a short run or a rule hunt on a correct pass is not vacuous."""
        return self.effect["fusable"] >= MIN_FUSABLE and self.effect["fused"] == 0

    def fails_fusion(self, required: bool) -> bool:
        """``--require-fusion``'s verdict: a vacuous run fails it, unless it was stopped early."""
        return required and self.vacuous and not self.interrupted

    def merge(self, other: "Result") -> None:
        self.examples += other.examples
        self.shrink_steps += other.shrink_steps
        self.seconds = max(self.seconds, other.seconds)
        self.decisions.update(other.decisions)
        for failure in other.failures:
            self.add_failure(failure)
        self.invalid += other.invalid
        self.repeats += other.repeats
        self.skipped.update(other.skipped)
        self.output_elements += other.output_elements
        self.judged_elements += other.judged_elements
        self.node_ranks += other.node_ranks
        self.proofs.update(other.proofs)
        self.interrupted = self.interrupted or other.interrupted
        self.harness_errors += other.harness_errors
        self.notes.extend(other.notes)
        self.ranks = merge_ranks(self.ranks, other.ranks)
        self.isolated = self.isolated and other.isolated
        self.shrunk = self.shrunk and other.shrunk
        self.forks += other.forks
        self.output_kept = self.output_kept and other.output_kept
        for stage, seconds in other.cpu_by_stage.items():
            self.cpu_by_stage[stage] = self.cpu_by_stage.get(stage, 0.0) + seconds
        self.known = self.known or other.known  # every worker read the same folder
        self.known_read = self.known_read or other.known_read
        self.known_sightings.update(other.known_sightings)
        self.effect.update(other.effect)
        self.has_planner = other.has_planner if self.has_planner is None else self.has_planner

    def add_failure(self, failure: dict) -> None:
        """A failure another worker saved; one bug found by two workers is one failure (by its
        signature, the root cause), counted once by checker and the second time as a repeat."""
        key = tuple(failure.get("signature") or ()) or id(failure)
        excused = failure.get("class") in _EXCUSED
        if any((tuple(f.get("signature") or ()) or id(f)) == key and (excused or f.get("class") not in _EXCUSED)
               for f in self.failures):
            self.repeats += 1  # an excused sighting never hides a later one on accepted input
            return
        self.failures.append(failure)
        self.by_checker.update(failure.get("checkers", []))

    def to_json(self) -> dict:
        return {"examples": self.examples, "shrink_steps": self.shrink_steps, "seconds": round(self.seconds, 3),
                "examples_per_second": round(self.examples / self.seconds, 3) if self.seconds else None,
                "failures_by_checker": dict(self.by_checker), "invalid_cases": self.invalid,
                "repeats_of_known_bugs": self.repeats,
                "skipped_checks": dict(self.skipped), "interrupted": self.interrupted, "harness_errors": self.harness_errors, "notes": self.notes,
                "output_elements": self.output_elements, "judged_elements": self.judged_elements,
                "node_ranks": self.node_ranks,
                "proofs": {key: self.proofs[key] for key in PROOFS},
                "decisions": {f"{a}:{r}": n for (a, r), n in sorted(self.decisions.items())},
                "failures": self.failures, "ranks": self.ranks, "repro": self.repro.to_json(),
                "isolation": {"isolated": self.isolated, "forks": self.forks, "output_kept": self.output_kept}, "shrunk": self.shrunk,
                "known_from_corpus": None if self.known_read is None else
                {**self.known_read, "bugs": len(self.known), "sightings": dict(self.known_sightings)},
                "cpu_by_stage": {stage: round(seconds, 3) for stage, seconds in sorted(self.cpu_by_stage.items())},
                "effect": {key: self.effect[key] for key in EFFECT}, "vacuous": self.vacuous,
                "has_planner": self.has_planner}


# What the ordering, numerics and planner verdicts rested on: schedule segments proved by the
# lockstep witness or by z3, cases whose outputs numerics compared on the shared (coded) runs or on
# plain runs (where codes could have hidden something), and later-round plans judged against the
# graph seen in the target's own run or a replay of its earlier rounds, worlds whose ranks were
# made to disagree (the exchange checker builds one for a sample of cases), and worlds whose ranks'
# graphs the spec itself plans differently (uneven shards), which the target rightly refused: only
# the planner judged those, never a rewrite; cases whose target ran with its loggers at DEBUG; and
# draws from a global generator that the target's callers restore (no finding, so counted here).
PROOFS = ("ordering_segments_lockstep", "ordering_segments_z3", "numerics_shared_runs", "numerics_plain_runs",
          "planner_rounds_watched", "planner_rounds_replayed", "layout_proved", "layout_two_runs", "layout_tested",
          "exchange_divergent_worlds", "planner_disagreements_stopped", "target_debug_logs",
          "generators_excused")


def proofs_of(metrics: dict) -> Counter:
    """One case's contribution to ``Result.proofs``, from its checkers' metrics."""
    ordering, numerics, planner = metrics.get("ordering", {}), metrics.get("numerics", {}), metrics.get("planner", {})
    layout = metrics.get("layout", {})
    runs = str(numerics.get("runs", ""))
    return Counter({"ordering_segments_lockstep": ordering.get("segments_by_lockstep", 0),
                    "ordering_segments_z3": ordering.get("segments_by_z3", 0),
                    "numerics_shared_runs": int(runs == "shared"), "numerics_plain_runs": int(runs.startswith("plain")),
                    "planner_rounds_watched": planner.get("later_rounds_watched", 0),
                    "planner_rounds_replayed": planner.get("later_rounds_replayed", 0),
                    "layout_proved": int(layout.get("proved") is True),
                    "layout_two_runs": int(layout.get("proved") is False and layout.get("two_digits") is True),
                    "layout_tested": int(layout.get("proved") is False and layout.get("two_digits") is not True),
                    "exchange_divergent_worlds": metrics.get("exchange", {}).get("divergent_worlds", 0),
                    "planner_disagreements_stopped": planner.get("disagreements_stopped", 0),
                    "target_debug_logs": metrics.get("target", {}).get("debug_logs", 0),
                    "generators_excused": metrics.get("generators", {}).get("excused", 0)})


# What the rewrites did: cases judged with a rewrite, those whose originals held two launches of one
# kind on one group (something to fuse), those whose rewrite holds fewer launches of some kind
# (fused) or more (grew), those whose rewrite differs from its original in any node or its order
# (changed: a scheduling pass changes graphs it fuses nothing in), and launches of each kind summed
# over ranks, before and after.
KINDS = tuple(kind.value for kind in BUCKETED)
MIN_FUSABLE = 20  # cases holding a fusable-looking pair before a run that fused none is called vacuous
EFFECT = ("rewritten", "fusable", "fused", "grew", "changed",
          *(f"{when}:{kind}" for when in ("before", "after") for kind in KINDS))


def launches_text(effect: Counter) -> str:
    """``all-gather 41 -> 36, reduce-scatter 31 -> 26``: each kind's launches before and after
    (summed ``EFFECT`` counts), kinds with none left out; '' when there are none."""
    return ", ".join(f"{kind.replace('_', '-')} {effect['before:' + kind]:,} -> {effect['after:' + kind]:,}"
                     for kind in KINDS if effect["before:" + kind] or effect["after:" + kind])


def effect_of(metrics: dict) -> Counter:
    """One case's contribution to ``Result.effect``, from ``metrics["effect"]`` (a case whose
    target raised has none)."""
    effect = metrics.get("effect")
    if not effect:
        return Counter()
    before, after = effect["before"], effect["after"]
    counts = Counter({"rewritten": 1, "fusable": int(bool(effect["fusable"])),
                      "fused": int(any(after.get(k, 0) < n for k, n in before.items())),
                      "grew": int(any(after.get(k, 0) > n for k, n in before.items())),
                      "changed": int(bool(effect.get("changed")))})
    counts.update({f"before:{k}": before.get(k, 0) for k in KINDS})
    counts.update({f"after:{k}": after.get(k, 0) for k in KINDS})
    return counts


def merge_ranks(a: dict, b: dict) -> dict:
    """Two workers' rank reports as one: counts summed, placements and events joined."""
    if not a or not b:
        return dict(a or b)
    merged = {**a}
    for key in ("cases", "executed", "restarts", "seconds"):
        if key in b:
            merged[key] = a.get(key, 0) + b[key]
    for key in ("not_run", "findings"):
        if key in b:
            merged[key] = dict(Counter(a.get(key, {})) + Counter(b[key]))
    for key in ("backend", "device"):
        if key in b:
            merged[key] = ",".join(sorted((set(a.get(key, "").split(",")) | set(b[key].split(","))) - {"", "none started"})) \
                or "none started"
    if "rank_counts" in b:
        merged["rank_counts"] = sorted(set(a.get("rank_counts", [])) | set(b["rank_counts"]))
    if "placements" in b:
        merged["placements"] = {**a.get("placements", {}), **b["placements"]}
    if "events" in b:
        merged["events"] = (a.get("events", []) + b["events"])[-20:]
    return merged
