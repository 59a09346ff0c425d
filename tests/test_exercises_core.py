"""The exercises of the core lessons 00, 01, 02, 03, 06, 07, 08 and 09 (checks in `ctl_explore.exercises`, appendix 94).

For every check, the wrong answers it must refuse: the honest lookalikes (float32 at small τ, rows with far-apart maxima,
the quantile's ceiling at awkward α and K, the 1 − P_ii cancellation, autograd inside backward, typed-in numbers for
"by hand" answers) are refused in this process, before any child process starts; the bypasses of the "no library" rule
(a worker thread, `sys.setprofile(None)`, a copy of the library's code object, `torch.ops.aten._softmax`) need the
child process in which the library is switched off, and are marked slow. Then what a student sees: the committed
lesson JSON (GitHub's view) holds no check body, no solution and no answer value, and no reading before its run."""
from __future__ import annotations

import json
import math
import re
import sys
import threading
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import ctl_explore.exercises as ex

ROOT = Path(__file__).resolve().parents[1]
NBS = ROOT / "nbs"
CORE = ("00_losses", "01_gradients", "02_explorer", "03_metrics", "06_memory_bank", "07_pretrain", "08_linear_eval", "09_temperature_study")


def refused(check, *answers, says: str = ""):
    with pytest.raises(AssertionError) as caught: check(*answers)
    assert says in str(caught.value), f"refused, but with {str(caught.value)!r}, not {says!r}"


# ================================================================ right answers (in process, the library's numbers)

def ce_loss(pos, neg, tau):
    return F.cross_entropy(torch.cat([pos[:, None], neg], 1) / tau, torch.zeros(len(pos), dtype=torch.long))

def hard_loss(pos, neg, tau, alpha, k_of=lambda a, k: max(1, math.ceil(round(a * k, 9)))):
    k = k_of(alpha, neg.shape[1])
    kept = neg.sort(dim=1, descending=True).values[:, :k]
    return F.cross_entropy(torch.cat([pos[:, None], kept], 1) / tau, torch.zeros(len(pos), dtype=torch.long), reduction="none")

def penalty(neg, tau):
    e = torch.exp(neg / tau - (neg / tau).max(1, keepdim=True).values)
    return e / e.sum(1, keepdim=True)

class Eq4(torch.autograd.Function):
    "Exercise 01.1's right answer: Eq 4 carried to the anchor, the positive and the bank by the chain rule."
    @staticmethod
    def forward(ctx, anchor, positive, bank, tau):
        logits = torch.cat([(anchor * positive).sum(1, keepdim=True), anchor @ bank.T], dim=1) / tau
        log_prob = F.log_softmax(logits, dim=1)
        ctx.save_for_backward(log_prob.exp(), anchor, positive, bank); ctx.tau = tau
        return -log_prob[:, 0]
    @staticmethod
    def backward(ctx, grad_out):
        prob, anchor, positive, bank = ctx.saved_tensors
        d_neg = grad_out[:, None] * prob[:, 1:] / ctx.tau
        d_pos = -d_neg.sum(1)
        return d_pos[:, None] * positive + d_neg @ bank, d_pos[:, None] * anchor, d_neg.T @ anchor, None


# ================================================================ lesson 00

def test_00_1_refuses_the_lookalikes():
    first = lambda n: torch.zeros(n, dtype=torch.long)
    naive = lambda p, n, t: -torch.log(torch.exp(p / t) / (torch.exp(p / t) + torch.exp(n / t).sum(1))).mean() + 0 * F.cross_entropy(torch.zeros(1, 2), first(1))
    refused(ex.check_00_1, naive, says="not finite")                                                   # NaN at τ = 0.005 in float32
    refused(ex.check_00_1, lambda p, n, t: ce_loss(p, n, t) * len(p), says="sum over the anchors")
    refused(ex.check_00_1, lambda p, n, t: ce_loss(p, n, 1.0), says="divide the similarities by τ")
    refused(ex.check_00_1, lambda p, n, t: F.cross_entropy(torch.cat([n, p[:, None]], 1) / t, first(len(p))), says="Hint")
    refused(ex.check_00_1, lambda p, n, t: F.cross_entropy(torch.cat([p[:, None], n[:, :255]], 1) / t, first(64)), says="raised")


def test_00_2_refuses_wrong_constants():
    scale = lambda k, t: k / ((k + 1) * t)
    for wrong in ((lambda k: 1.0, scale), (lambda k: 1 / k, lambda k, t: 1 / t), (lambda k: 1 / k, lambda k, t: 1 / ((k + 1) * t)),
                  (lambda k: 1 / (k + 1), scale), (lambda k: 1 / 255, lambda k, t: 255 / (256 * t))):  # the demo's K typed in
        refused(ex.check_00_2, wrong, says="Hint")
    refused(ex.check_00_2, lambda k: 1 / k, says="give eq7")


