"""Running one case: build its per-rank graphs, hand them to a target, and judge the result with
every registered checker. Campaign, gate, replay, selftest and the pytest plugin all come here;
``checks/`` and ``execute/`` never import this module.
"""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import os
import signal
import time
import traceback
from dataclasses import dataclass
from enum import Enum
from typing import Any, Callable, Mapping, Optional

import torch
from torch import fx

from fsdp_verify.model.case import Case
from fsdp_verify.checks import INVALID, CheckContext, Finding, default_checkers, registered
from fsdp_verify.model import spec_params
from fsdp_verify.checks.planner_oracle import expected_argument_error, watch_rounds
from fsdp_verify.execute.ranks.pool import exit_reason
from fsdp_verify.execute.world import build_world
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
    for rank, module in modules.items():
        try:
            module.graph.lint()
        except Exception as exc:  # noqa: BLE001 - FX raises plain errors
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
    run = TargetRun(case, build_world(case, shared=True))  # read only: equal ranks share
    modules = build_world(case)
    run.watched = watch_rounds(case, modules, on_watch) if watch and target.has_planner else None
    try:
        with watching(target, run.watched):
            run.plans = _checked_plans(target.rewrite(case, modules), modules)
        _lint(modules)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any target failure is a reported outcome
        return _fail(run, exc)
    run.rewritten = modules
    return run


def _target_failure(ctx: CheckContext) -> list[Finding]:
    """A target that raised: the planner oracle judges whether refusing was right; otherwise a finding."""
    findings = registered()["planner"].run(ctx)
    first = min(ctx.case.graph.world())
    refused_rightly = ctx.has_planner and \
        expected_argument_error(ctx.case.plan_args, ctx.case.group_ranks(first)) is not None
    if not refused_rightly:
        findings.append(Finding("target", f"target {getattr(ctx.target, 'name', '?')} raised "
                                          f"{ctx.run.error_type}: {ctx.run.error_message}",
                                details={"traceback": ctx.run.error}, rule="raised"))
    return findings


