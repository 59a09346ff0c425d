"""The students' copy (`ctl-explore student-copy`, appendix 98): the committed course without the worked solutions and the
tests that hold right answers. Built once from this checkout's last commit, then searched file by file for every line of
the worked solutions that the lessons themselves do not already print."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ctl_explore.grading import INSTRUCTOR_ONLY, STUDENT_NOTE, is_instructor_only, student_copy
from ctl_explore.cli import main

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="the students' copy is made from a git checkout's last commit")


def _committed(path: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"HEAD:{path}"], capture_output=True).returncode == 0


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return student_copy(tmp_path_factory.mktemp("students") / "course", ROOT)


def _code_lines(nb: Path) -> set[str]:
    "A notebook's code lines, stripped, each without a comment at its end (a lesson's given code often carries one)."
    cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
    return {re.sub(r"\s+#[^\"']*$", "", line).strip() for c in cells if c["cell_type"] == "code" for line in "".join(c["source"]).splitlines()}


def answer_lines() -> dict[str, str]:
    """Each line of a worked solution's code that could give an answer away: at least 20 characters, not an import, a
    comment, a call of the check or of the experiment the lesson's run cell already shows, and not a line the lesson
    itself prints (the exercise's given code)."""
    out = {}
    for sol in sorted((ROOT / "nbs" / "solutions").glob("*.ipynb")):
        given = _code_lines(ROOT / "nbs" / sol.name)
        for line in _code_lines(sol) - given:
            if len(line) >= 20 and not re.match(r"(import|from|#|with quietly\(\)|check_\d|run_\d|\w+ = _experiment_\d\d_\d\(\)$)", line):
                out[line] = sol.name
    return out


def test_the_instructors_files_exist_here_and_the_rule_names_them():
    "A rule that names files this repository does not have would pass while leaking: every entry is committed here."
    for entry in INSTRUCTOR_ONLY:
        assert _committed(entry.rstrip("/")), f"{entry} is named instructor-only but is not committed here"
    assert is_instructor_only("nbs/solutions/01_gradients.ipynb") and not is_instructor_only("nbs/01_gradients.ipynb")
    assert is_instructor_only("nbs/solutions") and is_instructor_only("nbs/solutions/key_numbers.py")  # the folder's own entry too
    assert not is_instructor_only("tests/test_grader.py.bak") and not is_instructor_only("nbs/solutions.md")
    assert len(answer_lines()) >= 40  # the search below has lines to look for


def test_the_copy_holds_no_solution_and_no_answer_bearing_test(copy):
    files = [p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file() and ".git" not in p.relative_to(copy).parts]
    assert "README.md" in files and "pyproject.toml" in files and "nbs/01_gradients.ipynb" in files
    assert not [f for f in files if is_instructor_only(f)]
    assert not (copy / "nbs" / "solutions").exists()
    committed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True,
                               check=True).stdout.split()
    assert sorted(files) == sorted(f for f in committed if not is_instructor_only(f))  # nothing else left out


def leaks(folder: Path) -> list[str]:
    "Every file of `folder` (its .git aside) that holds a line of `answer_lines`, with the line."
    lines, found = answer_lines(), []
    for path in folder.rglob("*"):
        if not path.is_file() or ".git" in path.relative_to(folder).parts: continue
        try: text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError): continue
        found += [f"{path.relative_to(folder)}: {line!r} (from solutions/{sol})" for line, sol in lines.items() if line in text]
    return found


def test_no_file_of_the_copy_holds_a_line_of_a_worked_solution(copy):
    found = leaks(copy)
    assert not found, "the students' copy gives these solution lines away:\n" + "\n".join(found[:20])


def test_the_search_finds_a_solution_line_planted_in_a_lesson(tmp_path):
    "The search above can fail: one solution line pasted into a lesson's JSON (indented, escaped as nbformat writes it) is caught."
    line = next(l for l in sorted(answer_lines()) if '"' not in l and "\\" not in l)
    lesson = tmp_path / "nbs" / "01_gradients.ipynb"
    lesson.parent.mkdir()
    lesson.write_text(json.dumps({"cells": [{"cell_type": "code", "source": ["x = 1\n", "    " + line + "\n"]}]}, indent=1), encoding="utf-8")
    assert any(line in f for f in leaks(tmp_path))


def test_readme_tells_students_what_they_have_and_no_test_needs_what_was_left_out(copy):
    readme = (copy / "README.md").read_text(encoding="utf-8")
    assert STUDENT_NOTE in readme and "instructors-only" not in readme and "student-copy DIR" not in readme
    assert "<!-- instructors-only -->" in (ROOT / "README.md").read_text(encoding="utf-8")
    left_out = [Path(p).stem for p in INSTRUCTOR_ONLY if p.endswith(".py")]
    for test in (copy / "tests").glob("*.py"):
        text = test.read_text(encoding="utf-8")
        assert not [m for m in left_out if re.search(rf"\b(import|from)\s+{m}\b", text)], f"{test.name} imports a test left out"
        assert not re.search(r"""["']nbs/solutions|/\s*["']solutions["']""", text), (
            f"{test.name} reads the solutions, which the students' copy does not have")
    log = subprocess.run(["git", "-C", str(copy), "log", "--oneline"], capture_output=True, text=True, check=True).stdout
    assert len(log.splitlines()) == 1  # a history of one commit: no earlier commit holds the solutions


def test_student_copy_refuses_a_folder_in_use_and_says_so(tmp_path, capsys):
    used = tmp_path / "mine"
    used.mkdir()
    (used / "notes.txt").write_text("my notes")
    assert main(["student-copy", str(used)]) == 1
    err = capsys.readouterr().err
    assert "not an empty folder" in err and len(err.strip().splitlines()) == 1
    assert (used / "notes.txt").read_text() == "my notes" and sorted(p.name for p in used.iterdir()) == ["notes.txt"]
