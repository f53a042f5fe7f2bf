"""Coverage of the generators: planner reasons and their sub-conditions (``reasons``,
``subconditions``) and branch coverage of ``fsdp_verify/reference`` (``branches``)."""

from fsdp_verify.coverage.reasons import Reach, case_reach, format_reach, measure, unreached
from fsdp_verify.coverage.subconditions import SUBCONDITIONS, SubCondition, classify

__all__ = ["SUBCONDITIONS", "Reach", "SubCondition", "case_reach", "classify", "format_reach", "measure",
           "unreached"]
