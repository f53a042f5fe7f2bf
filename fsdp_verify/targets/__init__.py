"""Targets: planners + rewriters under test, behind one interface."""

from .base import Target
from .registry import TargetNotFound, available, get_target

__all__ = ["Target", "TargetNotFound", "available", "get_target"]