def test_00_3_refuses_the_wrong_ceiling_and_order():
    refused(ex.check_00_3, lambda p, n, t, a: hard_loss(p, n, t, a, lambda a, k: max(1, round(a * k))), says="keep 13 negatives, Eq 9 keeps 14")
    refused(ex.check_00_3, lambda p, n, t, a: hard_loss(p, n, t, a, lambda a, k: math.ceil(a * k)), says="keep 8 negatives, Eq 9 keeps 7")
    refused(ex.check_00_3, lambda p, n, t, a: hard_loss(p, n, t, a, lambda a, k: max(1, math.floor(a * k))), says="ceiling")
    refused(ex.check_00_3, lambda p, n, t, a: hard_loss(p, -n, t, a), says="descending")
    naive = lambda p, n, t, a: (lambda kept: -torch.log(torch.exp(p / t) / (torch.exp(p / t) + torch.exp(kept / t).sum(1))))(
        n.sort(1, descending=True).values[:, :max(1, math.ceil(round(a * n.shape[1], 9)))])
    refused(ex.check_00_3, naive, says="not finite")
    refused(ex.check_00_3, lambda p, n, t, a: hard_loss(p, n, t, a).mean(), says="one loss per anchor")


def test_00_4_keeps_the_prediction_and_judges_the_reading(capsys):
    ex.PREDICTIONS.pop("00.4", None)
    refused(ex.check_00_4, "a", says="predict first")                 # no reading before the run
    ex.run_00_4(None)
    assert "prediction first" in capsys.readouterr().out and "00.4" not in ex.PREDICTIONS
    ex.run_00_4({0.1: 5.0, 1.0: 5.0, 5.0: 5.0})                      # a wrong prediction: kept, said so, never corrected
    out = capsys.readouterr().out
    assert "did not come true" in out and "a: each negative" in out and "correct" not in out.lower()
    ex.run_00_4({0.1: 1000.0, 1.0: 3.0, 5.0: 1.3})                   # a later, better one is not taken
    assert "first prediction" in capsys.readouterr().out and ex.PREDICTIONS["00.4"]["prediction"][0.1] == 5.0
    assert ex.PREDICTIONS["00.4"]["came_true"] is False
    for wrong in ("b", "c", "d", "e", 1):
        refused(ex.check_00_4, wrong, says="00.4")
    ex.check_00_4("a")
    assert ex.RESULTS[-1]["status"] == "passed" and ex.RESULTS[-1]["came_true"] is False and ex.RESULTS[-1]["prediction"][0.1] == 5.0


# ================================================================ lesson 01

def _chain(ctx, g, d_pos_of=lambda prob, d_neg, tau: -d_neg.sum(1), tau_factor=True):
    "Eq4.backward with one part swappable, for the lookalikes."
    prob, anchor, positive, bank = ctx.saved_tensors
    d_neg = g[:, None] * prob[:, 1:] / (ctx.tau if tau_factor else 1)
    d_pos = d_pos_of(prob, d_neg, ctx.tau) if tau_factor else -d_neg.sum(1)
    return d_pos, d_neg, anchor, positive, bank

class SignFlipped(Eq4):
    @staticmethod
    def backward(ctx, g):
        a, p, b, _ = Eq4.backward(ctx, g); return -a, -p, -b, None

class TauForgotten(Eq4):
    @staticmethod
    def backward(ctx, g):
        d_pos, d_neg, anchor, positive, bank = _chain(ctx, g, tau_factor=False)
        return d_pos[:, None] * positive + d_neg @ bank, d_pos[:, None] * anchor, d_neg.T @ anchor, None

class GradOutIgnored(Eq4):
    @staticmethod
    def backward(ctx, g): return Eq4.backward(ctx, torch.ones_like(g))

class OneMinusP(Eq4):  # ∂/∂s_ii = −(1 − P_ii)/τ: right in exact arithmetic, 0 in float32 when P_ii rounds to 1
    @staticmethod
    def backward(ctx, g):
        d_pos, d_neg, anchor, positive, bank = _chain(ctx, g, d_pos_of=lambda prob, d_neg, tau: -g * (1 - prob[:, 0]) / tau)
        return d_pos[:, None] * positive + d_neg @ bank, d_pos[:, None] * anchor, d_neg.T @ anchor, None

