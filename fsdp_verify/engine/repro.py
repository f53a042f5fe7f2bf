"""Running a written repro script in a fresh interpreter, and what its outcome says.

The script is the judge of whether torch alone shows a failure (issue rule: a finding against an
external target is a defect only when such a script fails); this module only runs it and reads
the JSON outcome it writes (``--json``), never its printed words.
"""

from __future__ import annotations

import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, replace
from enum import Enum
from pathlib import Path
from typing import Any, Optional, Sequence


class Outcome(Enum):
    """What a repro script's run showed."""

    REPRODUCED = "reproduced"          # exit 1: the rewrite raised, failed to run, died, hung, or an output differs
    NOT_REPRODUCED = "not_reproduced"  # exit 0: bitwise equal on every rank
    CANNOT_RUN = "cannot_run"          # exit 3: the original graph does not run on real ranks here
    BROKEN = "broken"                  # any other exit, or no outcome file: the script itself failed
    TIMED_OUT = "timed_out"            # the script did not finish in time
    CANNOT_LOAD = "cannot_load"        # exit 4: the pass's module does not import where the script ran


@dataclass(frozen=True)
class ScriptRun:
    """One run of a repro script."""

    outcome: Outcome
    kind: str = ""            # the script's own word for what it saw (target_raised, outputs_differ, ...)
    returncode: Optional[int] = None
    output: str = ""          # the last lines it printed, for people
    seconds: float = 0.0

    @property
    def reproduced(self) -> bool:
        return self.outcome is Outcome.REPRODUCED


_CODES = {0: Outcome.NOT_REPRODUCED, 1: Outcome.REPRODUCED, 3: Outcome.CANNOT_RUN, 4: Outcome.CANNOT_LOAD}


def run_script(script: str | Path, args: Sequence[str] = (), timeout: float = 600.0,
               env: Optional[dict] = None, cwd: Optional[str | Path] = None) -> ScriptRun:
    """Run ``script`` with this interpreter in a fresh process and read its JSON outcome."""
    with tempfile.TemporaryDirectory(prefix="fsdp-verify-repro-") as tmp:
        outcome_file = Path(tmp) / "outcome.json"
        command = [sys.executable, str(script), *args, "--json", str(outcome_file),
                   "--timeout", str(max(10.0, timeout - 30.0))]
        started = time.monotonic()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                  env=env if env is not None else dict(os.environ), cwd=cwd)
        except subprocess.TimeoutExpired as exc:
            tail = (exc.stdout or b"")[-2000:] if isinstance(exc.stdout, bytes) else (exc.stdout or "")[-2000:]
            return ScriptRun(Outcome.TIMED_OUT, output=str(tail), seconds=time.monotonic() - started)
        seconds = time.monotonic() - started
        text = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        outcome = _CODES.get(done.returncode, Outcome.BROKEN)
        try:
            kind = json.loads(outcome_file.read_text()).get("kind", "")
        except (OSError, ValueError, AttributeError):
            return ScriptRun(Outcome.BROKEN, "", done.returncode, text, seconds)
        return ScriptRun(outcome, str(kind), done.returncode, text, seconds)


def script_for(entry: Any, target_name: str | None = None, source: str = "a corpus case",
               filename: str = "repro.py") -> Any:
    """The repro script (``report.repro.Script``) of a loaded corpus entry, against ``target_name``
    or the target the entry was recorded against."""
    from fsdp_verify.report import repro
    return repro.write(entry.case, target_name or entry.target, entry.verdict.findings, entry.key,
                       source=source, filename=filename)


REPRO_KEY = "repro_outcome"  # provenance: what the standalone repro showed (``Outcome``'s value)
# The reasons a triaged failure carries (people read them; the class is the record).
_REPRODUCED = "its standalone repro fails on torch alone ({kind}): {script}"
_NOT_REPRODUCED = ("its standalone repro gives bitwise-equal outputs on real gloo ranks ({script}): the harness's "
                   "rule is stricter than what torch shows")
_UNJUDGED = "its standalone repro could not judge it ({outcome}): {script}"


