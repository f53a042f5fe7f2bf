"""A verification case: one graph plus everything a target is asked to plan it with.

Planner arguments are kept as raw JSON values (not BucketPolicy objects), so deliberately
broken module plans, policies and group ranks can be stored and replayed like any other case.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Optional

from fsdp_verify.graph.spec import GraphSpec, graph_from_json
from fsdp_verify.graph.values import SpecError, decode, encode
from fsdp_verify.model.spec_params import SpecParams, from_json as spec_params_from_json


@dataclass(frozen=True)
class PlanArgs:
    """Planner inputs beyond the graph.

    ``group_ranks=None`` means: on each rank, the graph's own groups as that rank sees them,
    minus ``omit_groups`` (collectives on those groups are then unknown to the planner).
    """

    group_ranks: Optional[dict] = None
    omit_groups: tuple = ()
    module_bucket_plans: Any = None
    policy: Optional[dict] = None
    pp_degree: int = 1
    dp_mode: str = "fsdp"

    def to_json(self) -> dict:
        """Typed JSON (tuples and odd values survive)."""
        return {"group_ranks": encode(self.group_ranks, "plan_args.group_ranks"),
                "module_bucket_plans": encode(self.module_bucket_plans, "plan_args.module_bucket_plans"),
                "policy": encode(self.policy, "plan_args.policy"),
                "pp_degree": encode(self.pp_degree, "plan_args.pp_degree"),
                "dp_mode": encode(self.dp_mode, "plan_args.dp_mode"),
                "omit_groups": list(self.omit_groups)}


def plan_args_from_json(doc: Any, path: str = "plan_args") -> PlanArgs:
    """Decode PlanArgs; unknown keys are an error."""
    if not isinstance(doc, dict):
        raise SpecError(path, "must be an object")
    unknown = set(doc) - {"group_ranks", "module_bucket_plans", "policy", "pp_degree", "dp_mode", "omit_groups"}
    if unknown:
        raise SpecError(path, f"unknown keys {sorted(unknown)}")
    values = {key: decode(value, f"{path}.{key}") for key, value in doc.items()}
    omit = values.get("omit_groups", [])
    if not isinstance(omit, list) or not all(isinstance(name, str) for name in omit):
        raise SpecError(f"{path}.omit_groups", "must be a list of group names")
    values["omit_groups"] = tuple(omit)
    return PlanArgs(**values)


@dataclass(frozen=True)
class Case:
    """A graph, its planner arguments and the seed of its per-rank input values."""

    graph: GraphSpec
    plan_args: PlanArgs = field(default_factory=PlanArgs)
    seed: int = 0
    label: str = ""
    spec: SpecParams = field(default_factory=SpecParams)  # the [I] settings it is judged under
    target_options: tuple[tuple[str, Any], ...] = ()  # the target configuration drawn for it (sorted)

    def group_ranks(self, rank: int) -> dict:
        """What the planner is told on ``rank``."""
        if self.plan_args.group_ranks is not None:
            return self.plan_args.group_ranks
        return {name: ranks for name, ranks in self.graph.group_ranks(rank).items()
                if name not in self.plan_args.omit_groups}

    def __repr__(self) -> str:
        # Short on purpose: Hypothesis prints a failing example's repr (and warns past 10 kB), and
        # the whole case lives in its corpus file, not in a log line.
        options = f", {len(self.target_options)} target options" if self.target_options else ""
        return (f"Case({self.label or 'unlabelled'!r}, {len(self.graph.nodes)} nodes, "
                f"{len(self.graph.params)} parameters, seed={self.seed}{options})")

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """Hypothesis's (and IPython's) pretty printer would walk every dataclass field."""
        printer.text(repr(self))

    def with_args(self, **changes: Any) -> "Case":
        """The same case with other planner arguments."""
        return replace(self, plan_args=replace(self.plan_args, **changes))

    def to_json(self) -> dict:
        """Typed JSON document of the case."""
        doc = {"graph": self.graph.to_json(), "plan_args": self.plan_args.to_json(), "seed": self.seed,
               "label": self.label}
        settings = self.spec.to_json()
        if settings:
            doc["spec_params"] = settings
        if self.target_options:
            doc["target_options"] = dict(self.target_options)
        return doc


def case_from_json(doc: Any, path: str = "") -> Case:
    """Decode a case document; errors name the field."""
    if not isinstance(doc, dict):
        raise SpecError(path, "a case must be a JSON object")
    where = f"{path}." if path else ""
    if "graph" not in doc:
        raise SpecError(f"{where}graph", "missing")
    try:
        graph = graph_from_json(doc["graph"])
    except SpecError as exc:
        raise SpecError(f"{where}graph.{exc.path}".rstrip("."), exc.reason) from None
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise SpecError(f"{where}seed", "must be an integer")
    label = doc.get("label", "")
    if not isinstance(label, str):
        raise SpecError(f"{where}label", "must be a string")
    try:
        spec = spec_params_from_json(doc.get("spec_params", {}))
    except ValueError as exc:
        raise SpecError(f"{where}spec_params", str(exc)) from None
    options = doc.get("target_options", {})
    if not isinstance(options, dict) or not all(
            isinstance(k, str) and (v is None or isinstance(v, (str, bool, int, float))) for k, v in options.items()):
        raise SpecError(f"{where}target_options", "must be an object of option name -> JSON scalar")
    return Case(graph, plan_args_from_json(doc.get("plan_args", {}), f"{where}plan_args"), seed, label, spec,
                tuple(sorted(options.items())))
