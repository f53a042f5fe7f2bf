"""The spec's expected decisions of a hand-made corpus case, checked against any planner.

A rule case (``corpus/rules``) says in its file which decision the spec demands: the launch it
breaks is skipped for the named rule, the named pair is split for the named reason, a list of
launches forms one bucket, or the arguments are refused with the spec's message. Replaying it
against a target with a planner checks those decisions, not only that nothing else failed, so
the case pins the rule its name claims and not whatever the reference happened to do.
"""

from __future__ import annotations

from fsdp_verify.model import spec_params
from fsdp_verify.checks.findings import Finding
from fsdp_verify.corpus.files import Entry
from fsdp_verify.execute.world import build_world
from fsdp_verify.targets.base import Target

NAME = "expected"


def _members(case, launches: list[str]) -> list[tuple[str, str]]:
    return sorted((str(case.graph.node(n).meta.get("param_name")), str(case.graph.node(n).meta.get("comm_type")))
                  for n in launches)


def check_expected(target: Target, entry: Entry) -> list[Finding]:
    """Findings for each expected decision the target's first-round plan of the first rank lacks."""
    expected, case = entry.expected, entry.case
    if not expected or not target.has_planner:
        return []
    rank = min(case.graph.world())
    module = build_world(case)[rank]
    try:
        with spec_params.use(case.spec):
            plan = target.plan(case, module, rank).to_dict()
    except ValueError as exc:
        if expected.get("error") and expected["error"] in str(exc):
            return []
        return [Finding(NAME, f"planning raised {exc!r}; the spec expects "
                              f"{'the error ' + repr(expected['error']) if expected.get('error') else 'a plan'}",
                        rule="planning_raised")]
    if expected.get("error"):
        return [Finding(NAME, f"invalid arguments were accepted; the spec expects the error {expected['error']!r}",
                        rule="invalid_arguments_accepted")]
    decisions = plan["decisions"]
    findings = []
    skips = {d["node"]: d["reason"] for d in decisions if d["action"] == "skip"}
    for node, reason in expected.get("skips", {}).items():
        if skips.get(node) != reason:
            findings.append(Finding(NAME, f"{node} must be skipped as {reason} (spec 2.5); the plan says "
                                          f"{skips.get(node, 'candidate')}", nodes=(node,), rule="skip_expected"))
    for split in expected.get("splits", []):
        want = {"node": split["node"], "previous_node": split["previous_node"], "action": "split",
                "reason": split["reason"]}
        if want not in decisions:
            found = [d for d in decisions if d.get("node") == split["node"] and d["action"] != "skip"]
            findings.append(Finding(NAME, f"{split['node']} must be split from {split['previous_node']} for "
                                          f"{split['reason']} (spec 2.7); the plan has {found or 'no such split'}",
                                    nodes=(split["node"],), rule="split_expected"))
    for node in expected.get("singletons", []):
        if {"node": node, "action": "singleton", "reason": "oversized"} not in decisions:
            findings.append(Finding(NAME, f"{node} must get an oversized singleton decision (spec 2.7)", nodes=(node,),
                                    rule="singleton_expected"))
    buckets = [sorted((m["param_name"], m["kind"]) for m in b["members"]) for b in plan["buckets"]]
    for launches in expected.get("together", []):
        if _members(case, launches) not in buckets:
            findings.append(Finding(NAME, f"{launches} must form exactly one bucket; the plan's buckets are "
                                          f"{[[name for name, _ in b] for b in buckets][:6]}", nodes=tuple(launches),
                                    rule="bucket_expected"))
    return findings