class NoPullOnTheAnchor(Eq4):  # the anchor's gradient without the positive's term
    @staticmethod
    def backward(ctx, g):
        d_pos, d_neg, anchor, positive, bank = _chain(ctx, g)
        return d_neg @ bank, d_pos[:, None] * anchor, d_neg.T @ anchor, None

class BankFromPositives(Eq4):  # the bank's gradient through the positives instead of the anchors
    @staticmethod
    def backward(ctx, g):
        d_pos, d_neg, anchor, positive, bank = _chain(ctx, g)
        return d_pos[:, None] * positive + d_neg @ bank, d_pos[:, None] * anchor, d_neg.T @ positive, None

class PositiveGetsItself(Eq4):  # the positive's gradient along the positive, not the anchor
    @staticmethod
    def backward(ctx, g):
        d_pos, d_neg, anchor, positive, bank = _chain(ctx, g)
        return d_pos[:, None] * positive + d_neg @ bank, d_pos[:, None] * positive, d_neg.T @ anchor, None

class AutogradInside(torch.autograd.Function):  # the chain rule never written: autograd of the forward inside backward
    @staticmethod
    def forward(ctx, anchor, positive, bank, tau):
        ctx.save_for_backward(anchor, positive, bank); ctx.tau = tau
        return Eq4.forward(types.SimpleNamespace(save_for_backward=lambda *t: None), anchor, positive, bank, tau)
    @staticmethod
    def backward(ctx, g):
        saved = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.double().detach().requires_grad_() for t in saved]
            loss = Eq4.forward(types.SimpleNamespace(save_for_backward=lambda *t: None), *leaves, ctx.tau)
            grads = torch.autograd.grad(loss, leaves, g.double())
        return (*(d.to(t.dtype) for d, t in zip(grads, saved)), None)

class ThreeGradients(Eq4):
    @staticmethod
    def backward(ctx, g):
        a, p, b, _ = Eq4.backward(ctx, g); return a, p, b


@pytest.mark.parametrize("wrong, says", [(SignFlipped, "signs are reversed"), (TauForgotten, "1/τ"), (GradOutIgnored, "grad_out"),
                                         (OneMinusP, "1 − P_ii rounds to 0"), (AutogradInside, "autograd"), (ThreeGradients, "four things"),
                                         (NoPullOnTheAnchor, "d_anchor is wrong"), (BankFromPositives, "d_bank is wrong"),
                                         (PositiveGetsItself, "d_positive is wrong")])
def test_01_1_refuses_the_slips(wrong, says):
    refused(ex.check_01_1, wrong, says=says)


def test_01_1_the_lesson_does_not_compute_its_answer():
    "Lesson 01's own code (loss_gradients) stops at the similarities: fed to the exercise as a backward, it is refused."
    from ctl_explore.gradients import loss_gradients
    class SimilaritiesOnly(Eq4):
        @staticmethod
        def backward(ctx, g):
            prob, anchor, positive, bank = ctx.saved_tensors
            d_pos, d_neg = loss_gradients(prob[:, 0].log() * ctx.tau, prob[:, 1:].log() * ctx.tau, ctx.tau)
            return d_pos[:, None] * g[:, None], d_neg * g[:, None], None, None
    with pytest.raises(AssertionError): ex.check_01_1(SimilaritiesOnly)


def test_01_1_unwritten_backward_is_a_reminder(capsys):
    class Unwritten(Eq4):
        @staticmethod
        def backward(ctx, g): raise NotImplementedError("your turn")
    assert ex.check_01_1(Unwritten) is None and "not answered" in capsys.readouterr().out


def test_01_2_refuses_the_lookalikes():
    naive = lambda n, t: torch.exp(n / t) / torch.exp(n / t).sum(1, keepdim=True)
    batch_max = lambda n, t: (lambda e: e / e.sum(1, keepdim=True))(torch.exp((n - n.max()) / t))          # one shift for the batch
    with_positive = lambda n, t: (lambda e: e / e.sum(1, keepdim=True))(torch.exp((torch.cat([torch.ones(len(n), 1, dtype=n.dtype), n], 1) - 1) / t))[:, 1:]
    whole = lambda n, t: (lambda e: e / e.sum())(torch.exp((n - n.max(1, keepdim=True).values) / t))       # normalised over the batch
    refused(ex.check_01_2, naive, says="NaN or infinity")
    refused(ex.check_01_2, batch_max, says="each row's own maximum")
    refused(ex.check_01_2, with_positive, says="sums to")
    refused(ex.check_01_2, whole, says="sums to")
    refused(ex.check_01_2, lambda n, t: penalty(n, 1.0), says="differs from Eq 5")
    refused(ex.check_01_2, lambda n, t: penalty(n, t)[:, :-1], says="shape")


