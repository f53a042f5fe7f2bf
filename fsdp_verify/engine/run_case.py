"""Running one case: build its per-rank graphs, hand them to a target, and judge the result with
every registered checker. Campaign, gate, replay, selftest and the pytest plugin all come here;
``checks/`` and ``execute/`` never import this module.
"""

from __future__ import annotations

import atexit
import faulthandler
import importlib
import os
import signal
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any, Callable, Mapping, Optional

import torch
from torch import fx

from fsdp_verify.graph import fx_sources
from fsdp_verify.model.case import Case
from fsdp_verify.checks import INVALID, CheckContext, Finding, default_checkers, registered
from fsdp_verify.model import spec_params
from fsdp_verify.checks import annotation
from fsdp_verify.checks.planner_oracle import Refusal, spec_refusal, watch_rounds
from fsdp_verify.checks.graph_facts import reads_before_definition
from fsdp_verify.engine import stages
from fsdp_verify.targets.debug_logs import DEBUG_EVERY, debug_logs, loggers_held
from fsdp_verify.engine.stages import Stage
from fsdp_verify.execute.isolation import Child, ChildDied, Served, fingerprint, output_file, shows_output
from fsdp_verify.execute.ranks.pool import exit_reason
from fsdp_verify.execute.world import build_world
from fsdp_verify.targets import generators
from fsdp_verify.targets.base import Target
from fsdp_verify.targets.outcome import PlanRecord, TargetRun
from fsdp_verify.targets.watch import watching


class Sent(Enum):
    """What a case's forked child tells its parent, in this order: watch events while the target
    runs, that the target is done, then the checkers' report or the harness's own failure."""

    WATCH = "watch"
    TARGET_DONE = "target-done"
    CHECKED = "checked"
    HARNESS_ERROR = "harness-error"


@dataclass(frozen=True)
class ChildReport:
    """The checkers' verdict on a case, as the child hands it to the parent (plain data)."""

    findings: list[dict]
    plans: dict[int, list[dict]]
    metrics: dict
    skipped: dict
    error_type: Optional[str]
    error_message: Optional[str]
    imported: tuple[str, ...] = ()  # modules this case imported in the child (the parent imports them too)


@dataclass(frozen=True)
class ChildMessage:
    """One message of the child: its kind and what that kind carries."""

    kind: Sent
    event: str = ""  # WATCH: "start" or "end" of a derivation of the planner oracle
    report: Optional[ChildReport] = None  # CHECKED
    trace: str = ""  # HARNESS_ERROR


def _is(message: Any, kind: Sent) -> bool:
    return isinstance(message, ChildMessage) and message.kind is kind


def _lint(modules: Mapping[int, fx.GraphModule]) -> None:
    """FX's own checks of each rewrite; a rewrite that reads a value above its definition is left to
    ``dependencies`` (rule ``read_before_definition`` names the nodes, where lint's error would
    make it a crash of the target). The scan for that runs only once lint has failed."""
    for rank, module in modules.items():
        try:
            module.graph.lint()
        except Exception as exc:  # noqa: BLE001 - FX raises plain errors
            if reads_before_definition(module):
                continue
            raise RuntimeError(f"rank {rank}: the rewritten graph does not lint: {exc}") from exc


def _fail(run: TargetRun, exc: BaseException) -> TargetRun:
    run.error = "".join(traceback.format_exception(exc)).strip()
    run.error_type = type(exc).__name__
    run.error_message = (str(exc).strip().splitlines() or [""])[0]
    return run


def _checked_plans(returned: object, modules: Mapping[int, fx.GraphModule]) -> dict:
    """What ``rewrite`` returned, if it is the documented shape (rank -> list of plans)."""
    if returned is None:
        return {}
    if not isinstance(returned, dict) or not all(isinstance(v, (list, tuple)) for v in returned.values()):
        raise TypeError(f"rewrite returned a {type(returned).__name__}; expected a dict of rank -> list of plans")
    if not all(callable(getattr(plan, "to_dict", None)) for plans in returned.values() for plan in plans):
        raise TypeError("rewrite returned plans without to_dict(); return {} when the target has no such plans")
    for rank, module in modules.items():
        if not isinstance(module, fx.GraphModule):
            raise TypeError(f"rewrite left a {type(module).__name__} for rank {rank}; expected a GraphModule")
    return dict(returned)


