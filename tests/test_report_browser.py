"""The study's report as a reader first sees it (issue 42): Chromium at 1280 × 720 opens the report of the shipped digits
study, and the six verdicts, each with how firmly it could be decided, are on the first screen, before any table of runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from browser_setup import launch_browser, needs_browser

pytestmark = needs_browser("the report's browser test")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


def test_the_report_opens_with_the_six_verdicts(browser, tmp_path):
    from ctl_explore.study.plan import get_preset
    from ctl_explore.study.report import write_report
    rows = json.loads((REPO / "data/study-digits/results.json").read_text())
    path = write_report(rows, tmp_path, get_preset("digits"))
    context = browser.new_context(viewport={"width": 1280, "height": 720}, device_scale_factor=1)
    page = context.new_page()
    page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file://") else r.abort())
    page.goto(path.as_uri())
    rows_shown = page.evaluate("""() => [...document.querySelectorAll('table.verdicts tr')].slice(1).map(tr => ({
        cells: [...tr.cells].map(td => td.innerText), bottom: tr.getBoundingClientRect().bottom}))""")
    first_h2 = page.evaluate("() => document.querySelector('h2').getBoundingClientRect().top")
    context.close()
    assert [r["cells"][0].split(".")[0] for r in rows_shown] == ["1", "2", "3", "4", "5", "6"]
    assert all(r["bottom"] <= 720 for r in rows_shown), [r["bottom"] for r in rows_shown]  # all six on the first screen
    assert first_h2 > max(r["bottom"] for r in rows_shown)                                   # before scale, criteria and runs
    assert "not decidable at this test-set size" in rows_shown[1]["cells"][2] and "seed resamplings and" in rows_shown[0]["cells"][3] and "studies drawn at its effects" in rows_shown[4]["cells"][3]
