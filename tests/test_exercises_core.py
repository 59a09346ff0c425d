"""The exercises of the core lessons 00, 01, 02, 03 and 06: each check accepts its solution and refuses the wrong answers
its exercise invites (listed here, one test each), and every check and solution cell is out of sight (`#| hide` and
JupyterLab's `source_hidden`).

The checks are the notebooks' own hidden cells, run here from the notebooks' JSON in a fresh namespace, so the test
exercises exactly what a student runs."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

NBS = Path(__file__).resolve().parent.parent / "nbs"
CORE = ("00_losses", "01_gradients", "02_explorer", "03_metrics", "06_memory_bank")


def _cells(name: str) -> list[dict]:
    return json.loads((NBS / f"{name}.ipynb").read_text())["cells"]


def _source(cell: dict) -> str: return "".join(cell["source"])


def _cell(name: str, cell_id: str) -> str:
    return next(_source(c) for c in _cells(name) if c.get("id") == cell_id)


def _check_cell_id(name: str) -> str:
    "The id of the hidden cell that defines the lesson's exercise checks."
    return next(c["id"] for c in _cells(name) if _defines_checks(c))


def _defines_checks(cell: dict) -> bool:
    "A lesson cell (not a library one, which is exported) that defines check functions."
    return (cell["cell_type"] == "code" and "#| export" not in _source(cell)
            and bool(re.search(r"^def check_\w+\(", _source(cell), re.M)))


def _namespace(name: str, *cell_ids: str, prelude: str = "") -> dict:
    "A fresh namespace holding `prelude`, the lesson's check cell and the given cells, run in order as the notebook runs them."
    ns = {"__name__": f"exercises_{name}"}
    exec(prelude, ns)
    for cell_id in (_check_cell_id(name), *cell_ids):
        exec(compile(_cell(name, cell_id), f"{name}.ipynb:{cell_id}", "exec"), ns)
    return ns


def _refused(call, message: str) -> None:
    with pytest.raises(AssertionError) as caught: call()
    assert message in str(caught.value), f"refused, but with {str(caught.value)!r}, not {message!r}"


# ============================================================ every check and solution is out of sight

def _exercise_cells(name: str) -> list[dict]:
    "The code cells that define a check, hold a solution (below '## Solutions') or test the checks."
    cells, found, in_solutions = _cells(name), [], False
    checks = set(re.findall(r"^def (check_\w+)\(", _cell(name, _check_cell_id(name)), re.M))
    tests_a_check = re.compile(r"test_fail\(lambda: (?:%s)\(" % "|".join(sorted(checks)))
    for c in cells:
        text = _source(c)
        if c["cell_type"] == "markdown" and re.match(r"##\s*Solutions\b", text.strip()): in_solutions = True
        if c["cell_type"] != "code": continue
        if in_solutions or _defines_checks(c) or tests_a_check.search(text):
            found.append(c)
    return found


@pytest.mark.parametrize("name", CORE)
def test_checks_and_solutions_are_hidden_and_collapsed(name):
    cells = _exercise_cells(name)
    assert len(cells) >= 4, f"{name}: expected a check cell, solutions and a test cell, found {len(cells)} cells"
    for c in cells:
        assert _source(c).startswith("#| hide"), f"{name} cell {c['id']}: an exercise check or solution must start with #| hide"
        assert c.get("metadata", {}).get("jupyter", {}).get("source_hidden") is True, (
            f"{name} cell {c['id']}: an exercise check or solution must carry the metadata {{'jupyter': {{'source_hidden': true}}}}")


@pytest.mark.parametrize("name", CORE)
def test_solutions_come_after_the_references_and_every_check_has_an_exercise(name):
    cells = _cells(name)
    heading = lambda pattern: next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and re.match(pattern, _source(c).strip()))
    exercises, references, solutions = heading(r"##\s*Exercises\b"), heading(r"##\s*References\b"), heading(r"##\s*Solutions\b")
    assert exercises < references < solutions, name
    checks = set(re.findall(r"^def (check_\w+)\(", _cell(name, _check_cell_id(name)), re.M))
    asked = {m for c in cells[exercises:references] if c["cell_type"] == "code" and not _source(c).startswith("#| hide")
             for m in re.findall(r"\b(check_\w+)\(", _source(c))}
    assert checks == asked, f"{name}: checks without a prompt or prompts without a check: {checks ^ asked}"
    hidden_above = [c["id"] for c in cells[:solutions] if c["cell_type"] == "code" and _source(c).startswith("#| hide")
                    and re.search(r"^check_\w+\(", _source(c), re.M)]
    assert not hidden_above, f"{name}: a solution runs above the Solutions heading: {hidden_above}"


# ============================================================ lesson 00

@pytest.fixture(scope="module")
def ns00():
    return _namespace("00_losses", "ex000007", "ex000008", "ex000009", "ex000014",
                      prelude="from ctl_explore.losses import *\nimport math, torch\nimport torch.nn.functional as F")


def _wrong_00(ns):
    lib = ns
    mine = ns["my_contrastive_loss"]
    hard = ns["my_hard_loss"]
    zeros = lambda p: torch.zeros(len(p), dtype=torch.long)
    pos, neg = ns["_demo_similarities"]()
    right_4 = {0.1: "more than 100", 1.0: "between 2 and 100", 5.0: "less than 2"}
    alias = lib["contrastive_loss"]
    return {
        "ex1: the library's function itself": (lambda: ns["check_exercise_1"](lib["contrastive_loss"]), "the library's own function"),
        "ex1: a wrapper of the library": (lambda: ns["check_exercise_1"](lambda p, n, t: lib["contrastive_loss"](p, n, t)), "calls the library (contrastive_loss)"),
        "ex1: the library under another name": (lambda: ns["check_exercise_1"](lambda p, n, t: alias(p, n, t)), "calls the library"),
        "ex1: the hard loss at alpha = 1": (lambda: ns["check_exercise_1"](lambda p, n, t: lib["hard_contrastive_loss"](p, n, t, alpha=1.0)), "calls the library"),
        "ex1: apply_loss": (lambda: ns["check_exercise_1"](lambda p, n, t: lib["apply_loss"]("contrastive", p, n, tau=t)), "calls the library"),
        "ex1: log_softmax, no cross-entropy": (lambda: ns["check_exercise_1"](lambda p, n, t: -F.log_softmax(torch.cat([p[:, None], n], 1) / t, 1)[:, 0].mean()),
                                              "never calls F.cross_entropy"),
        "ex1: the sum over the anchors": (lambda: ns["check_exercise_1"](lambda p, n, t: mine(p, n, t) * len(p)), "sum over the anchors"),
        "ex1: tau forgotten": (lambda: ns["check_exercise_1"](lambda p, n, t: F.cross_entropy(torch.cat([p[:, None], n], 1), zeros(p))), "divide the similarities by τ"),
        "ex1: the positive last": (lambda: ns["check_exercise_1"](lambda p, n, t: F.cross_entropy(torch.cat([n, p[:, None]], 1) / t, zeros(p))), "target"),
        "ex1: unshifted exp": (lambda: ns["check_exercise_1"](lambda p, n, t: -torch.log(torch.exp(p / t) / (torch.exp(p / t) + torch.exp(n / t).sum(1))).mean()
                                                              + 0 * F.cross_entropy(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))), "F.cross_entropy works"),
        "ex1: shapes of the demo set built in": (lambda: ns["check_exercise_1"](lambda p, n, t: F.cross_entropy(torch.cat([p[:, None], n[:, :255]], 1) / t, torch.zeros(64, dtype=torch.long))),
                                                 "raised"),
        "ex2: lambda = 1": (lambda: ns["check_exercise_2"]((lambda k: 1.0, lambda k, tau: k / ((k + 1) * tau))), "coefficients"),
        "ex2: scale 1/tau": (lambda: ns["check_exercise_2"]((lambda k: 1 / k, lambda k, tau: 1 / tau)), "coefficients"),
        "ex2: scale 1/(N tau)": (lambda: ns["check_exercise_2"]((lambda k: 1 / k, lambda k, tau: 1 / ((k + 1) * tau))), "coefficients"),
        "ex2: the scale fitted with the library": (lambda: ns["check_exercise_2"]((lambda k: 1 / k, lambda k, tau: float(
            (lib["simple_limit_loss"](pos[:1], neg[:1, :k], tau) - math.log(k + 1)) / lib["simple_loss"](pos[:1], neg[:1, :k], lam=1 / k)))), "calls the library"),
        "ex3: the library's hard loss": (lambda: ns["check_exercise_3"](lambda p, n, t, a: lib["hard_contrastive_loss"](p, n, t, a, reduction="none")), "calls the library"),
        "ex3: n_informative for the count": (lambda: ns["check_exercise_3"](lambda p, n, t, a: hard(p, n, t, a) + 0 * lib["n_informative"](40, a)), "calls the library (n_informative)"),
        "ex3: a floor instead of a ceiling": (lambda: ns["check_exercise_3"](lambda p, n, t, a: hard(p, n, t, math.floor(a * 40) / 40)), "one negative too few"),
        "ex3: ascending sort": (lambda: ns["check_exercise_3"](lambda p, n, t, a: hard(p, -n, t, a)), "descending"),
        "ex4: tau = 1 taken for flat": (lambda: ns["check_exercise_4"]({**right_4, 1.0: "less than 2"}, "a"), "τ = 1.0"),
        "ex4: tau = 5 taken for hardness-aware": (lambda: ns["check_exercise_4"]({**right_4, 5.0: "between 2 and 100"}, "a"), "τ = 5.0"),
        "ex4: no interpretation": (lambda: ns["check_exercise_4"](right_4, None), "interpret"),
        "ex4: a wrong reason": (lambda: ns["check_exercise_4"](right_4, "b"), "does not explain"),
        "ex4: another wrong reason": (lambda: ns["check_exercise_4"](right_4, "d"), "does not explain"),
    }


CASES_00 = ["ex1: the library's function itself", "ex1: a wrapper of the library", "ex1: the library under another name",
            "ex1: the hard loss at alpha = 1", "ex1: apply_loss", "ex1: log_softmax, no cross-entropy", "ex1: the sum over the anchors",
            "ex1: tau forgotten", "ex1: the positive last", "ex1: unshifted exp", "ex1: shapes of the demo set built in",
            "ex2: lambda = 1", "ex2: scale 1/tau", "ex2: scale 1/(N tau)", "ex2: the scale fitted with the library",
            "ex3: the library's hard loss", "ex3: n_informative for the count", "ex3: a floor instead of a ceiling", "ex3: ascending sort",
            "ex4: tau = 1 taken for flat", "ex4: tau = 5 taken for hardness-aware", "ex4: no interpretation", "ex4: a wrong reason",
            "ex4: another wrong reason"]


def test_00_solutions_pass(ns00, capsys):
    ns00["check_exercise_1"](ns00["my_contrastive_loss"])
    ns00["check_exercise_2"](ns00["eq7"])
    ns00["check_exercise_3"](ns00["my_hard_loss"])
    ns00["check_exercise_4"]({0.1: "more than 100", 1.0: "between 2 and 100", 5.0: "less than 2"}, "a")
    assert capsys.readouterr().out.count("Correct") == 4


@pytest.mark.parametrize("case", CASES_00)
def test_00_check_refuses(ns00, case):
    call, message = _wrong_00(ns00)[case]
    _refused(call, message)


def test_00_unanswered_is_a_reminder_not_an_error(ns00, capsys):
    for check in ("check_exercise_1", "check_exercise_2", "check_exercise_3"): ns00[check](None)
    ns00["check_exercise_4"](None, None)
    assert capsys.readouterr().out.count("Not answered yet") == 4


# ============================================================ lesson 01

@pytest.fixture(scope="module")
def ns01():
    return _namespace("01_gradients", "624962c9", "sol01e01", "5d0fbd1c", "cd7e68ea", "9edf342f", "sol01e05",
                      prelude="from ctl_explore.gradients import *\nfrom ctl_explore.losses import contrastive_loss\nimport math, torch\nimport torch.nn.functional as F\n"
                              "spread = torch.linspace(-1, 1, 201, dtype=torch.float64)[None, :]  # the lesson's Fig 3 negatives")


def _backwards_01(ns):
    "Hand-written backward passes with the usual slips, each a subclass of the lesson's solution or exercise class."
    Eq4Loss, MyEq4Loss, loss_gradients = ns["Eq4Loss"], ns["MyEq4Loss"], ns["loss_gradients"]

    class SignFlipped(Eq4Loss):
        @staticmethod
        def backward(ctx, grad_out):
            d_pos, d_neg, _ = Eq4Loss.backward(ctx, grad_out)
            return -d_pos, -d_neg, None

    class TauForgotten(Eq4Loss):
        @staticmethod
        def backward(ctx, grad_out):
            prob, = ctx.saved_tensors
            return -grad_out * prob[:, 1:].sum(1), grad_out[:, None] * prob[:, 1:], None

    class GradOutIgnored(Eq4Loss):
        @staticmethod
        def backward(ctx, grad_out): return Eq4Loss.backward(ctx, torch.ones_like(grad_out))

    class CallsTheLibrary(MyEq4Loss):
        @staticmethod
        def backward(ctx, grad_out):
            prob, = ctx.saved_tensors
            log_p = prob.log()
            d_pos, d_neg = loss_gradients(log_p[:, 0] * ctx.tau, log_p[:, 1:] * ctx.tau, ctx.tau)
            return grad_out * d_pos, grad_out[:, None] * d_neg, None

    class TwoGradients(MyEq4Loss):
        @staticmethod
        def backward(ctx, grad_out):
            d_pos, d_neg, _ = Eq4Loss.backward(ctx, grad_out)
            return d_pos, d_neg

    return dict(SignFlipped=(SignFlipped, "signs are reversed"), TauForgotten=(TauForgotten, "1/τ"),
                GradOutIgnored=(GradOutIgnored, "grad_out"), CallsTheLibrary=(CallsTheLibrary, "calls the library (loss_gradients)"),
                TwoGradients=(TwoGradients, "return three things"))


@pytest.mark.parametrize("slip", ["SignFlipped", "TauForgotten", "GradOutIgnored", "CallsTheLibrary", "TwoGradients"])
def test_01_backward_check_refuses(ns01, slip):
    cls, message = _backwards_01(ns01)[slip]
    _refused(lambda: ns01["check_exercise_1"](cls), message)


def _wrong_01(ns):
    rp = ns["relative_penalty"]
    push, tau_half = ns["push_90"], ns["tau_half"]
    right_5 = {0.05: "nearest", 1.0: "mean", 5.0: "mean"}
    return {
        "ex2: naive exp overflows": (lambda: ns["check_exercise_2"](lambda n, t: torch.exp(n / t) / torch.exp(n / t).sum(1, keepdim=True)), "NaN or infinity"),
        "ex2: the positive in the denominator": (lambda: ns["check_exercise_2"](
            lambda n, t: (lambda e: e / e.sum(1, keepdim=True))(torch.exp((torch.cat([torch.ones(len(n), 1, dtype=n.dtype), n], 1) - 1) / t))[:, 1:]), "sums to"),
        "ex2: the library's function itself": (lambda: ns["check_exercise_2"](rp), "the library's own function"),
        "ex2: a wrapper of the library": (lambda: ns["check_exercise_2"](lambda n, t: rp(n, t)), "calls the library (relative_penalty)"),
        "ex2: F.softmax": (lambda: ns["check_exercise_2"](lambda n, t: F.softmax(n / t, dim=1)), "calls softmax"),
        "ex2: Tensor.softmax": (lambda: ns["check_exercise_2"](lambda n, t: (n / t).softmax(1)), "calls softmax"),
        "ex2: torch.softmax": (lambda: ns["check_exercise_2"](lambda n, t: torch.softmax(n / t, 1)), "calls softmax"),
        "ex2: a sum over the whole tensor": (lambda: ns["check_exercise_2"](lambda n, t: (lambda e: e / e.sum())(torch.exp((n - n.max()) / t))), "two anchors"),
        "ex3: twice the temperature": (lambda: ns["check_exercise_3"](tau_half * 2), "too large"),
        "ex3: half the temperature": (lambda: ns["check_exercise_3"](tau_half / 2), "too small"),
        "ex4: one too few at 0.07": (lambda: ns["check_exercise_4"]({0.07: push[0.07] - 1, 1.0: push[1.0]}), "take more"),
        "ex4: one too many at 1": (lambda: ns["check_exercise_4"]({0.07: push[0.07], 1.0: push[1.0] + 1}), "smallest number"),
        "ex5: tau = 1 taken for hardness-aware": (lambda: ns["check_exercise_5"]({**right_5, 1.0: "nearest"}, "a"), "τ = 1.0"),
        "ex5: small tau along the mean": (lambda: ns["check_exercise_5"]({**right_5, 0.05: "mean"}, "a"), "τ = 0.05"),
        "ex5: no interpretation": (lambda: ns["check_exercise_5"](right_5, None), "interpret"),
        "ex5: the chain rule only rescales": (lambda: ns["check_exercise_5"](right_5, "b"), "does not explain"),
        "ex5: always the mean": (lambda: ns["check_exercise_5"](right_5, "c"), "does not explain"),
    }


CASES_01 = ["ex2: naive exp overflows", "ex2: the positive in the denominator", "ex2: the library's function itself",
            "ex2: a wrapper of the library", "ex2: F.softmax", "ex2: Tensor.softmax", "ex2: torch.softmax", "ex2: a sum over the whole tensor",
            "ex3: twice the temperature", "ex3: half the temperature", "ex4: one too few at 0.07", "ex4: one too many at 1",
            "ex5: tau = 1 taken for hardness-aware", "ex5: small tau along the mean", "ex5: no interpretation",
            "ex5: the chain rule only rescales", "ex5: always the mean"]


def test_01_solutions_pass(ns01, capsys):
    ns01["check_exercise_1"](ns01["Eq4Loss"])
    ns01["check_exercise_2"](ns01["my_relative_penalty"])
    ns01["check_exercise_3"](ns01["tau_half"])
    ns01["check_exercise_4"](ns01["push_90"])
    ns01["check_exercise_5"]({0.05: "nearest", 1.0: "mean", 5.0: "mean"}, "a")
    assert capsys.readouterr().out.count("Correct") == 5


@pytest.mark.parametrize("case", CASES_01)
def test_01_check_refuses(ns01, case):
    call, message = _wrong_01(ns01)[case]
    _refused(call, message)


# ============================================================ lesson 02

@pytest.fixture(scope="module")
def ns02():
    ns = _namespace("02_explorer", prelude="from ctl_explore.explorer import *\nfrom ctl_explore.gradients import penalty_entropy\nimport math, torch")
    ns["run_4"] = ns["simulate"]("contrastive", 5.0, steps=300)
    return ns


def _wrong_02(ns):
    choices, run = ns["GROWTH_CHOICES"], ns["run_4"]
    spread = ns["similarity_set"]("spread", 256)[1]
    return {
        "ex1: a temperature far off": (lambda: ns["check_half_tau"](0.1), "Hint"),
        "ex1: 5 % off": (lambda: ns["check_half_tau"](2 / 255 / math.log(2) * 1.05), "Hint"),
        "ex1: a string": (lambda: ns["check_half_tau"]("0.01"), "expects a temperature"),
        "ex2: the entropy's ceiling instead of the gap": (lambda: ns["check_entropy_gap"](lambda tau, v: 0.0), "Hint"),
        "ex2: a factor 2 missing": (lambda: ns["check_entropy_gap"](lambda tau, v: v / tau ** 2), "Hint"),
        "ex2: first order in 1/tau": (lambda: ns["check_entropy_gap"](lambda tau, v: v / (2 * tau)), "Hint"),
        "ex2: the standard deviation for the variance": (lambda: ns["check_entropy_gap"](lambda tau, v: math.sqrt(v) / (2 * tau ** 2)), "Hint"),
        "ex2: measured with the library": (lambda: ns["check_entropy_gap"](lambda tau, v: math.log(256) - ns["penalty_entropy"](spread[None], tau)[0].item()),
                                           "calls the library"),
        "ex3: one step too early": (lambda: ns["check_interval"]((0.24, 62)), "not the smallest"),
        "ex3: one step too late": (lambda: ns["check_interval"]((0.26, 67)), "not the smallest"),
        "ex3: the count of s >= 0.5 rounded down": (lambda: ns["check_interval"]((0.25, 63)), "keeps 64"),
        "ex3: the old, unreachable alpha": (lambda: ns["check_interval"]((0.025, 7)), "not the smallest"),
        "ex3: no pair": (lambda: ns["check_interval"](0.25), "expects a pair"),
        "ex4: longer runs catch up": (lambda: ns["check_long_run"](choices[0], run, "a"), "Not yet"),
        "ex4: nothing moves": (lambda: ns["check_long_run"](choices[2], run, "a"), "Not yet"),
        "ex4: no interpretation": (lambda: ns["check_long_run"](choices[1], run, ...), "interpret"),
        "ex4: the augmentation holds the clusters": (lambda: ns["check_long_run"](choices[1], run, "c"), "does not explain"),
        "ex4: the most uniform arrangement": (lambda: ns["check_long_run"](choices[1], run, "b"), "does not explain"),
        "ex4: not the 300-step run": (lambda: ns["check_long_run"](choices[1], ns["simulate"]("contrastive", 5.0, steps=20), "a"), "300 steps first"),
    }


CASES_02 = ["ex1: a temperature far off", "ex1: 5 % off", "ex1: a string", "ex2: the entropy's ceiling instead of the gap",
            "ex2: a factor 2 missing", "ex2: first order in 1/tau", "ex2: the standard deviation for the variance",
            "ex2: measured with the library", "ex3: one step too early", "ex3: one step too late",
            "ex3: the count of s >= 0.5 rounded down", "ex3: the old, unreachable alpha", "ex3: no pair", "ex4: longer runs catch up",
            "ex4: nothing moves", "ex4: no interpretation", "ex4: the augmentation holds the clusters", "ex4: the most uniform arrangement",
            "ex4: not the 300-step run"]


def test_02_solutions_pass(ns02, capsys):
    for cell_id in ("ex02sol1", "ex02sol2", "ex02sol3", "ex02sol4"): exec(_cell("02_explorer", cell_id), ns02)
    assert capsys.readouterr().out.count("Right") == 4


@pytest.mark.parametrize("case", CASES_02)
def test_02_check_refuses(ns02, case):
    call, message = _wrong_02(ns02)[case]
    _refused(call, message)


def test_02_exercise_3_is_reachable_with_the_alpha_slider():
    from ctl_explore.explorer import temperature_explorer
    ex = temperature_explorer()
    ex.alpha_slider.value = 0.25
    assert ex.alpha == 0.25 and ex._n_kept == 64 and ex._s_alpha >= 0.5


# ============================================================ lesson 03

@pytest.fixture(scope="module")
def ns03():
    ns = _namespace("03_metrics", prelude="from ctl_explore.metrics import *\nimport math, torch")
    ns["on_circle"] = ns["_circle"]  # the lesson's on_circle: unit vectors at the given angles
    exec(_cell("03_metrics", "ex03p4c2"), ns)  # the exercise's two short trainings, as the student runs them
    return ns


def _wrong_03(ns):
    uniformity, tolerance, alignment, on_circle = ns["uniformity"], ns["tolerance"], ns["alignment"], ns["on_circle"]
    right_tol = {(0, 0, 1, 1): "(cos(60) + cos(90)) / 2", (0, 1, 1, 0): "(cos(180) + cos(30)) / 2",
                 (0, 0, 0, 0): "(cos(60) + cos(90) + cos(180) + cos(30) + cos(120) + cos(90)) / 6"}
    four = on_circle([0, 60, 90, 180])
    anchors, positives = on_circle([0, 100, 200, 300]), on_circle([30, 130, 230, 330])
    runs = ns["runs_4"]
    right_4 = {"more uniform": 0.05, "more tolerant": 1.0, "beyond uniform points": False}
    order = ["even", "clusters", "arc"]
    return {
        "ex1: the library's uniformity as a number": (lambda: ns["check_exercise_1"](uniformity(on_circle([0, 120, 240])), order), "as a string"),
        "ex1: the library called in the expression": (lambda: ns["check_exercise_1"]("uniformity(on_circle([0, 120, 240]))", order), "not allowed"),
        "ex1: 2t instead of the simplex bound": (lambda: ns["check_exercise_1"]("4", order), "regular simplex"),
        "ex1: the arc ranked above the clusters": (lambda: ns["check_exercise_1"]("6", ["even", "arc", "clusters"]), "not the order"),
        "ex1: an import smuggled in": (lambda: ns["check_exercise_1"]("__import__('ctl_explore').metrics.uniformity", order), "not allowed"),
        "ex2: the library's tolerance as numbers": (lambda: ns["check_exercise_2"]({k: tolerance(four, list(k)) for k in right_tol}), "as a string"),
        "ex2: the library pasted with all its digits": (lambda: ns["check_exercise_2"]({**right_tol, (0, 1, 1, 0): repr(tolerance(four, [0, 1, 1, 0]))}), "more digits"),
        "ex2: the library called in the expression": (lambda: ns["check_exercise_2"]({k: f"tolerance(on_circle([0, 60, 90, 180]), {list(k)})" for k in right_tol}), "not allowed"),
        "ex2: one class taken as perfectly tolerant": (lambda: ns["check_exercise_2"]({**right_tol, (0, 0, 0, 0): "1"}), "(0, 0, 0, 0)"),
        "ex2: self-pairs counted": (lambda: ns["check_exercise_2"]({**right_tol, (0, 0, 1, 1): "(1 + 1 + 2 * cos(60) + 1 + 1 + 2 * cos(90)) / 8"}), "(0, 0, 1, 1)"),
        "ex3: the library's alignment as numbers": (lambda: ns["check_exercise_3"]({a: alignment(anchors, positives, alpha=a) for a in (2.0, 1.0)}), "as a string"),
        "ex3: rounded library values": (lambda: ns["check_exercise_3"]({2.0: "0.2679", 1.0: "0.5176"}), "α = 2.0"),
        "ex3: alpha = 2's value for alpha = 1": (lambda: ns["check_exercise_3"]({2.0: "2 - 2 * cos(30)", 1.0: "2 - 2 * cos(30)"}), "α = 1.0"),
        "ex4: large tau more uniform": (lambda: ns["check_exercise_4"]({**right_4, "more uniform": 1.0}, runs, "a"), "'more uniform'"),
        "ex4: small tau more tolerant": (lambda: ns["check_exercise_4"]({**right_4, "more tolerant": 0.05}, runs, "a"), "'more tolerant'"),
        "ex4: beyond uniform points": (lambda: ns["check_exercise_4"]({**right_4, "beyond uniform points": True}, runs, "a"), "uniform points in R^16"),
        "ex4: no interpretation": (lambda: ns["check_exercise_4"](right_4, runs, None), "interpret"),
        "ex4: a bigger gradient": (lambda: ns["check_exercise_4"](right_4, runs, "b"), "does not explain"),
        "ex4: collapse": (lambda: ns["check_exercise_4"](right_4, runs, "d"), "does not explain"),
        "ex4: not run": (lambda: ns["check_exercise_4"](right_4, None, "a"), "run the training cell first"),
    }


CASES_03 = ["ex1: the library's uniformity as a number", "ex1: the library called in the expression", "ex1: 2t instead of the simplex bound",
            "ex1: the arc ranked above the clusters", "ex1: an import smuggled in", "ex2: the library's tolerance as numbers",
            "ex2: the library pasted with all its digits", "ex2: the library called in the expression",
            "ex2: one class taken as perfectly tolerant", "ex2: self-pairs counted", "ex3: the library's alignment as numbers",
            "ex3: rounded library values", "ex3: alpha = 2's value for alpha = 1", "ex4: large tau more uniform",
            "ex4: small tau more tolerant", "ex4: beyond uniform points", "ex4: no interpretation", "ex4: a bigger gradient",
            "ex4: collapse", "ex4: not run"]


def test_03_solutions_pass(ns03, capsys):
    for cell_id in ("8077b096", "1c3289a9", "2d3688d0", "ex03sol4"): exec(_cell("03_metrics", cell_id), ns03)
    assert capsys.readouterr().out.count("Correct") == 4


@pytest.mark.parametrize("case", CASES_03)
def test_03_check_refuses(ns03, case):
    call, message = _wrong_03(ns03)[case]
    _refused(call, message)


# ============================================================ lesson 06

@pytest.fixture(scope="module")
def ns06():
    return _namespace("06_memory_bank", "ex060007", "ex060008", "ex060009", "ex060011",
                      prelude="from ctl_explore.memory_bank import *\nfrom ctl_explore.losses import n_informative, simple_loss\nimport math, torch\nimport torch.nn.functional as F")


def _wrong_06(ns):
    mine, bank_similarities, simple_loss, MemoryBank = ns["my_bank_simple_loss"], ns["bank_similarities"], ns["simple_loss"], ns["MemoryBank"]
    right_4 = {(0.05, "bank"): "over 70 %", (0.05, "batch"): "over 70 %", (0.5, "bank"): "under 30 %", (0.5, "batch"): "under 30 %"}
    own = lambda s, i: s.gather(1, i[:, None])[:, 0]
    return {
        "ex1: 1/(1 - m)": (lambda: ns["check_exercise_1"](lambda m: 1 / (1 - m)), "(1 − m) of the way"),
        "ex1: m": (lambda: ns["check_exercise_1"](lambda m: m), "m = 0.05"),
        "ex1: measured with the bank": (lambda: ns["check_exercise_1"](lambda m: ns["_steady_lag"](m) + 0 * MemoryBank(2, 2).features.sum().item()),
                                        "calls the library (MemoryBank.__init__)"),
        "ex2: the library's [B, N] path": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: simple_loss(*bank_similarities(q, v, i), lam=lam)),
                                           "calls the library (bank_similarities)"),
        "ex2: the [B, N] matrix by hand": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: (lambda s: (-own(s, i) + lam * (s.sum(1) - own(s, i))).mean())(q @ v.T)),
                                           "O((B + N) d) allows"),
        "ex2: the [B, N] matrix by einsum": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: (lambda s: (-own(s, i) + lam * (s.sum(1) - own(s, i))).mean())(torch.einsum("bd,nd->bn", q, v))),
                                             "O((B + N) d) allows"),
        "ex2: one query at a time": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: torch.stack([-(v[i[b]] @ q[b]) + lam * ((v @ q[b]).sum() - v[i[b]] @ q[b]) for b in range(len(q))]).mean()),
                                     "O((B + N) d) allows"),
        "ex2: a broadcast product": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: (lambda s: (-own(s, i) + lam * (s.sum(1) - own(s, i))).mean())((q[:, None, :] * v[None]).sum(-1))),
                                     "O((B + N) d) allows"),
        "ex2: through numpy": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: mine(q, torch.from_numpy(v.numpy().copy()), i, lam)), "leaves torch"),
        "ex2: through Python lists": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: mine(q, torch.tensor(v.tolist(), dtype=v.dtype), i, lam)), "leaves torch"),
        "ex2: the own row among the negatives": (lambda: ns["check_exercise_2"](lambda q, v, i, lam: (-(q * v[i]).sum(1) + lam * (q @ v.sum(0))).mean()), "own row"),
        "ex3: N instead of N - 1": (lambda: ns["check_exercise_3"](lambda n, a: math.ceil(a * n)), "2,001 rows"),
        "ex3: a floor": (lambda: ns["check_exercise_3"](lambda n, a: max(1, math.floor(a * (n - 1)))), "50,000 rows"),
        "ex3: rounded": (lambda: ns["check_exercise_3"](lambda n, a: max(1, round(a * (n - 1)))), "1,001 rows"),
        "ex3: no floor of one": (lambda: ns["check_exercise_3"](lambda n, a: int(a * (n - 1)) + (a * (n - 1) % 1 > 0) if a * (n - 1) >= 1 else 0), "5 rows"),
        "ex3: the library's count": (lambda: ns["check_exercise_3"](lambda n, a: ns["n_informative"](n - 1, a)), "calls the library (n_informative)"),
        "ex4: the batch taken for too small": (lambda: ns["check_exercise_4"]({**right_4, (0.05, "batch"): "30 to 70 %"}, "a"), "from the batch"),
        "ex4: the bank concentrating at large tau": (lambda: ns["check_exercise_4"]({**right_4, (0.5, "bank"): "30 to 70 %"}, "a"), "τ = 0.5, negatives from the bank"),
        "ex4: no interpretation": (lambda: ns["check_exercise_4"](right_4, None), "interpret"),
        "ex4: stale rows": (lambda: ns["check_exercise_4"](right_4, "b"), "does not explain"),
        "ex4: a larger pool always concentrates": (lambda: ns["check_exercise_4"](right_4, "d"), "does not explain"),
    }


CASES_06 = ["ex1: 1/(1 - m)", "ex1: m", "ex1: measured with the bank", "ex2: the library's [B, N] path", "ex2: the [B, N] matrix by hand",
            "ex2: the [B, N] matrix by einsum", "ex2: one query at a time", "ex2: a broadcast product", "ex2: through numpy",
            "ex2: through Python lists", "ex2: the own row among the negatives", "ex3: N instead of N - 1", "ex3: a floor", "ex3: rounded",
            "ex3: no floor of one", "ex3: the library's count", "ex4: the batch taken for too small",
            "ex4: the bank concentrating at large tau", "ex4: no interpretation", "ex4: stale rows", "ex4: a larger pool always concentrates"]


def test_06_solutions_pass(ns06, capsys):
    ns06["check_exercise_1"](lambda m: m / (1 - m))
    ns06["check_exercise_2"](ns06["my_bank_simple_loss"])
    ns06["check_exercise_3"](ns06["kept"])
    assert capsys.readouterr().out.count("Correct") == 3


def test_06_work_bound_separates_the_two_costs(ns06):
    "The budget of exercise 2 sits between the solution's work and the [B, N] matrix's, with room on both sides."
    g = torch.Generator().manual_seed(0)
    b, n, d = 128, 8000, 4
    bank = F.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    q = F.normalize(torch.randn(b, d, generator=g, dtype=torch.float64), dim=1)
    rows = torch.randperm(n, generator=g)[:b]
    _, work = ns06["_measured"](ns06["my_bank_simple_loss"], q, bank, rows, 0.5)
    budget = 10 * (b + n) * d
    assert work * 3 < budget < b * n * d / 3, (work, budget, b * n * d)


@pytest.mark.parametrize("case", CASES_06)
def test_06_check_refuses(ns06, case):
    call, message = _wrong_06(ns06)[case]
    _refused(call, message)


def test_case_lists_match_the_wrong_answers(ns00, ns01, ns02, ns03, ns06):
    "Every wrong answer defined above is tested, and every tested case is defined."
    for cases, wrong in ((CASES_00, _wrong_00(ns00)), (CASES_01, _wrong_01(ns01)), (CASES_02, _wrong_02(ns02)),
                         (CASES_03, _wrong_03(ns03)), (CASES_06, _wrong_06(ns06))):
        assert sorted(cases) == sorted(wrong)
