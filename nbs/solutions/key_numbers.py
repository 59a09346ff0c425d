"""The numbers of the answer key: for each exercise, what its answer comes to, computed now from the checks' own experiments.

Instructors' repository only (it sits beside the worked solutions, and `ctl-explore student-copy` leaves it out with them);
`ctl-explore answer-key` loads it from its --solutions folder (`ctl_explore.grading.load_key_numbers`)."""
from __future__ import annotations

import math

import torch

import ctl_explore.exercises as ex

def _numbers_00() -> dict:
    from ctl_explore.losses import contrastive_loss, n_informative
    p, n = ex._demo_similarities()
    return {"00.1": "Eq 1 on demo_pos, demo_neg: " + ", ".join(f"{contrastive_loss(p, n, t).item():.4f} at τ = {t}" for t in (0.5, 0.05, 0.001)),
            "00.2": "λ = 1/K and c = K / ((K + 1) τ); at K = 255, τ = 10: λ = 0.003922, c = 0.09961",
            "00.3": "kept of 40: " + ", ".join(f"{n_informative(40, a)} at α = {a}" for a in (0.1, 0.33, 0.34, 0.5)) + f"; of 100 at α = 0.07: {n_informative(100, 0.07)}",
            "00.4": "ratios " + ", ".join(f"{r:.3g} at τ = {t}" for t, r in ex._experiment_00_4().items()) + "; reading a"}

def _numbers_01() -> dict:
    from ctl_explore.gradients import penalty_entropy, relative_penalty
    lo, hi = 1e-3, 1e3
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if penalty_entropy(ex._SPREAD, mid)[0] < math.log(201) / 2 else (lo, mid)
    counts = {t: int((relative_penalty(ex._SPREAD, t)[0].sort(descending=True).values.cumsum(0) < 0.9).sum()) + 1 for t in (0.07, 1.0)}
    return {"01.1": "with g_ii = −Σ_k P_ik / τ and g_ij = P_ij / τ, each times grad_out: ∂/∂anchor_i = g_ii positive_i + Σ_j g_ij bank_j, "
                    "∂/∂positive_i = g_ii anchor_i, ∂/∂bank_j = Σ_i g_ij anchor_i",
            "01.2": "r_ij = exp((s_ij − max_k s_ik)/τ) / Σ_k exp((s_ik − max_k s_ik)/τ)",
            "01.3": f"τ_half = {mid:.4f}", "01.4": f"{counts[0.07]} negatives at τ = 0.07, {counts[1.0]} at τ = 1",
            "01.5": "cosines (nearest, mean): " + ", ".join(f"τ = {t}: {a:.2f}, {b:.2f}" for t, (a, b) in ex._experiment_01_5().items()) + "; reading a"}

def _numbers_02() -> dict:
    u = ex._experiment_02_4()
    return {"02.1": f"τ = 2/255 / log 2 = {2 / 255 / math.log(2):.5f}", "02.2": "log K − H = v / (2τ²)", "02.3": "(0.25, 64)",
            "02.4": f"uniformity at τ = 5: {u['tau5'][100]:.3f} after 100 steps, {u['tau5'][300]:.3f} after 300; τ = 0.2: {u['tau02'][-1]:.3f}; reading a"}

def _numbers_03() -> dict:
    from ctl_explore.metrics import alignment, tolerance
    pts = ex._circle([0, 60, 90, 180])
    runs = ex._experiment_03_4()
    return {"03.1": "3t (6 at t = 2); even, clusters, arc",
            "03.2": "at 0°, 60°, 90°, 180°: " + ", ".join(f"{k}: {tolerance(pts, list(k)):.4f}" for k in ex._LABELS_03_2),
            "03.3": "2 − 2 cos θ and 2 sin(θ/2); at 30°: " + ", ".join(f"α = {a}: {alignment(ex._circle([0, 100, 200, 300]), ex._circle([30, 130, 230, 330]), alpha=a):.4f}" for a in (2.0, 1.0)),
            "03.4": "; ".join(f"τ = {t}: uniformity {r['uniformity']:.3f}, tolerance {r['tolerance']:.3f}" for t, r in runs.items()) + f"; {ex._truth_03_4(runs)}; reading a"}

def _numbers_06() -> dict:
    return {"06.1": "lag = m / (1 − m)", "06.2": "mean of −s_ii + λ (q·Σ_j v_j − s_ii)",
            "06.3": ", ".join(f"{ex._ceil_kept(n, a)} of {n - 1:,} at α = {a}" for n, a in ex._KEPT_CASES),
            "06.4": ", ".join(f"{s:.1%} ({p}, τ = {t})" for (t, p), s in ex._experiment_06_4().items()) + "; reading a"}

