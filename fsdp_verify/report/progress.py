"""The progress line of a long command (fuzz, gate, replay, selftest, coverage).

On a terminal it is one live tqdm line on stderr; when stdout is not a terminal, or ``CI`` is set,
it is a plain line on stdout every ``every`` seconds, so a CI log shows a run is alive without
carriage-return noise. Checkers never print: only the command line drives this.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Optional, TextIO

from tqdm import tqdm

DEFAULT_EVERY = 10.0  # seconds between plain lines


def is_interactive() -> bool:
    """A live line only when both streams are terminals and no CI runner reads the log."""
    return sys.stdout.isatty() and sys.stderr.isatty() and not os.environ.get("CI")


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    """Examples done, examples/s, failures and time left of one command.

    ``total`` (examples) or ``seconds`` (a wall-clock budget) gives the time left; with neither it
    is not shown. The clock starts at the first update, when the work starts (spawned workers take
    seconds to import torch). ``unit`` names what is counted (examples, cases, planted bugs), ``bad`` what went
    wrong (failures, violations, survivors).
    """

    def __init__(self, label: str, *, unit: str = "examples", bad: str = "failures", total: Optional[int] = None,
                 seconds: Optional[float] = None, every: float = DEFAULT_EVERY,
                 interactive: Optional[bool] = None, stream: Optional[TextIO] = None):
        self.label, self.unit, self.bad, self.total, self.seconds = label, unit, bad, total, seconds
        self.every = every
        self.interactive = is_interactive() if interactive is None else interactive
        self.stream = stream
        self.start: Optional[float] = None
        self.done, self.failures, self.steps = 0, 0, 0
        self._last_line = time.monotonic()
        self._bar = tqdm(total=total, desc=label, unit=f" {unit}", dynamic_ncols=True, leave=False,
                         file=sys.stderr) if self.interactive else None

    def _elapsed(self) -> float:
        return 0.0 if self.start is None else time.monotonic() - self.start

    def text(self) -> str:
        """``label: 120 examples, 3.9 examples/s, 0 failures, 0:31 left``."""
        elapsed = self._elapsed()
        rate = self.done / elapsed if elapsed > 0 else 0.0
        parts = [f"{self.label}: {self.done}{f'/{self.total}' if self.total else ''} {self.unit}",
                 f"{rate:.2f} {self.unit}/s", f"{self.failures} {self.bad}"]
        if self.steps:
            parts.append(f"{self.steps} shrink steps")
        left = self.left(elapsed, rate)
        if left is not None:
            parts.append(f"{_clock(left)} left")
        return ", ".join(parts)

    def left(self, elapsed: float, rate: float) -> Optional[float]:
        """Seconds left: of the wall-clock budget, else estimated from the rate and the total."""
        if self.seconds is not None:
            return max(0.0, self.seconds - elapsed)
        if self.total is not None and rate > 0:
            return max(0.0, (self.total - self.done) / rate)
        return None

    def set_total(self, total: int) -> None:
        """The count the work turned out to have (a gate's generated cases, repeats dropped)."""
        self.total = total
        if self._bar is not None:
            self._bar.total = total

    def update(self, done: int, failures: int, steps: int = 0) -> None:
        """Record the counts so far (``steps``: shrink steps, shown once there are any, so a long
        shrink is seen to move); draws the live line or, when due, prints a plain line."""
        self.done, self.failures, self.steps = done, failures, steps
        if self.start is None:
            self.start = time.monotonic()
            if self._bar is not None:
                self._bar.reset(total=self.total)  # tqdm's own clock and rate start with the work too
        if self._bar is not None:
            self._bar.n = done
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.refresh()
            return
        now = time.monotonic()
        if now - self._last_line >= self.every:
            self._last_line = now
            print(f"progress {self.text()}", file=self.stream or sys.stdout, flush=True)

    def _postfix(self) -> str:
        elapsed = self._elapsed()
        left = self.left(elapsed, self.done / elapsed if elapsed > 0 else 0.0)
        steps = f", {self.steps} shrink steps" if self.steps else ""
        return f"{self.failures} {self.bad}{steps}" + (f", {_clock(left)} left" if left is not None else "")

    def write(self, line: str) -> None:
        """Print a line of the command's own output without tearing the live line."""
        if self._bar is not None:
            self._bar.write(line, file=sys.stdout)
        else:
            print(line, file=self.stream or sys.stdout, flush=True)

    def close(self) -> None:
        """Remove the live line (the command's summary follows)."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