def test_01_3_and_4_refuse_wrong_numbers():
    for wrong in (0.01, 10.0, "0.1", -1, True):
        refused(ex.check_01_3, wrong)
    from ctl_explore.gradients import relative_penalty
    right = {t: int((relative_penalty(ex._SPREAD, t)[0].sort(descending=True).values.cumsum(0) < 0.9).sum()) + 1 for t in (0.07, 1.0)}
    for wrong in ({0.07: right[0.07] - 1, 1.0: right[1.0]}, {0.07: right[0.07], 1.0: right[1.0] + 1}, {0.07: 201, 1.0: 201},
                  {0.07: right[0.07]}, [right[0.07], right[1.0]]):
        refused(ex.check_01_4, wrong)
    ex.check_01_4(right)


def test_01_5_readings():
    ex.PREDICTIONS.pop("01.5", None)
    refused(ex.check_01_5, "a", says="predict first")
    ex.run_01_5({0.05: "mean", 1.0: "mean", 5.0: "mean"})
    assert ex.PREDICTIONS["01.5"]["came_true"] is False
    for wrong in ("b", "c", "d", "z", 0):
        refused(ex.check_01_5, wrong)
    ex.check_01_5("a")


# ================================================================ lesson 02

def test_02_checks_refuse_wrong_answers():
    for wrong in (0.1, 0.005, 2 / 255, "0.0113", 0.02):
        refused(ex.check_02_1, wrong)
    ex.check_02_1(2 / 255 / math.log(2))
    from ctl_explore.gradients import penalty_entropy
    from ctl_explore.explorer import similarity_set
    spread = similarity_set("spread", 256)[1]
    for wrong in (lambda t, v: v / t ** 2, lambda t, v: v / (2 * t), lambda t, v: 0.0, lambda t, v: 0.0016 / (2 * t ** 2),  # v typed in
                  lambda t, v: math.log(256) - penalty_entropy(spread[None], t)[0].item()):                            # the library's set
        refused(ex.check_02_2, wrong, says="Hint")
    for wrong in ((0.24, 62), (0.26, 67), (0.25, 63), (0.5, 128), 0.25):
        refused(ex.check_02_3, wrong)


def test_02_4_readings(monkeypatch):
    curve = [0.5 + 0.001 * i for i in range(301)]
    monkeypatch.setattr(ex, "_experiment_02_4", lambda: {"tau5": curve, "tau02": [3.0] * 101})
    ex.PREDICTIONS.pop("02.4", None)
    refused(ex.check_02_4, "a", says="predict first")
    ex.run_02_4(0.7)  # 0.5 + 0.3 = 0.8 measured: 'more uniform ... far below' both
    assert ex.PREDICTIONS["02.4"]["came_true"] is True
    for wrong in ("b", "c", "d", "", "A"):
        refused(ex.check_02_4, wrong)


# ================================================================ lesson 03: by hand, at values drawn afresh

def test_03_by_hand_answers_must_be_formulas():
    from ctl_explore.metrics import alignment, tolerance, uniformity
    refused(ex.check_03_1, "6", ["even", "clusters", "arc"], says="(a)")                       # the value at t = 2, typed in
    refused(ex.check_03_1, "2 * t", ["even", "clusters", "arc"], says="(a)")
    refused(ex.check_03_1, uniformity(ex._circle([0, 120, 240])), ["even", "clusters", "arc"], says="as a string")
    refused(ex.check_03_1, "uniformity(on_circle([0, 120, 240]))", ["even", "clusters", "arc"], says="not allowed")
    refused(ex.check_03_1, "3 * t", ["even", "arc", "clusters"], says="(b)")
    right2 = {(0, 0, 1, 1): "(cos(b - a) + cos(d - c)) / 2", (0, 1, 1, 0): "(cos(d - a) + cos(c - b)) / 2",
              (0, 0, 0, 0): "(cos(b - a) + cos(c - a) + cos(d - a) + cos(c - b) + cos(d - b) + cos(d - c)) / 6"}
    typed = {k: repr(round(tolerance(ex._circle([0, 60, 90, 180]), list(k)), 4)) for k in right2}    # the lesson's values, rounded
    for wrong in (typed, {**right2, (0, 1, 1, 0): "(cos(180) + cos(30)) / 2"}, {**right2, (0, 0, 0, 0): "1"},
                  {k: "tolerance(on_circle([a, b, c, d]), [0, 0, 1, 1])" for k in right2}, {**right2, (0, 0, 1, 1): "cos(b - a) + cos(d - c)"}):
        refused(ex.check_03_2, wrong)
    ex.check_03_2(right2)
    lib = {a: alignment(ex._circle([0, 100, 200, 300]), ex._circle([30, 130, 230, 330]), alpha=a) for a in (2.0, 1.0)}
    for wrong in ({2.0: "2 - 2 * cos(30)", 1.0: "2 * sin(15)"}, {2.0: "0.2679", 1.0: "0.5176"}, {a: repr(v) for a, v in lib.items()},
                  {2.0: "2 - 2 * cos(theta)", 1.0: "2 - 2 * cos(theta)"}, {2.0: "2 * sin(theta / 2)", 1.0: "2 * sin(theta / 2)"}, lib):
        refused(ex.check_03_3, wrong)
    ex.check_03_3({2.0: "2 - 2 * cos(theta)", 1.0: "2 * sin(theta / 2)"})


