"""Property tests of `ctl_explore.losses`: [WL21] Eq 1, 3, 6, 7, 9, HardSimple, and the similarity builders."""
from __future__ import annotations

import math
import re
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given
from hypothesis import strategies as st
from torch.testing import assert_close

from ctl_explore.losses import (
    apply_loss, contrastive_loss, hard_contrastive_loss, hard_simple_loss, informative_mask, loss_names, loss_spec,
    n_informative, pair_similarities, simple_limit_loss, simple_loss, triplet_limit_loss,
)
from ctl_strategies import (
    distinct_neg, log_uniform, ref_anchor_loss, ref_contrastive, ref_kept, ref_n_informative, sims, tie_floats, top_gap_sims,
    unit_embeddings, unit_floats,
)

LOSS_NAMES = loss_names("similarity")  # lesson 00's losses, read from the registry

F64 = torch.float64
ALPHA_DEN = 1000
# alpha = m/1000: exact decimal fractions, so an exact-integer reference for ⌈αK⌉ exists
alpha_nums = st.integers(1, ALPHA_DEN)

# every loss, called as f(pos, neg, tau, reduction); the ones without a temperature ignore it
LOSSES = {
    "contrastive": lambda p, n, tau, red="mean": contrastive_loss(p, n, tau, reduction=red),
    "simple": lambda p, n, tau, red="mean": simple_loss(p, n, lam=0.5, reduction=red),
    "triplet_limit": lambda p, n, tau, red="mean": triplet_limit_loss(p, n, tau, reduction=red),
    "simple_limit": lambda p, n, tau, red="mean": simple_limit_loss(p, n, tau, reduction=red),
    "hard_contrastive": lambda p, n, tau, red="mean": hard_contrastive_loss(p, n, tau, alpha=0.3, reduction=red),
    "hard_simple": lambda p, n, tau, red="mean": hard_simple_loss(p, n, alpha=0.3, lam=0.5, reduction=red),
}


def per_anchor(t: torch.Tensor) -> list[float]:
    return t.detach().double().tolist()


# ============================================================ 1. Eq 1 and the reductions

@given(sims(), log_uniform(0.02, 50.0))
def test_contrastive_equals_cross_entropy_with_target_zero(ps, tau):
    pos, neg = ps
    logits = torch.cat([pos[:, None], neg], dim=1) / tau
    target = torch.zeros(len(pos), dtype=torch.long)
    for red in ("none", "sum", "mean"):
        assert_close(contrastive_loss(pos, neg, tau, reduction=red), F.cross_entropy(logits, target, reduction=red),
                     rtol=1e-12, atol=1e-12)