def run_target(target: Target, case: Case, watch: bool = True,
               on_watch: Callable[[str], None] | None = None) -> TargetRun:
    """Apply ``target`` to fresh copies of the case's graphs; an exception (``SystemExit`` too) or a
    malformed result becomes ``error``. ``watch``: the planner oracle derives the spec's plan of
    each later round's graph while the target's run holds it (``planner_oracle.RoundWatch``);
    ``on_watch`` hears each derivation (the harness's work, within the run) "start" and "end"."""
    cpu: dict[str, float] = {}
    with stages.timed(cpu, Stage.BUILD):
        run = TargetRun(case, build_world(case, shared=True))  # read only: equal ranks share
        modules = build_world(case)
    run.cpu = cpu
    watched = [0.0, 0.0]  # CPU seconds of the round watch's derivations, the start of the current one

    def heard(event: str) -> None:
        if event == "start":
            watched[1] = time.process_time()
        else:
            watched[0] += time.process_time() - watched[1]
        if on_watch is not None:
            on_watch(event)

    run.watched = watch_rounds(case, modules, heard) if watch and target.has_planner else None
    run.debug_logs = loggers_held(target, case)
    states = generators.snapshot()
    try:
        with stages.timed(cpu, Stage.TARGET), watching(target, run.watched), debug_logs(run.debug_logs):
            run.plans = _checked_plans(target.rewrite(case, modules), modules)
        run.generators_drawn = generators.drawn(states)
        _lint(modules)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any target failure is a reported outcome
        if run.debug_logs:
            with stages.timed(cpu, Stage.TARGET):
                run.raises_only_at_debug = not _raises(target, case)
        return _fail(run, exc)
    finally:
        cpu[str(Stage.TARGET)] = cpu.get(str(Stage.TARGET), 0.0) - watched[0]
        cpu[str(Stage.ROUND_WATCH)] = watched[0]
    run.rewritten = modules
    return run


def _raises(target: Target, case: Case) -> bool:
    """Whether ``target`` fails on fresh copies of the case's graphs with its loggers as they are:
    asked of a raise with them at DEBUG, which is a logging path's own only where the answer is no."""
    modules = build_world(case)
    try:
        _checked_plans(target.rewrite(case, modules), modules)
        _lint(modules)
    except (Exception, SystemExit):  # noqa: BLE001 - any failure: the raise is not the loggers' alone
        return True
    return False


def _target_failure(ctx: CheckContext) -> list[Finding]:
    """A target that raised: the planner oracle judges whether refusing was right; otherwise a finding.
    Where the plans it returned fail when read (their own ``to_dict`` raises, as a planner whose
    digest indexes a second member does on a bucket of one), nothing can be judged of them, and the
    raise is the finding: the harness must not crash on what a target did."""
    unjudged = ""
    try:
        findings = registered()["planner"].run(ctx)
        refusal = spec_refusal(ctx)
    except Exception as exc:  # noqa: BLE001 - the target's own plan objects failed; its raise is reported below
        findings, refusal, unjudged = [], None, f"{type(exc).__name__}: {exc}"
    if refusal is Refusal.DISAGREEMENT:
        ctx.metrics.setdefault("planner", {})["disagreements_stopped"] = 1  # said in the summary
    elif refusal is None:
        logs = ctx.run.debug_logs if ctx.run.raises_only_at_debug else ()
        findings.append(Finding("target", f"target {getattr(ctx.target, 'name', '?')} raised "
                                          f"{ctx.run.error_type}: {ctx.run.error_message}"
                                + (f" (only with its loggers at DEBUG, as one case in {DEBUG_EVERY} runs them: "
                                   f"it runs clean without)" if logs else ""),
                                details={"traceback": ctx.run.error,
                                         **({"plans_unreadable": unjudged} if unjudged else {}),
                                         **({"loggers_at_debug": list(logs)} if logs else {})}, rule="raised"))
    return findings