def test_03_4_readings(monkeypatch):
    monkeypatch.setattr(ex, "_experiment_03_4", lambda: {0.05: {"uniformity": 3.0, "tolerance": 0.3}, 1.0: {"uniformity": 2.0, "tolerance": 0.6}})
    ex.PREDICTIONS.pop("03.4", None)
    refused(ex.check_03_4, "a", says="predict first")
    ex.run_03_4({"more uniform": 0.05, "more tolerant": 1.0, "beyond uniform points": False})
    assert ex.PREDICTIONS["03.4"]["came_true"] is True
    for wrong in ("b", "c", "d", "", "q"):
        refused(ex.check_03_4, wrong)


# ================================================================ lesson 06

def test_06_checks_refuse_wrong_answers():
    for wrong in (lambda m: 1 / (1 - m), lambda m: m, lambda m: m / (1 + m), lambda m: 1 / (1 - m) ** 2, lambda m: 1.0):
        refused(ex.check_06_1, wrong, says="Hint")
    matrix = lambda q, v, i, lam: (lambda s: (-s.gather(1, i[:, None])[:, 0] + lam * (s.sum(1) - s.gather(1, i[:, None])[:, 0])).mean())(q @ v.T)
    row_by_row = lambda q, v, i, lam: torch.stack([-(v[i[b]] @ q[b]) + lam * ((v @ q[b]).sum() - v[i[b]] @ q[b]) for b in range(len(q))]).mean()
    broadcast = lambda q, v, i, lam: (lambda s: (-s.gather(1, i[:, None])[:, 0] + lam * (s.sum(1) - s.gather(1, i[:, None])[:, 0])).mean())((q[:, None, :] * v[None]).sum(-1))
    own = lambda q, v, i, lam: (-(q * v[i]).sum(1) + lam * (q @ v.sum(0))).mean()
    right = lambda q, v, i, lam: (lambda o: (-o + lam * (q @ v.sum(0) - o)).mean())((q * v[i]).sum(1))
    via_numpy = lambda q, v, i, lam: right(q, torch.from_numpy(v.numpy().copy()), i, lam)
    for wrong, says in ((matrix, "O((B + N) d)"), (row_by_row, "O((B + N) d)"), (broadcast, "O((B + N) d)"), (own, "own row"), (via_numpy, "leaves torch")):
        refused(ex.check_06_2, wrong, says=says)
    for wrong, says in ((lambda n, a: math.ceil(a * n), "rows"), (lambda n, a: max(1, math.floor(a * (n - 1))), "50,000 rows"),
                        (lambda n, a: max(1, round(a * (n - 1))), "rows"), (lambda n, a: max(1, math.ceil(a * (n - 1))), "101 rows"),  # 8, not 7
                        (lambda n, a: min(n - 1, 4095), "rows"), (lambda n, a: 4095, "rows")):
        refused(ex.check_06_3, wrong, says=says)


def test_06_4_readings(monkeypatch):
    monkeypatch.setattr(ex, "_experiment_06_4", lambda: {(0.05, "bank"): 0.8, (0.05, "batch"): 0.75, (0.5, "bank"): 0.15, (0.5, "batch"): 0.2})
    ex.PREDICTIONS.pop("06.4", None)
    refused(ex.check_06_4, "a", says="predict first")
    ex.run_06_4({(0.05, "bank"): 0.5, (0.05, "batch"): 0.5, (0.5, "bank"): 0.5, (0.5, "batch"): 0.5})
    assert ex.PREDICTIONS["06.4"]["came_true"] is False
    for wrong in ("b", "c", "d", "", "over 70 %"):
        refused(ex.check_06_4, wrong)
    ex.check_06_4("a")


