"""The course as a static site: built by its one command, then its pages read from disk in headless Chromium.

The module builds the site once per session (``python -m ctl_explore.site --out <tmp> --only SITE_ONLY``, see
``browser_setup``: lessons 02, 91, 92 and the index by default, 154-222 s on 2 cores shared with other jobs;
``CTL_SITE_ONLY=.`` builds every lesson) and checks it twice over: without a browser (a page for every lesson built, the hidden cells --
the exercises' solutions among them -- on none of them, the build leaves nothing new in the repository) and in
Chromium from ``file://`` (no network request, no console or page error, every plotly figure drawn, the math typeset
with no TeX left raw, no nbdev directive in the code shown, every widget shown as its snapshot or its explorable, the
index linking every page in course order; ``browser_setup.check_page_state``). Lesson 02's page and ``explorables.html``
get those checks in ``test_explorables``, on the pages it opens there anyway: each page is loaded once per run. Set
``CTL_ARTIFACTS`` to a folder to keep a viewport screenshot of each page there.

It also checks, with no browser and no lesson run, what the builder refuses: a folder it did not make (a user's files
there stay as they were), an invalid ``--only``; and, on a tiny project of its own, that a lesson which fails in a
rebuild does not leave its old page on the site.

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

pytestmark = pytest.mark.slow  # a browser, several processes or compiled kernels: tens of seconds on 2 cores

from browser_setup import (ARTIFACTS, SCREENSHOTS, built_site, check_page_state, launch_browser, needs_browser, open_page,
                           read_page_state, site_lessons)
from ctl_explore.site import SITE_MARKER, directive_free, is_hidden, lesson_notebooks, skip_reason

REPO = Path(__file__).resolve().parents[1]
NBS = REPO / "nbs"
LESSONS = site_lessons(lesson_notebooks(NBS))
ARTIFACTS = ARTIFACTS / "site"


BROWSER_MARKS = needs_browser("the site's browser tests")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    "The built site: (folder, manifest, files the build added to or changed in the repository, or None if unknown)."
    return built_site(tmp_path_factory)


def test_every_lesson_has_a_page(site):
    out, manifest, _ = site
    assert not manifest["failed"]
    assert [p["notebook"] for p in manifest["pages"]] == [p.name for p in LESSONS]
    for page in manifest["pages"]:
        assert (out / page["page"]).stat().st_size > 1000, page
    assert sum(p["figures"] for p in manifest["pages"]) > 0, "no lesson showed a single figure"
    assert manifest["test_flags"] == ["notest", "slow", "gpu"]  # the same cells nbdev-test skips
    for asset in ("plotly.min.js", "site.js", "explorables.js", "site.css", "mathjax/MathJax.js"):
        assert (out / "assets" / asset).is_file(), asset
    assert (out / SITE_MARKER).is_file()
    assert manifest["explorables"]["page"] == "explorables.html" and (out / "explorables.html").stat().st_size > 1000


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


def _needs_browser(test):
    for mark in BROWSER_MARKS:
        test = mark(test)
    return test


@_needs_browser
@pytest.mark.parametrize("stem", [p.stem for p in LESSONS if p.stem != "02_explorer"])
def test_page_reads_offline(site, browser, stem):
    "Each page but lesson 02's and explorables.html: test_explorables makes the same checks on those, on the pages it opens."
    out, manifest, _ = site
    context, page, seen = open_page(browser, out / f"{stem}.html")
    try:
        if SCREENSHOTS:
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / f"{stem}.png"))
        state = read_page_state(page)
    finally:
        context.close()
    check_page_state(stem, state, seen, out, manifest)


# ---- what the builder refuses, and a failed rebuild (no browser, no lesson of the course run) ----------------------

def _site_command(*args: str, cwd: Path = REPO, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ctl_explore.site", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_users_folder_is_refused_and_left_as_it_was(tmp_path):
    "--out naming a folder with a user's files (an index.html, an assets/mathjax of their own): one sentence, nothing touched."
    mine = tmp_path / "talk"
    (mine / "assets" / "mathjax").mkdir(parents=True)
    (mine / "index.html").write_text("<p>my slides</p>")
    (mine / "site.json").write_text("{}")
    (mine / "assets" / "mathjax" / "MathJax.js").write_text("// my own MathJax build")
    before = _snapshot(mine)
    proc = _site_command("--out", str(mine), "--only", "^index")
    assert proc.returncode == 1, proc
    assert "Traceback" not in proc.stderr
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: refusing to write the site into"), proc.stderr
    assert SITE_MARKER in lines[0] and str(mine) in lines[0]
    assert _snapshot(mine) == before, "the refused build changed the user's folder"
    # a file given as --out, too
    proc = _site_command("--out", str(mine / "index.html"), "--only", "^index")
    assert proc.returncode == 1 and "is a file, not a folder" in proc.stderr and "Traceback" not in proc.stderr
    assert _snapshot(mine) == before


def test_an_invalid_only_is_one_sentence_naming_the_option(tmp_path):
    for bad in ("(02", "*index", "[a-"):
        proc = _site_command("--out", str(tmp_path / "site"), "--only", bad)
        assert proc.returncode == 1, proc
        lines = [l for l in proc.stderr.splitlines() if l.strip()]
        assert len(lines) == 1 and lines[0].startswith(f"error: --only {bad!r} is not a valid regular expression"), proc.stderr
        assert not (tmp_path / "site").exists(), "the folder was made before the option was checked"


_TINY_PYPROJECT = """[project]
name = "tiny-course"
version = "0.0.1"

