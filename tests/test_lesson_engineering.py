"""Lesson 00 teaches the losses' equations; the machinery around them lives in appendix 31. This file says what counts as
an engineering line and holds lesson 00 to at most a quarter of them among the code lines a reader meets.

The definition. The lines counted are those `lesson_shape` counts: every non-blank line of a code cell on the page (every
cell but `#| hide` ones), nbdev directives left out. A line is *engineering* when the Python statement it belongs to is
  1. an import;
  2. argument validation: a `raise`, an `if` that only raises, or a call of a `check_...` function (an exercise's check,
     `check_00_1(...)`, is the exercise, not validation) or of `test_fail`;
  3. the registry and its switchboard: any use of `register_loss`, `LossSpec`, `LOSSES`, `loss_spec`, `loss_names`,
     `check_loss_params` or `apply_loss` (a declaration's labels and colours with it);
  4. dtype and cache plumbing: `lru_cache`, `torch.autocast`, a `torch.autograd.Function`;
  5. a re-export list (`__all__`, nbdev's `_all_`).
A `def` or `for` header is not engineering by itself; its body is judged statement by statement, and a function that is
itself machinery (a `check_...`, `register_...` or `_private` helper) counts whole."""
from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from ctl_explore.course import on_the_page

NBS = Path(__file__).resolve().parents[1] / "nbs"
MAX_ENGINEERING_SHARE = 0.25

_REGISTRY = {"register_loss", "LossSpec", "LOSSES", "loss_spec", "loss_names", "check_loss_params", "apply_loss"}
_PLUMBING = {"lru_cache", "autocast", "Function", "__all__", "_all_", "test_fail"}
_CHECK = re.compile(r"^_?check_(?!\d)\w+$")  # check_similarities, _check_x; not check_00_1
_MACHINERY_DEF = re.compile(r"^(?:_?check_\w+|register_\w+|_\w+)$")


def _names(node: ast.AST) -> set[str]:
    return {n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute))}


def _simple_is_engineering(stmt: ast.stmt) -> bool:
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Raise)): return True
    names = _names(stmt)
    return bool(names & (_REGISTRY | _PLUMBING)) or any(_CHECK.match(n) for n in names)


def _engineering_lines(stmts: list[ast.stmt]) -> set[int]:
    "The line numbers (1-based, within the cell) of the engineering statements among `stmts`, recursively."
    lines: set[int] = set()
    span = lambda s: set(range(s.lineno, s.end_lineno + 1))
    for s in stmts:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for d in s.decorator_list:
                if _names(d) & _PLUMBING: lines |= span(d)
            machinery = isinstance(s, ast.ClassDef) and any(_names(b) & _PLUMBING for b in s.bases)
            if machinery or _MACHINERY_DEF.match(s.name): lines |= span(s)
            else: lines |= _engineering_lines(s.body)
        elif isinstance(s, ast.If) and all(isinstance(b, ast.Raise) for b in s.body) and not s.orelse:
            lines |= span(s)
        elif isinstance(s, (ast.For, ast.While, ast.If, ast.With, ast.Try)):
            if isinstance(s, ast.With) and any(_names(i) & _PLUMBING for i in s.items): lines |= span(s); continue
            for block in ("body", "orelse", "finalbody"): lines |= _engineering_lines(getattr(s, block, []))
            for h in getattr(s, "handlers", []): lines |= _engineering_lines(h.body)
        elif _simple_is_engineering(s):
            lines |= span(s)
    return lines


def engineering_count(path: Path) -> tuple[int, int, list[str]]:
    "(engineering lines, visible code lines, the engineering lines themselves) of a notebook, by the module's definition."
    cells = json.loads(Path(path).read_text())["cells"]
    total, eng, shown = 0, 0, []
    for c in cells:
        if c["cell_type"] != "code" or not on_the_page(c): continue
        src = "".join(c["source"])
        text = "\n".join("" if l.lstrip().startswith("#|") else l for l in src.splitlines())
        counted = [i for i, l in enumerate(text.splitlines(), 1) if l.strip()]
        marked = _engineering_lines(ast.parse(text).body) if text.strip() else set()
        total += len(counted)
        for i in counted:
            if i in marked:
                eng += 1
                shown.append(text.splitlines()[i - 1].strip())
    return eng, total, shown


