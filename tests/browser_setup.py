"""What the browser tests share: finding the system Chromium, Playwright, the skip marks, one browser per module, and
one build of the static site per test session.

Never runs ``playwright install``: the tests drive the Chromium the system has (Debian: ``apt-get install chromium``),
or the binary named by the environment variable ``CTL_CHROMIUM``.

The site tests build only the pages they need, ``SITE_ONLY`` (a regular expression on the notebooks' names, given to
``python -m ctl_explore.site --only``): lesson 02 (its two widgets become the explorables), lesson 91 (a cell the build
skips, hidden cells), appendix 92 (a plotly figure and an explorable in a notebook's output) and the index (the list of
pages and its links), plus ``explorables.html``. Set ``CTL_SITE_ONLY=.`` to build and check every lesson, or
``CTL_SITE`` to the folder of a site already built to check it without building (every lesson, unless
``CTL_SITE_ONLY`` names the ones it was built with).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

CHROMIUM = os.environ.get("CTL_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

REPO = Path(__file__).resolve().parents[1]
SITE_ONLY = os.environ.get("CTL_SITE_ONLY", "." if os.environ.get("CTL_SITE") else r"^(02_|91_|92_|index)")
BUILD_TIMEOUT_S = 1800
# Screenshots and the pages' own timers go to a temporary folder (or CTL_ARTIFACTS): tests leave the checkout clean.
ARTIFACTS = Path(os.environ.get("CTL_ARTIFACTS") or Path(tempfile.gettempdir()) / "ctl_explore-test-artifacts")


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


def _git_status() -> set[str] | None:
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


_BUILT: dict = {}


def built_site(tmp_path_factory) -> tuple[Path, dict, list | None]:
    """The site, built once per test session with ``--only SITE_ONLY``: (folder, manifest, the files the build added to
    or changed in the repository, or None when unknown). The build's wall time is in the manifest's ``build_seconds``."""
    if "site" in _BUILT:
        return _BUILT["site"]
    if os.environ.get("CTL_SITE"):
        out = Path(os.environ["CTL_SITE"]).resolve()
        _BUILT["site"] = out, json.loads((out / "site.json").read_text()), None
        return _BUILT["site"]
    out = tmp_path_factory.mktemp("site") / "_site"
    before = _git_status()
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "ctl_explore.site", "--out", str(out), "--only", SITE_ONLY], cwd=REPO,
                          capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
    seconds = time.monotonic() - start
    after = _git_status()
    assert proc.returncode == 0, f"the site build failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    assert f"open {out / 'index.html'}" in proc.stdout, proc.stdout
    littered = sorted(after - before) if before is not None and after is not None else None
    manifest = json.loads((out / "site.json").read_text())
    manifest["build_seconds"] = round(seconds, 1)
    _BUILT["site"] = out, manifest, littered
    return _BUILT["site"]


def site_lessons(lessons: list[Path]) -> list[Path]:
    "The lessons that ``built_site`` builds (or that the site named by ``CTL_SITE`` was built with)."
    pattern = re.compile(SITE_ONLY)
    return [p for p in lessons if pattern.search(p.name)]


def open_page(browser, path: Path, timeout_ms: int = 120_000):
    """Open `path` from disk in a new context; returns (context, page, seen): what the page does is recorded in
    seen -- console errors, page errors, refused requests, and every request for anything but a file:// URL (aborted)."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    seen = {"console": [], "pageerror": [], "network": [], "failed": []}
    page.on("console", lambda m: seen["console"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: seen["pageerror"].append(str(e)))
    page.on("requestfailed", lambda r: seen["failed"].append(f"{r.url} ({r.failure})"))

    def route(r):
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            seen["network"].append(r.request.url)
            r.abort()
    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_function("window.ctlSite && (window.ctlSite.done || window.ctlSite.errors.length > 0)",
                           timeout=timeout_ms)
    return context, page, seen
