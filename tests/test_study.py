"""The temperature study on the smoke preset end to end (results, figures, report; reuse on rerun), and its report
opened in headless Chromium: no console errors, every figure drawn."""
from __future__ import annotations

import csv
import json
import os
import shutil
import time

import pytest
import torch

from ctl_explore.study import PRESETS, findings, run_study, study_configs, study_figures, write_report


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("study") / "smoke"
    start = time.perf_counter()
    rows = run_study("smoke", out, quiet=True)
    return out, rows, time.perf_counter() - start


def test_smoke_study_writes_tidy_results(smoke):
    out, rows, _ = smoke
    assert len(rows) == len(study_configs("smoke", 1438)) == 12
    with open(out / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == 12 and {"loss", "tau", "seed", "linear_top1", "uniformity", "tolerance", "alignment",
                                  "pos_similarity", "top_negative_10", "wall_time_s"} <= set(table[0])
    assert json.loads((out / "results.json").read_text()) == rows
    for r in rows:
        assert 0 <= r["linear_top1"] <= 1 and r["uniformity"] >= 0 and -1 <= r["tolerance"] <= 1
        assert r["top10_negatives"] == sorted(r["top10_negatives"], reverse=True)
    assert {r["loss"] for r in rows} == {"contrastive", "hard_contrastive", "simple", "hard_simple"}


def test_rerun_reuses_finished_runs(smoke):
    out, rows, first = smoke
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/checkpoint.pt")}
    start = time.perf_counter()
    assert run_study("smoke", out, quiet=True) == rows
    assert time.perf_counter() - start < first / 3
    assert stamps == {p: p.stat().st_mtime_ns for p in (out / "runs").glob("*/checkpoint.pt")}


def test_interrupted_study_continues(smoke, tmp_path):
    out, rows, _ = smoke
    partial = tmp_path / "partial"
    shutil.copytree(out, partial)
    for run in list((partial / "runs").iterdir())[:3]: (run / "result.json").unlink()  # as if killed before measuring
    assert run_study("smoke", partial, quiet=True) == rows


def test_figures_and_findings(smoke):
    _, rows, _ = smoke
    figs = study_figures(rows)
    assert set(figs) == {"uniformity_tolerance", "similarity_profile", "accuracy"}
    found = findings(rows)
    assert [f.number for f in found] == [1, 2, 3, 4, 5, 6]
    assert all(f.verdict in ("reproduced", "not reproduced", "inconclusive at this scale") for f in found)


def test_presets():
    assert {"smoke", "digits", "cifar10-paper", "cifar100-paper", "svhn-paper", "imagenet100-paper"} <= set(PRESETS)
    assert set(PRESETS["digits"].taus) >= {0.05, 0.07, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0} and len(PRESETS["digits"].seeds) >= 3
    assert PRESETS["svhn-paper"].alpha == 0.0315 and PRESETS["imagenet100-paper"].backbone == "resnet50"
    with pytest.raises(ValueError, match="preset must be one of"):
        run_study("mnist")


CHROMIUM = os.environ.get("CTL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs a system Chromium: `apt-get install -y --no-install-recommends chromium`")
def test_report_renders_in_chromium_without_errors(smoke):
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python: `pip install playwright`")
    out, rows, _ = smoke
    report = write_report(rows, out, "smoke")
    errors = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: errors.append(f"network request: {r.url}") if not r.url.startswith(("file:", "data:", "blob:")) else None)
            page.goto(report.as_uri())
            page.wait_for_function("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 3", timeout=30_000)
            drawn = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(
                gd => ({id: gd.id, traces: gd.querySelectorAll('.scatterlayer .trace').length}))""")
            verdicts = page.locator("td.v").all_inner_texts()
        finally:
            browser.close()
    assert errors == []
    assert {d["id"] for d in drawn} == {"fig-uniformity_tolerance", "fig-similarity_profile", "fig-accuracy"}
    assert all(d["traces"] >= 2 for d in drawn), drawn
    assert len(verdicts) == 6
