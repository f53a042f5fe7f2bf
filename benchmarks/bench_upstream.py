"""Examples and seconds to the first finding of each known upstream defect, as a user's campaign
meets it: ``fsdp-verify fuzz`` (the real command, one worker, failures kept as found) against the
configuration family the defect lives in, until a failure with the defect's signature appears.

A defect's signature is what the harness names it by (``engine/signature.py``: a crash's exception
type and innermost frame, a value difference's rule and first divergent operator), read by
replaying its saved case in ``corpus/found/``; a failure of the campaign is that defect when its
recorded signature is the same. So the figure also says whether one defect is one finding: the
campaign's other failures are listed beside it.

    python benchmarks/bench_upstream.py [--seconds 120] [--seed 0] [--parallel 2] [--only F7 ...]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Known:
    """A defect of docs/findings.md: its saved case, and the campaign a user would run to meet it."""

    name: str
    case: str  # corpus/found/<key>.json
    target: str  # the configuration family (the target's open options are drawn per example)
    strategy: str


KNOWN = (
    Known("F2", "c7b4d2d170e8ca759d92", "torch-inductor", "cases"),
    Known("F7", "d16f1596769588ce66bd", "torch-inductor:custom_ops_multidtype", "cases"),
    # the whole space: pinning multidtype for both kinds lets F7 (reduce-scatters) fire first on every graph
    Known("F8", "1bffb0577cf669e31606", "torch-inductor", "cases"),
    Known("F9", "c2ee48fa77cc446f6e5e", "torch-inductor", "captured"),
    Known("F10", "7b7d5c7883ff987e96ad", "torch-inductor@manual", "captured"),
)


def signature_of(case_key: str) -> list[str]:
    """The signature the harness gives the saved case now, on the target it was saved for."""
    from fsdp_verify.checks.findings import ERROR
    from fsdp_verify.corpus import files as corpus
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.engine.signature import signature
    from fsdp_verify.targets import get_target
    entry = corpus.load(ROOT / "corpus" / "found" / f"{case_key}.json")
    findings, _ = check_all(get_target(entry.target), entry.case)
    errors = [f for f in findings if f.severity == ERROR]
    return signature(errors).to_json() if errors else []


def hunt(known: Known, seconds: int, seed: int) -> dict:
    """One campaign in a fresh process; CPU seconds from the children's rusage (this thread's child
    only when hunts run one at a time)."""
    with tempfile.TemporaryDirectory() as folder:
        summary = Path(folder) / "summary.json"
        command = [sys.executable, "-m", "fsdp_verify", "fuzz", "--target", known.target, "--strategy",
                   known.strategy, "--budget", f"{seconds}s", "--seed", str(seed), "--no-shrink", "--no-repro",
                   "--max-failures", "50", "--corpus", str(Path(folder) / "found"), "--json", str(summary)]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.monotonic()
        subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        wall = time.monotonic() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        doc = json.loads(summary.read_text()) if summary.exists() else {"examples": 0, "failures": []}
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"examples": doc.get("examples", 0), "wall": wall, "cpu": cpu, "failures": doc.get("failures", [])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=120, help="campaign budget per defect")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parallel", type=int, default=1, help="hunts at once (one core each)")
    parser.add_argument("--only", action="append", default=[], help="only this defect (repeatable)")
    args = parser.parse_args()
    chosen = [k for k in KNOWN if not args.only or k.name in args.only]
    wanted = {k.name: signature_of(k.case) for k in chosen}
    with ThreadPoolExecutor(max_workers=args.parallel) as pool:
        runs = dict(zip((k.name for k in chosen), pool.map(lambda k: hunt(k, args.seconds, args.seed), chosen)))
    print(f"| defect | configuration | signature | first met at (examples, s) | campaign examples | "
          f"wall s | CPU s | failures with this signature | other failures |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for known in chosen:
        run, signature = runs[known.name], wanted[known.name]
        same = [f for f in run["failures"] if f.get("signature") == signature]
        first = min((tuple(f["found_at"]) for f in same if f.get("found_at")), default=None)
        met = f"{first[0]}, {first[1]:.1f}" if first else "not met"
        print(f"| {known.name} | `{known.target}` on `{known.strategy}` | {' / '.join(signature) or '(no failure)'} | "
              f"{met} | {run['examples']} | {run['wall']:.0f} | {run['cpu']:.0f} | {len(same)} | "
              f"{len(run['failures']) - len(same)} |")
    print(f"(budget {args.seconds} s a defect, seed {args.seed}, {args.parallel} at once; CPU per hunt is exact "
          f"only with --parallel 1)")


if __name__ == "__main__":
    main()