@given(sims(), log_uniform(0.05, 10.0))
def test_contrastive_equals_negative_log_softmax_by_hand(ps, tau):
    pos, neg = ps
    got = contrastive_loss(pos, neg, tau, reduction="none")
    assert got.shape == pos.shape
    # -log( e^{p/τ} / (e^{p/τ} + Σ e^{s/τ}) ) with plain exponentials: no overflow for |s| <= 1, τ >= 0.05
    by_hand = [-math.log(math.exp(p / tau) / math.fsum([math.exp(p / tau)] + [math.exp(s / tau) for s in row]))
               for p, row in zip(pos.tolist(), neg.tolist())]
    assert per_anchor(got) == pytest.approx(by_hand, rel=1e-11, abs=1e-11)
    assert per_anchor(got) == pytest.approx(ref_contrastive(pos, neg, tau), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("name", list(LOSSES))
@given(ps=sims(), tau=log_uniform(0.05, 10.0))
def test_reductions_are_consistent(name, ps, tau):
    pos, neg = ps
    f = LOSSES[name]
    none = f(pos, neg, tau, "none")
    assert none.shape == pos.shape
    assert f(pos, neg, tau, "sum").shape == ()
    assert_close(f(pos, neg, tau, "sum"), none.sum(), rtol=1e-12, atol=1e-12)
    assert_close(f(pos, neg, tau, "mean"), none.mean(), rtol=1e-12, atol=1e-12)
    assert_close(f(pos, neg, tau), none.mean(), rtol=1e-12, atol=1e-12)  # default reduction is "mean"


@given(sims(), log_uniform(0.02, 50.0), st.floats(-3.0, 3.0))
def test_contrastive_is_shift_invariant_and_positive(ps, tau, c):
    pos, neg = ps
    loss = contrastive_loss(pos, neg, tau, reduction="none")
    assert (loss >= 0).all()
    assert_close(contrastive_loss(pos + c, neg + c, tau, reduction="none"), loss, rtol=1e-9, atol=1e-9 / tau)


@given(st.integers(1, 6), st.integers(1, 40), unit_floats, log_uniform(1e-4, 1e4))
def test_contrastive_with_all_similarities_equal_is_log_n(b, k, s, tau):
    pos = torch.full((b,), s, dtype=F64)
    neg = torch.full((b, k), s, dtype=F64)
    assert per_anchor(contrastive_loss(pos, neg, tau, reduction="none")) == pytest.approx([math.log(k + 1)] * b,
                                                                                         rel=1e-12)


@given(sims(), st.floats(0.0, 5.0))
def test_simple_loss_matches_definition(ps, lam):
    pos, neg = ps
    got = simple_loss(pos, neg, lam=lam, reduction="none")
    expected = [lam * math.fsum(row) - p for p, row in zip(pos.tolist(), neg.tolist())]
    assert per_anchor(got) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert_close(simple_loss(pos, neg, reduction="none"), neg.sum(dim=1) - pos)  # λ = 1 by default


@pytest.mark.parametrize("name", list(LOSSES))
@given(ps=sims(elements=st.one_of(unit_floats, tie_floats)), tau=log_uniform(0.05, 10.0))
def test_each_anchor_loss_depends_only_on_its_own_row(name, ps, tau):
    # in particular the hard losses, whose code path for the whole batch switches when any row has a tie at its cut
    pos, neg = ps
    f = LOSSES[name]
    batch = f(pos, neg, tau, "none")
    alone = torch.cat([f(pos[i:i + 1], neg[i:i + 1], tau, "none") for i in range(len(pos))])
    assert_close(batch, alone, rtol=1e-12, atol=1e-12)


def test_hard_losses_with_a_tie_at_the_cut_in_one_row_only():
    # row 0: K=4, α=0.5 → keep 2, but 0.4 is tied at the cut (3 kept); row 1: no tie (2 kept)
    pos = torch.tensor([0.1, 0.2], dtype=F64)
    neg = torch.tensor([[0.9, 0.4, 0.4, -0.5], [0.3, -0.2, 0.7, 0.0]], dtype=F64)
    tau = 0.25
    expected = [ref_anchor_loss(0.1, [0.9, 0.4, 0.4], tau), ref_anchor_loss(0.2, [0.3, 0.7], tau)]
    assert per_anchor(hard_contrastive_loss(pos, neg, tau, 0.5, reduction="none")) == pytest.approx(expected, rel=1e-12)
    assert per_anchor(hard_simple_loss(pos, neg, 0.5, reduction="none")) == pytest.approx([1.6, 0.8], rel=1e-12)


# ---------------------------------------------------------------- apply_loss, the losses by name

PARAM_VALUES = {"tau": 0.3, "alpha": 0.4, "lam": 0.6}
DIRECT = {
    "contrastive": lambda p, n, red: contrastive_loss(p, n, 0.3, reduction=red),
    "hard_contrastive": lambda p, n, red: hard_contrastive_loss(p, n, 0.3, 0.4, reduction=red),
    "simple": lambda p, n, red: simple_loss(p, n, lam=0.6, reduction=red),
    "hard_simple": lambda p, n, red: hard_simple_loss(p, n, 0.4, lam=0.6, reduction=red),
    "triplet_limit": lambda p, n, red: triplet_limit_loss(p, n, 0.3, reduction=red),
    "simple_limit": lambda p, n, red: simple_limit_loss(p, n, 0.3, reduction=red),
}


def test_apply_loss_knows_every_loss():
    assert set(LOSS_NAMES) == set(DIRECT)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), st.sampled_from(sorted(DIRECT)),
       st.sampled_from(["none", "sum", "mean"]))
def test_apply_loss_dispatches_by_name(ps, name, red):
    pos, neg = ps
    params = {k: PARAM_VALUES[k] for k in loss_spec(name).params}
    assert_close(apply_loss(name, pos, neg, reduction=red, **params), DIRECT[name](pos, neg, red), rtol=0, atol=0)


@pytest.mark.parametrize("name", sorted(DIRECT))
def test_apply_loss_is_strict_about_hyper_parameters(name):
    pos, neg = torch.tensor([0.1], dtype=F64), torch.tensor([[0.3, -0.2]], dtype=F64)
    params = {k: PARAM_VALUES[k] for k in loss_spec(name).params}
    for extra in set(PARAM_VALUES) - set(params):
        with pytest.raises(ValueError, match=extra):
            apply_loss(name, pos, neg, **params, **{extra: PARAM_VALUES[extra]})
    for needed in set(params) - {"lam"}:  # lam defaults to 1
        with pytest.raises(ValueError, match=needed):
            apply_loss(name, pos, neg, **{k: v for k, v in params.items() if k != needed})
    if "lam" in params:
        assert_close(apply_loss(name, pos, neg, **{k: v for k, v in params.items() if k != "lam"}),
                     apply_loss(name, pos, neg, **{**params, "lam": 1.0}))


