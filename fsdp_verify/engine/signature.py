"""What makes two failures the same bug: the root cause, never the words of a message.

A failing case usually carries several findings: the one that caused it and the collateral ones
that follow from it (a crashed rewrite also leaves outputs unjudged, a lost node also breaks
edges). One bug must be one entry of a night's report, so a failure is named by its primary
finding only:

- a target that raised, timed out or died: the exception type and the innermost frame that
  raised it (Hypothesis's own notion of an origin), not the message, which carries shapes, dtypes
  and node names;
- a value, dtype or shape difference: the checker, its rule, what differs and the operator of the
  first node (kept by the rewrite) whose value differs (``checks/divergence.py``);
- any other rule: ``(checker, rule)``, and the operator it names where it names one (the kind of
  node lost, the collective whose volume changed).

The primary finding is the target's own failure when there is one, else the rewrite's failure to
run (a crash, a desync named by the kinds of collective the ranks part on, a deadlock), else the
first error finding in checker order (the registry's order puts the cheaper, more basic rules
first), passing over the findings the target's contract excuses on their own while another is
left. The others are collateral and are reported under it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Collection, Sequence

from fsdp_verify.checks.findings import ERROR, Finding

_FRAME = re.compile(r'^  File "([^"]+)", line \d+, in (\S+)')
# Files every error of a torch target passes through on its way up (the op dispatcher, fake and
# meta kernels, make_fx's tracing, dynamo's and the profiler's wrappers, FX's own graph checks): a
# frame there names where an op failed, not which code of the target called it, so the innermost
# frame outside them is the origin.
_PLUMBING = ("torch/_ops.py", "torch/_subclasses/", "torch/utils/_python_dispatch.py", "torch/_prims_common/",
             "torch/_refs/", "torch/_decomp/", "torch/_meta_registrations.py", "torch/_tensor.py",
             "torch/utils/_stats.py", "torch/_compile.py", "torch/_dynamo/eval_frame.py",
             "torch/fx/experimental/proxy_tensor.py", "torch/fx/_symbolic_trace.py",
             "torch/fx/graph.py", "torch/fx/node.py", "torch/fx/interpreter.py", "torch/fx/graph_module.py",
             "<eval_with_key>")  # FX's generated forward: its name counts up across a process


@dataclass(frozen=True)
class Signature:
    """One bug's name: the primary finding's rule and cause."""

    checker: str
    rule: str
    cause: str = ""

    def to_json(self) -> list[str]:
        return [self.checker, self.rule, self.cause]


def origin(finding: Finding) -> str:
    """For a target crash: the exception type and the innermost frame of the target's own code that
    raised it, read from the last traceback of the chain. The type is the first line at column 0
    after that traceback's frames: a message may run over several lines (a graph listing, advice),
    and its last line is no type."""
    trace = str(finding.details.get("traceback") or "").strip()
    if not trace:
        return ""
    header = trace.rfind("Traceback (most recent call last):")
    lines = trace[max(header, 0):].splitlines()[1 if header >= 0 else 0:]
    frames, kind = [], ""
    for line in lines:  # frames until the first line at column 0: the exception's; its message may
        found = _FRAME.match(line)  # quote more frames (dynamo's "from user code"), which are not ours
        if found:
            frames.append((found.group(1).replace("\\", "/"), found.group(2)))
        elif line and not line[0].isspace():
            kind = line.split(":")[0].strip()
            break
    own = [(path, name) for path, name in frames if not any(part in path for part in _PLUMBING)]
    path, name = (own or frames or [("", "")])[-1]
    return f"{kind} at {path.rsplit('/', 1)[-1]}:{name}" if path else kind


# A rewrite that cannot run at all (it crashes, or its ranks' streams desync or deadlock): every other
# finding of the case (an ordering rule broken on the way, a value never computed) follows from it,
# so it names the bug before any rule in checker order. One rank ordering its gathers otherwise (F13)
# once showed as two bugs: a group-order finding first in one case, a span finding in the other.
_REWRITE_FAILED = ("run_failed", "desync", "deadlock")


def primary(findings: Sequence[Finding], excused: Collection[Finding] = ()) -> Finding:
    """The finding that names the failure: the target's own, else the rewrite's failure to run,
    else the first error in checker order; of the errors not in ``excused`` where any is left.

    ``excused`` are the findings the target's contract excuses each on its own (a joint graph's
    phase-crossing window, for a pass that never receives joint graphs): in a failure that also
    breaks a rule the target is held to, that rule names the bug. Named by the excused finding,
    every bug that happens to come with it would be one signature, each later one a repeat."""
    order = ranked(findings)
    return next((f for f in order if not any(f is e for e in excused)), order[0])


def ranked(findings: Sequence[Finding]) -> list[Finding]:
    """The errors (else every finding) in the order they may name a failure: the target's own, the
    rewrite's failures to run, then the rest in checker order."""
    errors = [f for f in findings if f.severity == ERROR] or list(findings)
    own = [f for f in errors if f.checker == "target"]
    failed = [f for f in errors if f.checker != "target" and f.rule in _REWRITE_FAILED]
    return own + failed + [f for f in errors if f.checker != "target" and f.rule not in _REWRITE_FAILED]


def collateral(findings: Sequence[Finding], excused: Collection[Finding] = ()) -> list[Finding]:
    """The error findings reported under the primary one."""
    first = primary(findings, excused)
    return [f for f in findings if f is not first and f.severity == ERROR]


def signature(findings: Sequence[Finding], excused: Collection[Finding] = ()) -> Signature:
    """The bug ``findings`` show (one case's error findings; ``excused`` as for ``primary``)."""
    first = primary(findings, excused)
    if first.checker == "target":
        cause = origin(first)
    elif first.details.get("first_divergent_op"):  # where the values first part, and how
        cause = f"{first.details.get('first_differs')} at {first.details['first_divergent_op']}"
    else:  # what differs, for a rewrite that cannot run the exception's type, else the operator the
        # rule names: a lost add (a deduplicated sum) and a lost cast (a folded pre-gather cast) are
        # two causes, and one kept as a repeat of the other was never triaged on its own
        cause = str(first.details.get("differs", "") or first.details.get("error_type", "")
                    or first.details.get("op", ""))
    return Signature(first.checker, first.rule, cause)