def check_run(ctx: CheckContext, only: tuple[str, ...] | None = None) -> list[Finding]:
    """Every applicable checker on one target run; a crashing checker is itself a finding and a
    checker that cannot judge the case is recorded in ``ctx.skipped``."""
    if ctx.run.error is not None:
        return _target_failure(ctx)
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
    Target and checkers run under the case's [I] settings (``case.spec``), and the target under the
    configuration drawn for the case (``case.target_options``, when the target has options).
    """
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
        return _check_isolated(target, case, only, deadline, check_limit)


# What a case's forked child may use beyond what it inherits: address space (bytes) and the size of
# any file it writes. Set by --max-memory / --max-output through the environment, so campaign
# workers (forked or spawned) inherit them. A target past a limit fails in its own child: an
# allocation raises MemoryError, a write past the file limit raises "File too large" (Python ignores
# SIGXFSZ; native code that does not is killed by it): a finding either way, and the harness is
# never the process the kernel's OOM killer picks.
MEMORY_ENV, OUTPUT_ENV = "FSDP_VERIFY_MAX_MEMORY", "FSDP_VERIFY_MAX_OUTPUT"
DEFAULT_MAX_MEMORY = 8 << 30
DEFAULT_MAX_OUTPUT = 1 << 30


def _limit(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def limit_child() -> None:
    """Cap the current (child) process: its address space may grow by the memory limit over what
    it holds now (torch maps much it never touches), and no file it writes may pass the output limit."""
    import resource
    memory, output = _limit(MEMORY_ENV, DEFAULT_MAX_MEMORY), _limit(OUTPUT_ENV, DEFAULT_MAX_OUTPUT)
    try:
        with open("/proc/self/statm") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        mapped = 0
    for kind, value in ((resource.RLIMIT_AS, mapped + memory if memory > 0 else -1),
                        (resource.RLIMIT_FSIZE, output if output > 0 else -1)):
        if value > 0:
            try:
                resource.setrlimit(kind, (value, resource.getrlimit(kind)[1]))
            except (ValueError, OSError):
                pass  # a hard limit already lower: it stands


def _check_child(target: Target, case: Case, only: tuple[str, ...] | None, conn, parent: int) -> None:
    # A forked child must not enter the parent's OpenMP team: libgomp is not fork-safe, and the
    # first parallel op (layer_norm, matmul) would wait forever on the parent's threads.
    torch.set_num_threads(1)
    die_with_parent(parent=parent)
    limit_child()
    faulthandler.disable()  # a target's native crash is reported by the parent, not dumped here
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops (and kills) this child on a stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # the parent's deadline times the target alone: the watch says when each derivation starts and ends
    run = run_target(target, case, watch=only is None or "planner" in only,
                     on_watch=lambda event: conn.send(ChildMessage(Sent.WATCH, event=event)))
    conn.send(ChildMessage(Sent.TARGET_DONE))
    ctx = CheckContext(run, target)
    try:
        findings = check_run(ctx, only)
        report = ChildReport([f.to_json() for f in findings],
                             {rank: [p.to_dict() for p in rounds] for rank, rounds in run.plans.items()},
                             ctx.metrics, ctx.skipped, run.error_type, run.error_message)
        conn.send(ChildMessage(Sent.CHECKED, report=report))
    except Exception:  # noqa: BLE001 - a harness bug must not be reported as the target's death
        conn.send(ChildMessage(Sent.HARNESS_ERROR, trace=traceback.format_exc()))


def die_with_parent(signum: int = signal.SIGKILL, parent: int | None = None) -> None:
    """Linux: this process gets ``signum`` when its parent dies, so no child outlives the harness.
    ``parent`` (the pid that started this process) closes the race of a parent that died before
    the request was made: the signal is then sent at once."""
    try:
        ctypes.CDLL(None).prctl(1, signum)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent is not None and os.getppid() != parent:
        os.kill(os.getpid(), signum)


def _finding_from(doc: dict) -> Finding:
    return Finding.from_json(doc)


def _check_isolated(target: Target, case: Case, only: tuple[str, ...] | None, deadline: float,
                    check_limit: float | None = None) -> tuple[list[Finding], CheckContext]:
    """``check_limit`` caps the checkers' time too (a campaign passes what is left of its budget)."""
    context = multiprocessing.get_context("fork")
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_check_child, args=(target, case, only, child, os.getpid()), daemon=True)
    process.start()
    child.close()
    ctx = CheckContext(TargetRun(case, {}), target)
    target_done = False
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
            if not parent.poll(max(pause if deriving else left, 0.0)):
                if deriving:
                    return [Finding("harness", f"the planner oracle's work within the target's run took over "
                                               f"{deadline * WATCH_PAUSE_FACTOR:g}s; the case cannot be judged",
                                    severity=INVALID, details={"kind": "checker_timeout"},
                                    rule="watch_timeout")], ctx
                return [Finding("target", f"target {target.name!r} did not finish within {deadline:g}s",
                                details={"kind": "timeout"}, rule="timeout")], ctx
            message = parent.recv()
            spent = time.monotonic() - began
            if deriving:
                pause -= spent
            else:
                left -= spent
            if not _is(message, Sent.WATCH):
                break
            deriving = max(0, deriving + (1 if message.event == "start" else -1)) if pause > 0 else 0
        target_done = True
        message = ChildMessage(Sent.WATCH)
        while _is(message, Sent.WATCH):  # one the target's leftover threads sent late is not the result
            if not parent.poll(checks):
                return [Finding("harness", f"the checkers did not finish within {checks:g}s; the case cannot be "
                                           f"judged", severity=INVALID, details={"kind": "checker_timeout"},
                                rule="checker_timeout")], ctx
            message = parent.recv()
    except (EOFError, ConnectionError):
        process.join(5)
        if target_done:  # the target had finished: the checkers' process died, not the target
            return [Finding("harness", f"the checkers' process died ({exit_reason(process.exitcode)}); the case "
                                       f"cannot be judged", severity=INVALID,
                            details={"kind": "checker_died", "exitcode": process.exitcode}, rule="checker_died")], ctx
        return [Finding("target", f"target {target.name!r} died ({exit_reason(process.exitcode)})",
                        details={"kind": "died", "exitcode": process.exitcode}, rule="died")], ctx
    finally:
        if process.is_alive():
            process.kill()
        process.join(10)
    if not _is(message, Sent.CHECKED) or not isinstance(message.report, ChildReport):
        why = message.trace if _is(message, Sent.HARNESS_ERROR) else f"unexpected message {type(message).__name__}"
        return [Finding("harness", "the checkers failed on this case, so it cannot be judged", severity=INVALID,
                        details={"kind": "harness_error", "traceback": why}, rule="harness_error")], ctx
    report = message.report
    ctx.run.plans = {rank: [PlanRecord(r) for r in rounds] for rank, rounds in report.plans.items()}
    ctx.run.error_type, ctx.run.error_message = report.error_type, report.error_message
    ctx.metrics.update(report.metrics)
    ctx.skipped.update(report.skipped)
    return [_finding_from(doc) for doc in report.findings], ctx
