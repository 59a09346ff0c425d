"""The instructor's kit stays true: the reading-time tables in README.md and nbs/index.ipynb are what the stated rule
gives on the notebooks as they are; the class plans name sections that exist; no lesson keeps its solutions (they are in
nbs/solutions/); every exercise check and solution is out of sight in JupyterLab."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ctl_explore.course import (MAX_CONTENT, PLANS, READING_RULE, Slot, check_plan, count_exercises, exercise_texts,
                                is_derivation, is_hidden, lesson_stats, lessons, reading_minutes, reading_table, section_cells,
                                session_minutes, slot_content)

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
START, END = "<!-- reading-times: made by ctl_explore.course.reading_table -->", "<!-- /reading-times -->"


def _table(text: str) -> str:
    assert START in text and END in text, f"the reading-time table's markers {START!r} … {END!r} are missing"
    return text[text.index(START) + len(START):text.index(END)].strip()


def test_readme_reading_times_are_recounted():
    assert _table((ROOT / "README.md").read_text()) == reading_table(NBS, link="nbs/")


def test_index_reading_times_are_recounted():
    cells = json.loads((NBS / "index.ipynb").read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert _table(text) == reading_table(NBS)


def test_the_rule_counts_what_it_says(tmp_path):
    "A lesson grows by 130 words and 10 visible lines; hidden lines count nothing."
    base = lesson_stats(NBS / "00_losses.ipynb")
    nb = json.loads((NBS / "00_losses.ipynb").read_text())
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "word " * 130})
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "source": "x = 1\n" * 10})
    nb["cells"].append({"cell_type": "code", "metadata": {"jupyter": {"source_hidden": True}}, "outputs": [], "source": "y = 2\n" * 50})
    (tmp_path / "00_x.ipynb").write_text(json.dumps(nb))
    grown = lesson_stats(tmp_path / "00_x.ipynb")
    assert (grown.words - base.words, grown.code_lines - base.code_lines) == (130, 10)


@pytest.mark.parametrize("name", list(PLANS))
def test_plans_name_sections_that_exist(name):
    check_plan(PLANS[name], NBS)


def test_readme_and_index_state_the_rule_the_tables_use():
    assert READING_RULE in (ROOT / "README.md").read_text()
    assert READING_RULE in (NBS / "index.ipynb").read_text().replace("\\n", "\n")


def test_the_rule_weighs_each_part():
    "100 words, 5 lines, an exercise and a derivation: 1 + 1 + 10 + 20 minutes; a derivation is one of the exercises."
    assert reading_minutes(100, 5, exercises=2, derivations=1) == 32
    assert reading_minutes(0, 0, exercises=3, derivations=3) == 60
    with pytest.raises(ValueError, match="derivations must lie between 0 and exercises"):
        reading_minutes(0, 0, exercises=1, derivations=2)


def _cells(*parts):
    "Markdown cells from strings, code cells from ('code', source[, hidden])."
    out = []
    for p in parts:
        if isinstance(p, str): out.append({"cell_type": "markdown", "metadata": {}, "source": p})
        else: out.append({"cell_type": "code", "metadata": {"jupyter": {"source_hidden": True}} if p[2:] and p[2] else {},
                          "source": p[1], "outputs": []})
    return out


def test_exercises_are_counted_by_their_numbers_not_their_cells():
    "Cells built to fool the count: one exercise with two answer cells, a range heading with its items, a derivation word outside any exercise."
    cells = _cells("Intro: derive nothing here, by hand or otherwise.", "## Exercises\n\nEach exercise checks itself (work it out first).",
                   ("code", "#| hide\ndef check_a(x): pass\ndef check_b(x): pass", True),
                   "### Exercise 1: two answer cells\n\nPredict, then run.", ("code", "check_a(1)"), ("code", "check_b(2)"),
                   "### Exercises 2 to 3: a range\n\n2. **A number.** Give it.\n3. **A formula.** Give it as a function of τ.",
                   ("code", "check_a(3)"), ("code", "check_b(4)"),
                   "**Exercise 4.** To leading order in 1/τ, what is the gap?", ("code", "check_a(5)"),
                   "Some steps:\n\n7. **Not an exercise**: a numbered item outside a range.", "## References\n\n### Exercise 9 of a paper")
    texts = exercise_texts(cells)
    assert list(texts) == [1, 2, 3, 4] and count_exercises(cells) == 4
    assert [is_derivation(texts[n]) for n in texts] == [False, False, True, True]
    # a section that numbers nothing falls back to its answer cells, one each
    bare = _cells("## Exercises", ("code", "#| hide\ndef check_a(x): pass", True), "Answer:", ("code", "check_a(1)"), ("code", "check_a(2)"))
    assert exercise_texts(bare) == {} and count_exercises(bare) == 2


def test_lesson_08_has_two_exercises():
    "Its second exercise has two answer cells (a prediction and a measurement): one exercise."
    assert lesson_stats(NBS / "08_linear_eval.ipynb").exercises == 2


def test_a_section_is_its_heading_to_the_next_of_its_level():
    cells = _cells("## A\n\none two", ("code", "x = 1\ny = 2"), "### A.1\n\nthree", ("code", "z = 3"), "## B\n\nfour", ("code", "w = 4"))
    assert [c["source"] for c in section_cells(cells, "A")] == [c["source"] for c in cells[:4]]
    assert [c["source"] for c in section_cells(cells, "A.1")] == ["### A.1\n\nthree", "z = 3"]
    with pytest.raises(ValueError, match="no section 'C'"): section_cells(cells, "C")


def test_a_slot_counts_what_it_shows_and_not_what_it_skips(tmp_path):
    nb = {"cells": _cells("## A\n\n" + "word " * 100, ("code", "x = 1\n" * 10), "### A.1\n\n" + "word " * 300, ("code", "y = 1\n" * 50),
                          "## B\n\n" + "word " * 1000), "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (tmp_path / "00_toy.ipynb").write_text(json.dumps(nb))
    whole, skipped = Slot(30, "00_toy", ("A",)), Slot(30, "00_toy", ("A",), skip=("A.1",))
    assert slot_content(skipped, tmp_path) == pytest.approx(reading_minutes(102, 10))
    assert slot_content(whole, tmp_path) == pytest.approx(reading_minutes(102 + 302, 60))
    assert session_minutes([whole, Slot(10, "00_toy", ("B",), session=2)], tmp_path) == {
        1: (30, pytest.approx(reading_minutes(404, 60))), 2: (10, pytest.approx(reading_minutes(1002, 0)))}
    with pytest.raises(ValueError, match="00_toy: 'A.2'"): check_plan([Slot(5, "00_toy", ("A",), skip=("A.2",))], tmp_path)


@pytest.mark.parametrize("name", list(PLANS))
def test_plans_fit_their_classes(name):
    "Each class is 90 minutes of which at most MAX_CONTENT are content by the reading rule; no slot shows more than its time."
    for session, (time, content) in session_minutes(PLANS[name], NBS).items():
        assert time == 90 and content <= MAX_CONTENT[name], f"{name}, class {session}: {content:.1f} min of content in {time}"
    over = [(s.lesson, s.show, round(slot_content(s, NBS), 1), s.minutes) for s in PLANS[name] if slot_content(s, NBS) > s.minutes]
    assert not over, f"slots showing more than their time: {over}"


def test_the_one_class_plan_shows_the_criteria_its_verdicts_rest_on():
    plan = next(p for n, p in PLANS.items() if n.startswith("One 90-minute class"))
    verdicts = [s for s in plan if s.lesson.startswith("09")]
    assert verdicts and any("criteria" in h for s in verdicts for h in s.show)


def test_no_lesson_keeps_its_solutions():
    "Every lesson's solutions are in nbs/solutions/ (the answer key is built from there): no lesson has a Solutions section."
    kept = [path.name for path in lessons(NBS) if any(c["cell_type"] == "markdown" and re.match(r"#+\s*Solutions", "".join(c["source"]).strip())
                                                      for c in json.loads(path.read_text())["cells"])]
    assert not kept, f"lessons that keep a Solutions section: {kept}"


def test_exercise_checks_and_solutions_are_out_of_sight():
    "In every lesson with exercises, each cell that defines a check (def check_...) or sits after 'Solutions' is #| hide and collapsed."
    bad = []
    for path in lessons(NBS):
        cells = json.loads(path.read_text())["cells"]
        after_solutions = False
        for i, c in enumerate(cells):
            src = "".join(c["source"])
            if c["cell_type"] == "markdown":
                if re.match(r"#+\s*Solutions", src.strip()): after_solutions = True
                continue
            defines_check = re.search(r"^def check_(exercise|\w+)\(", src, re.M) and "## Exercises" in "".join(
                "".join(x["source"]) for x in cells[:i] if x["cell_type"] == "markdown")
            if (after_solutions or defines_check) and not (src.lstrip().startswith("#| hide")
                                                          and c.get("metadata", {}).get("jupyter", {}).get("source_hidden")):
                bad.append(f"{path.name} cell {i}")
    assert not bad, f"exercise checks or solutions visible in JupyterLab or on the site: {bad}"


# ---- one command keeps the tables and links in step (python -m ctl_explore.course)

def test_tables_and_site_links_are_in_step():
    from ctl_explore.course import update_docs
    stale = update_docs(ROOT, write=False)
    assert not stale, f"stale: {stale}; run `python -m ctl_explore.course` and commit what it changes"


def _copy_course(tmp_path: Path) -> Path:
    import shutil
    (tmp_path / "nbs").mkdir()
    for name in ("README.md", "pyproject.toml"): shutil.copy(ROOT / name, tmp_path / name)
    for p in [NBS / "index.ipynb", *lessons(NBS)]: shutil.copy(p, tmp_path / "nbs" / p.name)
    from ctl_explore.course import update_docs
    update_docs(tmp_path)  # in step, whatever the working tree's state
    return tmp_path


def test_a_changed_lesson_makes_the_docs_stale_until_updated(tmp_path):
    "A lesson that grows by a paragraph changes both reading tables; a lesson's summary changes both course tables; one command mends them."
    from ctl_explore.course import course_table, main, update_docs
    root = _copy_course(tmp_path)
    path = root / "nbs" / "06_memory_bank.ipynb"
    nb = json.loads(path.read_text())
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "word " * 1300})
    first = next(c for c in nb["cells"] if c["cell_type"] == "markdown")
    first["source"] = re.sub(r"^>.*$", "> A new summary of the memory bank.", "".join(first["source"]), count=1, flags=re.M)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    assert update_docs(root, write=False) == ["README.md", "nbs/index.ipynb"]
    assert main(["--root", str(root), "--check"]) == 1
    assert main(["--root", str(root)]) == 0 and update_docs(root, write=False) == []
    assert "A new summary of the memory bank." in (root / "README.md").read_text()
    assert "A new summary of the memory bank." in course_table(root / "nbs")


def test_a_new_lesson_gets_its_row_and_link(tmp_path):
    from ctl_explore.course import SITE_LINK, site_url, update_docs
    root = _copy_course(tmp_path)
    new = {"cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": "#| default_exp toy"},
                     {"cell_type": "markdown", "metadata": {}, "source": "# A toy lesson\n\n> One line that says what it shows.\n\nText."}],
           "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    (root / "nbs" / "97_toy.ipynb").write_text(json.dumps(new))
    changed = update_docs(root)
    assert changed == ["README.md", "nbs/97_toy.ipynb", "nbs/index.ipynb"]
    readme = (root / "README.md").read_text()
    assert "[97 · A toy lesson](nbs/97_toy.ipynb) | One line that says what it shows. | `ctl_explore.toy` |" in readme
    first = json.loads((root / "nbs" / "97_toy.ipynb").read_text())["cells"][1]["source"]
    assert SITE_LINK.search(first) and f"{site_url(root)}/97_toy.html" in first
    assert update_docs(root) == []  # a second run changes nothing: the link is replaced, never repeated


def test_a_lesson_without_a_summary_is_named(tmp_path):
    from ctl_explore.course import update_docs
    root = _copy_course(tmp_path)
    (root / "nbs" / "97_bare.ipynb").write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Bare"}],
                                                             "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    with pytest.raises(ValueError, match=r"97_bare.ipynb: its first markdown cell needs a '# title' and a '> summary' line"):
        update_docs(root, write=False)


def test_readme_and_index_name_where_the_site_is_served():
    from ctl_explore.course import site_url
    url = site_url(ROOT) + "/"
    assert url in (ROOT / "README.md").read_text()
    assert url in (NBS / "index.ipynb").read_text()
