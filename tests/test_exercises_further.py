"""The exercises of the further lessons 11, 12 and 15 (checks in `ctl_explore.exercises`, appendix 94; solutions in
`nbs/solutions/`).

For every check, at least five wrong answers it must refuse: the lookalikes each exercise invites (the textbook split's
λ, the colab's constant, a miscounted set of negatives, the run's own τ for the reference τ, the answer for another
batch size, the wrong probe, percent for a fraction, the paper's τ for the study's), and the placeholders a student
leaves. Then what a student sees: the committed lesson JSON (GitHub's view) holds no check body, no solution and no
answer value, and no Solutions section."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

import ctl_explore.exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
FURTHER = ("11_generalized_losses", "12_feature_suppression", "15_gpu_study")


def refused(check, answer, says: str = ""):
    with pytest.raises(AssertionError) as caught: check(answer)
    assert says in str(caught.value), f"{check.__name__}({answer!r}) refused with {str(caught.value)!r}, not {says!r}"


def passes(check, answer, capsys):
    assert check(answer) is True
    assert "Right." in capsys.readouterr().out and ex.RESULTS[-1]["status"] == "passed"


# ================================================================ lesson 11

def test_11_1_refuses_the_lookalike_constants(capsys):
    tau, d = 0.5, 16
    passes(ex.check_11_1, (tau / d, tau / d, 1 / d), capsys)
    for answer, says in (((tau, 1.0, -1.0), "changes from batch to batch"),                                  # the textbook split's λ = τ
                         ((tau / d, tau / d, -(tau * math.log(d) - 1) / d), "the colab's decoupled NT-Xent"),  # read off the colab's loss
                         ((tau / d, tau / d, -1 / d), "is not the constant"), ((tau / d, tau / d, 1.0), "is not the constant"),
                         ((tau / d, 1.0, 1 / d), "changes from batch to batch"), ((tau, tau / d, 1 / d), "changes from batch to batch"),
                         ((1 / d, 1 / d, 1 / d), "changes from batch to batch"),                                # τ forgotten
                         ((-tau / d, -tau / d, 1 / d), "is negative"), ((tau / d, 1 / d), "give a triple"),
                         (("1/32", "1/32", "1/16"), "give a triple")):
        refused(ex.check_11_1, answer, says)


def test_11_2_refuses_miscounted_negatives(capsys):
    right = [math.log1p(math.exp(1 / t) / 14) for t in (0.5, 0.1)]
    passes(ex.check_11_2, right, capsys)
    for answer, says in (([math.log1p(math.exp(1 / t) / 15) for t in (0.5, 0.1)], "Count them"),   # the positive counted as a negative
                         ([math.log1p(math.exp(1 / t) / 7) for t in (0.5, 0.1)], "counts 7 negatives"),
                         ([-g for g in right], "is not positive"),
                         ([1 / t for t in (0.5, 0.1)], "is not NT-Xent − DCL"),
                         (right[::-1], "is not NT-Xent − DCL"),                                            # the two τ swapped
                         ([16 * g for g in right], "is not NT-Xent − DCL"),                                # summed over the anchors
                         ([round(g, 2) for g in right], "is not NT-Xent − DCL"),                           # two decimals, not three
                         (0.5, "give a pair")):
        refused(ex.check_11_2, answer, says)


def test_11_3_refuses_the_wrong_scale(capsys):
    from ctl_explore.train import PretrainConfig
    d = PretrainConfig().out_dim
    passes(ex.check_11_3, (d, 0.03 / (0.2 / d)), capsys)
    for answer, says in (((1 / d, 0.03 / (0.2 / d)), "averages over all B·d entries"), ((2 * d, 0.03 / (0.2 / d)), "averages over all B·d entries"),
                         ((d, 0.03 / (0.5 / d)), "reference τ"),                                          # the run's own τ
                         ((d, 0.03 * 0.2 / d), "divided by c"), ((d, 0.03), "is not the learning rate"),
                         ((d, 0.03 * d), "reference τ"),                                                 # τ_ref forgotten
                         (d, "give a pair")):
        refused(ex.check_11_3, answer, says)


def test_11_3_agrees_with_the_lessons_grids():
    "The check's learning rate is the one lesson 11's `grids(FULL)` gives its decoupled NT-Xent runs (the lesson's cells, run here)."
    cells = json.loads((NBS / "11_generalized_losses.ipynb").read_text())["cells"]
    import torch
    import torch.nn.functional as F
    from ctl_explore import generalized
    ns: dict = {**vars(generalized), "torch": torch, "F": F}
    for c in cells:
        src = "".join(c["source"])
        if c["cell_type"] == "code" and any(m in src for m in ("import dataclasses, json, tempfile, time", "REF_TAU, D = 0.2")):
            exec(compile(src, "lesson 11", "exec"), ns)
    assert math.isclose(ns["grids"](ns["FULL"])["instantiations"]["decoupled_nt_xent-seed0"].lr, ex._lr_11_3(), rel_tol=1e-12)


# ================================================================ lesson 12

def test_12_1_refuses_the_near_misses(capsys):
    k = math.ceil(-math.log2(1 - 0.99 ** (1 / 127)))
    passes(ex.check_12_1, k, capsys)
    for answer, says in ((7, "far from enough"), (k - 1, "still have a twin"), (k + 1, "fewer bits may do"),
                         (math.ceil(-math.log2(1 - 0.99 ** (1 / 999))), "fewer bits may do"),        # the answer for batches of 1000
                         (math.ceil(math.log2(128)), "far from enough"),                             # 2^k = B
                         (float(k), "an integer"), (True, "an integer"), (-1, "an integer")):
        refused(ex.check_12_1, answer, says)


def test_12_2_refuses_other_rows_and_rules(capsys):
    from ctl_explore.suppression import at_chance
    rows = ex._randbit_rows()
    at = lambda tau: sorted(r["k"] for r in rows if r["tau"] == tau and at_chance(r["online_top1"], r["chance"], r["n_test"]))
    exact = at(0.05)[0]
    passes(ex.check_12_2, exact, capsys)
    grid = sorted({r["k"] for r in rows if r["tau"] == 0.05})
    below = max(k for k in grid if k < exact)
    for answer, says in ((below, "clearly above chance"),                      # the last k above chance
                         (at(0.05)[-1], "already at a smaller k"),              # the largest k at chance
                         (math.ceil(-math.log2(1 - 0.99 ** (1 / 127))), "the grid ran k in"),  # exercise 1's answer
                         (float(exact), "an integer"), (str(exact), "the grid ran k in"), (0, "clearly above chance")):
        refused(ex.check_12_2, answer, says)


def test_12_3_refuses_the_wrong_difference(capsys):
    from ctl_explore.suppression import zero_bit_confound
    (c,) = [c for c in zero_bit_confound(ex._randbit_rows()) if c["k"] == 16 and c["tau"] == 0.2]
    gap = {m: c[f"trained_{m}"] - c[f"random_{m}"] for m in ("zero", "shared")}
    probe = min(gap, key=gap.get)
    other = "shared" if probe == "zero" else "zero"
    by = gap[other] - gap[probe]
    passes(ex.check_12_3, (probe, by), capsys)
    for answer, says in (((other, by), "the more negative one"), ((probe, 100 * by), "looks like percent"),
                         ((probe, -by), "a positive number"),
                         ((probe, abs(c["trained_shared"] - c["trained_zero"])), "not the difference of the two gaps"),  # the trained encoder only
                         ((probe, abs(c["random_shared"] - c["random_zero"])), "not the difference of the two gaps"),  # the random one only
                         ((probe, abs(gap[probe])), "is not by how much"),                                              # one gap alone
                         (("both", by), "name the probe"), ((probe, f"{by:.3f}"), "is a number"), (probe, "give a pair")):
        refused(ex.check_12_3, answer, says)


# ================================================================ lesson 15

def test_15_1_refuses_other_counts(capsys):
    need, run_s, per_gpu, runs = ex._gpus_15_1()
    passes(ex.check_15_1, need, capsys)
    for answer, says in ((need - 1, "would not finish"), (need + 1, "fewer would do"), (runs, "fewer would do"),
                         (per_gpu, "would not finish"), (1, "would not finish"),
                         (float(need), "an integer"), (True, "an integer"), (str(need), "an integer"), (0, "an integer")):
        refused(ex.check_15_1, answer, says)
    assert (need, per_gpu) == (8, 7)
    refused(ex.check_15_1, math.ceil(runs * run_s / 3600), "would not finish")   # the GPU-hours rounded up: a run split between GPUs
    refused(ex.check_15_1, math.ceil(runs / math.ceil(3600 / run_s)), "would not finish")   # a part run counted as one


def test_15_2_refuses_the_neighbours_and_the_papers_tau(capsys):
    means = ex._tau_means_15_2()
    top = ex._top_15_2(means)
    for best in top: passes(ex.check_15_2, best, capsys)   # an exact tie (three seeds of one test set) accepts either
    assert top == [t for t in means if means[t] == max(means.values())]
    best = top[0]
    second = max((t for t in means if t not in top), key=means.get)
    hard = ex._tau_means_15_2("hard_contrastive")
    for answer, says in ((second, "Hint"), (min(means, key=means.get), "Hint"), (0.2 if 0.2 not in top else second, "Hint"),   # the paper's τ
                         (max(hard, key=hard.get) if max(hard, key=hard.get) not in top else 1.0, "Hint"),   # the hard loss's best
                         (str(best), "a number"), (True, "a number")):
        refused(ex.check_15_2, answer, says)


def test_15_3_refuses_the_off_by_ones(capsys):
    passes(ex.check_15_3, 20, capsys)
    for answer, says in ((21, "Hint"), (19, "Hint"), (40, "Hint"), (200, "Hint"), (20.0, "an integer"), ("20", "an integer")):
        refused(ex.check_15_3, answer, says)


@pytest.mark.parametrize("check", [ex.check_11_1, ex.check_11_2, ex.check_11_3, ex.check_12_1, ex.check_12_2, ex.check_12_3,
                                   ex.check_15_1, ex.check_15_2, ex.check_15_3])
def test_an_unanswered_exercise_is_a_reminder(check, capsys):
    assert check(None) is None and check(...) is None
    assert "not answered" in capsys.readouterr().out


def test_the_answer_key_numbers_compute():
    from ctl_explore.grading import load_key_numbers
    key = load_key_numbers()
    for lesson in ("11", "12", "15"):
        for e in ex.exercises_of(lesson):
            assert not key.answer_numbers(e.key).startswith("(could not"), e.key


# ================================================================ what a student sees: GitHub's view of the lessons

ANSWERS = ["tau / d", "1 / d", "math.log1p", "/ 14", "0.03 / (0.2", "0.99 **", "math.ceil(", "gap_zero", "check_15_1(8",
           "check_15_3(20", "(6)", "(20)", "at the very end of the notebook", "check_exercise_", "test_fail(", "## Solutions",
           "WRONG_ANSWERS", "def check_"]


@pytest.mark.parametrize("name", FURTHER)
def test_the_committed_lesson_shows_no_check_solution_or_answer(name):
    text = (NBS / f"{name}.ipynb").read_text()
    cells = json.loads(text)["cells"]
    assert not any(c["cell_type"] == "markdown" and "".join(c["source"]).lstrip().startswith("## Solutions") for c in cells)
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Exercises"))
    section = cells[start:]
    assert not any(re.search(r"^\s*def |^\s*assert |#\| hide", "".join(c["source"]), re.M) for c in section), f"{name}: a check body in the lesson"
    assert f"from ctl_explore.exercises import check_{name[:2]}_" in text
    shown = "".join("".join(c["source"]) for c in section)
    assert not [a for a in ANSWERS if a in shown], f"{name} shows {[a for a in ANSWERS if a in shown]}"
    for e in ex.exercises_of(name):
        assert f"check_{e.key.replace('.', '_')}(" in shown, f"{name}: no answer cell for exercise {e.key}"
        for var in e.answers:
            assert f"{var} = None" in shown, f"{name}: no variable {var} = None"


def test_the_solutions_run_the_checks_and_print_nothing():
    for name in FURTHER:
        src = "".join("".join(c["source"]) for c in json.loads((NBS / "solutions" / f"{name}.ipynb").read_text())["cells"])
        assert "quietly()" in src and "print(" not in src, f"{name}: the solutions print answers"
        for e in ex.exercises_of(name):
            assert f"check_{e.key.replace('.', '_')}(" in src, f"{name}: exercise {e.key} has no solution"
