"""A target small enough to mutate in a test: the reference, with two switches a mutant can flip.

``fsdp-verify mutate tests/helpers/mutable_target.py --target tests.helpers.mutable_target:Switched``
with ``--operators ReplaceFalseWithTrue`` makes exactly one mutant (``SKIP_WAIT = True``: the first
wait is bypassed, a read before its wait that ``dependencies`` kills); ``--operators
ReplaceTrueWithFalse`` makes one that changes only a log line (a survivor, equivalent).
"""

from __future__ import annotations

from fsdp_verify.targets.reference import ReferenceTarget

SKIP_WAIT = False
QUIET = True


class Switched(ReferenceTarget):
    name = "switched"

    def rewrite(self, case, modules):
        plans = super().rewrite(case, modules)
        if not QUIET:
            print("rewrote", len(modules), "ranks")
        if SKIP_WAIT:
            for module in modules.values():
                waits = [n for n in module.graph.nodes if n.op == "call_function" and "wait_tensor" in str(n.target)]
                if waits:
                    waits[0].replace_all_uses_with(waits[0].args[0])
                    module.graph.erase_node(waits[0])
                    module.recompile()
        return plans
