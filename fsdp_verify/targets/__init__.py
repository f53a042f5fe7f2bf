"""Targets: planners + rewriters under test, behind one interface."""

from fsdp_verify.targets.base import Target
from fsdp_verify.targets.registry import TargetNotFound, available, get_target

__all__ = ["Target", "TargetNotFound", "available", "get_target"]
