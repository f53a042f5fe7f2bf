"""``fx-pass:MODULE:CALLABLE``: any torch.fx pass, run as inductor's post-grad pipeline runs one.

A pass is written graph in, graph out: ``fn(graph_module)`` rewrites in place and returns None,
or returns the new module (or a ``PassResult``). It needs nothing from this project, so a bug
found in it has a repro that imports only torch and the pass's module (``fsdp-verify repro``).
The pass sees what inductor's bucketing passes see: post-grad graphs (``.default`` overloads,
positional group names, no frees or barriers), FakeTensor values in ``meta["val"]``, and the
case's process groups registered by name (a fake world per rank, as for ``torch-inductor``).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Sequence

from torch import fx

from fsdp_verify.execute.inputs import make_inputs
from fsdp_verify.model.case import Case
from fsdp_verify.targets.base import Target, TargetNotFound, family
from fsdp_verify.targets.inductor import TorchInductorTarget
from fsdp_verify.targets.post_grad import post_grad_pass, run_pass

PREFIX = "fx-pass:"


class FxPassTarget(Target):
    """One graph-in, graph-out pass, applied to each rank's post-grad graph in turn."""

    summary = "any torch.fx pass (graph in, graph out) as inductor's post-grad pipeline runs it"
    external = True
    restored_generators = TorchInductorTarget.restored_generators  # as inductor's post-grad pipeline runs it

    def __init__(self, spec: str, fn: Callable[[fx.GraphModule], Any]):
        self.spec, self.fn = spec, fn
        self.name = PREFIX + spec
        module = getattr(fn, "__module__", None)
        self.loggers = (module,) if isinstance(module, str) else ()  # where a pass's own logger lives, by convention

    def normalise(self, case: Case) -> Case:
        """The post-grad form, as for inductor's own passes."""
        return TorchInductorTarget().normalise(case)

    def contract_mismatches(self, case: Case, checkers: tuple[str, ...] = (), findings: Sequence[Any] = ()) -> list[str]:
        """The forms a post-grad pass never receives, as for inductor's own passes; none of the
        excuses of inductor's documented behaviours apply to another pass."""
        return TorchInductorTarget().contract_mismatches(case, checkers, findings, documented=False)

    def rewrite(self, case: Case, modules: dict[int, fx.GraphModule]) -> dict[int, list[Any]]:
        world, groups = case.graph.world(), dict(case.graph.groups)
        for rank in list(modules):
            modules[rank] = post_grad_pass(modules[rank], rank, len(world), groups,
                                           make_inputs(case.graph, rank, case.seed),
                                           lambda module: run_pass(self.fn, module))
        return {}


def load(spec: str) -> Callable:
    """``MODULE:CALLABLE`` -> the pass; a ``LookupError`` naming what could not be loaded."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise LookupError(f"fx-pass target {spec!r}: expected fx-pass:MODULE:CALLABLE")
    try:
        fn = getattr(importlib.import_module(module_name), attr)
    except Exception as exc:  # noqa: BLE001 - any failure to load is a usage error
        raise LookupError(f"cannot load fx pass {spec!r}: {type(exc).__name__}: {exc}") from None
    if not callable(fn):
        raise LookupError(f"fx pass {spec!r} is not callable ({type(fn).__name__})")
    return fn


def make(spec: str) -> FxPassTarget:
    """``MODULE:CALLABLE`` (the part after ``fx-pass:``) -> the target."""
    return FxPassTarget(spec, load(spec))


@family("fx-pass:MODULE:CALLABLE", "any torch.fx pass, graph in, graph out, run as a post-grad pass",
        claims=lambda name: name.startswith(PREFIX))
def named(name: str) -> FxPassTarget:
    """``fx-pass:MODULE:CALLABLE`` -> the target."""
    try:
        return make(name[len(PREFIX):])
    except LookupError as exc:
        raise TargetNotFound(str(exc)) from None
