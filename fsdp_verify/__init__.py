"""fsdp-verify: property-based verification and fuzzing of FSDP collective-bucketing passes.

The pipeline, one folder each: ``strategies`` (generate) -> ``graph`` (build) -> ``targets`` and
``reference`` (plan and rewrite) -> ``execute`` (run) -> ``checks`` (judge) -> ``corpus`` and
``report`` (keep and report), driven by ``engine`` and ``commands`` (``docs/architecture.md``).

Modules that once lay at the package root still import under their old names (and run with
``python -m``), with a DeprecationWarning naming the new place, so scripts and workflows written
against them keep working.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

__version__ = "0.1.0"

MOVED = {
    "fsdp_verify.case": "fsdp_verify.model.case",
    "fsdp_verify.spec_params": "fsdp_verify.model.spec_params",
    "fsdp_verify.names": "fsdp_verify.model.names",
    "fsdp_verify.collector": "fsdp_verify.engine.collector",
    "fsdp_verify.profiles": "fsdp_verify.corpus.profiles",
    "fsdp_verify.example_db": "fsdp_verify.corpus.example_db",
    "fsdp_verify.expectations": "fsdp_verify.corpus.expectations",
    "fsdp_verify.orchestrate": "fsdp_verify.engine.run_case",
    "fsdp_verify.triage": "fsdp_verify.engine.triage",
    "fsdp_verify.campaign": "fsdp_verify.engine.campaign",
    "fsdp_verify.gate": "fsdp_verify.engine.gate",
    "fsdp_verify.replay": "fsdp_verify.engine.replay",
    "fsdp_verify.selftest": "fsdp_verify.engine.selftest",
    "fsdp_verify.fuzz_properties": "fsdp_verify.commands.fuzz_properties",
    "fsdp_verify.cli": "fsdp_verify.commands.cli",
    "fsdp_verify.pytest_plugin": "fsdp_verify.commands.pytest_plugin",
    "fsdp_verify.torchrun_replay": "fsdp_verify.execute.ranks.torchrun",
    "fsdp_verify.e2e": "fsdp_verify.execute.compiled.sweep",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An old name is the new module itself (one module object, so one registry and one set of
    classes); ``python -m OLD`` runs the new module's code."""

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, self, origin=importlib.util.find_spec(MOVED[name]).origin)

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}", DeprecationWarning, stacklevel=2)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass

    def get_code(self, name):
        new = MOVED[name]
        return importlib.util.find_spec(new).loader.get_code(new)


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.append(_Alias())
