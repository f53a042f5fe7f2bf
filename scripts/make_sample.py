"""Regenerate the README's sample: a short campaign on a planted bug, its summary (docs/sample/ and
the README's sample block) and the picture of the finding it saved (docs/sample/). tests/test_readme.py checks that the sample is still what
the command prints, so the README never shows output the tool no longer gives.

    .venv/bin/python scripts/make_sample.py
"""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "docs" / "sample"
COMMAND = ["fuzz", "--target", "mutant:avg_twice", "--budget", "60", "--seed", "1", "--in-process",
           "--max-failures", "1", "--corpus", "found"]


def run_sample(folder: Path) -> tuple[str, Path]:
    """The summary the sample command prints in ``folder``, and the case it saved. It runs in a fresh
    process, as a user's command does: Hypothesis mixes literals of the loaded local modules into
    its draws, so the same command run inside another process (a test worker that imported every
    module) shrinks along another path."""
    done = subprocess.run([sys.executable, "-m", "fsdp_verify", *COMMAND], cwd=folder, capture_output=True,
                          text=True, check=False)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"the sample command exited {done.returncode}: {done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if not line.startswith("progress ")]
    return "\n".join(lines) + "\n", next((folder / "found").glob("*.json"))


def main() -> int:
    from fsdp_verify.commands.cli import main as cli
    SAMPLE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        summary, case = run_sample(Path(tmp))
        (SAMPLE / "summary.txt").write_text(summary)
        readme = ROOT / "README.md"
        head, rest = readme.read_text().split("<!-- sample:", 1)
        marker, rest = rest.split("\n", 1)
        _, tail = rest.split("<!-- end sample -->", 1)
        readme.write_text(f"{head}<!-- sample:{marker}\n```text\n{summary}```\n<!-- end sample -->{tail}")
        with contextlib.redirect_stdout(io.StringIO()):
            cli(["show", str(case), "--target", "mutant:avg_twice", "--svg", str(SAMPLE / "finding.svg")])
    print(f"wrote {SAMPLE / 'summary.txt'} and {SAMPLE / 'finding.svg'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