def test_apply_loss_rejects_unknown_names():
    with pytest.raises(ValueError, match="loss"):
        apply_loss("infonce", P, N, tau=0.1)


# ============================================================ 4. the τ→0 and τ→∞ limits, Eq 6 and Eq 7

@given(sims(elements=st.one_of(unit_floats, tie_floats)), log_uniform(1e-4, 1e4))
def test_contrastive_minus_triplet_limit_lies_in_0_log_n(ps, tau):
    # L - (s_max - s_ii)^+/τ = log Σ_{all terms} exp((s - top)/τ) with top = max(s_ii, s_max): the top term is 1,
    # the other K terms are in (0, 1], so the difference is in [0, log(K+1)] for every τ.
    pos, neg = ps
    loss = contrastive_loss(pos, neg, tau, reduction="none")
    trip = triplet_limit_loss(pos, neg, tau, reduction="none")
    diff = loss - trip
    tol = 1e-12 * (1 + trip)
    assert (diff >= -tol).all()
    assert (diff <= math.log(neg.shape[1] + 1) + tol).all()


@given(top_gap_sims(gap=0.05), st.sampled_from([1e-2, 3e-3, 1e-3]))
def test_contrastive_tends_to_triplet_limit_as_tau_goes_to_zero(ps, tau):
    # with the top similarity (pos or a negative) at least g above all K others, 0 <= L - L_trip <= K exp(-g/τ)
    pos, neg = ps
    k, gap = neg.shape[1], 0.05
    loss = contrastive_loss(pos, neg, tau, reduction="none")
    trip = triplet_limit_loss(pos, neg, tau, reduction="none")
    bound = k * math.exp(-(gap - 1e-12) / tau)
    rounding = 1e-12 * (1 + trip)
    assert ((loss - trip).abs() <= bound + rounding).all()
    if tau == 1e-3:
        assert ((loss - trip).abs() <= 1e-9 * (1 + trip)).all()


@given(sims(), log_uniform(0.01, 1e4))
def test_simple_limit_is_a_lower_bound_within_hoeffding(ps, tau):
    # L - L_lim = log mean_k exp(x_k) - mean_k x_k with x = s/τ over all N terms: >= 0 by Jensen and
    # <= (range x)^2 / 8 by Hoeffding's lemma.
    pos, neg = ps
    loss = contrastive_loss(pos, neg, tau, reduction="none")
    lim = simple_limit_loss(pos, neg, tau, reduction="none")
    allv = torch.cat([pos[:, None], neg], dim=1)
    spread = allv.amax(dim=1) - allv.amin(dim=1)
    tol = 1e-12 * (1 + loss.abs() + lim.abs())
    assert (loss - lim >= -tol).all()
    assert (loss - lim <= spread**2 / (8 * tau**2) + tol).all()


@given(sims(min_k=2))
def test_simple_limit_error_is_second_order_in_one_over_tau(ps):
    pos, neg = ps
    n = neg.shape[1] + 1
    allv = torch.cat([pos[:, None], neg], dim=1)
    first_order = (pos - allv.mean(dim=1)).abs()  # |L - log N| ≈ this/τ
    keep = first_order >= 0.05  # guard: the first-order term must not vanish
    assume(bool(keep.any()))

    def ratio(tau):
        loss = contrastive_loss(pos, neg, tau, reduction="none")
        return ((loss - simple_limit_loss(pos, neg, tau, reduction="none")).abs()
                / (loss - math.log(n)).abs())[keep]

    shrink = ratio(100.0) / ratio(1000.0)
    # |L - L_lim| ~ Var(s)/(2τ²) and |L - log N| ~ |s_ii - mean(s)|/τ: the ratio falls 10x per decade of τ
    assert ((shrink > 8) & (shrink < 12.5)).all(), shrink

    tau = 1e3
    gap2 = (contrastive_loss(pos, neg, tau, reduction="none") - simple_limit_loss(pos, neg, tau, reduction="none"))
    half_var = allv.var(dim=1, unbiased=False) / 2
    spread = allv.amax(dim=1) - allv.amin(dim=1)
    assert ((gap2 * tau**2 - half_var).abs() <= spread**3 / tau + 1e-6).all()


@given(sims(), log_uniform(1e-3, 1e3))
def test_simple_limit_is_a_rescaled_simple_loss(ps, tau):
    # Eq 7 = log N + (K/(Nτ)) · simple_loss(λ = 1/K): the τ→∞ limit is the simple loss of Eq 3, up to scale
    pos, neg = ps
    k = neg.shape[1]
    expected = math.log(k + 1) + k / ((k + 1) * tau) * simple_loss(pos, neg, lam=1 / k, reduction="none")
    assert_close(simple_limit_loss(pos, neg, tau, reduction="none"), expected, rtol=1e-10, atol=1e-10)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), log_uniform(1e-3, 1e3))