def _misannotated(ctx: CheckContext) -> list[Finding]:
    """The case is invalid input where a reduce-scatter's spec (dtype or shape) is not its input's
    (``checks/annotation.py``): no annotator writes that graph, so no checker judges it. It reads
    the original world's one run, which the checkers share afterwards (it is the same run, made
    earlier; an original that cannot run is numerics' to report)."""
    run = ctx.original_sim
    if isinstance(run, Exception):
        return []
    found = annotation.disagreements(ctx.original, run)
    if not found:
        return []
    return [Finding("harness", f"a reduce-scatter's spec is not its input's ({found[0].describe()}; "
                               f"{len(found)} in all): no annotator writes this graph, so it cannot be judged",
                    nodes=tuple(sorted({f.node for f in found})), severity=INVALID,
                    details={"kind": "spec_disagrees_with_input", "disagreements": len(found)},
                    rule="spec_disagrees_with_input")]


def check_run(ctx: CheckContext, only: tuple[str, ...] | None = None) -> list[Finding]:
    """Every applicable checker on one target run; a crashing checker is itself a finding and a
    checker that cannot judge the case is recorded in ``ctx.skipped``."""
    cpu = ctx.metrics.setdefault(stages.CPU, {})
    stages.add(cpu, ctx.run.cpu)
    ctx.metrics.setdefault("target", {})["debug_logs"] = int(bool(ctx.run.debug_logs))
    if ctx.run.error is not None:
        with stages.timed(cpu, stages.checker("planner")):
            return _target_failure(ctx)
    with stages.timed(cpu, stages.checker("annotation")):
        misannotated = _misannotated(ctx)
    if misannotated:
        return misannotated  # invalid input: what the rewrite did is not counted
    with stages.timed(cpu, Stage.REPORTING):
        ctx.metrics["effect"] = ctx.run.effect()  # before any checker: one hands the rewrite back to the target
    findings: list[Finding] = []
    chosen = registered() if only is not None else default_checkers()
    for name, checker in chosen.items():
        if only is not None and name not in only:
            continue
        reason = checker.skip_reason(ctx) if checker.skip_reason is not None else None
        if reason is not None:
            ctx.skipped[name] = reason
            continue
        try:
            with stages.timed(cpu, stages.checker(name)):
                findings.extend(checker.run(ctx))
        except Exception as exc:  # noqa: BLE001 - a checker crash must not hide other verdicts
            findings.append(Finding(name, f"checker {name} crashed: {type(exc).__name__}: {exc}",
                                    details={"kind": "checker_crash"}, rule="checker_crash"))
    return findings


CHECK_DEADLINE_FACTOR = 20  # the checkers of an isolated case get this many times the target's deadline
WATCH_PAUSE_FACTOR = 4  # the planner oracle's work within the target's run may pause its clock this many deadlines


def check_all(target: Target, case: Case, only: tuple[str, ...] | None = None,
              deadline: float | None = None, check_limit: float | None = None,
              keep_rewrite: bool = False) -> tuple[list[Finding], CheckContext]:
    """Run ``target`` on ``case`` and every checker.

    With a ``deadline`` the target *and the checkers* run in a forked child (so every check that
    needs the target's live plans and rewriters still runs): a target that hangs past the deadline,
    or dies, is a ``target`` finding; the parent gets the findings, plans, metrics and skips back.
    The child persists across cases of one target (``execute/isolation.py`` says when it is
    replaced), so isolation costs a fork per failure, not per case.
    Target and checkers run under the case's [I] settings (``case.spec``), and the target under the
    configuration drawn for the case (``case.target_options``, when the target has options).
    """
    base = target
    if case.target_options and type(target).configure is not Target.configure:
        try:
            target = target.configure(dict(case.target_options))
        except ValueError as exc:
            return [Finding("harness", f"the case's target_options cannot configure {target.name!r}: {exc}",
                            severity=INVALID, rule="target_options")], CheckContext(TargetRun(case, {}), target)
    with spec_params.use(case.spec):
        if deadline is None:
            ctx = CheckContext(run_target(target, case, watch=only is None or "planner" in only), target,
                               keep_rewrite=keep_rewrite)
            return check_run(ctx, only), ctx
        return _check_isolated(target, case, only, deadline, check_limit, base)