def _numbers_07() -> dict:
    runs = ex._experiment_07_4()
    return {"07.1": "(1/575, 1/25): K = 1437 and 2 · 32 − 2 = 62, of which ⌈0.4 K⌉ = 575 and 25 are kept", "07.2": "0.02, 0.04, 0.06, 0.08, 0.1 (epochs 0–4), 0.1 to epoch 14, 0.01 from 15, 0.001 from 27",
            "07.3": f"bank {128 * 1437:,}, batch {256 * 254:,}",
            "07.4": "; ".join(f"τ = {t:g}: uniformity {r['uniformity']:.3f}, tolerance {r['tolerance']:.3f}, kNN {r['knn_accuracy']:.3f}" for t, r in runs.items())
                    + f"; reading {ex.reading_07_4(runs)}"}

def _numbers_08() -> dict:
    m = ex._experiment_08_2()
    return {"08.1": "⌈n/b⌉ steps an epoch at 30 · 0.2^(drops passed), drops at round(0.4, 0.6, 0.8 × epochs)",
            "08.2": f"random init {m['random']:.3f}, 3 epochs {m['trained']:.3f}: {ex._two_se_direction(m['trained'], m['random'], m['n_test'])}"}

def _numbers_09() -> dict:
    judged = [r for r in ex._shipped() if r["uniformity_change"] is not None]
    best = max(judged, key=lambda r: abs(r["uniformity_change"]))
    m = ex._experiment_09_4()
    return {"09.1": f"{best['run']} ({best['uniformity_change']:+.3f})", "09.2": "e.g. accuracy falling from τ = 0.05 to 0.1, the peak kept at 0.2",
            "09.3": "(%g, %g, %g)" % ex._truth_09_3(), "09.4": "; ".join(f"τ = {t}: uniformity {r['uniformity']:.3f}, tolerance {r['tolerance']:.3f}" for t, r in m.items()) + "; reading b"}

def _numbers_11() -> dict:
    from ctl_explore.generalized import dcl_loss, nt_xent_loss
    from ctl_explore.train import PretrainConfig
    e, d = torch.eye(8, dtype=torch.float64), PretrainConfig().out_dim
    return {"11.1": f"(λ, a, c) = (τ/d, τ/d, 1/d) = ({0.5 / 16:g}, {0.5 / 16:g}, {1 / 16:g})",
            "11.2": ", ".join(f"{(nt_xent_loss(e, e, t) - dcl_loss(e, e, t)).item():.4f} at τ = {t}" for t in (0.5, 0.1)) + " (log(1 + e^{1/τ}/14))",
            "11.3": f"c = d = {d}, learning rate {ex._lr_11_3():g} = 0.03 / (0.2/d)"}

def _numbers_12() -> dict:
    from ctl_explore.suppression import at_chance, twin_share, zero_bit_confound
    rows = ex._randbit_rows()
    k1 = next(j for j in range(64) if twin_share(j, 128) < 0.01)
    k2 = min(r["k"] for r in rows if r["tau"] == 0.05 and at_chance(r["online_top1"], r["chance"], r["n_test"]))
    (c,) = [c for c in zero_bit_confound(rows) if c["k"] == 16 and c["tau"] == 0.2]
    gap = {m: c[f"trained_{m}"] - c[f"random_{m}"] for m in ("zero", "shared")}
    probe = min(gap, key=gap.get)
    return {"12.1": f"k = {k1} ({100 * twin_share(k1, 128):.2f}% have a twin; {k1 - 1} bits leave {100 * twin_share(k1 - 1, 128):.2f}%)",
            "12.2": f"k = {k2}", "12.3": f"('{probe}', {abs(gap['shared'] - gap['zero']):.3f}): gaps zero {gap['zero']:+.3f}, shared {gap['shared']:+.3f}"}

def _numbers_15() -> dict:
    from ctl_explore.train import PretrainConfig, evaluates_at
    need, run_s, per_gpu, runs = ex._gpus_15_1()
    means = ex._tau_means_15_2()
    cfg = PretrainConfig(epochs=200, eval_every=10)
    return {"15.1": f"{need} GPUs ({run_s / 60:.1f} min a run, {per_gpu} runs an hour per GPU, {runs} runs)",
            "15.2": f"τ = {' or '.join(f'{t:g}' for t in ex._top_15_2(means))} (" + ", ".join(f"{t}: {m:.4f}" for t, m in means.items()) + ")",
            "15.3": f"{sum(evaluates_at(cfg, e) for e in range(cfg.epochs))} epochs"}

_NUMBERS = {"00": _numbers_00, "01": _numbers_01, "02": _numbers_02, "03": _numbers_03, "06": _numbers_06, "07": _numbers_07, "08": _numbers_08, "09": _numbers_09, "11": _numbers_11, "12": _numbers_12, "15": _numbers_15}

def answer_numbers(key: str) -> str:
    "The numbers exercise `key`'s answer comes to, computed now (an error is reported in the text, not raised)."
    try: return _NUMBERS[key[:2]]()[key]
    except Exception as e: return f"(could not be computed here: {type(e).__name__}: {e})"
