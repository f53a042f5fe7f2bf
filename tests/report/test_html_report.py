"""The HTML report of fuzz, replay and gate: one self-contained page (no network, no script),
each finding with its picture, plan, message and replay command; a large graph is cut to the
neighbourhood of the finding; and a real browser renders it."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fsdp_verify.commands.cli import main
from fsdp_verify.engine.run_case import check_all
from fsdp_verify.model.case import Case
from fsdp_verify.report.picture import SHOWN, dot_source, neighbourhood, shown_nodes
from fsdp_verify.strategies.blueprint import Blueprint, ParamDraw, render
from fsdp_verify.targets.mutants import MUTANTS

BUG = "mutant:avg_twice"


@pytest.fixture(scope="module")
def campaign_page(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("campaign")
    # unshrunk: the page shows a finding either way, and shrinking was most of this test's time
    code = main(["fuzz", "--target", BUG, "--budget", "60", "--in-process", "--max-failures", "1", "--seed", "1",
                 "--no-shrink",
                 "--corpus", str(folder / "found"), "--html", str(folder / "report.html")])
    assert code == 1
    return folder / "report.html"


def test_the_campaign_page_is_self_contained_and_shows_each_finding(campaign_page):
    page = campaign_page.read_text()
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert "https://" not in page
    assert re.search(r'<section class="finding" id="finding-1">', page)
    assert "fsdp-verify replay " in page and f"--target {BUG}" in page
    assert re.search(r"fsdp-verify repro \S+\.json -o repro_\w+\.py", page)  # the standalone script's command
    assert "rule <code>" in page and "Reason coverage" in page and "Skipped checks" in page
    if shutil.which("dot"):
        assert "<svg" in page.split('id="finding-1"')[1]
    else:
        assert "Graphviz&#39;s dot is not installed" in page or "Graphviz's dot is not installed" in page


def test_a_large_graph_is_cut_to_the_neighbourhood_of_the_finding():
    blocks = tuple((ParamDraw((2, 4)), ParamDraw((3,))) for _ in range(60))  # over six times what is drawn
    case = Case(render(Blueprint(blocks=blocks)))
    findings, ctx = check_all(MUTANTS[BUG.split(":")[1]], case, keep_rewrite=True)
    assert findings
    shown, total = shown_nodes(ctx, findings)
    assert total > 6 * SHOWN and shown <= 2 * SHOWN
    named = {name for f in findings for name in f.nodes}
    kept = {n.name for n in neighbourhood(ctx.run.originals[0], named)}
    assert named & {n.name for n in ctx.run.originals[0].graph.nodes} <= kept
    dot = dot_source(ctx, findings)
    assert dot.count(" -> ") < 8 * SHOWN and "more nodes not drawn" in dot


def test_gate_and_replay_write_pages_too(tmp_path, campaign_page):
    found = sorted((campaign_page.parent / "found").glob("*.json"))
    assert main(["replay", str(found[0]), "--target", "reference", "--in-process", "--html",
                 str(tmp_path / "replay.html")]) == 0
    assert "as expected" in (tmp_path / "replay.html").read_text()
    # the candidate is the bug the corpus case was found on: it fails there whatever the six draws
    assert main(["gate", "--baseline", "reference", "--candidate", BUG, "--examples", "6",
                 "--in-process", "--corpus", str(found[0]), "--html", str(tmp_path / "gate.html")]) == 1
    page = (tmp_path / "gate.html").read_text()
    assert "candidate violations" in page and "violation" in page and "<script" not in page


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_a_real_browser_renders_the_page(campaign_page, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it as root)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0"]
    url = campaign_page.resolve().as_uri()
    shot = tmp_path / "page.png"
    taken = subprocess.run([browser, *flags, "--window-size=1280,2400", f"--screenshot={shot}", url],
                           capture_output=True, text=True, timeout=180)
    assert shot.exists() and shot.stat().st_size > 20_000, taken.stderr[-2000:]
    dom = subprocess.run([browser, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert 'id="finding-1"' in dom.stdout  # the finding section rendered
    if shutil.which("dot"):
        picture = dom.stdout.split('id="finding-1"')[1].split("</section>")[0]
        assert "<svg" in picture and picture.count("<g ") > 10  # a picture with content
    errors = [line for line in dom.stderr.splitlines() + taken.stderr.splitlines()
              if "CONSOLE" in line and ("ERROR" in line or "Uncaught" in line)]
    assert not errors, errors
