"""Targets used by the plugin tests: loaded by ``module:callable`` and through an entry point."""

from __future__ import annotations

import os
import signal
import time

from fsdp_verify.targets.base import Target
from fsdp_verify.targets.reference import ReferenceTarget


class Crashing(Target):
    name = "crashing"

    def rewrite(self, case, modules):
        raise RuntimeError("planner exploded on purpose")


class Hanging(Target):
    name = "hanging"

    def rewrite(self, case, modules):
        time.sleep(3600)
        return {}


class Hoarding(Target):
    """Allocates without bound (a leak in a planner's cache, say)."""

    name = "hoarding"

    def rewrite(self, case, modules):
        import torch
        hoard = []
        while True:
            hoard.append(torch.empty(16 << 20))  # 64 MiB a time, never touched


class Scribbling(Target):
    """Writes to the disk without bound (a debug dump left on)."""

    name = "scribbling"

    def rewrite(self, case, modules):
        import tempfile
        with tempfile.TemporaryFile() as out:
            while True:
                out.write(b"x" * (8 << 20))


class Unlinted(Target):
    """Returns a graph whose nodes are out of topological order."""

    name = "unlinted"

    def rewrite(self, case, modules):
        for module in modules.values():
            nodes = [n for n in module.graph.nodes if n.op == "call_function"]
            nodes[0].append(nodes[-1]) if len(nodes) > 1 else None
            nodes[-1].prepend(nodes[0])
        return {}


class UnlintedReference(ReferenceTarget):
    """The reference, whose rewrite it then puts out of topological order (its planner lints)."""

    name = "unlinted-reference"

    def rewrite(self, case, modules):
        plans = super().rewrite(case, modules)
        Unlinted().rewrite(case, modules)
        return plans


def reference_copy() -> Target:
    """A factory, as an entry point would name it."""
    target = ReferenceTarget()
    target.name = "reference-copy"
    return target


class Segfaulting(Target):
    """Dies of a native crash (SIGSEGV) while rewriting."""

    name = "segfaulting"

    def rewrite(self, case, modules):
        import ctypes
        ctypes.string_at(0)
        return {}


class Exiting(Target):
    name = "exiting"

    def rewrite(self, case, modules):
        raise SystemExit(3)


class Garbage(Target):
    name = "garbage"

    def rewrite(self, case, modules):
        return "not a plan"


class Interrupting(Target):
    name = "interrupting"

    def rewrite(self, case, modules):
        raise KeyboardInterrupt


def broken_factory() -> Target:
    raise RuntimeError("factory exploded on purpose")


class TwoBugs(Target):
    """Bug B on graphs with three or more parameters; bug A on every other graph."""

    name = "two-bugs"

    def rewrite(self, case, modules):
        if len(case.graph.params) >= 3:
            raise TypeError("bug B: three or more parameters")
        raise ValueError("bug A: every other graph")


class SlowFailing(Target):
    """Fails on graphs with two or more parameters, slowly (a long shrink)."""

    name = "slow-failing"

    def rewrite(self, case, modules):
        time.sleep(0.4)
        if len(case.graph.params) >= 2:
            raise RuntimeError("slow bug")
        return {}


class Flaky(Target):
    """Fails on about half of its runs, whatever the graph (a nondeterministic target)."""

    name = "flaky"

    def rewrite(self, case, modules):
        import os
        if os.urandom(1)[0] < 128:
            raise RuntimeError("sometimes")
        return {}


class NeverSeesThese(Target):
    """Fails on every graph, but declares every graph a form it never receives in practice."""

    name = "never-sees-these"
    external = True

    def rewrite(self, case, modules):
        raise ValueError("fails on a form it never receives")

    def contract_mismatches(self, case, checkers=()):
        return ["every graph here is a form this target never receives"]


class ExcusedOnSmallGraphs(Target):
    """Fails on every graph with one root cause, but declares graphs of ``limit`` nodes or fewer a
    form it never receives: the larger graphs, drawn later, are where the same failure is its bug."""

    name = "excused-on-small-graphs"
    limit = 40

    def rewrite(self, case, modules):
        raise ValueError("fails on every graph")

    def contract_mismatches(self, case, checkers=()):
        return ["a small graph: a form this target never receives"] if len(case.graph.nodes) <= self.limit else []


def _dies_once(module, rank) -> None:
    """avg_twice, and the first worker process to rewrite a case after the campaign saved a failure
    kills itself (SIGKILL, as the OOM killer would): once per marker file."""
    import os
    import signal
    from pathlib import Path

    from fsdp_verify.targets.mutants import rewrite_bugs
    rewrite_bugs.avg_twice(module, rank)
    marker, corpus = os.environ.get("FSDP_TEST_DIE_MARKER"), os.environ.get("FSDP_TEST_DIE_CORPUS")
    if marker and corpus and not Path(marker).exists() and any(Path(corpus).glob("*.json")):
        Path(marker).write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)


def dies_once():
    from fsdp_verify.targets.mutants.base import Mutant
    return Mutant("dies_once", "avg_twice, and one worker is killed once", ("numerics",), damage=_dies_once)


POLLUTED = "FSDP_TEST_POLLUTED"


class Polluting(ReferenceTarget):
    """Correct plans, but the first run leaves the process changed (an environment variable, as a
    pass that sets a debug flag and never unsets it would); a run that finds the change raises. In
    a child that served the first run, the second case would fail for what the first one did."""

    name = "polluting"
    # Its second run in one process raises by design, and the exchange checker runs it a second
    # time on a disagreeing world: that finding is not what the isolation tests are about.
    exchanges_plans = False

    def rewrite(self, case, modules):
        import os
        if os.environ.get(POLLUTED):
            raise RuntimeError("this run inherited the state an earlier case left behind")
        os.environ[POLLUTED] = "1"
        return super().rewrite(case, modules)


class Threading(ReferenceTarget):
    """Correct plans, but each run leaves a thread running (a background compile pool, say)."""

    name = "threading"

    def rewrite(self, case, modules):
        import threading
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
        return super().rewrite(case, modules)


class RaisesOnce(ReferenceTarget):
    """Raises on its first run in a process, then plans correctly."""

    name = "raises-once"
    raised = False

    def rewrite(self, case, modules):
        if not RaisesOnce.raised:
            RaisesOnce.raised = True
            raise RuntimeError("first run fails")
        return super().rewrite(case, modules)


class Chatty(Target):
    """Prints on every case (as inductor's passes log), and dies of a native crash on cases with an
    odd seed after saying why (its last words must reach the finding)."""

    name = "chatty"

    def rewrite(self, case, modules):
        print("chatty: planning seed", case.seed, flush=True)
        os.write(2, b"chatty: a C-level warning\n")
        if case.seed % 2:
            os.write(2, b"chatty: about to crash\n")
            os.kill(os.getpid(), signal.SIGSEGV)
        return {}


class LazyRaising(Target):
    """Imports a module on its first call, then raises (so every case forks a fresh child)."""

    name = "lazy-raising"

    def rewrite(self, case, modules):
        import helpers.lazily_imported  # noqa: F401 - the import is the point
        raise RuntimeError("raises after a lazy import")


class Knobbed(ReferenceTarget):
    """The reference with an open option of three values (a campaign draws one per case)."""

    name = "knobbed"

    def options(self):
        return {"knob": (1, 2, 3)}

    def configure(self, options):
        return self