# ================================================================ lesson 07

def test_07_checks_refuse_wrong_answers():
    ex.check_07_1((1 / 575, 1 / 25))
    # the off-by-one K (the anchor's own row, K = 1438; a view too many, K = 63 or 64) changes λ at α = 0.4, batch 32;
    # then 1/K for all negatives, the floor, the old α = 0.1, a lone number, a string
    for wrong in ((1 / 576, 1 / 25), (1 / 575, 1 / 26), (1 / 576, 1 / 26), (1 / 1437, 1 / 62), (1 / 574, 1 / 24),
                  (1 / 144, 1 / 13), 1 / 575, ("1/575", "1/25"), (True, 1 / 25)):
        refused(ex.check_07_1, wrong)
    right = [0.1 * (e + 1) / 5 for e in range(5)] + [0.1] * 10 + [0.01] * 12 + [0.001] * 3
    for wrong in ([0.0] + right[1:], right[:14] + [0.01] * 13 + [0.001] * 3, right[:-1], [0.1 * e / 5 for e in range(5)] + right[5:], [0.1] * 30):
        refused(ex.check_07_2, wrong)
    for wrong in ({"bank": 128 * 1437, "batch": 128 * 254}, {"bank": 128 * 1438, "batch": 256 * 254}, {"bank": 128 * 1437, "batch": 256 * 255},
                  {"bank": 128 * 1437}, [128 * 1437, 256 * 254]):
        refused(ex.check_07_3, wrong)


def test_07_4_reading_follows_the_records(monkeypatch):
    crowded = {0.05: dict(uniformity=2.0, tolerance=0.8, knn_accuracy=0.7), 1.0: dict(uniformity=2.5, tolerance=0.5, knn_accuracy=0.8)}
    monkeypatch.setattr(ex, "_experiment_07_4", lambda: crowded)
    ex.PREDICTIONS.pop("07.4", None)
    refused(ex.check_07_4, "B", says="predict first")
    ex.run_07_4({"more uniform": 0.05, "more tolerant": 1.0})          # the paper's answer: wrong after 3 epochs, and kept
    assert ex.PREDICTIONS["07.4"]["came_true"] is False
    for wrong in ("A", "C", "a", "", "D"):
        refused(ex.check_07_4, wrong)
    ex.check_07_4("B")
    paper = {0.05: dict(uniformity=3.8, tolerance=0.3, knn_accuracy=0.9), 1.0: dict(uniformity=3.0, tolerance=0.6, knn_accuracy=0.8)}
    monkeypatch.setattr(ex, "_experiment_07_4", lambda: paper)
    refused(ex.check_07_4, "B")
    ex.check_07_4("C")


# ================================================================ lesson 08

def steps(n, epochs, batch, rounding=round, last=True, drops=(0.4, 0.6, 0.8)):
    per = -(-n // batch) if last else n // batch
    return [30.0 * 0.2 ** sum(e >= rounding(f * epochs) for f in drops) for e in range(epochs) for _ in range(per)]

def test_08_checks_refuse_wrong_answers(monkeypatch):
    for wrong, says in ((lambda n, e, b: steps(n, e, b, last=False), "last, smaller batch"), (lambda n, e, b: steps(n, e, b, rounding=int), "nearest epoch"),
                        (lambda n, e, b: steps(n, e, b, rounding=math.ceil), "nearest epoch"), (lambda n, e, b: steps(n, e, b, drops=()), "0.2"),
                        (lambda n, e, b: [], "steps")):
        refused(ex.check_08_1, wrong, says=says)
    monkeypatch.setattr(ex, "_experiment_08_2", lambda: {"random": 0.80, "trained": 0.70, "n_test": 359})
    ex.PREDICTIONS.pop("08.2", None)
    refused(ex.check_08_2, "below", says="predict first")
    ex.run_08_2((0.8, 0.72))
    assert ex.PREDICTIONS["08.2"]["came_true"] is True
    for wrong in ("above", "within", "Below", "", 0.7):
        refused(ex.check_08_2, wrong)
    ex.check_08_2("below")


# ================================================================ lesson 09

def test_09_checks_refuse_wrong_answers():
    pytest.importorskip("ctl_explore.study.findings")
    shipped = ex._shipped()
    judged = [r for r in shipped if r["uniformity_change"] is not None]
    for wrong in ("simple-seed9", min(judged, key=lambda r: abs(r["uniformity_change"]))["run"], 3, "", shipped[0]["run"] + "x"):
        refused(ex.check_09_1, wrong)
    def moved(m): m[("contrastive", 0.5)]["linear_top1"] = 0.99; return m
    def flat(m):
        for (l, t), v in m.items():
            if l == "contrastive": v["linear_top1"] = 0.95
        return m
    def partial(m): return {k: v for k, v in list(m.items())[:-1]}
    for wrong in (lambda m: m, moved, flat, partial, lambda m: dict(m)):
        refused(ex.check_09_2, wrong)
    for wrong in ((125, 62.5, 80), (150, 80, 100), (125, 75, 100), (125, 77.5, 100), (125, 80, 120), (125, 80), (125, 85, 100)):
        refused(ex.check_09_3, wrong)  # 77.5: where the window starts, not an epoch the run measures
    ex.check_09_3((125, 80, 100))


def test_09_4_readings(monkeypatch):
    monkeypatch.setattr(ex, "_experiment_09_4", lambda: {0.05: dict(uniformity=2.0, tolerance=0.8, alignment=0.2), 1.0: dict(uniformity=2.6, tolerance=0.5, alignment=0.5)})
    ex.PREDICTIONS.pop("09.4", None)
    refused(ex.check_09_4, "b", says="predict first")
    ex.run_09_4({"uniformity": 0.05, "tolerance": 1.0})
    assert ex.PREDICTIONS["09.4"]["came_true"] is False
    for wrong in ("a", "c", "d", "", "B"):
        refused(ex.check_09_4, wrong)
    ex.check_09_4("b")


# ================================================================ the library's bypasses: the child process (slow)

from ctl_explore.losses import contrastive_loss as _library_loss, hard_contrastive_loss as _library_hard


def in_a_thread(pos, neg, tau):
    out = []
    t = threading.Thread(target=lambda: out.append(_library_loss(pos, neg, tau))); t.start(); t.join()
    return out[0] + 0 * F.cross_entropy(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))

