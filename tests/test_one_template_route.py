"""One route for HTML: no module of the package builds page markup in Python. Every string constant and f-string of
`ctl_explore/` (read with `ast`, so comments and docstrings about tags do not count) is searched for HTML tags; markup
belongs in a template under `ctl_explore/templates/`, filled by `ctl_explore.html.render`. The few strings that hold a
tag without writing one (a regular expression that reads the site's own markup back) are allowed below, each with
its reason; anything else fails with its file and line."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ctl_explore"

# an opening tag of page markup: the tag's name, then a space, ">" or "/" (so plotly's "<br>" in a figure title, a
# placeholder such as "<wnid>" or "<preset>" in a help text, and "<extra>" in a hover template are not tags here)
TAG = re.compile(r"<a\s+href\b|<(?:p|div|span|section|article|header|footer|nav|main|table|thead|tbody|tr|td|th|ul|ol|li"
                 r"|dl|dt|dd|h[1-6]|b|i|em|strong|code|pre|img|form|input|button|select|label|details|summary)(?=[\s>/])", re.I)

# (file under ctl_explore/, a piece of the allowed string) -> why it is not page markup built in Python
ALLOWED = {
    ("course.py", '<div class="ctl-plotly"><script type="application/json">(.*?)'):
        "a regular expression that finds the site's plotly divs in a built page: it reads markup, writes none",
    ("site.py", '^<div class="ctl-widget" data-ctl-widget='):
        "a regular expression that finds a widget's placeholder in a lesson's rendered HTML: it reads markup",
    ("site.py", r'<li class="ctl-not-built"><a href="{}">(.*?)</a> \(failed to build\)</li>'):
        "a regular expression (mark_failed) that finds an index entry the template wrote, to replace it by the "
        "template's own `index_entry` part",
    ("site.py", '<li><a href="{}">(.*?)</a></li>'):
        "a regular expression (mark_failed) that finds an index entry the template wrote, to replace it by the "
        "template's own `index_entry` part",
}


def _text(node: ast.AST) -> str:
    "A string constant's value, or an f-string's literal parts with `{}` where its values go."
    if isinstance(node, ast.Constant): return node.value
    return "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in node.values)


def strings(source: str) -> list[tuple[int, str]]:
    "(line, text) of each string constant and f-string of `source` (an f-string read whole, with its parts), docstrings left out."
    tree = ast.parse(source)
    skip = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    skip |= {id(n.body[0].value) for n in ast.walk(tree)  # a docstring describes; it writes nothing
             if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
             and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return [(node.lineno, _text(node)) for node in ast.walk(tree) if id(node) not in skip
            and (isinstance(node, ast.JoinedStr) or (isinstance(node, ast.Constant) and isinstance(node.value, str)))]


def markup_in_python(source: str, name: str = "<source>") -> list[tuple[str, int, str]]:
    "(name, line, the string) for each string constant or f-string of `source` that holds an HTML tag and is not allowed."
    return [(name, line, text) for line, text in strings(source)
            if TAG.search(text) and not any(f == name and piece in text for f, piece in ALLOWED)]


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "_modidx.py")


def test_no_module_builds_html_in_python():
    found = [hit for p in _modules()
             for hit in markup_in_python(p.read_text(encoding="utf-8"), p.relative_to(PACKAGE).as_posix())]
    assert not found, ("HTML built in Python; put it in a template under ctl_explore/templates/ and render it with "
                       "ctl_explore.html.render:\n" + "\n".join(f"  ctl_explore/{f}:{line}: {text[:100]!r}" for f, line, text in found))


def test_every_allowed_string_is_still_there():
    "An allowance whose string has left the package is dropped, so the list does not grow stale and hide a new one."
    for name, piece in ALLOWED:
        texts = [text for _, text in strings((PACKAGE / name).read_text(encoding="utf-8"))]
        assert any(piece in text for text in texts), f"ctl_explore/{name} no longer holds {piece!r}: drop its allowance"


PLANTED = '''
def readout(x):
    "A docstring that names <div> is not markup."  # nor is a comment: <table>
    note = "<br>".join(["a", "b"])      # a line break in a plotly title, allowed
    return f"<div class='x'>{x}</div>"
'''


def test_the_scan_catches_a_planted_fstring():
    found = markup_in_python(PLANTED, "planted.py")
    assert [(f, line) for f, line, _ in found] == [("planted.py", 5)], found


@pytest.mark.parametrize("code", ['x = "<p>Hello</p>"', "x = '<a href=\"x.html\">x</a>'", 'x = f"<tr><td>{1}</td></tr>"',
                                  'x = "<ul>" + "".join(items)', 'x = f"<h2>{t}</h2>"', 'x = "<section class=\'s\'>"'])
def test_the_scan_catches_each_kind_of_tag(code):
    assert markup_in_python(code), code


@pytest.mark.parametrize("code", ['x = "a <br> b"', 'x = "root/train/<wnid>/"', 'x = "default: study-<preset>"',
                                  'x = "%{y}<extra></extra>"', 'x = "s < 0.5 and t > 0.1"'])
def test_the_scan_leaves_what_is_not_markup(code):
    assert not markup_in_python(code), code


def test_an_allowance_is_for_its_own_file_only():
    "The regular expression allowed in site.py is still caught in any other module."
    assert markup_in_python("""x = '<li><a href="p.html">p</a></li>'""", "course.py")
    assert not markup_in_python("""x = rf'<li><a href="{p}">(.*?)</a></li>'""", "site.py")