[tool.nbdev]
lib_path = "tiny_course"
nbs_path = "nbs"
tst_flags = "notest slow gpu"
cell_timeout = 60
"""


def _tiny_notebook(path: Path, title: str, code: str) -> None:
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {title}\n\nSome prose."),
                                         nbformat.v4.new_code_cell(code)])
    nb.metadata["kernelspec"] = {"display_name": "python3", "language": "python", "name": "python3"}
    nbformat.write(nb, path)


def test_a_lesson_that_fails_in_a_rebuild_leaves_no_old_page(tmp_path):
    "Built once with its lessons passing, then rebuilt (all of them) with one failing: its page says it failed, the index marks it."
    project = tmp_path / "course"
    (project / "nbs").mkdir(parents=True)
    (project / "pyproject.toml").write_text(_TINY_PYPROJECT)
    _tiny_notebook(project / "nbs" / "00_first.ipynb", "First", "print('first lesson ran')")
    _tiny_notebook(project / "nbs" / "01_second.ipynb", "Second", "print('second lesson, version 1')")
    _tiny_notebook(project / "nbs" / "index.ipynb", "Tiny course", "print('the index')")
    out = tmp_path / "site"
    # one lesson process at a time (--jobs 1): each costs a kernel's and a worker's start, and this test's point is
    # not their number; the first build needs only the lesson that fails later and the index that marks it
    args = ("--out", str(out), "--nbs", str(project / "nbs"), "--no-explorables", "--jobs", "1")
    proc = _site_command(*args, "--only", "^(01_|index)")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "second lesson, version 1" in (out / "01_second.html").read_text(encoding="utf-8")
    assert 'class="ctl-not-built"' not in (out / "index.html").read_text(encoding="utf-8")

    _tiny_notebook(project / "nbs" / "01_second.ipynb", "Second", "raise ValueError('the second lesson broke')")
    proc = _site_command(*args)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "01_second.html" in proc.stderr and "the second lesson broke" in proc.stderr  # which lessons failed, said
    page = (out / "01_second.html").read_text(encoding="utf-8")
    assert "second lesson, version 1" not in page, "the old page of the failed lesson is still on the site"
    assert "failed when the site was last built" in page and "the second lesson broke" in page
    index = (out / "index.html").read_text(encoding="utf-8")
    assert '<li class="ctl-not-built"><a href="01_second.html">' in index and "(failed to build)" in index
    assert '<li><a href="00_first.html">' in index  # the others as they were
    assert "first lesson ran" in (out / "00_first.html").read_text(encoding="utf-8")
    manifest = json.loads((out / "site.json").read_text())
    assert list(manifest["failed"]) == ["01_second.ipynb"] and [p["page"] for p in manifest["pages"]] == ["00_first.html", "index.html"]


    _tiny_notebook(project / "nbs" / "01_second.ipynb", "Second", "print('second lesson, version 2')")
    proc = _site_command(*args, "--only", "^01_")  # fixed and rebuilt alone: its page back, the index's mark gone
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "second lesson, version 2" in (out / "01_second.html").read_text(encoding="utf-8")
    index = (out / "index.html").read_text(encoding="utf-8")
    assert 'class="ctl-not-built"' not in index and '<li><a href="01_second.html">' in index


@_needs_browser
def test_instructors_pages_read_offline(site, browser):
    "instructors.html (plans, reading times) and figures.html (one screen per key lesson), linked from the index; no answer key anywhere."
    from ctl_explore.course import KEY_FIGURE_LESSONS, PLANS
    out, _, _ = site
    index = (out / "index.html").read_text()
    assert all(f'href="{p}"' in index for p in ("instructors.html", "figures.html")) and "answer-key.html" not in index
    for page in ("instructors.html", "figures.html"):
        context, pg, seen = open_page(browser, out / page)
        try:
            text = pg.inner_text("body")
            assert not pg.evaluate("window.ctlSite.errors") and not seen["console"] and not seen["pageerror"], (page, seen)
            assert not seen["network"], seen["network"]
            if page == "instructors.html": assert all(name in text for name in PLANS)
            else:
                assert pg.locator("section.ctl-slide").count() == len(KEY_FIGURE_LESSONS)
                built = [s for s in KEY_FIGURE_LESSONS if (out / f"{s}.html").exists()]
                drawn = pg.evaluate("() => document.querySelectorAll('section.ctl-slide .js-plotly-plot svg.main-svg').length")
                assert drawn >= len(built), (drawn, built)
                assert text.count("this site has no page for it") == len(KEY_FIGURE_LESSONS) - len(built)
        finally:
            context.close()
    assert not (out / "answer-key.html").exists() and not list(out.rglob("*answer*"))
    assert not any("def check_" in p.read_text() for p in out.glob("*.html"))  # no check body on any page


def test_a_page_drops_its_lessons_link_to_the_site(site):
    "Each lesson's notebook links to its page on the published site; the page itself does not link to itself."
    out, manifest, _ = site
    from ctl_explore.course import SITE_LINK
    for page in manifest["pages"]:
        nb = json.loads((NBS / page["notebook"]).read_text())
        first = next("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
        if page["notebook"] != "index.ipynb":
            assert SITE_LINK.search(first), f"{page['notebook']} has no link to its page on the site"
        assert "On the course site:" not in (out / page["page"]).read_text(encoding="utf-8"), page["page"]
