"""The exercises of lessons 11 and 12 (the core lessons' are in test_exercises_core.py, their checks in ctl_explore.exercises): every check refuses the wrong answers its exercise invites (each listed here,
as in the notebook's hidden cell), accepts the right one, and every check and solution cell is out of sight
(`#| hide` for the site, `source_hidden` for JupyterLab), the solutions after the references.

The checks are read from the notebooks and run in a namespace of their own, so that this file tests the cells the
students run, not a copy of them."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

NBS = Path(__file__).resolve().parent.parent / "nbs"
NOTEBOOKS = ["11_generalized_losses.ipynb", "12_feature_suppression.ipynb"]


def _cells(name: str) -> list[dict]:
    return json.loads((NBS / name).read_text())["cells"]


def _source(cell: dict) -> str:
    return "".join(cell["source"])


def _run(name: str, namespace: dict, *markers: str) -> dict:
    "Execute, in order, the code cells of notebook `name` whose source contains one of `markers`, in `namespace`."
    for cell in _cells(name):
        src = _source(cell)
        if cell["cell_type"] == "code" and any(m in src for m in markers): exec(compile(src, f"{name}:{cell['id']}", "exec"), namespace)
    return namespace


def _refuses(check, answer, hint: str, *args) -> None:
    with pytest.raises(AssertionError) as info: check(answer, *args)
    assert hint in str(info.value), f"{check.__name__}({answer!r}) refused with {str(info.value)!r}, not with a hint containing {hint!r}"


# ---------------------------------------------------------------- every check and solution out of sight

def _exercise_cells(cells: list[dict]) -> list[dict]:
    "The code cells that hold a check (its definition) or a solution (everything after the '## Solutions' heading)."
    out, in_solutions = [], False
    for cell in cells:
        src = _source(cell)
        if cell["cell_type"] == "markdown" and src.lstrip().startswith("## Solutions"): in_solutions = True
        if cell["cell_type"] == "code" and (in_solutions or "def check_exercise_" in src or "def check_prediction" in src): out.append(cell)
    return out


def _visible(cells: list[dict]) -> list[str]:
    "What is wrong with each check or solution cell that the site or JupyterLab would show."
    problems = []
    for cell in _exercise_cells(cells):
        if not _source(cell).startswith("#| hide"): problems.append(f"{cell['id']}: no '#| hide'")
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden") is not True: problems.append(f"{cell['id']}: not source_hidden")
    return problems


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_checks_and_solutions_are_hidden_on_the_site_and_collapsed_in_jupyterlab(name):
    cells = _cells(name)
    found = _exercise_cells(cells)
    assert any("def check_exercise_" in _source(c) for c in found) and any("check_exercise_1(" in _source(c) for c in found)
    assert _visible(cells) == []


def test_the_visibility_rule_finds_each_way_of_showing_a_check():
    "The rule above on cells built to break it: a check without '#| hide', one without source_hidden, a solution with neither."
    hidden = {"jupyter": {"source_hidden": True}}
    cells = [{"cell_type": "code", "id": "a", "metadata": {}, "source": ["#| hide\n", "def check_exercise_1(x): pass\n"]},
             {"cell_type": "code", "id": "b", "metadata": hidden, "source": ["def check_exercise_2(x): pass\n"]},
             {"cell_type": "code", "id": "c", "metadata": hidden, "source": ["#| hide\n", "def check_exercise_3(x): pass\n"]},
             {"cell_type": "markdown", "id": "d", "metadata": {}, "source": ["## Solutions\n"]},
             {"cell_type": "code", "id": "e", "metadata": {}, "source": ["check_exercise_1(42)\n"]}]
    assert _visible(cells) == ["a: not source_hidden", "b: no '#| hide'", "e: no '#| hide'", "e: not source_hidden"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_solutions_come_after_the_references_and_every_exercise_has_an_answer_cell(name):
    heads = [_source(c).lstrip().split("\n")[0] for c in _cells(name) if c["cell_type"] == "markdown"]
    assert heads.index("## Exercises") < heads.index("## References") < heads.index("## Solutions")
    answers = [c for c in _cells(name) if c["cell_type"] == "code" and "= None" in _source(c) and "check_exercise_" in _source(c)]
    assert len(answers) == sum(h.startswith("### Exercise") for h in heads) and all(not _source(c).startswith("#|") for c in answers)


# ---------------------------------------------------------------- lesson 11

@pytest.fixture(scope="module")
def lesson11():
    import fastcore.test
    from ctl_explore import generalized
    ns = {**vars(generalized), **{k: getattr(fastcore.test, k) for k in ("test_eq", "test_close", "test_fail")}, "torch": torch, "F": F}
    return _run("11_generalized_losses.ipynb", ns, "import dataclasses, json, tempfile, time", "REF_TAU, D = 0.2", "def check_exercise_1")


def test_11_exercise_1_refuses_the_lookalike_constants(lesson11):
    check, tau, d = lesson11["check_exercise_1"], 0.5, 16
    check((tau / d, tau / d, 1 / d))
    for answer, hint in (((tau, 1.0, -1.0), "changes from batch to batch"),                              # the textbook split's λ = τ
                         ((tau / d, tau / d, -(tau * math.log(d) - 1) / d), "the colab's decoupled NT-Xent"),  # read off the colab's loss
                         ((tau / d, tau / d, -1 / d), "is not the constant"), ((tau / d, tau / d, 1.0), "is not the constant"),
                         ((tau / d, 1.0, 1 / d), "changes from batch to batch"), ((tau, tau / d, 1 / d), "changes from batch to batch"),
                         ((-tau / d, -tau / d, 1 / d), "is negative"), ((tau / d, 1 / d), "give a triple")):
        _refuses(check, answer, hint)


def test_11_exercise_2_refuses_miscounted_negatives(lesson11):
    check = lesson11["check_exercise_2"]
    check([math.log1p(math.exp(1 / t) / 14) for t in (0.5, 0.1)])
    for answer, hint in (([math.log1p(math.exp(1 / t) / 15) for t in (0.5, 0.1)], "Count them"),
                         ([math.log1p(math.exp(1 / t) / 7) for t in (0.5, 0.1)], "counts 7 negatives"),
                         ([-math.log1p(math.exp(1 / t) / 14) for t in (0.5, 0.1)], "is not positive"),
                         ([1 / t for t in (0.5, 0.1)], "is not NT-Xent − DCL"), (0.5, "give a pair")):
        _refuses(check, answer, hint)


def test_11_exercise_3_refuses_the_wrong_scale(lesson11):
    check, d = lesson11["check_exercise_3"], 128
    check((d, 0.03 / (0.2 / d)))
    for answer, hint in (((1 / d, 0.03 / (0.2 / d)), "averages over all B·d entries"), ((d, 0.03 / (0.5 / d)), "reference τ"),
                         ((d, 0.03 * 0.2 / d), "divided by c"), ((d, 0.03), "is not the learning rate")):
        _refuses(check, answer, hint)


# ---------------------------------------------------------------- lesson 12

@pytest.fixture(scope="module")
def lesson12():
    from ctl_explore import suppression
    import os
    here = os.getcwd()
    os.chdir(NBS)  # the check cell reads ../data/suppression/ as the notebook does
    try: return _run("12_feature_suppression.ipynb", {**vars(suppression)}, "def check_exercise_1")
    finally: os.chdir(here)


def test_12_exercise_1_refuses_the_near_misses(lesson12):
    check, k = lesson12["check_exercise_1"], math.ceil(-math.log2(1 - 0.99 ** (1 / 127)))
    check(k)
    for answer, hint in ((7, "far from enough"), (k - 1, "still have a twin"), (k + 1, "fewer bits may do"),
                         (17, "fewer bits may do"),                                   # the answer for batches of 1000
                         (float(k), "an integer"), (True, "an integer"), (-1, "an integer")):
        _refuses(check, answer, hint)


def test_12_exercise_2_refuses_other_probes_and_other_rules(lesson12):
    check, rows = lesson12["check_exercise_2"], lesson12["_grid_rows"]
    at_chance = lesson12["at_chance"]
    mine = sorted((r for r in rows if r["tau"] == 0.05), key=lambda r: r["k"])
    exact = next(r["k"] for r in mine if at_chance(r["online_top1"], r["chance"], r["n_test"]))
    check(exact)
    # the rule with a chance level of 0.1 and no noise allowance, and the shared-code probe instead of the online one
    strict = next((r["k"] for r in mine if r["online_top1"] <= 0.1), None)
    for answer, hint in ((4, "clearly above chance"), (16, "already at a smaller k"), (10, "the grid ran k in")):
        if answer != exact: _refuses(check, answer, hint)
    if strict not in (None, exact): _refuses(check, strict, "already at a smaller k")


def test_12_exercise_3_refuses_the_wrong_difference(lesson12):
    check, confound = lesson12["check_exercise_3"], lesson12["zero_bit_confound"]
    (c,) = [c for c in confound(lesson12["_grid_rows"]) if c["k"] == 16 and c["tau"] == 0.2]
    gap = {m: c[f"trained_{m}"] - c[f"random_{m}"] for m in ("zero", "shared")}
    probe = min(gap, key=gap.get)
    other = "shared" if probe == "zero" else "zero"
    by = gap[other] - gap[probe]
    check((probe, by))
    for answer, hint in (((other, by), "the more negative one"), ((probe, 100 * by), "looks like percent"),
                         ((probe, -by), "a positive number"),
                         ((probe, abs(c["out_of_distribution_drop"])), "not the difference of the two gaps"),  # the trained encoder only
                         ((probe, abs(c["random_zero"] - c["random_shared"])), "not the difference of the two gaps"),  # the random one only
                         (("both", by), "name the probe"), (probe, "give a pair")):
        _refuses(check, answer, hint)
