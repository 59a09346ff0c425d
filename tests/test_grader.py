"""`ctl-explore grade` over fabricated submissions to lesson 06 (tiny notebooks: an import and a few answers): a right
one, a wrong one, one that crashes its kernel and then loops, and one that cheats (redefines the check, reaches for the
library where the exercise forbids it, deletes the grader's marker file). Each gets one row per exercise, the
events get rows of their own, and the grading goes on. Also: the answer key is built on demand and never by the site."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from ctl_explore.grading import ROW_FIELDS, grade, lessons_of, load_key_numbers, submissions

IMPORT = "import math\nfrom ctl_explore.exercises import check_06_1, check_06_3"
RIGHT = "kept = lambda n_rows, alpha: max(1, math.ceil(round(alpha * (n_rows - 1), 9)))\ncheck_06_3(kept)"


def _write(path: Path, *cells: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells]), path)
    return path


def _no_sandbox():
    from ctl_explore.grading import _bwrap_works
    return _bwrap_works()


@pytest.mark.slow
@pytest.mark.skipif(_no_sandbox() is not None, reason="`grade` runs submissions only in a bubblewrap sandbox, and none works here")
def test_grade_scores_right_wrong_crashing_looping_and_cheating_submissions(tmp_path):
    subs = tmp_path / "week2"
    _write(subs / "right" / "06_memory_bank.ipynb", IMPORT, RIGHT, "lag = lambda m: m / (1 - m)")
    _write(subs / "wrong.ipynb", IMPORT, "kept = lambda n_rows, alpha: max(1, math.ceil(alpha * (n_rows - 1)))", "lag = lambda m: 1 / (1 - m)")
    _write(subs / "crash.ipynb", IMPORT, "lag = lambda m: m / (1 - m)", "import os; os._exit(3)", "import time\nwhile True: time.sleep(0.05)", RIGHT)
    _write(subs / "cheat.ipynb", IMPORT, "from ctl_explore.losses import n_informative\ncheck_06_3 = lambda answer: print('Right.')",
           "kept = lambda n_rows, alpha: n_informative(n_rows - 1, alpha)\ncheck_06_3(kept)", "import os; os.remove('DO-NOT-DELETE.txt')")
    # (the loop sleeps: the limit must interrupt it all the same, and 10 s of spinning would only take a core from the
    # other tests)
    lines = []
    rows = grade([subs], tmp_path / "grades.csv", time_limit=10, echo=lines.append)
    table = {(r["student"], r["exercise"]): r for r in rows}
    assert {s for s, _ in table} == {"right", "wrong", "crash", "cheat"}
    for student in ("right", "wrong", "crash", "cheat"):            # every exercise of lesson 06 has its row
        assert {e for s, e in table if s == student} >= {"06.1", "06.2", "06.3", "06.4"}
    assert table["right", "06.3"]["status"] == table["right", "06.1"]["status"] == "passed"
    assert table["right", "06.2"]["status"] == "not answered"
    assert table["wrong", "06.3"]["status"] == "failed" and "101 rows" in table["wrong", "06.3"]["reason"]
    assert table["wrong", "06.1"]["status"] == "failed"
    events = [r["reason"] for r in rows if r["student"] == "crash" and r["exercise"] == "(notebook)"]
    assert events[0] == "the kernel died while running cell 3; graded again without that cell"
    assert "cell 4 ran past the 10 s limit and was interrupted" in events
    assert table["crash", "06.3"]["status"] == "passed" and table["crash", "06.1"]["status"] == "passed"   # the cells around them count
    cheat = [r for r in rows if r["student"] == "cheat"]
    assert table["cheat", "06.3"]["status"] == "failed" and "n_informative" in table["cheat", "06.3"]["reason"], table["cheat", "06.3"]
    assert any("deleted files" in r["reason"] for r in cheat if r["exercise"] == "(notebook)")
    with (tmp_path / "grades.csv").open() as f:
        written = list(csv.DictReader(f))
    assert tuple(written[0]) == ROW_FIELDS and len(written) == len(rows)
    assert any("exercises passed" in line for line in lines)


def test_which_lessons_a_submission_answers(tmp_path):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("from ctl_explore.exercises import check_00_1, run_00_4\n"
                                                                   "from ctl_explore.exercises import check_03_2")])
    assert lessons_of(nb, tmp_path / "anything.ipynb") == ["00", "03"]
    assert lessons_of(nbformat.v4.new_notebook(), tmp_path / "06_memory_bank.ipynb") == ["06"]
    assert lessons_of(nbformat.v4.new_notebook(), tmp_path / "notes.ipynb") == []
    _write(tmp_path / "a" / "x.ipynb", "1"); _write(tmp_path / "b.ipynb", "1")
    _write(tmp_path / "a" / ".ipynb_checkpoints" / "x-checkpoint.ipynb", "1")
    assert [(s, p.name) for s, p in submissions([tmp_path])] == [("a", "x.ipynb"), ("b", "b.ipynb")]
    with pytest.raises(FileNotFoundError, match="no notebook or folder"): submissions([tmp_path / "missing"])


def test_the_answer_key_is_built_on_demand_and_the_site_has_none(tmp_path):
    pytest.importorskip("mistune")
    import inspect
    import ctl_explore.site as site
    from ctl_explore.grading import answer_key
    page = answer_key(tmp_path / "key", numbers=False).read_text()
    assert "MathJax" in page and "my_contrastive_loss" in page and "\\(" in page
    assert "Lesson 11" in page and "Lesson 15" in page                      # the further lessons' solutions too, from nbs/solutions
    assert "answer-key" not in inspect.getsource(site) and "answer_key" not in inspect.getsource(site)


@pytest.mark.slow
def test_the_answer_key_holds_the_numbers(tmp_path, monkeypatch):
    import ctl_explore.exercises as ex
    for name in ("_experiment_07_4", "_experiment_08_2", "_experiment_09_4", "_experiment_02_4", "_experiment_03_4"):  # trainings: out of this test
        monkeypatch.setattr(ex, name, lambda: (_ for _ in ()).throw(RuntimeError("not in this test")))
    key = load_key_numbers()
    assert key.answer_numbers("06.3").startswith("4095 of 49,999") and "7 of 100" in key.answer_numbers("06.3")
    assert "14 at α = 0.33" in key.answer_numbers("00.3") and "could not be computed" in key.answer_numbers("07.4")


def _key_answer(key: str, text: str):
    "The answer a key entry states, read from its text as a student would type it (the parsers differ by the entry's form)."
    import re
    nums = lambda s: [float(x.replace(",", "")) for x in re.findall(r"-?\d[\d,]*\.?\d*", s)]
    if key == "07.1": return tuple(1 / int(d) for d in re.findall(r"1/(\d+)", text.split(":")[0]))
    if key == "07.3": return dict(zip(("bank", "batch"), (int(x) for x in nums(text))))
    if key in ("02.3", "09.3"):
        a, b, c = (nums(text) + [None])[:3]
        return (a, int(b)) if key == "02.3" else (a, b, c)
    if key == "01.3": return nums(text)[-1]
    if key == "01.4": return dict(zip((0.07, 1.0), (int(x) for x in nums(text)[0::2])))
    if key == "12.3": return (re.search(r"'(\w+)'", text).group(1), nums(text)[0])
    if key == "15.2": return nums(text)[0]
    return int(nums(text)[0])                                   # 12.1, 12.2, 15.1, 15.3: a count


@pytest.mark.parametrize("key", ["01.3", "01.4", "02.3", "07.1", "07.3", "09.3", "12.1", "12.2", "12.3", "15.1", "15.2", "15.3"])
def test_the_answer_key_agrees_with_the_checks(key, capsys):
    "Every key entry that states a value is accepted by its check, as typed from the key (the functions' entries are formulas, checked by the solutions notebooks)."
    import ctl_explore.exercises as ex
    text = load_key_numbers().answer_numbers(key)
    assert not text.startswith("(could not"), text
    answer = _key_answer(key, text)
    with ex.quietly(): assert ex.CHECKS[key](answer) is True, (key, text, answer)


def test_the_answer_key_keeps_the_maths_backslashes():
    mistune = pytest.importorskip("mistune")
    from ctl_explore.grading import _math
    html = mistune.create_markdown(escape=True)(_math(r"$\beta\,E_r[s]$ and $\|u - v\|$ and $$\{x_i\}$$"))
    assert r"\(\beta\,E\_r[s]\)" not in html and r"\beta\,E_r[s]" in html and r"\|u - v\|" in html and r"\{x_i\}" in html, html
