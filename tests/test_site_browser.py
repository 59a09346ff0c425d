"""The course as a static site: built by its one command, then every page read from disk in headless Chromium.

The module builds the site once (``python -m ctl_explore.site --out <tmp>``, every lesson, slow cells excepted; a few
minutes on 2 cores) and checks it twice over: without a browser (a page for every lesson, the hidden cells -- the
exercises' solutions among them -- on none of them, the build leaves nothing new in the repository) and in Chromium
from ``file://`` (no network request, no console or page error, every plotly figure drawn, the math typeset with no
TeX left raw, no nbdev directive in the code shown, every widget shown as its snapshot, the index linking every
lesson in course order). Viewport screenshots go to ``tests/artifacts/site/`` (git-ignored).

Set ``CTL_SITE`` to the folder of a site already built with the same command to check it without building again.
The browser tests need the ``playwright`` Python package and a system Chromium (Debian: ``apt-get install chromium``);
they never download a browser. Set ``CTL_CHROMIUM`` to use a Chromium binary elsewhere. Without them, those tests
are skipped and say why.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from browser_setup import launch_browser, needs_browser
from ctl_explore.site import directive_free, is_hidden, lesson_notebooks, skip_reason

REPO = Path(__file__).resolve().parents[1]
NBS = REPO / "nbs"
LESSONS = lesson_notebooks(NBS)
ARTIFACTS = REPO / "tests" / "artifacts" / "site"
BUILD_TIMEOUT_S = 1800
PAGE_TIMEOUT_MS = 120_000


BROWSER_MARKS = needs_browser("the site's browser tests")


def _git_status() -> set[str] | None:
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=REPO, capture_output=True,
                             text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(out.stdout.splitlines()) if out.returncode == 0 else None


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    "The built site: (folder, manifest, files the build added to or changed in the repository, or None if unknown)."
    if os.environ.get("CTL_SITE"):
        out = Path(os.environ["CTL_SITE"]).resolve()
        return out, json.loads((out / "site.json").read_text()), None
    out = tmp_path_factory.mktemp("site") / "_site"
    before = _git_status()
    proc = subprocess.run([sys.executable, "-m", "ctl_explore.site", "--out", str(out)], cwd=REPO, capture_output=True,
                          text=True, timeout=BUILD_TIMEOUT_S)
    after = _git_status()
    assert proc.returncode == 0, f"the site build failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    assert f"open {out / 'index.html'}" in proc.stdout, proc.stdout
    littered = sorted(after - before) if before is not None and after is not None else None
    return out, json.loads((out / "site.json").read_text()), littered


def test_every_lesson_has_a_page(site):
    out, manifest, _ = site
    assert not manifest["failed"]
    assert [p["notebook"] for p in manifest["pages"]] == [p.name for p in LESSONS]
    for page in manifest["pages"]:
        assert (out / page["page"]).stat().st_size > 1000, page
    assert sum(p["figures"] for p in manifest["pages"]) > 0, "no lesson showed a single figure"
    assert manifest["test_flags"] == ["notest", "slow", "gpu"]  # the same cells nbdev-test skips
    for asset in ("plotly.min.js", "site.js", "site.css", "mathjax/MathJax.js"):
        assert (out / "assets" / asset).is_file(), asset


def test_the_build_leaves_the_repository_as_it_was(site):
    _, _, littered = site
    if littered is None:
        pytest.skip("not built here, or not in a git checkout: nothing to compare")
    assert not littered, f"building the site added or changed files in the repository: {littered}"


def _page_text(page_html: str) -> str:
    "What a reader can read on the page: tags and scripts out, entities decoded."
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page_html, flags=re.S | re.I)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def _code_lines(source: str) -> list[str]:
    return [l.strip() for l in directive_free(source).splitlines() if len(l.strip()) >= 25]


def test_hidden_cells_stay_off_the_pages(site):
    "The `#| hide` cells (the exercises' checkers and solutions) run but are shown nowhere; the shown cells are."
    import nbformat
    out, _, _ = site
    hidden_checked = shown_checked = 0
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        shown_lines = {l for c in code if not is_hidden(c.source) for l in _code_lines(c.source)}
        text = {l.strip() for l in _page_text((out / f"{path.stem}.html").read_text(encoding="utf-8")).splitlines()}
        for cell in code:
            if is_hidden(cell.source):
                for line in _code_lines(cell.source):
                    if line in shown_lines or line.startswith("#"):
                        continue
                    assert line not in text, f"{path.name}: a hidden cell's line is on its page: {line!r}"
                    hidden_checked += 1
            elif cell.source.strip():  # a shown cell's code is on the page, so the search above can find lines
                lines = _code_lines(cell.source)
                if lines:
                    assert lines[0] in text, f"{path.name}: a shown cell's line is missing from its page: {lines[0]!r}"
                    shown_checked += 1
    assert hidden_checked > 0 and shown_checked > 0, (hidden_checked, shown_checked)


def test_skipped_cells_say_so(site):
    "A cell the build skipped (as nbdev-test does: #| slow, #| gpu, #| notest, #| eval: false) says why on the page."
    import nbformat
    out, manifest, _ = site
    flags = manifest["test_flags"]
    for path in LESSONS:
        nb = nbformat.read(path, as_version=4)
        skipped = [c for c in nb.cells if c.cell_type == "code" and skip_reason(c.source, flags) and not is_hidden(c.source)]
        page = (out / f"{path.stem}.html").read_text(encoding="utf-8")
        assert page.count('<p class="ctl-skip-note">') == len(skipped), path.name


@pytest.fixture(scope="module")
def browser():
    yield from launch_browser()


def _open(browser, path: Path):
    "Open `path` from disk; returns the page and what it did: console errors, page errors, requests that were refused."
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
                           timeout=PAGE_TIMEOUT_MS)
    return context, page, seen


def _needs_browser(test):
    for mark in BROWSER_MARKS:
        test = mark(test)
    return test


@_needs_browser
@pytest.mark.parametrize("stem", [p.stem for p in LESSONS])
def test_page_reads_offline(site, browser, stem):
    out, manifest, _ = site
    entry = next(p for p in manifest["pages"] if p["page"] == f"{stem}.html")
    context, page, seen = _open(browser, out / f"{stem}.html")
    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"{stem}.png"))
        state = page.evaluate("""() => {
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
            links: q('a[href]').map(a => a.getAttribute('href')),
          };
        }""")
    finally:
        context.close()
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
    nb = json.loads((NBS / entry["notebook"]).read_text(encoding="utf-8"))
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    if re.search(r"\$[^$\n]+\$", re.sub(r"`[^`]*`", "", prose)):
        assert state["math"] > 0, f"{stem}: the notebook's prose has math but the page typeset none"
    for href in state["links"]:
        target = href.split("#")[0]
        if target.endswith(".html") and "://" not in target:
            assert (out / target).is_file(), f"{stem}: a link to a page that does not exist: {href}"
    if stem == "index":
        linked = [h.split("#")[0] for h in state["links"]]
        for other in manifest["pages"]:
            if other["page"] != "index.html":
                assert other["page"] in linked, f"the index does not link {other['page']}"
        listed = [h for h in linked if h.endswith(".html") and h != "index.html"]
        order = [p["page"] for p in manifest["pages"] if p["page"] != "index.html"]
        assert listed[-len(order):] == order, "the index's list of pages is not in course order"
