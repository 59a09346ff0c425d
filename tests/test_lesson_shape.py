"""Core lessons teach and appendices build: in lessons 00-03 and 06-09 at most a quarter of the code cells a reader
meets (every cell but `#| hide` ones) are checks, the prose talks about the subject rather than the project (CI, tests, issues, earlier versions), and
each lesson opens with objectives and closes with takeaways; its code is read beside its prose (median visible cell,
largest cell, words of prose per visible line: SHAPE_LIMITS, reported for the lessons in SHAPE_PENDING). The rule is
`ctl_explore.course.lesson_shape`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctl_explore.course import CORE_LESSONS, MAX_TEST_SHARE, SHAPE_LIMITS, SHAPE_PENDING, is_test_cell, lesson_shape, lessons

NBS = Path(__file__).resolve().parents[1] / "nbs"
CORE = [p for p in lessons(NBS) if p.stem[:2] in CORE_LESSONS]


def test_the_core_lessons_are_all_there():
    assert [p.stem[:2] for p in CORE] == list(CORE_LESSONS)


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.stem)
def test_a_core_lesson_is_mostly_not_checks(path):
    s = lesson_shape(path)
    assert s["test_share"] <= MAX_TEST_SHARE, (f"{path.name}: {s['test_cells']} of its {s['code_cells']} visible code cells are "
                                               f"checks ({s['test_share']:.0%} > {MAX_TEST_SHARE:.0%}): move some to tests/ or collapse them")


@pytest.mark.parametrize("path", [p for p in lessons(NBS) if p.stem[:2] in ("11", "12")], ids=lambda p: p.stem)
def test_the_cll20_lessons_are_mostly_not_checks_too(path):
    "Lessons 11 and 12 are read like the core lessons: at most a quarter of their visible code cells are checks."
    s = lesson_shape(path)
    assert s["test_share"] <= MAX_TEST_SHARE, f"{path.name}: {s['test_cells']} of its {s['code_cells']} visible code cells are checks"


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.stem)
def test_a_core_lesson_talks_about_its_subject(path):
    s = lesson_shape(path)
    assert not s["engineering_talk"], f"{path.name}'s prose talks about the project: {s['engineering_talk']}"
    assert s["objectives"] and s["takeaways"], f"{path.name}: objectives {s['objectives']}, takeaways {s['takeaways']}"


@pytest.mark.parametrize("path", lessons(NBS), ids=lambda p: p.stem)
def test_no_lesson_talks_about_the_project(path):
    "Appendices and further lessons too: the history of a result belongs in benchmarks/results/."
    assert not lesson_shape(path)["engineering_talk"], f"{path.name}: {lesson_shape(path)['engineering_talk']}"


def _lesson(tmp_path, cells) -> Path:
    path = tmp_path / "00_made.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def _code(src, hidden=False):
    return {"cell_type": "code", "source": src, "metadata": {"jupyter": {"source_hidden": True}} if hidden else {}, "outputs": []}


def test_the_rule_is_not_fooled(tmp_path):
    "Checks hidden among code, in a loop, under a comment, folded in JupyterLab or in the library's cells: each counted (or not) as a reader meets it."
    cells = [_code("#| export\ndef f(x):\n    assert x > 0\n    return x"),  # the library's own check: not a test cell
             _code("x = f(1)\nassert x == 1"),                             # a check after code: a test cell
             _code("#| hide\ntest_eq(f(2), 2)"),                           # off the page: not counted at all
             _code("test_eq(f(2), 2)", hidden=True),                        # only folded in JupyterLab: GitHub and the site show it
             _code("for t in (1, 2):\n    test_eq(f(t), t)"),               # a check in a loop is still a check
             _code("y = f(3)  # assert nothing here"),                      # the word in a comment is no check
             {"cell_type": "markdown", "source": "This cell was checked in CI; see tests/test_x.py and issue 12. "
                                                 "An earlier version of this lesson did otherwise.", "metadata": {}}]
    s = lesson_shape(_lesson(tmp_path, cells))
    assert (s["code_cells"], s["test_cells"]) == (5, 3)
    assert [is_test_cell(c) for c in cells[:6]] == [False, True, False, True, True, False]
    assert [t.lower() for t in s["engineering_talk"]] == ["ci", "tests/", "test_x.py", "issue 12", "earlier version"]
    assert not s["objectives"] and not s["takeaways"]


def test_prose_about_the_subject_is_not_flagged(tmp_path):
    "Words that look alike but speak of the subject: 'tests' of a hypothesis, 'critical' values, 'versions' of a loss."
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "**After this lesson you can** run two tests of a trend. "
              "The critical value and the CIFAR versions of the loss differ; the tissue of the argument holds."},
             {"cell_type": "markdown", "metadata": {}, "source": "## Key takeaways\n\n- one"}]
    s = lesson_shape(_lesson(tmp_path, cells))
    assert s["engineering_talk"] == [] and s["objectives"] and s["takeaways"]


def _meets(s) -> bool:
    return (s["median_lines"] <= SHAPE_LIMITS["median_lines"] and s["largest_lines"] <= SHAPE_LIMITS["largest_lines"]
            and s["words_per_line"] >= SHAPE_LIMITS["words_per_line"])


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.stem)
def test_a_core_lesson_reads_beside_its_prose(path):
    "Its code in cells a reader takes in beside the prose; a lesson in SHAPE_PENDING has its numbers reported, and leaves the list once it meets them."
    s = lesson_shape(path)
    report = (f"{path.name}: median visible cell {s['median_lines']:g} lines, largest {s['largest_lines']}, "
              f"{s['words_per_line']:.1f} words of prose per visible line of code (limits {SHAPE_LIMITS})")
    print(report)
    if path.stem[:2] in SHAPE_PENDING:
        assert not _meets(s), f"{report}: it meets them now, so take {path.stem[:2]} out of SHAPE_PENDING"
    else:
        assert _meets(s), report


def test_the_size_rule_counts_what_a_reader_reads(tmp_path):
    "Blank lines, directives and #| hide cells are not read; the median of an even count is the mean of the middle two."
    cells = [_code("#| export\ndef f(x):\n\n    return x"),         # 2 lines: the directive and the blank are not read
             _code("a = 1\nb = 2\nc = 3\nd = 4"),                   # 4
             _code("#| hide\n" + "x = 1\n" * 100),                 # off the page
             _code("y = 2\n" * 50, hidden=True),                    # folded, still on the page: 50
             _code("z = 3"),                                        # 1
             {"cell_type": "markdown", "metadata": {}, "source": "word " * 570}]
    s = lesson_shape(_lesson(tmp_path, cells))
    assert (s["median_lines"], s["largest_lines"]) == (3, 50) and s["words_per_line"] == pytest.approx(570 / 57)


# ---------------------------------------------------------------- the idea before the machinery
import re  # noqa: E402

from ctl_explore.course import on_the_page  # noqa: E402

_FIGURE = re.compile(r"go\.Figure|make_subplots|\.show\(\)")  # a cell that draws a figure
_MACHINERY = re.compile(r"^\s*(?:def (?:_?check_\w+|register_\w+|__getattr__)\(|class \w*Spec\b|HISTORY\s*=)|\bregister_loss\(", re.M)
_COMMIT = re.compile(r"\bcommit\b[^\n]{0,20}\b[0-9a-f]{7,40}\b")


def _code_sources(path) -> list[tuple[int, str]]:
    "(index, source) of the code cells a reader meets."
    cells = json.loads(Path(path).read_text())["cells"]
    return [(i, "".join(c["source"]) if isinstance(c["source"], list) else c["source"]) for i, c in enumerate(cells)
            if c["cell_type"] == "code" and on_the_page(c)]


def _first_figure_before_machinery(path) -> bool:
    "Whether the first visible cell that draws a figure comes before the first that defines an argument check or a registry (or registers into one)."
    code = _code_sources(path)
    figure = next((i for i, s in code if _FIGURE.search(s)), None)
    machinery = next((i for i, s in code if _MACHINERY.search(s)), None)
    return figure is not None and (machinery is None or figure < machinery)


def _machinery_in_sight(path) -> list[str]:
    "Shims, registries and commit lists among the code cells a reader meets: the first line of each."
    return [m.group(0).strip() for _, s in _code_sources(path) for m in (*_MACHINERY.finditer(s), *_COMMIT.finditer(s))
            if not m.group(0).lstrip().startswith("register_loss(")]  # a loss's one-line declaration beside its function is not machinery


def test_lesson_00_draws_eq_1_before_any_registry_or_check():
    assert _first_figure_before_machinery(NBS / "00_losses.ipynb")


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.stem)
def test_a_core_lesson_shows_no_shim_registry_or_commit_list(path):
    "The machinery behind a lesson (argument checks aside) lives in its appendix: no `__getattr__` shim, no registry's definition, no list of commits."
    found = [m for m in _machinery_in_sight(path) if "check_" not in m]
    assert not found, f"{path.name} shows machinery a core lesson imports instead: {found}"


def test_the_machinery_rules_are_not_fooled(tmp_path):
    "A registry defined before the first figure, one hidden behind #| hide, a shim and a commit list: each seen as a reader sees it."
    fig = _code("import plotly.graph_objects as go\ngo.Figure()")
    registry = _code("def register_loss(spec):\n    LOSSES[spec.name] = spec")
    assert not _first_figure_before_machinery(_lesson(tmp_path, [registry, fig]))
    assert _first_figure_before_machinery(_lesson(tmp_path, [fig, registry]))
    assert _first_figure_before_machinery(_lesson(tmp_path, [_code("#| hide\n" + registry["source"]), fig]))  # out of sight
    assert not _first_figure_before_machinery(_lesson(tmp_path, [_code("x = 1")]))  # no figure at all
    assert not _first_figure_before_machinery(_lesson(tmp_path, [_code("register_loss(LossSpec('x', f, ()))"), fig]))
    shown = _lesson(tmp_path, [_code("def __getattr__(name):\n    return old[name]"), _code("HISTORY = [dict(commit='e85b96e')]"),
                               _code("# from commit e85b96e on\nx = 1"), _code("register_loss(LossSpec('x', f, ()))"),
                               _code("#| hide\ndef __getattr__(name): pass")])
    assert _machinery_in_sight(shown) == ["def __getattr__(", "HISTORY =", "commit='e85b96e", "commit e85b96e"]