def test_triplet_limit_matches_definition(ps, tau):
    pos, neg = ps
    expected = [max(max(row) - p, 0.0) / tau for p, row in zip(pos.tolist(), neg.tolist())]
    assert per_anchor(triplet_limit_loss(pos, neg, tau, reduction="none")) == pytest.approx(expected, rel=1e-12,
                                                                                            abs=1e-12)


# ============================================================ 5. stability over τ and dtypes

STABILITY_TAUS = (1e-4, 1e-2, 1.0, 1e2, 1e4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", list(LOSSES))
@given(ps=sims(max_b=4, max_k=20, elements=st.one_of(unit_floats, tie_floats)))
def test_losses_and_their_gradients_are_finite(name, dtype, ps):
    f = LOSSES[name]
    for tau in STABILITY_TAUS:
        pos = ps[0].to(dtype).requires_grad_()
        neg = ps[1].to(dtype).requires_grad_()
        loss = f(pos, neg, tau)
        assert loss.dtype == dtype
        assert torch.isfinite(loss), (tau, loss)
        loss.backward()
        assert torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all(), (tau, pos.grad, neg.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
@pytest.mark.parametrize("tau", STABILITY_TAUS)
@pytest.mark.parametrize("pos_value,neg_value", [(-1.0, 1.0), (1.0, -1.0), (1.0, 1.0)])
def test_extreme_similarity_sets_are_finite(dtype, tau, pos_value, neg_value):
    # the worst cases at K = 40: positive far below all negatives, far above them, or tied with them
    for f in LOSSES.values():
        pos = torch.full((3,), pos_value, dtype=dtype, requires_grad=True)
        neg = torch.full((3, 40), neg_value, dtype=dtype, requires_grad=True)
        loss = f(pos, neg, tau)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(pos.grad).all() and torch.isfinite(neg.grad).all()


def test_contrastive_loss_at_tiny_tau_is_exact_in_float32():
    # computed naively, exp(2/1e-4) would overflow; the stable loss must be (s_max - s_ii)/τ exactly here
    pos = torch.tensor([-1.0])
    neg = torch.tensor([[1.0, 0.0, -1.0]])
    assert contrastive_loss(pos, neg, 1e-4).item() == pytest.approx(2e4, rel=1e-6)


# ============================================================ 6. the hard loss (Eq 9) and HardSimple

@given(sims(elements=st.one_of(unit_floats, tie_floats)), log_uniform(1e-3, 1e3))
def test_hard_loss_with_alpha_one_is_the_contrastive_loss(ps, tau):
    pos, neg = ps
    assert_close(hard_contrastive_loss(pos, neg, tau, alpha=1.0, reduction="none"),
                 contrastive_loss(pos, neg, tau, reduction="none"), rtol=0, atol=0)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), alpha_nums, log_uniform(0.02, 50.0))
def test_hard_loss_matches_sorting_reference(ps, num, tau):
    pos, neg = ps
    alpha = num / ALPHA_DEN
    k = neg.shape[1]
    n_keep = ref_n_informative(k, num, ALPHA_DEN)
    expected = []
    for p, row in zip(pos.tolist(), neg.tolist()):
        expected.append(ref_anchor_loss(p, ref_kept(row, n_keep), tau))
    got = hard_contrastive_loss(pos, neg, tau, alpha=alpha, reduction="none")
    assert per_anchor(got) == pytest.approx(expected, rel=1e-11, abs=1e-11)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), alpha_nums, st.floats(0.0, 3.0))
def test_hard_simple_matches_sorting_reference(ps, num, lam):
    pos, neg = ps
    n_keep = ref_n_informative(neg.shape[1], num, ALPHA_DEN)
    expected = [lam * math.fsum(ref_kept(row, n_keep)) - p for p, row in zip(pos.tolist(), neg.tolist())]
    got = hard_simple_loss(pos, neg, alpha=num / ALPHA_DEN, lam=lam, reduction="none")
    assert per_anchor(got) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), st.floats(0.0, 3.0))
def test_hard_simple_with_alpha_one_is_the_simple_loss(ps, lam):
    pos, neg = ps
    assert_close(hard_simple_loss(pos, neg, alpha=1.0, lam=lam, reduction="none"),
                 simple_loss(pos, neg, lam=lam, reduction="none"), rtol=1e-12, atol=1e-12)


