"""Property tests of `ctl_explore.gradients`: [WL21] Eq 2, 4, 5 and 8, and the entropy of the relative penalty."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from ctl_explore.gradients import loss_gradients, penalty_entropy, relative_penalty
from ctl_explore.losses import contrastive_loss, hard_contrastive_loss, informative_mask, n_informative
from ctl_strategies import (
    distinct_neg, log_uniform, logsumexp_py, ref_entropy, sims, tie_floats, top_gap_neg, unit_floats,
)

F64 = torch.float64
any_floats = st.one_of(unit_floats, tie_floats)
alphas = st.integers(1, 1000).map(lambda m: m / 1000)


def autograd_of_sum_loss(pos, neg, tau, alpha=None):
    "d/d(pos, neg) of Σ_i L(x_i): each anchor's own loss, by autograd."
    pos, neg = pos.detach().clone().requires_grad_(), neg.detach().clone().requires_grad_()
    loss = (contrastive_loss(pos, neg, tau, reduction="sum") if alpha is None
            else hard_contrastive_loss(pos, neg, tau, alpha, reduction="sum"))
    loss.backward()
    return pos.grad, neg.grad


# ============================================================ 2. Eq 4 and Eq 5

@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_eq4_matches_autograd(ps, tau):
    pos, neg = ps
    dpos, dneg = loss_gradients(pos, neg, tau)
    assert dpos.shape == pos.shape and dneg.shape == neg.shape
    apos, aneg = autograd_of_sum_loss(pos, neg, tau)
    assert_close(dpos, apos, rtol=1e-8, atol=1e-8)
    assert_close(dneg, aneg, rtol=1e-8, atol=1e-8)


@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_eq4_matches_plain_python_eq2(ps, tau):
    # P_ij = exp(s_ij/τ) / (exp(s_ii/τ) + Σ_k exp(s_ik/τ)); ∂L/∂s_ii = -(1/τ) Σ_k P_ik, ∂L/∂s_ij = P_ij/τ
    pos, neg = ps
    dpos, dneg = loss_gradients(pos, neg, tau)
    for i, (p, row) in enumerate(zip(pos.tolist(), neg.tolist())):
        lse = logsumexp_py([p / tau] + [s / tau for s in row])
        probs = [math.exp(s / tau - lse) for s in row]
        assert dneg[i].tolist() == pytest.approx([q / tau for q in probs], rel=1e-10, abs=1e-300)
        assert dpos[i].item() == pytest.approx(-math.fsum(probs) / tau, rel=1e-10, abs=1e-300)


@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_positive_push_equals_total_negative_push(ps, tau):
    pos, neg = ps
    dpos, dneg = loss_gradients(pos, neg, tau)
    assert (dpos <= 0).all() and (dneg >= 0).all()  # the loss falls with s_ii and rises with every s_ij
    assert_close(dpos.abs(), dneg.abs().sum(dim=1), rtol=1e-12, atol=0)


@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_relative_penalty_is_the_gradient_ratio_and_sums_to_one(ps, tau):
    pos, neg = ps
    dpos, dneg = loss_gradients(pos, neg, tau)
    r = relative_penalty(neg, tau)
    assert r.shape == neg.shape and (r >= 0).all()
    assert_close(r.sum(dim=1), torch.ones(len(pos), dtype=F64), rtol=0, atol=1e-12)
    assert_close(dneg / dpos.abs()[:, None], r, rtol=1e-10, atol=1e-14)
    # and from autograd alone, without loss_gradients. Autograd gets ∂L/∂s_ii as -(1 - P_ii)/τ, which cancels
    # when P_ii ≈ 1, so compare products (absolute error ~ eps/τ) rather than the ratio.
    apos, aneg = autograd_of_sum_loss(pos, neg, tau)
    assert_close(aneg, r * apos.abs()[:, None], rtol=1e-9, atol=1e-13 / tau)


@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_relative_penalty_is_a_boltzmann_distribution(ps, tau):
    _, neg = ps
    r = relative_penalty(neg, tau)
    for rrow, row in zip(r.tolist(), neg.tolist()):
        lse = logsumexp_py([s / tau for s in row])
        assert rrow == pytest.approx([math.exp(s / tau - lse) for s in row], rel=1e-10, abs=1e-300)
        # harder (more similar) negatives get at least as much of the push
        order = sorted(range(len(row)), key=row.__getitem__)
        assert all(rrow[a] <= rrow[b] for a, b in zip(order, order[1:]))


@given(sims(elements=any_floats), log_uniform(0.02, 50.0))
def test_mean_reduction_gradient_is_eq4_over_b(ps, tau):
    # Eq 4 is per anchor: the gradient of the batch mean is Eq 4 divided by B
    pos, neg = (t.clone().requires_grad_() for t in ps)
    contrastive_loss(pos, neg, tau).backward()
    dpos, dneg = loss_gradients(ps[0], ps[1], tau)
    assert_close(pos.grad * len(pos), dpos, rtol=1e-8, atol=1e-8)
    assert_close(neg.grad * len(pos), dneg, rtol=1e-8, atol=1e-8)


@given(sims(elements=any_floats), alphas, log_uniform(0.05, 20.0))
def test_eq8_is_the_hard_loss_gradient_ratio(ps, alpha, tau):
    pos, neg = ps
    r = relative_penalty(neg, tau, alpha=alpha)
    mask = informative_mask(neg, alpha)
    assert (r[~mask] == 0).all()
    assert (r[mask] > 0).all()
    assert_close(r.sum(dim=1), torch.ones(len(pos), dtype=F64), rtol=0, atol=1e-12)
    apos, aneg = autograd_of_sum_loss(pos, neg, tau, alpha=alpha)
    assert_close(aneg, r * apos.abs()[:, None], rtol=1e-9, atol=1e-13 / tau)  # see the Eq 5 test for why
    # Eq 8 is Eq 5 conditioned on the informative negatives
    full = relative_penalty(neg, tau) * mask
    assert_close(r, full / full.sum(dim=1, keepdim=True), rtol=1e-10, atol=1e-14)


@given(sims(elements=any_floats), log_uniform(1e-3, 1e3))
def test_alpha_one_changes_nothing(ps, tau):
    _, neg = ps
    assert_close(relative_penalty(neg, tau, alpha=1.0), relative_penalty(neg, tau), rtol=0, atol=0)
    assert_close(penalty_entropy(neg, tau, alpha=1.0), penalty_entropy(neg, tau), rtol=0, atol=0)


# ============================================================ 3. entropy of the relative penalty vs τ

TAU_GRID = torch.logspace(math.log10(0.05), math.log10(5.0), 25, dtype=F64).tolist()


@given(distinct_neg(min_gap=1e-3))
def test_entropy_strictly_increases_with_tau(neg):
    h = torch.stack([penalty_entropy(neg, tau) for tau in TAU_GRID], dim=1)  # [B, len(grid)]
    assert (h[:, 1:] > h[:, :-1]).all(), h


@given(distinct_neg(min_gap=1e-3), alphas)
def test_hard_entropy_increases_with_tau(neg, alpha):
    # with alpha, the kept set does not depend on τ: the same Boltzmann argument applies to it (when it has >= 2)
    h = torch.stack([penalty_entropy(neg, tau, alpha=alpha) for tau in TAU_GRID], dim=1)
    if n_informative(neg.shape[1], alpha) >= 2:
        assert (h[:, 1:] > h[:, :-1]).all(), h
    else:
        assert (h.abs() <= 1e-12).all(), h  # one kept negative: r is one-hot, H = 0


@given(sims(elements=any_floats))
def test_entropy_tends_to_log_k_as_tau_grows(ps):
    _, neg = ps
    tau = 1e4
    h = penalty_entropy(neg, tau)
    log_k = math.log(neg.shape[1])
    spread = neg.amax(dim=1) - neg.amin(dim=1)
    # log K - H = KL(r || uniform) <= max_j log(K r_j) <= spread/τ
    assert (log_k - h >= -1e-12).all()
    assert (log_k - h <= spread / tau + 1e-12).all()
    assert (log_k - h <= 1e-3).all()
    r = relative_penalty(neg, tau)
    assert_close(r, torch.full_like(r, 1 / neg.shape[1]), rtol=3e-4, atol=0)


@given(top_gap_neg(gap=0.01))
def test_entropy_tends_to_zero_as_tau_shrinks(neg):
    tau = 1e-4
    assert (penalty_entropy(neg, tau) <= 1e-10).all()
    r = relative_penalty(neg, tau)
    nearest = neg.argmax(dim=1)
    assert_close(r, torch.nn.functional.one_hot(nearest, neg.shape[1]).to(F64), rtol=0, atol=1e-30)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)], ids=["f64", "f32"])
@given(ps=sims(elements=any_floats), tau=log_uniform(1e-4, 1e4))
def test_entropy_lies_between_zero_and_log_k(dtype, tol, ps, tau):
    _, neg = ps
    h = penalty_entropy(neg.to(dtype), tau)
    assert h.shape == (neg.shape[0],) and h.dtype == dtype
    assert (h >= -tol).all() and (h <= math.log(neg.shape[1]) + tol).all(), h


@given(sims(elements=any_floats), log_uniform(1e-2, 1e2))
def test_entropy_matches_plain_python(ps, tau):
    _, neg = ps
    h = penalty_entropy(neg, tau)
    for hi, row in zip(h.tolist(), neg.tolist()):
        lse = logsumexp_py([s / tau for s in row])
        assert hi == pytest.approx(ref_entropy([math.exp(s / tau - lse) for s in row]), rel=1e-9, abs=1e-12)


@given(st.integers(1, 6), st.integers(1, 40), unit_floats, log_uniform(1e-4, 1e4))
def test_equal_negatives_give_uniform_penalty(b, k, s, tau):
    neg = torch.full((b, k), s, dtype=F64)
    assert_close(relative_penalty(neg, tau), torch.full((b, k), 1 / k, dtype=F64))
    assert_close(penalty_entropy(neg, tau), torch.full((b,), math.log(k), dtype=F64), rtol=1e-12, atol=1e-12)


@given(sims(elements=any_floats), alphas, log_uniform(1e-4, 1e4))
def test_hard_entropy_is_at_most_log_of_kept_count(ps, alpha, tau):
    _, neg = ps
    h = penalty_entropy(neg, tau, alpha=alpha)
    kept = informative_mask(neg, alpha).sum(dim=1).to(F64)
    assert (h >= -1e-12).all()
    assert (h <= kept.log() + 1e-12).all()
    # and as τ → ∞ the hard penalty becomes uniform over the kept negatives
    assert_close(penalty_entropy(neg, 1e4, alpha=alpha), kept.log(), rtol=0, atol=1e-3)


# ============================================================ 5. stability over τ and dtypes

STABILITY_TAUS = (1e-4, 1e-2, 1.0, 1e2, 1e4)
DTYPES = [torch.float32, torch.float64, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(ps=sims(max_b=4, max_k=20, elements=any_floats))
def test_gradient_functions_are_finite(dtype, ps):
    pos, neg = ps[0].to(dtype), ps[1].to(dtype)
    for tau in STABILITY_TAUS:
        dpos, dneg = loss_gradients(pos, neg, tau)
        assert dpos.dtype == dtype and dneg.dtype == dtype
        assert torch.isfinite(dpos).all() and torch.isfinite(dneg).all(), tau
        for alpha in (None, 0.3, 1.0):
            assert torch.isfinite(relative_penalty(neg, tau, alpha=alpha)).all(), (tau, alpha)
            assert torch.isfinite(penalty_entropy(neg, tau, alpha=alpha)).all(), (tau, alpha)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@given(ps=sims(max_b=4, max_k=20, elements=any_floats))
def test_entropy_has_finite_gradient(dtype, ps):
    for tau in STABILITY_TAUS:
        neg = ps[1].to(dtype).requires_grad_()
        penalty_entropy(neg, tau).sum().backward()
        assert torch.isfinite(neg.grad).all(), tau


def test_hard_entropy_has_finite_gradient():
    neg = torch.tensor([[0.9, 0.5, 0.1, -0.3]], dtype=F64, requires_grad=True)
    penalty_entropy(neg, 0.5, alpha=0.5).sum().backward()
    assert torch.isfinite(neg.grad).all(), neg.grad


# ============================================================ 8. argument checking

P = torch.tensor([0.1, 0.2], dtype=F64)
N = torch.tensor([[0.3, -0.4, 0.5], [0.0, 0.6, -0.1]], dtype=F64)
NAN, INF = float("nan"), float("inf")

NEG_FNS = {
    "relative_penalty": relative_penalty,
    "penalty_entropy": penalty_entropy,
}


def _with(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


@pytest.mark.parametrize("tau", [0, -0.5, NAN, INF, None])
def test_bad_tau_raises(tau):
    with pytest.raises(ValueError, match="tau"):
        loss_gradients(P, N, tau)
    for f in NEG_FNS.values():
        with pytest.raises(ValueError, match="tau"):
            f(N, tau)


@pytest.mark.parametrize("alpha", [0, -0.1, 1.5, NAN])
@pytest.mark.parametrize("name", list(NEG_FNS))
def test_bad_alpha_raises(name, alpha):
    with pytest.raises(ValueError, match="alpha"):
        NEG_FNS[name](N, 0.5, alpha=alpha)


@pytest.mark.parametrize("value", [NAN, INF, -INF])
def test_non_finite_similarities_raise(value):
    with pytest.raises(ValueError, match="pos"):
        loss_gradients(_with(P, 0, value), N, 0.5)
    with pytest.raises(ValueError, match="neg"):
        loss_gradients(P, _with(N, (1, 1), value), 0.5)
    for f in NEG_FNS.values():
        with pytest.raises(ValueError, match="neg"):
            f(_with(N, (1, 1), value), 0.5)
        with pytest.raises(ValueError, match="neg"):
            f(_with(N, (0, 2), value), 0.5, alpha=0.5)


def test_shape_errors():
    with pytest.raises(ValueError, match="pos.*neg|neg.*pos"):
        loss_gradients(P, N[:1], 0.5)
    with pytest.raises(ValueError, match="neg"):
        loss_gradients(P, N[:, :0], 0.5)
    with pytest.raises(ValueError, match="pos"):
        loss_gradients(P[:, None], N, 0.5)
    for f in NEG_FNS.values():
        with pytest.raises(ValueError, match="neg"):
            f(N[:, :0], 0.5)
        with pytest.raises(ValueError, match="neg"):
            f(N[0], 0.5)
        with pytest.raises(ValueError, match="neg"):
            f(torch.zeros(2, 3, dtype=torch.long), 0.5)


def test_non_tensors_raise_type_error():
    with pytest.raises(TypeError, match="pos"):
        loss_gradients(P.tolist(), N, 0.5)
    with pytest.raises(TypeError, match="neg"):
        loss_gradients(P, N.numpy(), 0.5)
    for f in NEG_FNS.values():
        with pytest.raises(TypeError, match="neg"):
            f(N.tolist(), 0.5)
        with pytest.raises(TypeError, match="neg"):
            f(N.tolist(), 0.5, alpha=0.5)