# What a case's forked child may use beyond what it holds when the case starts: address space
# (bytes) and the size of any file it writes. Set by --max-memory / --max-output through the
# environment, so campaign workers (forked or spawned) inherit them; read for each case, so the
# child applies the limits in force when the case is sent. A target past a limit fails in its own
# child: an allocation raises MemoryError, a write past the file limit raises "File too large"
# (Python ignores SIGXFSZ; native code that does not is killed by it): a finding either way, and
# the harness is never the process the kernel's OOM killer picks.
MEMORY_ENV, OUTPUT_ENV = "FSDP_VERIFY_MAX_MEMORY", "FSDP_VERIFY_MAX_OUTPUT"
OUTPUT_TAIL = 4096  # bytes of a target's output kept with its finding
DEFAULT_MAX_MEMORY = 8 << 30
DEFAULT_MAX_OUTPUT = 1 << 30


def _limit(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass(frozen=True)
class CaseRequest:
    """One case for the persistent child: the child configures its own copy of the target (the one
    it was forked with) from ``case.target_options``, exactly as the parent did."""

    case: Case
    only: Optional[tuple[str, ...]]


def _child_setup() -> None:
    # A forked child must not enter the parent's OpenMP team: libgomp is not fork-safe, and the
    # first parallel op (layer_norm, matmul) would wait forever on the parent's threads.
    torch.set_num_threads(1)
    faulthandler.disable()  # a target's native crash is reported by the parent, not dumped here
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops (and kills) this child on a stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # Every torch.fx Interpreter run makes a (disabled) tqdm bar, and tqdm starts a monitor thread
    # with its first bar: a new thread after the first case retired every child whose parent had
    # never run an Interpreter (inductor on harness graphs: a fork per case). Nothing here shows a bar.
    import tqdm
    tqdm.tqdm.monitor_interval = 0


def _serve_case(target: Target, request: CaseRequest, send: Callable[[Any], None]) -> Served:
    """Run and judge one case in the child. The child stays for the next case only when the target
    returned normally, or refused arguments the spec says it must refuse, and no checker crashed:
    any other raise may have left state behind that no fingerprint sees, so its child is replaced
    (failures are rare; the price is one fork each). A right refusal keeps the child because the
    target's real callers go on after it in the same process too, and the fingerprint still
    guards the process-wide state."""
    case, only = request.case, request.only
    began = time.process_time()
    modules = set(sys.modules)
    fx_sources.forget_old_sources()  # the child serves cases all night: its compiled sources too
    if case.target_options and type(target).configure is not Target.configure:
        target = target.configure(dict(case.target_options))  # the parent checked that it can
    with spec_params.use(case.spec):
        # the parent's deadline times the target alone: the watch says when each derivation starts and ends
        run = run_target(target, case, watch=only is None or "planner" in only,
                         on_watch=lambda event: send(ChildMessage(Sent.WATCH, event=event)))
        send(ChildMessage(Sent.TARGET_DONE))
        ctx = CheckContext(run, target)
        try:
            findings = check_run(ctx, only)
            cpu = ctx.metrics[stages.CPU]  # the child's own glue (configuring, the report) is isolation's
            cpu[str(Stage.ISOLATION)] = max(0.0, time.process_time() - began - sum(cpu.values()))
            report = ChildReport([f.to_json() for f in findings],
                                 {rank: [p.to_dict() for p in rounds] for rank, rounds in run.plans.items()},
                                 ctx.metrics, ctx.skipped, run.error_type, run.error_message,
                                 tuple(name for name in list(sys.modules) if name not in modules))  # import order
        except Exception:  # noqa: BLE001 - a harness bug must not be reported as the target's death
            return Served(ChildMessage(Sent.HARNESS_ERROR, trace=traceback.format_exc()), fit=False)
    raised = run.error is not None and any(f.key == ("target", "raised") for f in findings)
    fit = not raised and not any(f.rule == "checker_crash" for f in findings)
    return Served(ChildMessage(Sent.CHECKED, report=report), fit=fit,
                  plain=lambda: ChildMessage(Sent.CHECKED, report=ChildReport(*(_sendable(getattr(report, f.name))
                                                                                 for f in fields(report)))))


_SENDABLE = (str, int, float, bool, type(None), torch.dtype, torch.device)


def _sendable(value: Any) -> Any:
    """``value`` with dicts, lists and tuples rebuilt and any leaf that is not plain data replaced by
    its description: a target's report may hold what does not pickle (an ``fx.Node``, whose graph
    holds C++ functions), and the checkers' verdict on it must still reach the parent."""
    if isinstance(value, _SENDABLE):
        return value
    if isinstance(value, dict):
        return {_sendable(key): _sendable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [_sendable(item) for item in value]
        return tuple(items) if type(value) is tuple else items
    return f"<{type(value).__name__} {str(value)[:120]}>"


MAX_CHILDREN = 2  # persistent children kept at once (the gate alternates two targets)
_children: "OrderedDict[int, tuple[Target, Child]]" = OrderedDict()


def _child_for(target: Target) -> Child:
    """The persistent child that serves ``target``. Keyed by the object itself (held here, so its
    id cannot be reused by another target while the child lives): the child runs the target as it
    was when the child forked."""
    key = id(target)
    if key in _children:
        _children.move_to_end(key)
        return _children[key][1]
    while len(_children) >= MAX_CHILDREN:
        _, (_, old) = _children.popitem(last=False)
        old.close()
    child = Child(lambda request, send: _serve_case(target, request, send), _child_setup, _output_file())
    _children[key] = (target, child)
    return child


def _output_file() -> Optional[int]:
    return None if shows_output() else output_file()


def close_children() -> None:
    """Stop every persistent child (end of a campaign, or a test that changed what a child holds)."""
    while _children:
        _, (_, child) = _children.popitem()
        child.close()


atexit.register(close_children)  # replay, gate and show end without a campaign's close: no child stays


def children_started() -> int:
    """Children forked so far by the children alive now (how often isolation paid for a fork)."""
    return sum(child.started for _, child in _children.values())


_imports_stopped = False  # set once an import here changed the process: none is tried again


def _import_in_parent(names: tuple[str, ...]) -> None:
    """Import here what a case imported in its child, so the next child forks with it loaded.

    A target imports much lazily (inductor's passes pull in dynamo, FakeTensor and the pattern
    matcher: 2-4 CPU-s), and a child forked after a raise would import it all again: per shrink step
    of a crash, that was most of the step's cost. Why this keeps isolation: only module code runs
    here, never the target's call, and only submodules of packages this process already holds (no
    new top-level package, nothing of a ``testing`` package), in the child's import order. An
    import that changes what the isolation fingerprint sees (threads, environment, signal handlers,
    global switches) stops all further imports here; a module that fails to import is the child's."""
    global _imports_stopped
    if _imports_stopped or not names:
        return
    held = {name.partition(".")[0] for name in sys.modules}
    wanted = [name for name in names if name not in sys.modules and name.partition(".")[0] in held
              and ".testing" not in name and not name.startswith("__")]
    if not wanted:
        return
    before = fingerprint()
    known = {name for name, _ in before[5]}  # config modules already loaded (a new one is no change)
    for name in wanted:
        if name in sys.modules:
            continue
        try:
            importlib.import_module(name)
        except KeyboardInterrupt:
            raise
        except BaseException:  # noqa: BLE001 - a module only a child can import stays the child's
            pass
    after = fingerprint()
    after = (*after[:5], tuple(item for item in after[5] if item[0] in known), *after[6:])
    if after != before:
        _imports_stopped = True


def _finding_from(doc: dict) -> Finding:
    return Finding.from_json(doc)


def _check_isolated(target: Target, case: Case, only: tuple[str, ...] | None, deadline: float,
                    check_limit: float | None = None, base: Target | None = None) -> tuple[list[Finding], CheckContext]:
    """``check_limit`` caps the checkers' time too (a campaign passes what is left of its budget).
    ``base``: the unconfigured target the persistent child holds (``target`` is it configured).
    A finding of the target's own (a raise, a death, a hang) carries what the child printed for
    this case (its last ``OUTPUT_TAIL`` bytes), which the campaign's log no longer shows."""
    child = _child_for(base if base is not None else target)
    findings, ctx = _judged_in(child, target, case, only, deadline, check_limit)
    if any(f.checker == "target" for f in findings):
        tail = child.output_tail(OUTPUT_TAIL)
        if tail.strip():
            findings = [replace(f, details={**f.details, "output": tail}) if f.checker == "target" else f
                        for f in findings]
    return findings, ctx


def _judged_in(child: Child, target: Target, case: Case, only: tuple[str, ...] | None, deadline: float,
               check_limit: float | None) -> tuple[list[Finding], CheckContext]:
    child.submit(CaseRequest(case, only), memory=_limit(MEMORY_ENV, DEFAULT_MAX_MEMORY),
                 output=_limit(OUTPUT_ENV, DEFAULT_MAX_OUTPUT))
    ctx = CheckContext(TargetRun(case, {}), target)
    target_done, answered = False, False
    checks = deadline * CHECK_DEADLINE_FACTOR if check_limit is None else min(deadline * CHECK_DEADLINE_FACTOR,
                                                                              max(check_limit, 0.1))
    try:
        # The target's clock stops while the planner oracle derives within its run (between the
        # watch's "start" and "end"), for at most WATCH_PAUSE_FACTOR deadlines in all: a derivation
        # that outlasts them is the harness's failure, and a target that plans without end still
        # times out.
        left, pause, deriving = deadline, min(checks, deadline * WATCH_PAUSE_FACTOR), 0
        while True:
            began = time.monotonic()
            reply = child.receive(pause if deriving else left)
            if reply is None:
                if deriving:
                    return [Finding("harness", f"the planner oracle's work within the target's run took over "
                                               f"{deadline * WATCH_PAUSE_FACTOR:g}s; the case cannot be judged",
                                    severity=INVALID, details={"kind": "checker_timeout"},
                                    rule="watch_timeout")], ctx
                return [Finding("target", f"target {target.name!r} did not finish within {deadline:g}s",
                                details={"kind": "timeout"}, rule="timeout")], ctx
            message, answered = reply.message, reply.last
            spent = time.monotonic() - began
            if deriving:
                pause -= spent
            else:
                left -= spent
            if not _is(message, Sent.WATCH):
                break
            deriving = max(0, deriving + (1 if message.event == "start" else -1)) if pause > 0 else 0
        target_done = True
        while not answered:  # a watch event the target's leftover threads sent late is not the result
            reply = child.receive(checks)
            if reply is None:
                return [Finding("harness", f"the checkers did not finish within {checks:g}s; the case cannot be "
                                           f"judged", severity=INVALID, details={"kind": "checker_timeout"},
                                rule="checker_timeout")], ctx
            message, answered = reply.message, reply.last
    except ChildDied as died:
        if target_done:  # the target had finished: the checkers' process died, not the target
            return [Finding("harness", f"the checkers' process died ({exit_reason(died.exitcode)}); the case "
                                       f"cannot be judged", severity=INVALID,
                            details={"kind": "checker_died", "exitcode": died.exitcode}, rule="checker_died")], ctx
        return [Finding("target", f"target {target.name!r} died ({exit_reason(died.exitcode)})",
                        details={"kind": "died", "exitcode": died.exitcode}, rule="died")], ctx
    finally:
        if not answered:
            child.kill()  # a hang, a stop or a death: this child serves no other case
    if not _is(message, Sent.CHECKED) or not isinstance(message.report, ChildReport):
        why = message.trace if _is(message, Sent.HARNESS_ERROR) else f"unexpected message {type(message).__name__}"
        return [Finding("harness", "the checkers failed on this case, so it cannot be judged", severity=INVALID,
                        details={"kind": "harness_error", "traceback": why}, rule="harness_error")], ctx
    report = message.report
    _import_in_parent(report.imported)
    ctx.run.plans = {rank: [PlanRecord(r) for r in rounds] for rank, rounds in report.plans.items()}
    ctx.run.error_type, ctx.run.error_message = report.error_type, report.error_message
    ctx.metrics.update(report.metrics)
    ctx.skipped.update(report.skipped)
    return [_finding_from(doc) for doc in report.findings], ctx
