"""fsdp-verify: property-based verification and fuzzing of FSDP collective-bucketing passes.

The pipeline, one package each: ``strategies`` (generate) -> ``fsdp_verify.graph`` (build) ->
``fsdp_verify.targets`` / ``fsdp_verify.reference`` (plan and rewrite) -> ``fsdp_verify.execute``
(run) -> ``fsdp_verify.checks`` (judge) -> ``fsdp_verify.corpus`` / ``fsdp_verify.report`` (keep
and report). The command line is ``fsdp-verify`` (``fsdp_verify.cli``).
"""

__version__ = "0.1.0"
