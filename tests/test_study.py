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


def _table(agree: bool, seeds=(0, 1, 2)):
    "Hand-made study rows built to agree (or disagree) with every finding of [WL21]."
    rows = []
    for loss in ("contrastive", "hard_contrastive"):
        hard = loss == "hard_contrastive"
        for x, tau in enumerate((0.05, 0.2, 1.0)):
            x = x if agree else -x
            for s in seeds:
                e = 0.001 * s
                acc = (0.8 + (0.05 if x == 1 else 0) + (0.08 * x if hard else 0)) if agree else 0.9 - 0.1 * abs(x) - (0.05 * abs(x) if hard else 0)
                rows.append(dict(loss=loss, tau=tau, seed=s, uniformity=3.0 - x * (0.5 if not hard else 0.1 if agree else 0.9) + e,
                                 tolerance=0.3 + 0.2 * x + e, linear_top1=acc + e, pos_similarity=0.6 + 0.1 * x + e,
                                 top10_negatives=[0.2 + 0.2 * x + e] * 10))
    for loss, acc in (("simple", 0.6 if agree else 0.95), ("hard_simple", 0.85 if agree else 0.5)):
        rows += [dict(loss=loss, tau=None, seed=s, uniformity=2.0, tolerance=0.5, linear_top1=acc + 0.001 * s,
                      pos_similarity=0.7, top10_negatives=[0.4] * 10) for s in seeds]
    return rows


def test_findings_rules_on_hand_made_tables():
    assert [f.verdict for f in findings(_table(True))] == ["reproduced"] * 6
    assert [f.verdict for f in findings(_table(False))] == ["not reproduced"] * 6
    # one seed: no spread, so nothing can be told apart, whatever the means say
    assert {f.verdict for f in findings(_table(True, seeds=(0,)))} == {"inconclusive at this scale"}
    # overlapping seed spreads: the uniformity ends of finding 1 no longer differ
    noisy = [dict(r, uniformity=r["uniformity"] + (0.8 if r["seed"] == 0 else -0.8)) for r in _table(True)]
    assert findings(noisy)[0].verdict == "inconclusive at this scale"
