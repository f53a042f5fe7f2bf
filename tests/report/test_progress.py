"""The progress line: plain periodic lines when no terminal reads them, with rate, failures and time left."""

from __future__ import annotations

import io
import time

from fsdp_verify.report.progress import Progress


def test_plain_lines_are_periodic_and_carry_rate_failures_and_time_left():
    out = io.StringIO()
    progress = Progress("fuzz", seconds=60, every=0.05, interactive=False, stream=out)
    progress.update(0, 0)
    time.sleep(0.06)
    progress.update(3, 1)
    progress.update(4, 1)  # within the period: no line
    lines = out.getvalue().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("progress fuzz: 3 examples, ") and "examples/s, 1 failures, 0:59 left" in lines[0]


def test_time_left_is_estimated_from_the_rate_for_a_count():
    progress = Progress("gate", unit="cases", bad="violations", total=10, interactive=False, stream=io.StringIO())
    progress.update(0, 0)
    progress.start -= 10  # ten seconds in
    progress.update(5, 0)
    assert progress.text().startswith("gate: 5/10 cases, 0.50 cases/s, 0 violations, 0:10 left")


def test_on_a_terminal_the_command_output_goes_to_stdout_and_the_live_line_to_stderr(capsys):
    with Progress("replay", unit="cases", total=2, interactive=True) as progress:
        progress.update(1, 0)
        progress.write("ok  some/case.json")
    captured = capsys.readouterr()
    assert captured.out == "ok  some/case.json\n"
    assert "replay" in captured.err and "1/2" in captured.err
