"""Plan exchange: the validator (spec 5.2.14) and a disagreement stopping the round (spec 5.4.3).

Every simulated rank plans the same graph, so the reports a correct target exchanges always
agree, and a validator that accepts anything passes every other check. This checker makes the
disagreement itself:

1. The run's first-round reports of each group of two or more ranks go to the target's validator
   as they are (accepted), and edited one way each: a rank dropped, a rank added, one rank's copy
   of the group's ranks reversed, one rank's digest changed. Each edit must be refused with the
   spec's message.
2. The world is planned again with one tagged launch's ``state_idx`` changed on one rank. That
   is a wire record, which enters the group's digest (spec 2.11), so the ranks disagree: the
   target's own exchange must raise ValueError before it rewrites any rank's graph. This copies
   and plans every rank again (about as much as the target's own run), so it runs on one case in
   ``DIVERGENT_EVERY``, chosen by the case's seed (a shrunk case keeps seed 0, so keeps it); the
   summary counts the worlds built.
"""

from __future__ import annotations

import copy
import marshal
from dataclasses import dataclass
from typing import Any, Callable, Optional

from torch import fx

from fsdp_verify.checks.findings import CheckContext, Finding
from fsdp_verify.checks.graph_facts import FSDP_KINDS, changed, snapshot
from fsdp_verify.checks.planner_oracle import DISAGREE, expected_argument_error
from fsdp_verify.graph.clone import clone_module
from fsdp_verify.checks.registry import Checker

NAME = "exchange"
MISSING = "Expected reports for group"
# Added to a launch's state_idx on one rank: far above any index a drawn or captured graph holds.
STATE_IDX_SHIFT = 1_000_003
DIVERGENT_EVERY = 4


def _shared_groups(ctx: CheckContext) -> list[tuple[str, tuple[int, ...]]]:
    """Every (group, ranks) of two or more ranks some rank's planner is told, whose every rank
    planned in this world: an expert group's every subgroup, not only the first rank's."""
    found: list[tuple[str, tuple[int, ...]]] = []
    for rank in sorted(ctx.original):
        for group, ranks in ctx.case.group_ranks(rank).items():
            ranks = tuple(ranks)
            if len(ranks) >= 2 and all(r in ctx.original for r in ranks) and (group, ranks) not in found:
                found.append((group, ranks))
    return found


# -- 1. the validator on edited reports ------------------------------------------------------------

def _dropped(reports: dict, group: str, ranks: tuple) -> dict:
    return {rank: report for rank, report in reports.items() if rank != ranks[-1]}


def _added(reports: dict, group: str, ranks: tuple) -> dict:
    return {**reports, max(reports) + 1: reports[ranks[0]]}


def _reordered(reports: dict, group: str, ranks: tuple) -> dict:
    last = reports[ranks[-1]]
    edited = {**last, "group_ranks": {**last["group_ranks"], group: list(reversed(ranks))}}
    return {**reports, ranks[-1]: edited}


def _narrowed(reports: dict, group: str, ranks: tuple) -> dict:
    """The last rank names the group without its last rank: a tuple that sorts before the true one,
    where a reversed one sorts after (a validator comparing by order, or pairwise with ``zip``, passes it)."""
    last = reports[ranks[-1]]
    edited = {**last, "group_ranks": {**last["group_ranks"], group: list(ranks[:-1])}}
    return {**reports, ranks[-1]: edited}


def _redigested(reports: dict, group: str, ranks: tuple) -> dict:
    last = reports[ranks[-1]]
    digest = str(last["group_digests"].get(group))
    edited = {**last, "group_digests": {**last["group_digests"], group: "0" * 64 if digest != "0" * 64 else "1" * 64}}
    return {**reports, ranks[-1]: edited}


@dataclass(frozen=True)
class Edit:
    """One way to make a group's reports disagree, the rule a validator that accepts it breaks,
    and the start of the message spec 2.12 gives its refusal."""

    apply: Callable[[dict, str, tuple], dict]
    what: str
    rule: str
    message: str


EDITS = (
    Edit(_dropped, "its last rank's report dropped", "validator_accepts_missing_rank", MISSING),
    Edit(_added, "a report from a rank outside the group", "validator_accepts_extra_rank", MISSING),
    Edit(_reordered, "the group's ranks reversed in one report", "validator_accepts_rank_order", DISAGREE),
    Edit(_narrowed, "the group's last rank left out of one report's ranks", "validator_accepts_other_ranks",
         DISAGREE),
    Edit(_redigested, "one rank's digest changed", "validator_accepts_digest", DISAGREE),
)


def _refusal(ctx: CheckContext, reports: dict, group: str) -> Optional[BaseException]:
    try:
        ctx.target.validate_reports(reports, group)
    except Exception as exc:  # noqa: BLE001 - what the validator raised is judged below
        return exc
    return None


_ATOMS = (str, int, float, bool, type(None))


def _copied(value: Any) -> Any:
    """A copy of a report that no validator's write can reach the original through. ``marshal``
    rebuilds the plain containers and atoms the spec's planner returns in C (a third of the Python
    walk's cost, which was a twentieth of the harness): it refuses any other type, subclasses
    included, and those reports take the walk. Both keep two references to one object as one, as
    deepcopy's memo does; a report that crossed a process boundary has new strings, as these do."""
    try:
        return marshal.loads(marshal.dumps(value))
    except ValueError:  # an object marshal does not write
        return _rebuilt(value)


