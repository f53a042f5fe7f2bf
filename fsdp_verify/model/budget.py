"""A campaign's budget, importable without torch or Hypothesis: the command line checks it
before any heavy import, so a bad value answers at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Budget:
    """Stop after ``seconds`` of wall clock or ``examples`` cases, whichever is given."""

    seconds: Optional[float] = None
    examples: Optional[int] = None

    def describe(self) -> str:
        """``90s`` or ``500 examples``."""
        return f"{self.seconds:g}s" if self.seconds is not None else f"{self.examples} examples"

    @staticmethod
    def parse(text: str) -> "Budget":
        """``90s``, ``5m``, ``1h`` (time) or ``500`` (examples)."""
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
        if not match:
            raise ValueError(f"budget {text!r}: use a duration like 90s, 5m, 1h or an example count like 500")
        value, unit = float(match.group(1)), match.group(2)
        if not unit:
            return Budget(examples=int(value))
        return Budget(seconds=value * {"s": 1, "m": 60, "h": 3600}[unit])
