"""What the browser tests share: finding the system Chromium, Playwright, the skip marks, one browser per module, and
one build of the static site per test session.

Never runs ``playwright install``: the tests drive the Chromium the system has (Debian: ``apt-get install chromium``),
or the binary named by the environment variable ``CTL_CHROMIUM``.

The site tests build only the pages they need, ``SITE_ONLY`` (a regular expression on the notebooks' names, given to
``python -m ctl_explore.site --only``): lesson 02 (its two widgets become the explorables), lesson 91 (a cell the build
skips, hidden cells), appendix 92 (a plotly figure and an explorable in a notebook's output) and the index (the list of
pages and its links), plus ``explorables.html``: built once per session, however pytest-xdist spreads the files
(``built_site``). Set ``CTL_SITE_ONLY=.`` to build and check every lesson, or ``CTL_SITE`` to the folder of a site
already built to check it without building (every lesson, unless ``CTL_SITE_ONLY`` names the ones it was built with).
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
# After the first six: flags that change how Chromium spends CPU, not what a page draws (software rendering either way):
# the GPU thread in the browser's process instead of a process of its own, one renderer process model without site
# isolation (every page is a file:// page), no paint holding (it only delays a first paint), no translate, hints or
# media-router services. Together about 15 % fewer Chromium CPU-seconds on three plotly + MathJax pages.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--in-process-gpu", "--disable-site-isolation-trials",
                 "--disable-features=site-per-process,Translate,OptimizationHints,MediaRouter,PaintHolding"]
try:
    from playwright.sync_api import sync_playwright
except ImportError:  # pragma: no cover - depends on the machine
    sync_playwright = None

REPO = Path(__file__).resolve().parents[1]
SITE_ONLY = os.environ.get("CTL_SITE_ONLY", "." if os.environ.get("CTL_SITE") else r"^(02_|91_|92_|index)")
BUILD_TIMEOUT_S = 1800
# The pages' own timers go to a temporary folder (or CTL_ARTIFACTS): tests leave the checkout clean. Screenshots are
# taken only when CTL_ARTIFACTS names a folder (no test reads them; each costs Chromium a fraction of a CPU-second),
# except the one a failing JupyterLab explorer test leaves of its page.
ARTIFACTS = Path(os.environ.get("CTL_ARTIFACTS") or Path(tempfile.gettempdir()) / "ctl_explore-test-artifacts")
SCREENSHOTS = bool(os.environ.get("CTL_ARTIFACTS"))


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
SITE_FILES = ("test_site_browser.py", "test_explorables.py", "test_site_screens.py")  # the test files that use built_site
BUILD_RECORD, BUILD_LOCK = "ctl-site-build.json", "ctl-site-build.lock"


def built_site(tmp_path_factory) -> tuple[Path, dict, list | None]:
    """The site, built once per test session with ``--only SITE_ONLY``: (folder, manifest, the files the build added to
    or changed in the repository, or None when unknown). The build's wall time is in the manifest's ``build_seconds``.

    Under pytest-xdist the site's test files run on either worker: the build is made once, in the session's shared
    temporary folder, under a file lock there -- by the controller in the background from the start of the run (see
    ``start_site_build``), or else by the first test that asks; the others wait on the lock and use that build (or
    fail with its message when it failed)."""
    if "site" in _BUILT:
        return _BUILT["site"]
    if os.environ.get("CTL_SITE"):
        out = Path(os.environ["CTL_SITE"]).resolve()
        _BUILT["site"] = out, json.loads((out / "site.json").read_text()), None
        return _BUILT["site"]
    from filelock import FileLock
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent  # the folder above every worker's own: one per session, the controller's
    record = shared / BUILD_RECORD
    with FileLock(str(shared / BUILD_LOCK), timeout=BUILD_TIMEOUT_S + 300):
        if not record.exists():
            record.write_text(json.dumps(_build_site(shared / "ctl-site" / "_site")))
        done = json.loads(record.read_text())
    assert done["error"] is None, done["error"]
    out = Path(done["out"])
    manifest = json.loads((out / "site.json").read_text())
    manifest["build_seconds"] = done["seconds"]
    _BUILT["site"] = out, manifest, done["littered"]
    return _BUILT["site"]


def _build_site(out: Path) -> dict:
    """Build the site into `out`: {out, seconds (wall), cpu_seconds (the build's processes), littered (the files the
    build added to or changed in the repository, or None when unknown), error (None, or why the build failed)}."""
    before = _git_status()
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "ctl_explore.site", "--out", str(out), "--only", SITE_ONLY],
                                cwd=REPO, stdout=stdout, stderr=stderr, text=True)
        _BUILDING.append(proc)
        try:
            status, usage = _wait(proc, BUILD_TIMEOUT_S)
        finally:
            _BUILDING.remove(proc)
        stdout.seek(0); stderr.seek(0)
        out_text, err_text = stdout.read(), stderr.read()
    seconds = time.monotonic() - start
    after = _git_status()
    error = None
    if status is None:
        error = f"the site build ran past {BUILD_TIMEOUT_S} s and was stopped"
    elif status != 0:
        error = f"the site build failed (exit {status}):\n{err_text[-4000:]}"
    elif f"open {out / 'index.html'}" not in out_text:
        error = out_text
    littered = sorted(after - before) if before is not None and after is not None else None
    return dict(out=str(out), seconds=round(seconds, 1), cpu_seconds=usage, littered=littered, error=error)


_BUILDING: list = []  # the build's process while it runs (the controller stops it when the session ends first)


def _wait(proc, timeout: float) -> tuple[int | None, float | None]:
    "Wait for `proc`: (exit status, or None when it ran past `timeout` and was killed; CPU seconds of it and its children)."
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, round(usage.ru_utime + usage.ru_stime, 1)
        if time.monotonic() > deadline:
            proc.kill(); proc.wait()
            return None, None
        time.sleep(0.2)


def start_site_build(shared: Path) -> None:
    """In the xdist controller, once the workers have collected site tests: build the site in a background thread (its
    file lock taken before this returns), so that the build runs beside the other tests instead of holding up a worker."""
    import threading
    from filelock import FileLock
    if os.environ.get("CTL_SITE") or (shared / BUILD_RECORD).exists():
        return
    lock = FileLock(str(shared / BUILD_LOCK), thread_local=False)
    lock.acquire()

    def build():
        try:
            if not (shared / BUILD_RECORD).exists():
                (shared / BUILD_RECORD).write_text(json.dumps(_build_site(shared / "ctl-site" / "_site")))
        finally:
            lock.release()
    threading.Thread(target=build, name="ctl-site-build", daemon=True).start()


def stop_site_build() -> None:
    "At the session's end: stop a build that no test waited for (a run stopped early, say)."
    for proc in list(_BUILDING):
        proc.kill()


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


# ---- what every page of the site must show in Chromium (test_site_browser; test_explorables for the two pages it
# opens anyway, lesson 02's and explorables.html, so that each page is loaded once per run) -----------------------

PAGE_STATE = """() => {
          const q = s => Array.from(document.querySelectorAll(s));
          const markdown = q('.jp-MarkdownOutput').map(e => {
            const c = e.cloneNode(true);
            c.querySelectorAll('code, pre, script').forEach(x => x.remove());
            return c.textContent;
          }).join('\\n');
          return {
            errors: window.ctlSite.errors,
            figures: q('div.ctl-plotly').length,
            drawn: q('div.ctl-plotly').filter(d => d.querySelector('.js-plotly-plot svg.main-svg')).length,
            traces: q('div.ctl-plotly').map(d => d.querySelectorAll('.js-plotly-plot .trace, .js-plotly-plot .gl-container').length),
            images: q('img').length,
            broken_images: q('img').filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src.slice(0, 80)),
            math: q('.MathJax, .MathJax_Display').length,
            math_errors: q('.merror, .noError, .MathJax_Error').map(e => e.textContent.slice(0, 120)),
            raw_math: (markdown.match(/\\$[^$\\n]{1,200}\\$/g) || []).slice(0, 5),
            directives: q('.jp-InputArea-editor').map(e => e.innerText).filter(t => /^\\s*#\\|/m.test(t)).map(t => t.slice(0, 80)),
            widgets: q('.ctl-widget').length,
            explorables: q('.ctl-explorable').map(e => [e.dataset.ctlExplorable, e.querySelectorAll('.js-plotly-plot svg.main-svg').length > 0]),
            fallbacks: q('.ctl-x-fallback').length,
            links: q('a[href]').map(a => a.getAttribute('href')),
          };
        }"""


def read_page_state(page) -> dict:
    "What `check_page_state` checks, read from a page that ``open_page`` opened, before anything on it was changed."
    return page.evaluate(PAGE_STATE)


def check_page_state(stem: str, state: dict, seen: dict, out: Path, manifest: dict) -> None:
    """The page `stem` of the site in `out` (its `state` read by `read_page_state`, `seen` from ``open_page``): no request
    beyond file://, no error, every figure and explorable drawn with its traces, math typeset and none left raw, no nbdev
    directive in the code shown, its widgets, its links to pages that exist (the index: to every page, in course order)."""
    entry = next((p for p in manifest["pages"] if p["page"] == f"{stem}.html"), None)
    if stem == "explorables":  # no notebook behind it: two explorables, no figure of plotly's own, no widget
        entry = {"page": "explorables.html", "notebook": None, "figures": 0, "widgets": 0}
    assert not seen["network"], f"{stem}: requests beyond file:// ({len(seen['network'])}): {seen['network'][:5]}"
    assert not seen["failed"], f"{stem}: files the page asked for and did not get: {seen['failed'][:5]}"
    assert not seen["pageerror"], f"{stem}: page errors: {seen['pageerror'][:5]}"
    assert not seen["console"], f"{stem}: console errors: {seen['console'][:5]}"
    assert not state["errors"], f"{stem}: {state['errors']}"
    assert state["figures"] == entry["figures"], (stem, state["figures"], entry["figures"])
    assert state["drawn"] == state["figures"], f"{stem}: {state['figures'] - state['drawn']} of {state['figures']} figures not drawn"
    assert all(n > 0 for n in state["traces"]) or not state["traces"], f"{stem}: a figure drawn without traces: {state['traces']}"
    assert not state["broken_images"], f"{stem}: images that did not load: {state['broken_images']}"
    assert not state["math_errors"], f"{stem}: TeX that MathJax could not typeset: {state['math_errors']}"
    assert not state["raw_math"], f"{stem}: math left as raw TeX: {state['raw_math']}"
    assert not state["directives"], f"{stem}: nbdev directives in the code shown: {state['directives']}"
    assert state["widgets"] == entry["widgets"], (stem, state["widgets"], entry["widgets"])
    assert all(drawn for _, drawn in state["explorables"]), f"{stem}: an explorable not drawn: {state['explorables']}"
    assert state["fallbacks"] == 0, f"{stem}: an explorable still shows its fallback note"
    kinds = sorted(kind for kind, _ in state["explorables"])
    if stem == "02_explorer":  # lesson 02's two widgets are live on its page
        assert kinds == ["hypersphere-replay", "temperature-explorer"], kinds
    if stem == "explorables":  # and on their own page, with lessons 09 and 12's shipped results
        assert kinds == ["figure-stepper"] * 3 + ["hypersphere-replay", "temperature-explorer"], kinds
    if entry["notebook"] is None:
        assert any(h.split("#")[0] == "index.html" for h in state["links"]), f"{stem}: no link back to the index"
        return
    nb = json.loads((REPO / "nbs" / entry["notebook"]).read_text(encoding="utf-8"))
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    if re.search(r"\$[^$\n]+\$", re.sub(r"`[^`]*`", "", prose)):
        assert state["math"] > 0, f"{stem}: the notebook's prose has math but the page typeset none"
    for href in state["links"]:
        target = href.split("#")[0]
        if target.endswith(".html") and "://" not in target:
            assert (out / target).is_file(), f"{stem}: a link to a page that does not exist: {href}"
    if stem == "index":
        linked = [h.split("#")[0] for h in state["links"]]
        for other in manifest["pages"] + [manifest["explorables"]]:
            if other["page"] != "index.html":
                assert other["page"] in linked, f"the index does not link {other['page']}"
        listed = [h for h in linked if h.endswith(".html") and h not in ("index.html", "explorables.html")]
        order = [p["page"] for p in manifest["pages"] if p["page"] != "index.html"]
        assert listed[-len(order):] == order, "the index's list of pages is not in course order"
