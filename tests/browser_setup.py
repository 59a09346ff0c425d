"""What both browser tests share: finding the system Chromium, Playwright, the skip marks, and one browser per module.

Never runs ``playwright install``: the tests drive the Chromium the system has (Debian: ``apt-get install chromium``),
or the binary named by the environment variable ``CTL_CHROMIUM``.
"""
from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM = os.environ.get("CTL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None


def needs_browser(what: str) -> list:
    "Skip marks with the reason in a sentence: `what` (e.g. 'the site's browser tests') needs Playwright and Chromium."
    return [
        pytest.mark.skipif(sync_playwright is None, reason=f"{what} need Playwright for Python: "
                           "`pip install playwright` (the package only; do not run `playwright install`)"),
        pytest.mark.skipif(CHROMIUM is None, reason=f"{what} need a system Chromium: on Debian/Ubuntu "
                           "`apt-get install -y --no-install-recommends chromium`, or set CTL_CHROMIUM to a Chromium binary"),
    ]


def launch_browser():
    "A generator for a module-scoped fixture: one headless Chromium, closed at the end (skips without one)."
    if sync_playwright is None or CHROMIUM is None:
        pytest.skip("no Playwright or no Chromium (see the skip reasons of the browser tests)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()
