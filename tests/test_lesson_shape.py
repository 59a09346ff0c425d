"""Core lessons teach and appendices build: in lessons 00-03 and 06-09 at most a quarter of the code cells a reader
meets (every cell but `#| hide` ones) are checks, the prose talks about the subject rather than the project (CI, tests, issues, earlier versions), and
each lesson opens with objectives and closes with takeaways. The rule is `ctl_explore.course.lesson_shape`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctl_explore.course import CORE_LESSONS, MAX_TEST_SHARE, is_test_cell, lesson_shape, lessons

NBS = Path(__file__).resolve().parents[1] / "nbs"
CORE = [p for p in lessons(NBS) if p.stem[:2] in CORE_LESSONS]


def test_the_core_lessons_are_all_there():
    assert [p.stem[:2] for p in CORE] == list(CORE_LESSONS)


@pytest.mark.parametrize("path", CORE, ids=lambda p: p.stem)
def test_a_core_lesson_is_mostly_not_checks(path):
    s = lesson_shape(path)
    assert s["test_share"] <= MAX_TEST_SHARE, (f"{path.name}: {s['test_cells']} of its {s['code_cells']} visible code cells are "
                                               f"checks ({s['test_share']:.0%} > {MAX_TEST_SHARE:.0%}): move some to tests/ or collapse them")


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