def test_ties_at_the_threshold_are_all_kept():
    # K = 10, α = 0.3 → the 3rd largest (0.5) is the threshold; all four 0.5s are kept, so 5 negatives in all
    neg = torch.tensor([[0.5, -0.2, 0.9, 0.5, 0.1, 0.5, -0.7, 0.5, 0.0, 0.3]], dtype=F64)
    pos = torch.tensor([0.2], dtype=F64)
    assert n_informative(10, 0.3) == 3
    mask = informative_mask(neg, 0.3)
    assert mask.tolist() == [[v >= 0.5 for v in neg[0].tolist()]]
    assert int(mask.sum()) == 5
    kept = torch.tensor([[0.9, 0.5, 0.5, 0.5, 0.5]], dtype=F64)
    assert_close(hard_contrastive_loss(pos, neg, 0.5, alpha=0.3), contrastive_loss(pos, kept, 0.5))
    assert_close(hard_simple_loss(pos, neg, alpha=0.3), simple_loss(pos, kept))


@given(sims(elements=tie_floats, min_k=2))
def test_informative_mask_is_the_top_set_with_ties(ps):
    _, neg = ps
    for alpha in (0.01, 0.1, 0.25, 0.5, 0.99):
        k = n_informative(neg.shape[1], alpha)
        mask = informative_mask(neg, alpha)
        assert mask.dtype == torch.bool and mask.shape == neg.shape
        for row, keep in zip(neg.tolist(), mask.tolist()):
            kth = sorted(row, reverse=True)[k - 1]
            assert keep == [v >= kth for v in row]
            assert sum(keep) >= k


@given(distinct_neg(min_gap=1e-6, min_k=1), alpha_nums)
def test_informative_mask_counts_n_informative_for_distinct_values(neg, num):
    alpha = num / ALPHA_DEN
    k = n_informative(neg.shape[1], alpha)
    mask = informative_mask(neg, alpha)
    assert mask.sum(dim=1).tolist() == [k] * neg.shape[0]
    # the kept ones are the k largest
    assert_close(neg[mask].view(-1, k).sort(dim=1).values, neg.topk(k, dim=1).values.sort(dim=1).values)


@given(sims(elements=st.one_of(unit_floats, tie_floats)), alpha_nums, log_uniform(0.05, 20.0))
def test_dropped_negatives_get_exactly_zero_gradient(ps, num, tau):
    pos, neg = (t.clone().requires_grad_() for t in ps)
    alpha = num / ALPHA_DEN
    hard_contrastive_loss(pos, neg, tau, alpha=alpha, reduction="sum").backward()
    mask = informative_mask(neg.detach(), alpha)
    assert (neg.grad[~mask] == 0).all()
    assert (neg.grad[mask] > 0).all()  # every kept negative is pushed (τ >= 0.05: no underflow)
    assert (pos.grad < 0).all()

    # HardSimple: kept negatives get exactly λ, dropped ones 0
    neg.grad = None
    hard_simple_loss(pos, neg, alpha=alpha, lam=0.7, reduction="sum").backward()
    assert_close(neg.grad, mask.to(F64) * 0.7, rtol=0, atol=0)


@given(st.integers(1, 5000), alpha_nums)
def test_n_informative_is_ceil_alpha_k_clipped(k, num):
    assert n_informative(k, num / ALPHA_DEN) == ref_n_informative(k, num, ALPHA_DEN)


@given(st.integers(1, 5000), st.floats(1e-9, 1.0), st.floats(1e-9, 1.0))
def test_n_informative_is_monotone_and_in_range(k, a, b):
    lo, hi = sorted((a, b))
    n_lo, n_hi = n_informative(k, lo), n_informative(k, hi)
    assert 1 <= n_lo <= n_hi <= k
    assert n_lo >= lo * k - 1e-6  # keeps at least the α fraction (up to the float-noise rounding)
    assert n_lo < lo * k + 1 or n_lo == 1


def test_n_informative_special_values():
    assert n_informative(510, 0.1) == 51  # 0.1 * 510 = 51.00000000000001 in floats: no spurious round-up
    assert n_informative(49_999, 0.0819) == 4095  # [WL21]'s CIFAR setting: 4095 of the 49,999 negatives
    assert n_informative(7, 1.0) == 7
    assert n_informative(7, 1e-6) == 1
    assert n_informative(1, 0.5) == 1


# ============================================================ 7. similarity builders