def profile_off(pos, neg, tau):
    sys.setprofile(None)
    return _library_loss(pos, neg, tau) + 0 * F.cross_entropy(torch.zeros(1, 2), torch.zeros(1, dtype=torch.long))

code_copy = types.FunctionType(_library_loss.__code__, _library_loss.__globals__, "my_loss", _library_loss.__defaults__, _library_loss.__closure__)

def swallowed(pos, neg, tau):  # the tripwire's error caught, and the right answer computed by hand afterwards
    try: _library_loss(pos, neg, tau)
    except Exception: pass
    return ce_loss(pos, neg, tau)


@pytest.mark.slow
@pytest.mark.parametrize("wrong, says", [(in_a_thread, "uses the library"), (profile_off, "uses the library"), (code_copy, "library"),
                                         (swallowed, "uses the library")])
def test_00_1_refuses_the_library_however_it_is_reached(wrong, says):
    refused(ex.check_00_1, wrong, says=says)


def test_a_copy_of_a_library_function_is_recognised():
    "By the file its code came from, and by its bytecode when the copy was compiled anew under another name."
    import inspect
    import ctl_explore.losses as losses
    prints = ex._library_fingerprints([losses])
    assert ex._copied_from_library(code_copy, prints) == "contrastive_loss"
    ns = {}
    exec(compile(inspect.getsource(losses.n_informative), "<typed in>", "exec"), vars(losses).copy(), ns)
    assert ex._copied_from_library(ns["n_informative"], prints) == "n_informative"
    assert ex._copied_from_library(ce_loss, prints) is None and ex._copied_from_library(Eq4, prints) is None


@pytest.mark.slow
def test_the_library_is_off_for_each_function_exercise():
    refused(ex.check_00_3, lambda p, n, t, a: _library_hard(p, n, t, a, reduction="none"), says="uses the library")
    refused(ex.check_01_2, lambda n, t: torch.ops.aten._softmax(n / t, 1, False), says="torch's _softmax")
    from ctl_explore.losses import n_informative
    refused(ex.check_06_3, lambda n, a: n_informative(n - 1, a), says="n_informative")


@pytest.mark.slow
def test_a_right_function_passes_in_the_child(capsys):
    ex.check_01_1(Eq4)
    assert "Right." in capsys.readouterr().out


def _mark_and_report():
    import os
    import ctl_explore.exercises as e
    seen = getattr(e, "_left_by_an_answer", None)
    e._left_by_an_answer = os.getpid()
    print("an answer's own print")  # goes to the child's stderr, not into its report
    return seen, os.getpid(), os.listdir()

def _loop():
    import time
    while True: time.sleep(0.05)

def _crash():
    import os
    os._exit(3)


