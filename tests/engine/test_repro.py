"""``fsdp-verify repro``: the scripts it writes show a failure with torch alone, and only a failure.

Each planted bug is first killed by the harness (so the case is a real finding), then its script
runs in a fresh interpreter where fsdp_verify cannot be imported (a ``sitecustomize`` blocks it,
in the forked rank processes too): it must fail on the faulty pass and pass on the corrected one.
"""

from __future__ import annotations

import ast
import json
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from fsdp_verify.commands.cli import main
from fsdp_verify.corpus import files as corpus
from fsdp_verify.engine.repro import Outcome, run_script
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.graph.compose import Composer
from fsdp_verify.graph.examples import mlp_graph
from fsdp_verify.graph.values import NodeRef
from fsdp_verify.model.case import Case
from fsdp_verify.report import repro
from fsdp_verify.targets import post_grad
from fsdp_verify.targets.registry import get_target
from helpers import ROOT, TESTS



@pytest.fixture(scope="module")
def torch_only_env(tmp_path_factory) -> dict:
    """An environment in which ``import fsdp_verify`` fails (and the planted passes import)."""
    block = tmp_path_factory.mktemp("block")
    (block / "sitecustomize.py").write_text("import sys\nsys.modules['fsdp_verify'] = None\n")
    return {**os.environ, "PYTHONPATH": f"{block}{os.pathsep}{TESTS}"}


def _save(tmp_path: Path, target_name: str, case: Case) -> Path:
    """Judge ``case`` with the harness (it must fail) and save it as a corpus case."""
    target = get_target(target_name)
    case = target.normalise(case)
    findings, _ = check_all(target, case)
    verdict = corpus.Verdict.of(findings)
    assert verdict.status == corpus.FAIL, "the harness must kill the planted bug before a repro means anything"
    path, _ = corpus.save(corpus.Entry(case, target_name, verdict), tmp_path / "found")
    return path


def _write(path: Path, out: Path, *extra: str) -> Path:
    assert main(["repro", str(path), "-o", str(out), *extra]) == 0
    return out