@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.05, 10.0))
def test_pair_similarities_match_full_matrix_cross_entropy(zs, tau):
    z1, z2 = zs
    b = z1.shape[0]
    pos, neg = pair_similarities(z1, z2)
    assert pos.shape == (2 * b,) and neg.shape == (2 * b, 2 * b - 2)

    z = torch.cat([z1, z2])
    sim = z @ z.T
    logits = sim.masked_fill(torch.eye(2 * b, dtype=torch.bool), float("-inf")) / tau
    target = (torch.arange(2 * b) + b) % (2 * b)
    for red in ("none", "mean", "sum"):
        assert_close(contrastive_loss(pos, neg, tau, reduction=red), F.cross_entropy(logits, target, reduction=red),
                     rtol=1e-12, atol=1e-12)

    # and element-wise: each view's positive is the other view of its sample, its negatives all the other views
    for i in range(2 * b):
        j = (i + b) % (2 * b)
        assert pos[i].item() == pytest.approx(float(z[i] @ z[j]), abs=1e-12)
        others = sorted(float(z[i] @ z[m]) for m in range(2 * b) if m not in (i, j))
        assert sorted(neg[i].tolist()) == pytest.approx(others, abs=1e-12)


@given(unit_embeddings(min_b=2, n_sets=2, normalise=False))
def test_pair_similarities_gradients_reach_both_views(zs):
    z1, z2 = (z.clone().requires_grad_() for z in zs)
    contrastive_loss(*pair_similarities(z1, z2), 0.5).backward()
    z1r, z2r = (z.detach().clone().requires_grad_() for z in zs)
    b = z1r.shape[0]
    z = torch.cat([z1r, z2r])
    logits = (z @ z.T).masked_fill(torch.eye(2 * b, dtype=torch.bool), float("-inf")) / 0.5
    F.cross_entropy(logits, (torch.arange(2 * b) + b) % (2 * b)).backward()
    assert_close(z1.grad, z1r.grad, rtol=1e-10, atol=1e-10)
    assert_close(z2.grad, z2r.grad, rtol=1e-10, atol=1e-10)


# ============================================================ 8. argument checking

P = torch.tensor([0.1, 0.2], dtype=F64)
N = torch.tensor([[0.3, -0.4, 0.5], [0.0, 0.6, -0.1]], dtype=F64)
NAN, INF = float("nan"), float("inf")

TAU_LOSSES = {
    "contrastive_loss": lambda tau: contrastive_loss(P, N, tau),
    "triplet_limit_loss": lambda tau: triplet_limit_loss(P, N, tau),
    "simple_limit_loss": lambda tau: simple_limit_loss(P, N, tau),
    "hard_contrastive_loss": lambda tau: hard_contrastive_loss(P, N, tau, 0.5),
}
ALPHA_FNS = {
    "hard_contrastive_loss": lambda a: hard_contrastive_loss(P, N, 0.5, a),
    "hard_simple_loss": lambda a: hard_simple_loss(P, N, a),
    "informative_mask": lambda a: informative_mask(N, a),
    "n_informative": lambda a: n_informative(10, a),
}
# every loss as f(pos, neg, reduction) with valid other arguments
ALL_LOSSES = {name: (lambda f: lambda p, n, red="mean": f(p, n, 0.5, red))(f) for name, f in LOSSES.items()}


@pytest.mark.parametrize("tau", [0, 0.0, -0.1, -1, NAN, INF, -INF, None, "fast"])
@pytest.mark.parametrize("name", list(TAU_LOSSES))
def test_bad_tau_raises(name, tau):
    with pytest.raises(ValueError, match="tau"):
        TAU_LOSSES[name](tau)


@pytest.mark.parametrize("name", list(TAU_LOSSES))
def test_tau_may_be_any_real_scalar(name):
    f = TAU_LOSSES[name]
    expected = f(0.5)
    for tau in (np.float64(0.5), torch.tensor(0.5), Fraction(1, 2)):
        assert_close(f(tau), expected)


@pytest.mark.parametrize("alpha", [0, 0.0, -0.2, 1.0000001, 2, NAN, INF, None])
@pytest.mark.parametrize("name", list(ALPHA_FNS))
def test_bad_alpha_raises(name, alpha):
    with pytest.raises(ValueError, match="alpha"):
        ALPHA_FNS[name](alpha)


@pytest.mark.parametrize("lam", [-0.1, NAN, INF])
@pytest.mark.parametrize("f", [lambda lam: simple_loss(P, N, lam=lam), lambda lam: hard_simple_loss(P, N, 0.5, lam=lam)],
                         ids=["simple_loss", "hard_simple_loss"])
def test_bad_lam_raises(f, lam):
    with pytest.raises(ValueError, match="lam"):
        f(lam)


@pytest.mark.parametrize("reduction", ["avg", "MEAN", "", None])
@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_bad_reduction_raises(name, reduction):
    with pytest.raises(ValueError, match="reduction"):
        ALL_LOSSES[name](P, N, reduction)


