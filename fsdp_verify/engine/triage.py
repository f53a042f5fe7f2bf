"""What kind of finding a failure is: a defect, a contract mismatch, or a finding on invalid input.

Only a finding on input the target accepts in practice can be a defect of the target. A case
whose graph holds forms the target never receives (its ``contract_mismatches``) is a contract
mismatch; one whose collectives could not run in any real world (a degree that is not its
group's size, an unknown group) is invalid input. A defect of an external target is still only a
*candidate* until a standalone reproduction that imports only torch shows it (docs/findings.md).
"""

from __future__ import annotations

import inspect
from typing import Any, Sequence

from fsdp_verify.engine.signature import ranked
from fsdp_verify.graph import collectives
from fsdp_verify.model.case import Case
from fsdp_verify.model.classes import FailureClass
from fsdp_verify.targets.base import Target

# the values stored in failure records (``FailureClass`` is what code compares)
DEFECT, CANDIDATE, MISMATCH, INVALID_INPUT = (FailureClass.DEFECT.value, FailureClass.CANDIDATE.value,
                                              FailureClass.MISMATCH.value, FailureClass.INVALID_INPUT.value)
CLASSES = tuple(c.value for c in FailureClass)


def invalid_collectives(case: Case) -> list[str]:
    """Launches that no real world could run (``collectives.invalid_launches``)."""
    return collectives.invalid_launches(case.graph)


def classify(target: Target, case: Case, checkers: tuple[str, ...] = (), findings: Sequence[Any] = ()) -> tuple[str, list[str]]:
    """The class of a failure of ``target`` on ``case`` found by ``checkers`` (``findings``: the error
    findings, for targets that excuse one rule rather than a whole checker), with the reasons. A
    target with a reference-format planner is judged on every graph the spec covers (malformed
    collectives must be skipped, not crashed on), so only other targets get ``invalid input``."""
    invalid = [] if target.has_planner else invalid_collectives(case)
    if invalid:
        return INVALID_INPUT, invalid
    # A target written before ``findings`` existed declares ``contract_mismatches(case, checkers)``.
    accepts = "findings" in inspect.signature(target.contract_mismatches).parameters
    mismatches = target.contract_mismatches(case, checkers, findings=findings) if accepts else \
        target.contract_mismatches(case, checkers)
    if mismatches:
        return MISMATCH, mismatches
    external = getattr(target, "external", False)
    return (CANDIDATE, ["needs a standalone reproduction that imports only torch"]) if external else (DEFECT, [])


def excused_alone(target: Target, case: Case, errors: Sequence[Any]) -> tuple[Any, ...]:
    """The errors that ``signature.primary`` must pass over: those the target's contract excuses each
    on its own (``classify`` of that finding alone) that would name the failure before the first
    error not excused so. Empty where every error is excused, or the case is invalid input. Asked
    in naming order and no further than that first error: a failing case's shrink steps ask it
    each time, and the first is mostly not excused."""
    if len(errors) < 2 or (not target.has_planner and invalid_collectives(case)):
        return ()
    alone = []
    for finding in ranked(errors):
        if not FailureClass(classify(target, case, (finding.checker,), [finding])[0]).excused:
            return tuple(alone)
        alone.append(finding)
    return ()


def receives(target: Target, case: Case) -> bool:
    """Whether ``target`` can be judged on ``case`` (already ``normalise``d): no forms it never
    receives (``contract_mismatches`` of the form alone) and, for a target without a reference-format
    planner, no launch that no real world could run: its verdict there, pass or fail, says nothing
    (a failure is invalid input), so a campaign and the gate do not spend cases on it."""
    return not target.contract_mismatches(case) and (target.has_planner or not invalid_collectives(case))
