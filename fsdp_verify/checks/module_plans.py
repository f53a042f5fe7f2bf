"""Module plans from a model (spec 2.2, ``build_module_bucket_plans``), on the case's own names.

The driver turns a model and its configured groups into module plans before it plans (spec 3.3),
so a target's answer decides which parameters may share a bucket. A case is a graph, not a
model: ``graph/skeleton.py`` builds the module tree the graph's parameter names imply, and the
target is asked for the plans of that tree with the case's explicit groups, with block types,
with both, and with each argument broken once. Each answer (a plan or an error message) is
compared with the one spec 2.2 gives, derived here from the skeleton's ``named_modules()``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional

from torch import nn

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.planner_oracle import expected_argument_error
from fsdp_verify.checks.registry import Checker
from fsdp_verify.graph.skeleton import HEAD, Block, skeleton

NAME = "module_plans"
MODEL_ERROR = "model must be a torch.nn.Module"
TYPES_ERROR = "block_module_types must be a tuple of torch.nn.Module subclasses"
ABSENT = "fsdp_verify_absent_scope"  # a module no skeleton holds: skeleton names come from a graph


@dataclass(frozen=True)
class Call:
    """One question put to the target: a model, block types and explicit groups."""

    what: str
    model: Any
    block_module_types: Any
    module_bucket_plans: Any


@dataclass(frozen=True)
class Answer:
    """Module plans, or the message of the ValueError that refuses the call."""

    plans: Optional[tuple] = None
    error: Optional[str] = None


def _normalised(groups: list) -> tuple:
    return tuple((entry,) if isinstance(entry, str) else tuple(entry) for entry in groups)


def expected_answer(call: Call, args: Any) -> Answer:
    """Spec 2.2 for ``call``: checks in the spec's order, then outermost blocks and explicit groups."""
    if not isinstance(call.model, nn.Module):
        return Answer(error=MODEL_ERROR)
    types = call.block_module_types
    if not isinstance(types, tuple) or not all(isinstance(t, type) and issubclass(t, nn.Module) for t in types):
        return Answer(error=TYPES_ERROR)
    explicit = call.module_bucket_plans
    problem = expected_argument_error(replace(args, module_bucket_plans=explicit, policy=None), {})
    if problem is not None:
        return Answer(error=problem)
    modules = dict(call.model.named_modules())
    for group in _normalised(list(explicit)):
        for fqn in group:
            if fqn not in modules:
                return Answer(error=f"Module bucket scope does not exist in model: {fqn!r}")
    blocks: list[str] = []
    for fqn, module in modules.items():
        if fqn and types and isinstance(module, types) and not any(fqn.startswith(b + ".") for b in blocks):
            blocks.append(fqn)
    combined = [*blocks, *explicit]
    problem = expected_argument_error(replace(args, module_bucket_plans=combined, policy=None), {})
    return Answer(error=problem) if problem is not None else Answer(plans=_normalised(combined))


def _answer(ctx: CheckContext, call: Call) -> Answer | BaseException:
    try:
        plans = ctx.target.module_plans(call.model, call.block_module_types, call.module_bucket_plans)
    except ValueError as exc:
        return Answer(error=str(exc))
    except Exception as exc:  # noqa: BLE001 - any other failure is a wrong answer, judged below
        return exc
    return Answer(plans=plans)


def calls(ctx: CheckContext) -> list[Call]:
    """The questions for this case: its explicit groups (when a list), block types, both, block types
    that name the model's own type, and one broken argument each (a missing scope, a non-module
    model, block types in a list or not modules)."""
    model = skeleton(param.fqn for param in ctx.case.graph.params)
    own = ctx.case.plan_args.module_bucket_plans
    own = own if isinstance(own, (list, tuple)) else ()
    return [Call("the case's module plans", model, (), own),
            Call("block types", model, (Block,), ()),
            Call("block types and the case's module plans", model, (Block,), own),
            Call("block types and a module outside every block", model, (Block,), [[HEAD]]),
            # the model's own type too: the model is never a block (its FQN is empty), its children may be
            Call("block types that include the model's own type", model, (Block, type(model)), ()),
            Call("a scope the model lacks", model, (), [[ABSENT]]),
            Call("a model that is no nn.Module", object(), (), ()),
            Call("block types in a list", model, [Block], ()),
            Call("a block type that is no nn.Module", model, (int,), ())]


def check_module_plans(ctx: CheckContext) -> list[Finding]:
    """Every call's answer is the spec's: the same plans, or a ValueError with its message."""
    findings = []
    for call in calls(ctx):
        want, got = expected_answer(call, ctx.case.plan_args), _answer(ctx, call)
        if isinstance(got, BaseException):
            findings.append(Finding(NAME, f"{call.what}: the target raised {type(got).__name__}: {got}; spec 2.2 "
                                          f"says {want.plans if want.error is None else want.error!r}",
                                    rule="module_plans_raised"))
        elif want.error is not None and got.error is None:
            findings.append(Finding(NAME, f"{call.what}: the target returned {got.plans}; spec 2.2 refuses it with "
                                          f"{want.error!r}", rule="module_plans_accepted_invalid"))
        elif want.error is not None and want.error not in got.error:
            findings.append(Finding(NAME, f"{call.what}: the target refused it with {got.error!r}; spec 2.2 says "
                                          f"{want.error!r}", rule="module_plans_wrong_error"))
        elif want.error is None and got.error is not None:
            findings.append(Finding(NAME, f"{call.what}: the target refused it with {got.error!r}; spec 2.2 gives "
                                          f"{want.plans}", rule="module_plans_refused_valid"))
        elif want.error is None and got.plans != want.plans:
            findings.append(Finding(NAME, f"{call.what}: the target gave {got.plans}; spec 2.2 gives {want.plans}",
                                    rule="module_plans_differ"))
    return findings


def _skip_reason(ctx: CheckContext) -> Optional[str]:
    if ctx.target is None or not ctx.target.has_module_plans:
        return "the target builds no module plans from a model"
    return None


CHECKER = Checker(NAME, check_module_plans, after=("planner",), skip_reason=_skip_reason,
                  summary="module plans from a model (spec 2.2), on the module tree the case's names imply")