def _with(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("value", [NAN, INF, -INF])
@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_non_finite_similarities_raise(name, value):
    f = ALL_LOSSES[name]
    with pytest.raises(ValueError, match="pos"):
        f(_with(P, 1, value), N)
    with pytest.raises(ValueError, match="neg"):
        f(P, _with(N, (0, 2), value))


@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_shape_and_dtype_errors(name):
    f = ALL_LOSSES[name]
    with pytest.raises(ValueError, match="pos.*neg|neg.*pos"):  # batch mismatch names both
        f(P, N[:1])
    with pytest.raises(ValueError, match="neg"):  # K = 0
        f(P, N[:, :0])
    with pytest.raises(ValueError, match="pos"):
        f(P[:, None], N)
    with pytest.raises(ValueError, match="neg"):
        f(P, N[0])
    with pytest.raises(ValueError, match="pos"):
        f(torch.tensor([1, 0]), N)
    with pytest.raises(ValueError, match="neg"):
        f(P, torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("name", list(ALL_LOSSES))
def test_non_tensors_raise_type_error(name):
    f = ALL_LOSSES[name]
    with pytest.raises(TypeError, match="pos"):
        f(P.tolist(), N)
    with pytest.raises(TypeError, match="pos"):
        f(P.numpy(), N)
    with pytest.raises(TypeError, match="neg"):
        f(P, N.tolist())


def test_informative_mask_argument_errors():
    with pytest.raises(TypeError, match="neg"):
        informative_mask(N.tolist(), 0.5)
    with pytest.raises(ValueError, match="neg"):
        informative_mask(N[0], 0.5)


Z = F.normalize(torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0)), dim=1)


def test_pair_similarities_argument_errors():
    with pytest.raises(ValueError, match="z1"):
        pair_similarities(Z[:1], Z[:1])  # B = 1: no negatives
    with pytest.raises(ValueError, match="z1.*z2"):
        pair_similarities(Z, Z[:2])
    with pytest.raises(ValueError, match="z1"):
        pair_similarities(_with(Z, (0, 0), NAN), Z)
    with pytest.raises(ValueError, match="z2"):
        pair_similarities(Z, _with(Z, (2, 1), INF))
    with pytest.raises(ValueError, match="z1"):
        pair_similarities(Z[0], Z[0])
    with pytest.raises(TypeError, match="z1"):
        pair_similarities(Z.tolist(), Z)
    with pytest.raises(TypeError, match="z2"):
        pair_similarities(Z, Z.numpy())


# ============================================================ 9. gradients (autograd) against finite differences