def _rebuilt(value: Any) -> Any:
    """dicts, lists and tuples rebuilt, their atoms shared (immutable), anything else deep-copied."""
    if isinstance(value, _ATOMS):
        return value
    if type(value) is dict:
        return {key: _rebuilt(item) for key, item in value.items()}
    if type(value) is list:
        return [_rebuilt(item) for item in value]
    if type(value) is tuple:
        return tuple(_rebuilt(item) for item in value)
    return copy.deepcopy(value)


def _validator_findings(ctx: CheckContext, groups: list[tuple[str, tuple[int, ...]]]) -> list[Finding]:
    findings = []
    for group, ranks in groups:
        if not all(ctx.reports(rank) for rank in ranks):
            continue
        # copies: spec 2.12 uses a dict report as is, and the other checkers read the shared ones
        reports = {rank: _copied(ctx.reports(rank)[0]) for rank in ranks}
        refused = _refusal(ctx, reports, group)
        if refused is not None:
            findings.append(Finding(NAME, f"group {group} {list(ranks)}: the validator refused the ranks' own "
                                          f"agreeing reports: {type(refused).__name__}: {refused}",
                                    rule="validator_refuses_agreement"))
            continue
        for edit in EDITS:
            refused = _refusal(ctx, _copied(edit.apply(reports, group, ranks)), group)
            if refused is None:
                findings.append(Finding(NAME, f"group {group} {list(ranks)}: the validator accepted the reports "
                                              f"with {edit.what} (spec 2.12 refuses them)", rule=edit.rule))
            elif not isinstance(refused, ValueError) or f"{edit.message} {group}" not in str(refused):
                findings.append(Finding(NAME, f"group {group} {list(ranks)}: the reports with {edit.what} were "
                                              f"refused with {type(refused).__name__}: {refused}; spec 2.12 says "
                                              f"ValueError {edit.message!r}", rule="validator_wrong_error"))
    return findings


# -- 2. the target's own exchange on a world whose ranks disagree -----------------------------------

def _shift_one_launch(module: fx.GraphModule, group: str) -> Optional[str]:
    """Change the state_idx of the first tagged launch on ``group``; its name, or None."""
    for node in module.graph.nodes:
        if (node.meta.get("comm_type") in FSDP_KINDS and node.args and node.args[-1] == group
                and isinstance(node.meta.get("state_idx"), int)):
            node.meta["state_idx"] = node.meta["state_idx"] + STATE_IDX_SHIFT
            return node.name
    return None


def _divergent_findings(ctx: CheckContext, groups: list[tuple[str, tuple[int, ...]]]) -> list[Finding]:
    case = ctx.case
    start = (case.seed // DIVERGENT_EVERY) % len(groups) if groups else 0  # each group and subgroup in turn
    for group, ranks in groups[start:] + groups[:start]:
        rank = ranks[-1]
        if tuple(case.group_ranks(rank).get(group, ())) != ranks:
            continue  # the ranks are told different groups: not the disagreement this builds
        modules = {r: clone_module(module) for r, module in ctx.original.items()}  # it may rewrite in place
        shifted = _shift_one_launch(modules[rank], group)
        if shifted is None:
            continue
        before = {r: snapshot(module) for r, module in modules.items()}
        ctx.metrics.setdefault(NAME, {})["divergent_worlds"] = 1
        where = f"group {group} {list(ranks)}, rank {rank}'s {shifted} given another state_idx"
        try:
            ctx.target.rewrite(case, modules)
        except ValueError as exc:
            if f"{DISAGREE} {group}" not in str(exc):
                return [Finding(NAME, f"{where}: the target raised ValueError: {exc}; spec 2.12 says "
                                      f"{DISAGREE + ' ' + group!r}", nodes=(shifted,), rule="divergent_wrong_error")]
            written = sorted(r for r, module in modules.items() if changed(module, before[r]) is not None)
            if written:
                return [Finding(NAME, f"{where}: the exchange refused the round, but ranks {written} were "
                                      f"rewritten first (spec 5.4.3: no rewrite of a failing round)",
                                nodes=(shifted,), rule="divergent_round_applied")]
            return []
        except Exception as exc:  # noqa: BLE001 - any other failure is the wrong refusal
            return [Finding(NAME, f"{where}: the target raised {type(exc).__name__}: {exc}, not ValueError",
                            nodes=(shifted,), rule="divergent_wrong_error")]
        return [Finding(NAME, f"{where}: the ranks' digests differ, yet the target rewrote the world "
                              f"(spec 5.4.3: a digest mismatch raises)", nodes=(shifted,), rank=rank,
                        rule="divergent_plans_accepted")]
    return []


def check_exchange(ctx: CheckContext) -> list[Finding]:
    """The validator refuses every edited report and accepts agreement; a disagreeing world raises."""
    if expected_argument_error(ctx.case.plan_args, ctx.case.group_ranks(min(ctx.original))) is not None:
        return []  # the planner must refuse these arguments before any exchange
    groups = _shared_groups(ctx)
    findings = _validator_findings(ctx, groups) if ctx.target.has_validator and ctx.plans else []
    args = ctx.case.plan_args
    supported = args.pp_degree == 1 and args.dp_mode == "fsdp"  # else the driver returns untouched (spec 3.2)
    if ctx.target.exchanges_plans and supported and not findings and ctx.case.seed % DIVERGENT_EVERY == 0:
        findings += _divergent_findings(ctx, groups)
    return findings


def _skip_reason(ctx: CheckContext) -> Optional[str]:
    target: Any = ctx.target
    if target is None or not (target.exchanges_plans or target.has_validator):
        return "the target exchanges no plans between ranks"
    return None


CHECKER = Checker(NAME, check_exchange, after=("planner",), skip_reason=_skip_reason,
                  summary="plan exchange: edited reports refused (spec 5.2.14), a disagreeing world stops (5.4.3)")