def import_roots(target_name: str | None) -> list[str]:
    """The folder that holds the top-level package of the module a target name names (an
    ``fx-pass:MODULE:CALLABLE`` pass, a ``module:callable`` target), as this process finds it: a
    repro script runs from a folder of its own, where a pass found through the campaign's working
    folder does not import, and the script would judge nothing. Empty where there is none to add."""
    if not target_name:
        return []
    spec = target_name[len("fx-pass:"):] if target_name.startswith("fx-pass:") else target_name
    module_name = spec.partition(":")[0]
    if not module_name or ":" not in spec:
        return []
    try:  # the top-level package alone: found without running the target's code
        found = importlib.util.find_spec(module_name.split(".")[0])
    except (ImportError, ValueError):
        return []
    if found is None:
        return []
    if found.origin and Path(found.origin).is_file():
        origin = Path(found.origin).resolve()
        root = origin.parent.parent if origin.name == "__init__.py" else origin.parent
    elif found.submodule_search_locations:  # a namespace package: a folder without __init__.py
        root = Path(next(iter(found.submodule_search_locations))).resolve().parent
    else:
        return []  # built in or frozen
    # where the script's interpreter looks anyway (site-packages, the standard library): put first
    # on its path, such a folder could shadow the standard library
    usual = {Path(p).resolve() for p in (*site.getsitepackages(), site.getusersitepackages(), sysconfig.get_paths()["stdlib"])}
    return [] if root in usual else [str(root)]


def script_env(target_name: str | None) -> dict:
    """This process's environment, with the folders ``target_name``'s module imports from first on
    ``PYTHONPATH`` (``import_roots``): the script's own folder is its first import path, not this
    process's working folder."""
    env = dict(os.environ)
    roots = import_roots(target_name)
    if roots:
        env["PYTHONPATH"] = os.pathsep.join([*roots, *filter(None, [env.get("PYTHONPATH")])])
    return env


def triage_candidates(result: Any, folder: Path, timeout: float = 300.0, target_name: str | None = None) -> None:
    """Write and run the repro of every defect candidate of a campaign ``result`` (a
    ``report.tally.Result``) and reclassify it by the script's outcome alone: reproduced is an
    upstream defect, bitwise equal a harness limitation, anything else stays a candidate."""
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.corpus.known import CLASS_KEY
    from fsdp_verify.model import classes
    folder.mkdir(parents=True, exist_ok=True)
    for failure in result.failures:
        if classes.of(failure) is not classes.FailureClass.CANDIDATE or not failure.get("file"):
            continue
        entry = corpus.load(failure["file"])
        path = folder / f"repro_{Path(failure['file']).stem}.py"
        script = script_for(entry, target_name, source=failure["file"], filename=path.name)
        path.write_text(script.text)
        ran = run_script(path, timeout=timeout, env=script_env(target_name or entry.target))
        failure["repro"] = {"script": str(path), "outcome": ran.outcome.value, "kind": ran.kind,
                            "seconds": round(ran.seconds, 1)}
        if ran.outcome is Outcome.REPRODUCED:
            result.repro.reproduced += 1
            failure["class"] = classes.FailureClass.UPSTREAM.value
            failure["class_reasons"] = [_REPRODUCED.format(kind=ran.kind, script=path)]
        elif ran.outcome is Outcome.NOT_REPRODUCED:
            result.repro.not_reproduced += 1
            failure["class"] = classes.FailureClass.LIMITATION.value
            failure["class_reasons"] = [_NOT_REPRODUCED.format(script=path)]
        else:
            result.repro.unjudged += 1
            failure["class_reasons"] = [*failure.get("class_reasons", []),
                                        _UNJUDGED.format(outcome=ran.outcome.value, script=path)]
        # The saved case says what the run concluded (the next night reads its class back, and a
        # person opening it must not read "defect candidate" for what the repro settled).
        provenance = {**entry.provenance, CLASS_KEY: failure["class"], REPRO_KEY: ran.outcome.value}
        try:
            corpus.restate(replace(entry, provenance=provenance), failure["file"])
        except OSError as exc:  # a read-only or full corpus folder: the summary still says it
            failure["class_reasons"] = [*failure["class_reasons"], f"the saved case keeps its old class: "
                                        f"{failure['file']} cannot be written ({type(exc).__name__}: {exc})"]