def test_autograd_gradients_pass_gradcheck():
    gen = torch.Generator().manual_seed(0)
    pos = torch.rand(6, generator=gen, dtype=F64).requires_grad_()
    neg = torch.rand(6, 30, generator=gen, dtype=F64).requires_grad_()
    assert torch.autograd.gradcheck(lambda p, n: contrastive_loss(p, n, 0.2, "none"), (pos, neg))
    assert torch.autograd.gradcheck(lambda p, n: hard_contrastive_loss(p, n, 0.2, 0.25, "none"), (pos, neg))
    z1 = F.normalize(torch.randn(4, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    z2 = F.normalize(torch.randn(4, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    w = torch.randn(8, 6, generator=gen, dtype=F64)
    assert torch.autograd.gradcheck(lambda a, b: (lambda p, n: (p ** 2).sum() + (n * w).sum())(*pair_similarities(a, b)), (z1, z2))


def test_hard_contrastive_gradient_matches_autograd_of_kept_negatives():
    # reference: plain autograd through F.cross_entropy over the positive and the kept negatives only
    gen = torch.Generator().manual_seed(1)
    pos = torch.rand(8, generator=gen, dtype=F64)
    neg = torch.rand(8, 50, generator=gen, dtype=F64)
    p, n = pos.clone().requires_grad_(), neg.clone().requires_grad_()
    hard_contrastive_loss(p, n, 0.1, 0.1, "sum").backward()
    rp, rn = pos.clone().requires_grad_(), neg.clone().requires_grad_()
    keep = informative_mask(neg, 0.1)
    logits = torch.cat([rp[:, None], rn.masked_fill(~keep, float("-inf"))], dim=1) / 0.1
    F.cross_entropy(logits, torch.zeros(8, dtype=torch.long), reduction="sum").backward()
    assert_close(p.grad, rp.grad, rtol=1e-12, atol=1e-12)
    assert_close(n.grad, rn.grad, rtol=1e-12, atol=1e-12)
    assert (n.grad[~keep] == 0).all()




# --- no host sync with the value checks off, and float32 inside autocast (issue 16) ---
from ctl_explore.checks import value_checks
from ctl_explore.debug import count_host_syncs
from ctl_explore.losses import _pair_negative_index, dot_products, pair_similarities


@pytest.mark.parametrize("batch", [2, 3, 5, 16])
def test_pair_negative_index_lists_every_other_column_but_the_positive(batch):
    n = 2 * batch
    want = torch.tensor([[c for c in range(n) if c not in (r, (r + batch) % n)] for r in range(n)])
    assert torch.equal(_pair_negative_index.__wrapped__(batch, torch.device("cpu")), want)


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_pair_losses_read_no_value_when_checks_are_off(name):
    gen = torch.Generator().manual_seed(0)
    z1, z2 = [F.normalize(torch.randn(5, 4, generator=gen), dim=1).requires_grad_() for _ in range(2)]
    params = {p: {"tau": 0.2, "alpha": 0.4, "lam": 0.5}[p] for p in loss_spec(name).params}
    _pair_negative_index.cache_clear()  # the index is built on the device too, without a read
    with value_checks(False), count_host_syncs() as off:
        apply_loss(name, *pair_similarities(z1, z2), reduction="sum", **params).backward()
    assert off.total == 0, off.ops
    with count_host_syncs() as on:
        apply_loss(name, *pair_similarities(z1, z2), **params)
    assert on.total > 0  # the default keeps the finite checks


def test_dot_products_in_float32_inside_autocast_both_passes():
    gen = torch.Generator().manual_seed(1)
    a, b = torch.randn(6, 32, generator=gen), torch.randn(7, 32, generator=gen)
    w = torch.randn(6, 7, generator=gen)
    out = []
    for autocast in (False, True):
        x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            d = dot_products(x, y)
            (d * w).sum().backward()
        out.append((d.detach(), x.grad, y.grad))
    assert out[1][0].dtype == torch.float32
    for got, want in zip(out[1], out[0]): assert torch.equal(got, want)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert (a @ b.T).dtype == torch.bfloat16 and dot_products(a.double(), b.double()).dtype == torch.float64
    assert dot_products(a.bfloat16(), b.bfloat16()).dtype == torch.bfloat16  # outside autocast: the inputs' dtype, as @


# ============================================================ a temperature too small for the dtype (issue 24's message)

@pytest.mark.parametrize("dtype, smallest", [(torch.float32, "5.88e-39"), (torch.bfloat16, "5.9e-39"), (torch.float16, "3.05e-05")])
@pytest.mark.parametrize("name", ["contrastive", "hard_contrastive"])
def test_a_tau_below_the_dtype_range_is_refused_with_the_smallest_safe_value(name, dtype, smallest):
    pos, neg = torch.tensor([0.9, 0.5], dtype=dtype), torch.tensor([[0.1, 0.3, -0.2], [0.8, 0.0, 0.2]], dtype=dtype)
    tiny = 1e-40 if dtype != torch.float16 else 1e-5
    with pytest.raises(ValueError, match=rf"tau must be at least {re.escape(smallest)} for {str(dtype)[6:]} similarities"):
        LOSSES[name](pos, neg, tiny)
    assert torch.isfinite(LOSSES[name](pos, neg, float(smallest) * 1.01))  # just above it the loss is a number


def test_the_tau_check_reads_no_value_when_checks_are_off_and_measures_large_similarities_when_on():
    from ctl_explore.checks import value_checks
    from ctl_explore.debug import count_host_syncs
    from ctl_explore.losses import check_temperature
    pos, neg = torch.tensor([0.9, 0.5]), torch.tensor([[0.1, 0.3, -0.2], [0.8, 0.0, 0.2]])
    with value_checks(False), count_host_syncs() as syncs:
        with pytest.raises(ValueError, match="tau must be at least"): check_temperature(1e-40, pos, neg)
        assert check_temperature(1e-9, pos * 1e30, neg) == 1e-9  # unmeasured with the checks off: the dtype's bound only
    assert syncs.total == 0
    with pytest.raises(ValueError, match=r"of size up to 9e\+29"): check_temperature(1e-9, pos * 1e30, neg)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"): check_temperature(0.0, pos, neg)
    assert check_temperature(1e-40, pos.double(), neg.double()) == 1e-40  # float64 reaches far lower


def test_relative_penalty_and_loss_gradients_refuse_a_tau_below_the_dtype_range():
    from ctl_explore.gradients import loss_gradients, relative_penalty
    pos, neg = torch.tensor([0.9, 0.5]), torch.tensor([[0.1, 0.3, -0.2], [0.8, 0.0, 0.2]])
    for call in (lambda: relative_penalty(neg, 1e-40), lambda: loss_gradients(pos, neg, 1e-40)):
        with pytest.raises(ValueError, match="tau must be at least 5.88e-39"): call()