def test_the_shared_setup_module_imports_only_torch():
    # the scripts copy post_grad.py's source: an fsdp_verify import there would break every script
    tree = ast.parse(Path(post_grad.__file__).read_text())
    roots = {(alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
             for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
             for alias in (node.names if isinstance(node, ast.Import) else [None])}
    assert roots <= {"__future__", "contextlib", "typing", "torch"}, roots


@pytest.mark.parametrize("planted, kind", [("negates_first_wait", "outputs_differ"),
                                           ("crashes_on_two_gathers", "target_raised"),
                                           ("widens_first_output", "outputs_differ"),
                                           ("draws_from_python", "generator_drawn")])
def test_a_planted_pass_bug_fails_standalone_and_the_corrected_pass_passes(tmp_path, torch_only_env, planted, kind):
    path = _save(tmp_path, f"fx-pass:helpers.torch_passes:{planted}", Case(mlp_graph(device="cpu")))
    script = _write(path, tmp_path / "repro.py")
    imports = {(alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
               for node in ast.walk(ast.parse(script.read_text()))
               if isinstance(node, (ast.Import, ast.ImportFrom))
               for alias in (node.names if isinstance(node, ast.Import) else [None])}
    assert imports - set(sys.stdlib_module_names) == {"torch"}, imports
    faulty = run_script(script, env=torch_only_env, timeout=240)
    assert faulty.outcome is Outcome.REPRODUCED and faulty.kind == kind, faulty.output
    if planted == "negates_first_wait":  # the three scripts differ only in the pass: one corrected run serves
        corrected = run_script(script, ["--pass", "helpers.torch_passes:correct"], env=torch_only_env, timeout=240)
        assert corrected.outcome is Outcome.NOT_REPRODUCED, corrected.output
    if planted == "draws_from_python":  # torch's generator is one inductor's compile restores: no bug
        restored = run_script(script, ["--pass", "helpers.torch_passes:draws_from_torch"], env=torch_only_env,
                              timeout=240)
        assert restored.outcome is Outcome.NOT_REPRODUCED, restored.output
    if planted == "widens_first_output":
        assert "dtype differ" in faulty.output  # what differs is said (for people; the kind is the record)


def test_a_rank_whose_process_ends_in_the_rewritten_graph_is_named_at_once_not_hung(tmp_path, torch_only_env):
    # Before, every rank put its report on one queue: a rank that died was "hung" after the timeout.
    path = _save(tmp_path, "fx-pass:helpers.torch_passes:ends_the_rank", Case(mlp_graph(device="cpu")))
    script = _write(path, tmp_path / "repro.py")
    began = time.monotonic()
    faulty = run_script(script, env=torch_only_env, timeout=240)
    assert faulty.outcome is Outcome.REPRODUCED and faulty.kind == "rewritten_died", faulty.output
    assert "exit status 3) while running the rewritten graph" in faulty.output
    assert time.monotonic() - began < 60, "a dead rank was waited for as if it could still report"


def test_an_inductor_crash_reproduces_on_torch_alone_and_a_corrected_configuration_passes(tmp_path, torch_only_env):
    # F7's shape: two reduce-scatters under the multidtype reduce-scatter mode
    c = Composer({"fsdp": (0, 1)}, overload="default")
    grads = []
    for i in range(2):
        c.param(f"w{i}", (4,), state_idx=i, device="cpu")
        x = c.input(f"g{i}", (8,), "float32")
        grads.append(c.reduce_scatter(c.call("aten.mul.Tensor", x, 2.0, backward=True), f"w{i}")[1])
    case = Case(c.finish(grads), target_options=(("bucket_reduce_scatters_bucket_mode", "custom_ops_multidtype"),
                                                ("bucket_reduce_scatters_fx", "all")))
    path = _save(tmp_path, "torch-inductor", case)
    script = _write(path, tmp_path / "f7.py")
    text = script.read_text()
    assert "'bucket_reduce_scatters_bucket_mode': 'custom_ops_multidtype'" in text  # the recorded configuration
    faulty = run_script(script, env=torch_only_env, timeout=240)
    assert faulty.outcome is Outcome.REPRODUCED and faulty.kind == "target_raised", faulty.output
    corrected = run_script(script, ["--config", "bucket_reduce_scatters_bucket_mode=default"], env=torch_only_env,
                           timeout=240)
    assert corrected.outcome is Outcome.NOT_REPRODUCED, corrected.output


def test_a_planted_bug_of_the_catalogue_fails_and_the_reference_passes(tmp_path):
    path = _save(tmp_path, "mutant:swapped_copy_out", Case(mlp_graph(device="cpu")))
    script = _write(path, tmp_path / "mutant.py")
    assert "import fsdp_verify" not in script.read_text().split("def rewrite_world")[0]  # only the rewrite needs it
    faulty = run_script(script, timeout=240)
    assert faulty.outcome is Outcome.REPRODUCED and faulty.kind == "outputs_differ", faulty.output
    assert run_script(script, ["--target", "reference"], timeout=240).outcome is Outcome.NOT_REPRODUCED


def test_several_cases_need_a_folder_and_a_bad_file_is_named(tmp_path, capsys):
    (tmp_path / "a.json").write_text("{}")
    assert main(["repro", str(tmp_path)]) == 2
    assert "-o" in capsys.readouterr().err
    assert main(["repro", str(tmp_path / "a.json"), "-o", str(tmp_path / "r.py")]) == 2
    assert "a.json" in capsys.readouterr().err
    assert main(["repro", str(tmp_path / "missing.json")]) == 2


def test_one_case_without_output_prints_the_script(tmp_path, capsys):
    path = _save(tmp_path, "mutant:swapped_copy_out", Case(mlp_graph(device="cpu")))
    assert main(["repro", str(path)]) == 0
    text = capsys.readouterr().out
    compile(text, "repro.py", "exec")
    assert "mutant:swapped_copy_out" in text


def test_literals_rebuild_the_values_they_were_written_from():
    value = {"a": (1, 2.5, float("inf")), "b": [torch.float32, torch.device("cpu"), torch.channels_last],
             "c": None, "d": "text", "e": (), "f": (True,)}
    assert eval(repro.literal(value), {"torch": torch, "float": float}) == value  # noqa: S307 - our own output
    assert repro.literal(NodeRef("mm")) == "n_mm"


def test_the_committed_repros_are_what_the_command_writes_now(tmp_path, monkeypatch):
    cases = sorted((ROOT / "corpus" / "found").glob("*.json"))
    monkeypatch.chdir(ROOT)
    assert main(["repro", "corpus/found", "-o", str(tmp_path)]) == 0
    for case in cases:
        committed = ROOT / "docs" / "repros" / f"{case.stem}.py"
        assert committed.exists(), f"regenerate: fsdp-verify repro corpus/found -o docs/repros ({committed.name})"
        assert committed.read_text() == (tmp_path / f"{case.stem}.py").read_text(), \
            f"{committed.name} is stale: fsdp-verify repro corpus/found -o docs/repros"


def test_a_campaign_classes_a_candidate_torch_does_not_show_as_a_harness_limitation(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # the scripts import the planted pass's module
    summary = tmp_path / "fuzz.json"
    got = main(["fuzz", "--target", "fx-pass:helpers.torch_passes:renames_sums", "--budget", "30", "--size",
                "tiny", "--in-process", "--no-shrink", "--max-failures", "1", "--seed", "1", "--corpus", str(tmp_path / "found"),
                "--json", str(summary), "--junit", str(tmp_path / "fuzz.xml"), "--repro-dir", str(tmp_path / "repros")])
    out = capsys.readouterr().out
    data = json.loads(summary.read_text())
    triaged = [f for f in data["failures"] if "repro" in f]
    assert triaged and all(f["class"] == "harness limitation" for f in triaged), data["failures"]
    assert all(Path(f["repro"]["script"]).exists() for f in triaged)
    assert not any(f["class"] == "defect candidate" for f in data["failures"])  # nothing left untriaged
    assert data["repro"]["reproduced"] == 0 and "(precision 0%)" in out
    # the saved cases say so too: the next night reads their class back
    saved = [json.loads(Path(f["file"]).read_text())["provenance"] for f in triaged]
    assert all((p["failure_class"], p["repro_outcome"]) == ("harness limitation", "not_reproduced") for p in saved), saved
    assert 'name="repro_precision" value="0.000"' in (tmp_path / "fuzz.xml").read_text()
    assert got == 0  # a harness limitation is no bug of the target


def test_a_candidate_whose_repro_fails_is_an_upstream_defect_and_precision_counts_it(tmp_path, monkeypatch):
    from fsdp_verify.engine import campaign
    from fsdp_verify.engine.repro import triage_candidates
    from fsdp_verify.report.summary import junit_xml, summary_text
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    name = "fx-pass:helpers.torch_passes:negates_first_wait"
    result = campaign.run(campaign.Config(target=name, budget=campaign.Budget(examples=10), corpus_dir=str(tmp_path),
                                          size="tiny", modules=False, max_failures=1, profile="ci", seed=1,
                                          shrink=False))
    assert [f["class"] for f in result.failures] == ["defect candidate"]
    triage_candidates(result, tmp_path / "repros")
    assert [f["class"] for f in result.failures] == ["upstream defect"]
    saved = json.loads(Path(result.failures[0]["file"]).read_text())["provenance"]
    assert (saved["failure_class"], saved["repro_outcome"]) == ("upstream defect", "reproduced")
    assert result.repro.reproduced == 1 and result.repro.not_reproduced == 0
    assert "1 of 1 defect candidates fail on torch alone (precision 100%)" in summary_text(result, name)
    assert 'name="upstream_defects" value="1"' in junit_xml(result, name)


def test_a_run_that_skips_the_repros_says_how_many_candidates_wait():
    from fsdp_verify.report.summary import repro_line
    from fsdp_verify.report.tally import Result
    result = Result(failures=[{"class": "defect candidate"}, {"class": "contract mismatch"}])
    result.repro.skipped = "--no-repro"
    assert repro_line(result) == "repro triage    skipped (--no-repro): 1 defect candidate untriaged"


def test_real_ranks_leave_a_renamed_reduction_source_inexact_in_both_runs():
    from fsdp_verify.execute.ranks.judge import kept_in_every
    c = Composer({"fsdp": (0, 1)}, overload="default")
    c.param("w", (4,), state_idx=0, device="cpu")
    grad = c.call("aten.mul.Tensor", c.input("g", (8,), "float32"), 2.0, backward=True)
    graph = c.finish([c.reduce_scatter(grad, "w")[1]])
    renamed = graph.with_nodes([n if n.name != grad else type(n)("other", n.op, n.target, n.args, n.kwargs, n.meta)
                                for n in graph.nodes])
    assert kept_in_every((grad,), [graph]) == (grad,)
    assert kept_in_every((grad,), [graph, renamed]) == ()


def test_an_uneven_case_s_script_builds_each_rank_s_graph_and_inputs_as_the_harness_does():
    """A rank that pads a short shard has its own graph and inputs: the script rebuilds both."""
    import runpy

    from fsdp_verify.execute.inputs import make_inputs
    from fsdp_verify.graph.builder import build_module, localize
    stem = "a8f9cee317f18f626ebd"
    namespace = runpy.run_path(str(ROOT / "docs" / "repros" / f"{stem}.py"), run_name="not_main")
    case = corpus.load(ROOT / "corpus" / "found" / f"{stem}.json").case
    assert case.graph.uneven
    shapes = set()
    for rank in case.graph.world():
        written, built = namespace["build_graph"](rank), build_module(localize(case.graph, rank))
        assert [(n.name, n.op, str(n.target), str(n.args)) for n in written.graph.nodes] == \
            [(n.name, n.op, str(n.target), str(n.args)) for n in built.graph.nodes]
        values, expected = namespace["make_inputs"](rank), make_inputs(case.graph, rank)
        # the shards all-gathers move take full-mantissa values (``FULL``), the harness's random mode
        full, drawn = set(namespace["FULL"]), make_inputs(case.graph, rank, mode="random")
        assert full and full <= set(namespace["INPUTS"])
        expected = [d if name in full else e for name, e, d in zip(namespace["INPUTS"], expected, drawn)]
        assert len(values) == len(expected) and all(torch.equal(a, b) for a, b in zip(values, expected))
        shapes.add(tuple(tuple(v.shape) for v in values))
    assert len(shapes) == 2  # the short rank's shard is its own


def test_a_pass_that_rounds_gathered_shards_is_reproduced_not_excused_as_a_harness_limitation(
        tmp_path, torch_only_env, monkeypatch):
    # The harness's identity codes see a float32 shard gathered through bfloat16; the script's
    # exact dyadic shards (k/8) came through unchanged, so the triage called a real bug a harness
    # limitation. The shards all-gathers move now take full-mantissa values in the script.
    path = _save(tmp_path, "fx-pass:helpers.torch_passes:gathers_through_bf16", Case(mlp_graph(device="cpu")))
    script = _write(path, tmp_path / "repro.py")
    assert run_script(script, env=torch_only_env, timeout=240).outcome is Outcome.REPRODUCED
    monkeypatch.setattr(repro, "gathered_shards", lambda spec: ())  # the dyadic shards of before
    dyadic = _write(path, tmp_path / "dyadic.py")
    assert run_script(dyadic, env=torch_only_env, timeout=240).outcome is Outcome.NOT_REPRODUCED


def test_a_script_whose_pass_does_not_import_judges_nothing_and_the_triage_runs_it_where_it_does(tmp_path):
    # A pass found through the campaign's working folder did not import from the script's own
    # folder: "the rewrite raised ModuleNotFoundError" was REPRODUCED, an upstream defect.
    from fsdp_verify.engine.repro import import_roots, script_env
    package = tmp_path / "userpkg"
    package.mkdir()
    (package / "user_pass_35.py").write_text(
        "from helpers.torch_passes import negates_first_wait as bucket\n")
    sys.path.insert(0, str(package))
    try:
        target = "fx-pass:user_pass_35:bucket"
        path = _save(tmp_path, target, Case(mlp_graph(device="cpu")))
        script = _write(path, tmp_path / "scripts" / "repro.py")
        alone = run_script(script, env={**os.environ, "PYTHONPATH": str(TESTS)}, timeout=240)
        assert alone.outcome is Outcome.CANNOT_LOAD and "CANNOT LOAD user_pass_35:bucket" in alone.output
        assert import_roots(target) == [str(package.resolve())]
        env = script_env(target)
        env["PYTHONPATH"] += os.pathsep + str(TESTS)
        assert run_script(script, env=env, timeout=240).outcome is Outcome.REPRODUCED
    finally:
        sys.path.remove(str(package))
        sys.modules.pop("user_pass_35", None)


def test_import_roots_name_a_user_folder_and_never_site_packages_or_the_standard_library(tmp_path, monkeypatch):
    from fsdp_verify.engine.repro import import_roots
    (tmp_path / "namespace_35" / "inner").mkdir(parents=True)  # folders without __init__.py
    (tmp_path / "namespace_35" / "inner" / "passes.py").write_text("def run(gm):\n    pass\n")
    (tmp_path / "package_35").mkdir()
    (tmp_path / "package_35" / "__init__.py").write_text("")
    (tmp_path / "package_35" / "passes.py").write_text("def run(gm):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    root = [str(tmp_path.resolve())]
    assert import_roots("fx-pass:namespace_35.inner.passes:run") == root
    assert import_roots("fx-pass:package_35.passes:run") == root
    assert import_roots("package_35.passes:make_target") == root
    # torch (site-packages) and json (the standard library) import anyway: first on the path they
    # could shadow the standard library
    assert import_roots("fx-pass:torch._inductor.fx_passes.bucketing:bucket_all_gather") == []
    assert import_roots("fx-pass:json:dumps") == [] and import_roots("reference") == []


def test_shards_gathered_through_views_pads_and_packing_take_full_mantissa_values(tmp_path, torch_only_env):
    # Only shards gathered directly or through one cast took full-mantissa values: a column-major
    # copy (transpose, contiguous, transpose) of a shard kept exact dyadics, which no narrower wire
    # rounds, so a pass that rounds what it gathers read as a harness limitation there.
    from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
    bp = Blueprint(blocks=((ParamDraw((2, 3), layout="column_major"), ParamDraw((2, 3), layout="column_major")),),
                   device="cpu")
    spec = render(bp)
    assert set(repro.gathered_shards(spec)) == {p.placeholder for p in spec.params}
    assert "x" not in repro.gathered_shards(spec)  # the batch is no shard: it stays exact
    path = _save(tmp_path, "fx-pass:helpers.torch_passes:gathers_through_bf16", Case(spec))
    script = _write(path, tmp_path / "repro.py")
    assert run_script(script, env=torch_only_env, timeout=240).outcome is Outcome.REPRODUCED