@pytest.mark.slow
def test_each_check_runs_in_a_new_process_that_a_loop_or_a_crash_cannot_hold():
    "Checked twice, an answer finds nothing the first run left (a new process each time, in an empty folder); a loop is stopped at the limit, a crash said."
    import os
    first = ex.isolated("first", (_mark_and_report,), [(0, ())])["results"][0]
    second = ex.isolated("second", (_mark_and_report,), [(0, ())])["results"][0]
    assert first[0] is None and second[0] is None, (first, second)
    assert len({first[1], second[1], os.getpid()}) == 3 and first[2] == second[2] == []
    with pytest.raises(AssertionError, match=r"looper ran past 2 s on the check's inputs: does it loop\?"):
        ex.isolated("looper", (_loop,), [(0, ())], timeout=2)
    with pytest.raises(AssertionError, match="crasher crashed the process that checks it"):
        ex.isolated("crasher", (_crash,), [(0, ())])
    assert ex.isolated("after them", (_mark_and_report,), [(0, ())])["results"][0][0] is None


@pytest.mark.slow
def test_a_script_without_a_main_guard_runs_once_when_it_checks(tmp_path):
    "The check's process does not run the script that asked for the check again (as multiprocessing's children would)."
    import subprocess
    script = tmp_path / "answers.py"
    script.write_text("import ctl_explore.exercises as ex\nopen('ran.txt', 'a').write('ran\\n')\n"
                      "def f(): return 41 + 1\nprint(ex.isolated('f', (f,), [(0, ())])['results'])\n")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.strip() == "[42]", done.stderr[-2000:]
    assert (tmp_path / "ran.txt").read_text() == "ran\n"


# ================================================================ what a student sees: GitHub's view of the lessons

ANSWERS = ["1 / k", "k / ((k + 1)", "round(alpha *", "m / (1 - m)", "v / (2 * tau", "2 / 255 / math.log(2)", "(0.25, 64)", "1 / 575",
           "128 * 1437", "256 * 254", "(125, 80, 100)", "cos(b - a)", "2 - 2 * cos(theta)", "prob[:, 1:] / ctx.tau", "Eq 7's λ = 1/K",
           "at the very end of the notebook", "check_exercise_", "test_fail(", "## Solutions"]


@pytest.mark.parametrize("name", CORE)
def test_the_committed_lesson_shows_no_check_solution_or_answer(name):
    text = (NBS / f"{name}.ipynb").read_text()
    cells = json.loads(text)["cells"]
    start = next(i for i, c in enumerate(cells) if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Exercises"))
    section = cells[start:]
    assert not any(re.search(r"^\s*def check_|^\s*assert |#\| hide", "".join(c["source"]), re.M) for c in section), f"{name}: a check body in the lesson"
    assert f"from ctl_explore.exercises import check_{name[:2]}_" in text
    shown = "".join("".join(c["source"]) for c in section)
    assert not [a for a in ANSWERS if a in shown], f"{name} shows {[a for a in ANSWERS if a in shown]}"
    readings = [v for k, v in vars(ex).items() if k.startswith("READINGS_") and isinstance(v, dict)]
    leaked = [t[:50] for r in readings for t in r.values() if len(t) > 30 and t[:50] in text]
    assert not leaked, f"{name} shows a reading before its run: {leaked}"


def test_solutions_are_run_by_nbdev_but_are_not_lessons():
    from nbdev.doclinks import nbglob
    from ctl_explore.course import lessons
    from ctl_explore.site import lesson_notebooks
    solutions = sorted((NBS / "solutions").glob("*.ipynb"))
    assert [p.stem for p in solutions] == sorted(CORE + ("11_generalized_losses", "12_feature_suppression", "15_gpu_study"))
    assert {str(p) for p in solutions} <= {str(Path(p).resolve()) for p in nbglob(NBS)}
    assert not any("solutions" in p.parts for p in lessons(NBS) + lesson_notebooks(NBS))
    for p in solutions:
        src = "".join("".join(c["source"]) for c in json.loads(p.read_text())["cells"])
        assert "quietly()" in src and "print(" not in src, f"{p.name} prints answers"


def test_every_core_exercise_has_its_answer_cell_in_its_lesson():
    for name in CORE:
        text = (NBS / f"{name}.ipynb").read_text()
        for e in ex.exercises_of(name):
            n = e.key.split(".")[1]
            assert f"check_{name[:2]}_{n}(" in text, f"{name}: no answer cell for exercise {e.key}"
            for var in e.answers + ((e.prediction,) if e.prediction else ()):
                assert f"{var} = None" in text or f"def {var}(" in text or f"class {var}(" in text, f"{name}: no variable {var}"