def test_lesson_00_is_at_most_a_quarter_engineering():
    eng, total, shown = engineering_count(NBS / "00_losses.ipynb")
    print(f"lesson 00: {eng} of {total} visible code lines are engineering ({eng / total:.0%})")
    assert total > 100, "lesson 00 should still carry its equations' code"
    assert eng / total <= MAX_ENGINEERING_SHARE, (f"{eng} of {total} visible code lines of lesson 00 are engineering "
                                                  f"({eng / total:.0%} > {MAX_ENGINEERING_SHARE:.0%}): " + " | ".join(shown))


def _made(tmp_path, *sources, hidden=()) -> Path:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "source": ("#| hide\n" if i in hidden else "") + s}
             for i, s in enumerate(sources)]
    path = tmp_path / "00_made.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_the_count_is_not_fooled(tmp_path):
    "Each kind of engineering line is counted, the equation's lines are not, and nothing off the page is read."
    loss = ('#| export\n'
            'def loss(pos, neg, tau):\n'
            '    "Eq 1."\n'
            '    check_similarities(pos, neg)\n'          # validation: 1
            '    if tau <= 0:\n'                           # an if that only raises: 2
            '        raise ValueError("tau")\n'
            '    logits = torch.cat([pos[:, None], neg], 1) / tau\n'
            '    return -logits.log_softmax(1)[:, 0]\n')
    declare = 'register_loss(LossSpec("x", loss, ("tau",),\n                       color="#123456"))\n'  # 2
    imports = 'import torch\nfrom ctl_explore.loss_registry import apply_loss\n'                    # 2
    helper = 'def _index(b):\n    return b + 1\n'                                                     # a private helper: 2
    figure = 'fig = go.Figure()\nfor t in (0.1, 1.0):\n    fig.add_scatter(y=loss(p, n, t))\ncheck_00_1(my_loss)\n'
    hidden = 'import os\ncheck_positive("tau", 1)\n'
    eng, total, shown = engineering_count(_made(tmp_path, loss, declare, imports, helper, figure, hidden, hidden={5}))
    assert (eng, total) == (9, 7 + 2 + 2 + 2 + 4), (eng, total, shown)
    assert shown[:3] == ["check_similarities(pos, neg)", "if tau <= 0:", 'raise ValueError("tau")']
    assert "check_00_1(my_loss)" not in shown and not any("log_softmax" in s or "Figure" in s for s in shown)


def _lesson_code_before_exercises(path: Path) -> list[str]:
    "The code cells of a lesson before its Exercises heading, hidden ones included: a student reads them all in JupyterLab."
    cells = json.loads(Path(path).read_text())["cells"]
    end = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Exercises"))
    return ["".join(c["source"]) for c in cells[:end] if c["cell_type"] == "code"]


def test_lesson_00_does_not_hand_over_its_exercises_answers():
    "Exercise 00.1 writes Eq 1 with F.cross_entropy; 00.3 finds the floating-point trap in ⌈αK⌉: the lesson computes neither."
    code = _lesson_code_before_exercises(NBS / "00_losses.ipynb")
    assert any("def contrastive_loss(" in s for s in code) and any("n_informative" in s for s in code)
    assert not [s for s in code if re.search(r"\bcross_entropy\(", s)], "lesson 00 computes Eq 1 as a cross-entropy: exercise 00.1"
    assert not [s for s in code if re.search(r"ceil\(\s*round\(|round\([^)]*,\s*9\)", s)], "lesson 00 shows ⌈round(αK, 9)⌉: exercise 00.3"
