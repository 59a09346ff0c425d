"""The site's scripts, styles and page templates as the files they are: the JavaScript parsed as JavaScript, every
page with a viewport tag, and the site's modules writing HTML only through `ctl_explore.html.render`."""
from __future__ import annotations

import re
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import pytest

from ctl_explore.html import TEMPLATES, package_text, render

REPO = Path(__file__).resolve().parents[1]
TEMPLATE_DIR = resources.files("ctl_explore").joinpath(TEMPLATES)
SCRIPTS = sorted(p.name for p in TEMPLATE_DIR.iterdir() if p.name.endswith(".js"))
NODE = shutil.which("node")


def test_the_site_ships_its_scripts():
    assert {"explorables.js", "site.js", "mathjax-config.js"} <= set(SCRIPTS)


@pytest.mark.skipif(NODE is None, reason="parsing the site's JavaScript needs Node.js (`node --check`); it is not on PATH")
@pytest.mark.parametrize("name", SCRIPTS)
def test_javascript_parses(name, tmp_path):
    path = tmp_path / name
    path.write_text(package_text(name), encoding="utf-8")
    out = subprocess.run([NODE, "--check", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{name} is not valid JavaScript:\n{out.stderr}"


@pytest.mark.skipif(NODE is None, reason="parsing needs Node.js (`node --check`); it is not on PATH")
def test_the_parser_check_can_fail(tmp_path):
    "The check above rejects a script with a syntax error (so a passing check means something)."
    bad = tmp_path / "bad.js"
    bad.write_text(package_text("explorables.js").replace("function (", "function ((", 1))
    assert subprocess.run([NODE, "--check", str(bad)], capture_output=True, timeout=60).returncode != 0


PAGE_TEMPLATES = ("failed.html.j2", "explorables.html.j2", "page.html.j2")


@pytest.mark.parametrize("name", PAGE_TEMPLATES + ("lesson.html.j2",))
def test_every_page_template_fits_the_screen(name):
    text = package_text(name)
    # the lesson template extends nbconvert's `lab` template, which carries the tag itself; the others, page.html.j2
    assert 'name="viewport"' in text or "extends 'index.html.j2'" in text or 'extends "page.html.j2"' in text


def test_a_page_escapes_what_it_is_given():
    page = render("failed.html.j2", title="<b>x</b>", message="a & b", nav="", math=False)
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "a &amp; b" in page and 'name="viewport"' in page


@pytest.mark.parametrize("module", ["site.py", "explorables.py"])
def test_html_goes_through_templates(module):
    "No string.Template, no inline <script>/<style>, no whole page built in Python in the site's modules."
    text = (REPO / "ctl_explore" / module).read_text(encoding="utf-8")
    assert "string.Template" not in text and "from string import Template" not in text
    assert not re.search(r"""f?["']{1,3}\s*<!DOCTYPE""", text, re.I), f"{module} builds a page in Python"
    assert not re.search(r"""["']<(script|style)\b""", text), f"{module} inlines a script or a style sheet"
    assert not re.search(r'^\w+_(JS|CSS) = r?"""', text, re.M), f"{module} holds a script or style sheet as a string"
    assert not re.search(r"""\bf["']{1,3}<""", text), f"{module} builds HTML in an f-string"
