"""The command line end to end, through subprocesses: every command and exit code (refusals of bad
input run ``main`` in this process: the same code, without a subprocess's start)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fsdp_verify.corpus import files as corpus
from fsdp_verify.model.case import Case
from helpers.cases import two_block_case
from helpers import ROOT

EXE = [sys.executable, "-m", "fsdp_verify"]


def cli(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*EXE, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout)


def in_process(capsys, *args: str) -> subprocess.CompletedProcess:
    """The command run by ``main`` in this process: the same code as in a subprocess (the entry point
    and the commands that run work are tested through one) without the seconds each interpreter
    spends importing torch."""
    from fsdp_verify.commands.cli import main
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's refusals
        code = exc.code
    captured = capsys.readouterr()
    return subprocess.CompletedProcess(list(args), code, captured.out, captured.err)


def test_help_and_targets():
    assert cli("--help").returncode == 0
    out = cli("targets")
    assert out.returncode == 0 and "reference" in out.stdout and "mutant:<name>" in out.stdout
    from fsdp_verify.targets.mutants import MUTANTS
    for name, mutant in MUTANTS.items():  # every planted bug, its summary and the checkers meant for it
        assert f"mutant:{name} " in out.stdout and f"{mutant.summary} [{', '.join(mutant.kills)}]" in out.stdout


def test_every_option_has_help_and_fixed_values_are_choices():
    import argparse

    from fsdp_verify.commands.cli import build_parser
    from fsdp_verify.strategies.graphs import SIZES
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name, command in commands.items():
        for action in command._actions:
            assert action.help, f"{name} {action.option_strings or action.dest} has no help"
            if action.dest in ("size", "profile", "strategy"):
                assert action.choices, f"{name} --{action.dest} should list its values"
    assert tuple(commands["fuzz"]._option_string_actions["--size"].choices) == tuple(SIZES)
    from fsdp_verify.engine import campaign
    from fsdp_verify.corpus import profiles
    assert commands["fuzz"]._option_string_actions["--strategy"].choices == campaign.STRATEGIES
    assert commands["fuzz"]._option_string_actions["--profile"].choices == profiles.PROFILES


def test_help_imports_neither_torch_nor_hypothesis():
    """``fsdp-verify --help`` and argument errors answer without the heavy imports (issue 17: <0.5 s)."""
    probe = ("import sys\nfrom fsdp_verify.commands.cli import build_parser\nbuild_parser().format_help()\n"
             "try:\n    build_parser().parse_args(['fuzz', '--budget', 'soon'])\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('torch', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr
    bad = cli("selftest", "--mutant", "no_such_bug")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr and "fused_launch_early" in bad.stderr


def test_the_process_entry_returns_the_commands_code_and_freezes_what_it_left(monkeypatch):
    """The interpreter's last collection would walk everything a campaign left; frozen, it walks
    nothing. ``main`` itself (what tests and benchmarks call) leaves the collector alone."""
    import gc
    from fsdp_verify.commands import cli as command_line
    monkeypatch.setattr(command_line, "main", lambda: 3)
    assert gc.get_freeze_count() == 0
    try:
        assert command_line.entry() == 3
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("name", ["nope", "os:system_typo", "mutant:nothing"])
def test_unknown_target_exits_2_with_the_list(name, capsys):
    out = in_process(capsys, "fuzz", "--target", name, "--budget", "1")
    assert out.returncode == 2
    assert "fsdp-verify: error:" in out.stderr
    if name == "nope":
        assert "available: " in out.stderr and "reference" in out.stderr


def test_bad_budget_exits_2():
    out = cli("fuzz", "--budget", "soon")
    assert out.returncode == 2 and "budget 'soon'" in out.stderr


def test_bad_database_exits_2():
    out = cli("gate", "--baseline", "reference", "--candidate", "reference", "--db", "s3://bucket/db")
    assert out.returncode == 2 and "unknown URL scheme" in out.stderr and "redis://host:port/db" in out.stderr


def test_fuzz_reference_passes_and_writes_reports(tmp_path):
    junit, summary = tmp_path / "fuzz.xml", tmp_path / "fuzz.json"
    out = cli("fuzz", "--target", "reference", "--budget", "6", "--size", "tiny", "--no-modules",
              "--corpus", str(tmp_path / "found"), "--db", str(tmp_path / "db"), "--junit", str(junit),
              "--json", str(summary), "--progress-every", "0.01", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not (tmp_path / ".hypothesis").exists()  # examples go only where --db says
    assert "examples/s" in out.stdout and "reason coverage" in out.stdout
    # stdout is a pipe: plain periodic progress lines, no carriage returns
    assert "progress fuzz: " in out.stdout and " left" in out.stdout and "\r" not in out.stdout + out.stderr
    data = json.loads(summary.read_text())
    assert data["examples"] >= 6 and data["failures"] == []
    assert "<testsuite" in junit.read_text()


def test_a_pass_that_never_fuses_fails_with_require_fusion(tmp_path, capsys, monkeypatch):
    # A pass that never matches its graphs passes every check: the campaign said "0 failures" on
    # a user's pass that fused nothing in 632 cases. Now the summary says what the rewrites did.
    from helpers import TESTS
    monkeypatch.syspath_prepend(str(TESTS))
    failed = in_process(capsys, "fuzz", "--target", "fx-pass:helpers.torch_passes:never_matches", "--budget", "30",
                        "--size", "tiny", "--no-modules", "--corpus", str(tmp_path / "found"), "--db",
                        str(tmp_path / "db"), "--no-repro", "--require-fusion", "--junit", str(tmp_path / "j.xml"))
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "fused launches in 0 of the 30 cases it rewrote" in failed.stdout
    assert "FAIL: the target fused no launch" in failed.stdout
    assert '<property name="vacuous" value="True"' in (tmp_path / "j.xml").read_text()


def test_found_failure_is_saved_replayed_and_drawn(tmp_path, capsys):
    found = tmp_path / "found"
    out = cli("fuzz", "--target", "mutant:fused_meta_dropped", "--budget", "60", "--size", "tiny", "--no-modules",
              "--corpus", str(found), "--max-failures", "1", "--junit", str(tmp_path / "j.xml"))
    assert out.returncode == 1, out.stdout + out.stderr
    files = sorted(found.glob("*.json"))
    assert len(files) == 1
    entry = corpus.load(files[0])
    assert entry.target == "mutant:fused_meta_dropped" and entry.verdict.status == "fail"
    assert "consistency" in entry.verdict.checkers
    junit = (tmp_path / "j.xml").read_text()
    assert "<failure" in junit and f"replay: fsdp-verify replay {files[0]} --target mutant:fused_meta_dropped" in junit
    assert f"replay: fsdp-verify replay {files[0]}" in out.stdout
    repro = f"fsdp-verify repro {files[0]} -o repro_{files[0].stem}.py"
    assert f"repro: {repro}" in junit and f"repro:  {repro}" in out.stdout  # each finding names its repro
    written = in_process(capsys, *repro.split()[1:-1], str(tmp_path / "repro.py"))
    assert written.returncode == 0 and "mutant:fused_meta_dropped" in (tmp_path / "repro.py").read_text()
    same = in_process(capsys, "replay", str(found), "--target", "mutant:fused_meta_dropped")
    assert same.returncode == 0 and "1 as expected" in same.stdout
    # One rule for replay and pytest: a case recorded against another target must pass every invariant.
    fixed = in_process(capsys, "replay", str(found), "--target", "reference")
    assert fixed.returncode == 0 and "recorded against mutant:fused_meta_dropped" in fixed.stdout
    dot = tmp_path / "case.dot"
    shown = in_process(capsys, "show", str(files[0]), "--target", "mutant:fused_meta_dropped", "--dot", str(dot))
    assert shown.returncode == 0 and "findings:" in shown.stdout and "[consistency]" in shown.stdout
    assert "digraph" in dot.read_text() and "cluster_rewritten" in dot.read_text()
    if shutil.which("dot"):
        svg = tmp_path / "case.svg"
        assert in_process(capsys, "show", str(files[0]), "--svg", str(svg)).returncode == 0
        assert "<svg" in svg.read_text()


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _valid_doc() -> dict:
    entry = corpus.Entry(two_block_case(), "reference", corpus.Verdict("pass"), {})
    return entry.to_json()


@pytest.mark.parametrize("name,mutate,message", [
    ("notjson", lambda d: "{oops", "not valid JSON"),
    ("schema", lambda d: json.dumps({**d, "schema": "other"}), "schema: expected"),
    ("version", lambda d: json.dumps({**d, "version": 9}), "version: unsupported version 9"),
    ("status", lambda d: json.dumps({**d, "verdict": {"status": "maybe"}}), "verdict.status"),
    ("nocase", lambda d: json.dumps({k: v for k, v in d.items() if k != "case"}), "case: missing"),
    ("hostile_tag", lambda d: json.dumps({**d, "case": {**d["case"], "seed": {"$eval": "__import__('os')"}}}),
     "case.seed: must be an integer"),
    ("bad_target", lambda d: json.dumps(_set_node_target(d, "os.system")), "unknown target 'os.system'"),
    ("bad_node", lambda d: json.dumps(_set_node_args(d, [{"$pickle": "x"}])), "unknown value tag '$pickle'"),
    ("array", lambda d: "[1, 2]", "must hold a JSON object"),
])
def test_malformed_corpus_files_exit_2_naming_file_field_and_reason(tmp_path, name, mutate, message, capsys):
    path = _write(tmp_path / "bad", f"{name}.json", mutate(_valid_doc()))
    _write(tmp_path / "bad", "good.json", json.dumps(_valid_doc()))
    out = in_process(capsys, "replay", str(tmp_path / "bad"), "--in-process")
    assert out.returncode == 2, out.stdout + out.stderr
    assert str(path) in out.stderr and message in out.stderr
    assert "1 cases replayed" in out.stdout  # the good file is still replayed: nothing is lost
    assert "Traceback" not in out.stderr


def _set_node_target(doc: dict, target: str) -> dict:
    nodes = doc["case"]["graph"]["nodes"]
    index = next(i for i, n in enumerate(nodes) if n["op"] == "call_function")
    nodes[index]["target"] = target
    return doc


def _set_node_args(doc: dict, args: list) -> dict:
    nodes = doc["case"]["graph"]["nodes"]
    index = next(i for i, n in enumerate(nodes) if n["op"] == "call_function")
    nodes[index]["args"] = args
    return doc


def test_replay_missing_path_exits_2(tmp_path, capsys):
    out = in_process(capsys, "replay", str(tmp_path / "nothing"))
    assert out.returncode == 2 and "no such file" in out.stderr


def test_show_malformed_case_exits_2(tmp_path, capsys):
    path = _write(tmp_path, "x.json", "{}")
    out = in_process(capsys, "show", str(path))
    assert out.returncode == 2 and str(path) in out.stderr


def test_gate_passes_for_reference_and_fails_for_a_broken_candidate(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    same = cli("gate", "--baseline", "reference", "--candidate", "reference", "--examples", "4",
               "--corpus", str(empty), "--progress-every", "0.01")
    assert same.returncode == 0 and "candidate violations: 0" in same.stdout
    assert "progress gate: " in same.stdout and "/4 cases" in same.stdout
    rules = sorted(ROOT.joinpath("corpus", "rules").glob("*.json"))[:3]
    for rule in rules:
        shutil.copy(rule, empty / rule.name)
    broken = cli("gate", "--baseline", "reference", "--candidate", "mutant:members_unsorted", "--examples", "4",
                 "--corpus", str(empty))
    assert broken.returncode == 1 and "FAIL" in broken.stdout
    assert "cases whose plans differ" in broken.stdout


def test_coverage_command_fails_loudly_naming_what_is_unreached():
    out = cli("coverage", "--examples", "5")
    assert "missing_parameter_identity" in out.stdout and "param_name_empty" in out.stdout  # per sub-condition
    assert "pp_degree values:" in out.stdout and "dp_mode values:" in out.stdout
    assert out.returncode == 1
    assert "unreached in 5 examples:" in out.stderr and "/" in out.stderr.split("examples:")[1]


def test_corpus_save_is_atomic_and_deduplicated(tmp_path):
    entry = corpus.Entry(Case(two_block_case().graph), "reference", corpus.Verdict("pass"), {})
    path, written = corpus.save(entry, tmp_path)
    again, written_again = corpus.save(entry, tmp_path)
    assert written and not written_again and path == again
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert corpus.load(path).case.to_json() == entry.case.to_json()


def test_the_picture_groups_buckets_and_shows_plan_findings_divergence_and_legend():
    from fsdp_verify.engine.run_case import check_all
    from fsdp_verify.report.divergence import first_divergence
    from fsdp_verify.report.picture import dot_source
    from fsdp_verify.targets import get_target
    from helpers.cases import two_block_case
    findings, ctx = check_all(get_target("mutant:swapped_copy_out"), two_block_case())
    diverged = first_divergence(ctx)
    dot = dot_source(ctx, findings, diverged)
    assert diverged and f'"rewritten:{diverged}"' in dot and "first divergence" in dot
    assert "cluster_original_bucket_0" in dot and "cluster_rewritten_bucket_0" in dot
    assert "fused all_gather" in dot and "round 1 plan (rank 0)" in dot and "[layout]" in dot
    assert "cluster_legend" in dot and "named by a finding" in dot
    _, clean = check_all(get_target("reference"), two_block_case())
    assert first_divergence(clean) is None
