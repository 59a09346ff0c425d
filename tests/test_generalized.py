"""Property tests of [CLL20]'s generalized losses in `ctl_explore.generalized` (lesson 11): alignment, LogSumExp, NT-Xent,
DCL, CLL20's decoupled NT-Xent and generalized loss checked against a transcription of the official colab, the sliced
Wasserstein distance, float32 under autocast, and the by-name switchboard."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from ctl_explore.generalized import (
    DISTRIBUTION_LOSSES, SWD_PRIORS, alignment_loss, apply_feature_loss,
    cll20_alignment, cll20_logsumexp, dcl_loss, decoupled_nt_xent_loss, generalized_loss, logsumexp_loss, nt_xent_loss,
    prior_samples, random_orthogonal, swd_loss,
)
from ctl_explore.losses import contrastive_loss, loss_names, loss_spec, pair_similarities
from ctl_strategies import log_uniform, logsumexp_py, unit_embeddings

FEATURE_LOSS_NAMES = loss_names("feature")  # the feature losses registered by lesson 11, read from the registry

F64 = torch.float64
seeds = st.integers(0, 2**32 - 1)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sim_py(a, b) -> float:
    return math.fsum(x * y for x, y in zip(a, b))


# ============================================================ 1. hand-computed small cases

def test_two_orthogonal_images_seen_identically_by_hand():
    # views: e1, e2 | e1, e2. Each anchor: positive at 1, two negatives at 0; alignment 0.
    e = torch.eye(2, dtype=F64)
    tau = 0.5
    assert_close(nt_xent_loss(e, e, tau, reduction="none"), torch.full((4,), -2.0 + math.log(math.exp(2.0) + 2), dtype=F64))
    assert_close(dcl_loss(e, e, tau, reduction="none"), torch.full((4,), -2.0 + math.log(2), dtype=F64))
    assert_close(logsumexp_loss(torch.cat([e, e]), tau, reduction="none"), torch.full((4,), math.log(math.exp(2.0) + 2), dtype=F64))
    assert alignment_loss(e, e).item() == 0.0


def test_alignment_by_hand():
    z1 = torch.tensor([[3.0, 0.0], [0.0, 1.0]], dtype=F64)
    z2 = torch.tensor([[0.0, 4.0], [0.0, 1.0]], dtype=F64)
    assert_close(alignment_loss(z1, z2, reduction="none"), torch.tensor([25 / 2, 0.0], dtype=F64))
    assert_close(alignment_loss(z1, z2, reduction="sum"), torch.tensor(12.5, dtype=F64))
    assert_close(alignment_loss(z1, z2), torch.tensor(6.25, dtype=F64))


@given(unit_embeddings(min_b=2, n_sets=1), log_uniform(0.05, 5.0))
def test_logsumexp_against_plain_python(zs, tau):
    (z,) = zs
    rows = z.tolist()
    want = [logsumexp_py([sim_py(rows[i], rows[j]) / tau for j in range(len(rows)) if j != i]) for i in range(len(rows))]
    assert_close(logsumexp_loss(z, tau, reduction="none"), torch.tensor(want, dtype=F64), rtol=1e-10, atol=1e-10)


@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.05, 5.0))
def test_nt_xent_and_dcl_against_plain_python(zs, tau):
    z1, z2 = zs
    b = len(z1)
    views = torch.cat([z1, z2]).tolist()
    want, want_dec = [], []
    for i in range(2 * b):
        p = (i + b) % (2 * b)
        pos = sim_py(views[i], views[p]) / tau
        negs = [sim_py(views[i], views[j]) / tau for j in range(2 * b) if j not in (i, p)]
        want.append(-pos + logsumexp_py([pos] + negs))
        want_dec.append(-pos + logsumexp_py(negs))
    assert_close(nt_xent_loss(z1, z2, tau, reduction="none"), torch.tensor(want, dtype=F64), rtol=1e-10, atol=1e-10)
    assert_close(dcl_loss(z1, z2, tau, reduction="none"), torch.tensor(want_dec, dtype=F64), rtol=1e-10, atol=1e-10)


def test_swd_in_one_dimension_by_hand():
    # d = 1: the orthogonal "matrix" is ±1; redo the draws with the same generator and compute in plain Python
    z = [0.3, -1.2, 2.0, 0.7]
    g = gen(11)
    sign = random_orthogonal(1, g, F64).item()
    prior = prior_samples("gaussian", 4, 1, g, F64)[:, 0].tolist()
    assert sign in (1.0, -1.0)
    want = math.fsum((a - b) ** 2 for a, b in zip(sorted(sign * x for x in z), sorted(sign * y for y in prior))) / 4
    got = swd_loss(torch.tensor(z, dtype=F64)[:, None], "gaussian", gen(11)).item()
    assert math.isclose(got, want, rel_tol=1e-12)


# ============================================================ 2. identities

@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.02, 20.0))
def test_nt_xent_is_lesson_00s_contrastive_loss_on_pair_similarities(zs, tau):
    z1, z2 = zs
    for red in ("none", "mean", "sum"):
        assert_close(nt_xent_loss(z1, z2, tau, reduction=red), contrastive_loss(*pair_similarities(z1, z2), tau, reduction=red),
                     rtol=1e-12, atol=1e-12)


@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.02, 20.0))
def test_tau_nt_xent_is_alignment_plus_tau_logsumexp_minus_one(zs, tau):
    z1, z2 = zs
    z = torch.cat([z1, z2])
    per_anchor = alignment_loss(z1, z2, reduction="none").repeat(2) + tau * logsumexp_loss(z, tau, reduction="none") - 1
    assert_close(tau * nt_xent_loss(z1, z2, tau, reduction="none"), per_anchor, rtol=1e-10, atol=1e-10)
    assert_close(tau * nt_xent_loss(z1, z2, tau) + 1, apply_feature_loss("align_logsumexp", z1, z2, lam=tau, tau=tau), rtol=1e-10, atol=1e-10)


@given(unit_embeddings(min_b=2, n_sets=2, normalise=False), log_uniform(0.1, 5.0), st.floats(0.0, 3.0))
def test_align_logsumexp_gradient_matches_autograd_of_the_parts(zs, tau, lam):
    # through the L2 normalisation an encoder applies: d/dx [align + λ·LSE] == d/dx align + λ·d/dx LSE, and at λ = τ
    # the gradient of the generalized loss is τ times NT-Xent's
    x1, x2 = (z.clone().requires_grad_() for z in zs)
    if (x1.norm(dim=1) < 1e-3).any() or (x2.norm(dim=1) < 1e-3).any(): return
    unit = lambda: (F.normalize(x1, dim=1), F.normalize(x2, dim=1))
    split = lambda l: apply_feature_loss("align_logsumexp", *unit(), lam=l, tau=tau)
    g_gen = torch.autograd.grad(split(lam), (x1, x2))
    u1, u2 = unit()
    g_align = torch.autograd.grad(alignment_loss(u1, u2), (x1, x2))
    u1, u2 = unit()
    g_lse = torch.autograd.grad(logsumexp_loss(torch.cat([u1, u2]), tau), (x1, x2))
    for a, b, c in zip(g_gen, g_align, g_lse): assert_close(a, b + lam * c, rtol=1e-9, atol=1e-9)
    g_tied = torch.autograd.grad(split(tau), (x1, x2))
    g_ntx = torch.autograd.grad(nt_xent_loss(*unit(), tau), (x1, x2))
    for a, b in zip(g_tied, g_ntx): assert_close(a, tau * b, rtol=1e-9, atol=1e-9)


@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.02, 20.0))
def test_dcl_differs_by_minus_log_one_minus_p_positive(zs, tau):
    z1, z2 = zs
    pos, neg = pair_similarities(z1, z2)
    p_pos = torch.softmax(torch.cat([pos[:, None], neg], dim=1) / tau, dim=1)[:, 0]
    gap = nt_xent_loss(z1, z2, tau, reduction="none") - dcl_loss(z1, z2, tau, reduction="none")
    # -log(1 - p) = softplus(pos/τ − LSE(neg/τ)): the stable form of the same quantity
    assert_close(gap, F.softplus(pos / tau - torch.logsumexp(neg / tau, dim=1)), rtol=1e-9, atol=1e-12)
    assert (gap >= -1e-9).all()  # ≥ 0 up to the rounding of a difference of two losses
    mask = p_pos < 0.999
    assert_close(gap[mask], -torch.log1p(-p_pos[mask]), rtol=1e-6, atol=1e-12)


@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.05, 5.0))
def test_dcl_positive_gradient_is_constant_and_nt_xents_fades(zs, tau):
    z1, z2 = zs
    pos, neg = pair_similarities(z1, z2)
    s = pos.clone().requires_grad_()
    (g_dec,) = torch.autograd.grad((torch.logsumexp(neg / tau, dim=1) - s / tau).sum(), s)
    (g_ce,) = torch.autograd.grad(contrastive_loss(s, neg, tau, reduction="sum"), s)
    p_pos = torch.softmax(torch.cat([pos[:, None], neg], dim=1) / tau, dim=1)[:, 0]
    assert_close(g_dec, torch.full_like(s, -1 / tau))
    assert_close(g_ce, -(1 - p_pos) / tau, rtol=1e-9, atol=1e-12)


# ============================================================ 3. the sliced Wasserstein distance

@given(st.integers(1, 12), seeds)
def test_random_orthogonal_is_orthogonal_and_reproducible(d, seed):
    w = random_orthogonal(d, gen(seed), F64)
    assert_close(w @ w.T, torch.eye(d, dtype=F64), rtol=0, atol=1e-12)
    assert torch.equal(w, random_orthogonal(d, gen(seed), F64))


@given(st.sampled_from(SWD_PRIORS), st.integers(1, 40), st.integers(1, 8), seeds)
def test_swd_is_reproducible_fresh_per_call_and_nonnegative(prior, n, d, seed):
    z = torch.randn(n, d, generator=gen(seed + 1), dtype=F64)
    a, b = swd_loss(z, prior, gen(seed)), swd_loss(z, prior, gen(seed))
    assert a.item() == b.item() and a.item() >= 0
    g = gen(seed)
    first, second = swd_loss(z, prior, g), swd_loss(z, prior, g)
    # a fresh projection and fresh prior samples each call (on the 0-sphere {−1, 1} two draws can coincide)
    if d > 1 or prior == "gaussian": assert first.item() != second.item()


@given(st.sampled_from(SWD_PRIORS), st.integers(2, 30), st.integers(1, 6), seeds)
def test_swd_ignores_the_order_of_the_batch(prior, n, d, seed):
    z = torch.randn(n, d, generator=gen(seed), dtype=F64)
    perm = torch.randperm(n, generator=gen(seed + 1))
    assert_close(swd_loss(z[perm], prior, gen(7)), swd_loss(z, prior, gen(7)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("prior, d", [("gaussian", 4), ("gaussian", 32), ("hypersphere", 4), ("hypersphere", 32), ("hypercube", 4)])
def test_swd_is_near_zero_for_prior_samples_and_clearly_positive_otherwise(prior, d):
    g = gen(0)
    n = 4096
    sample = prior_samples(prior, n, d, g, F64)
    own = swd_loss(sample, prior, g).item()
    scale = {"gaussian": 1.0, "hypersphere": 1.0 / d, "hypercube": 1.0 / 3}[prior]  # per-coordinate variance of the prior
    assert own < 0.01 * scale
    others = {
        "shifted": sample + math.sqrt(scale),
        "scaled": 2 * sample,
        "collapsed": sample[:1].expand(n, d),
        "in one orthant": F.normalize(sample.abs(), dim=1) if prior == "hypersphere" else sample.abs(),
    }
    for name, z in others.items():
        assert swd_loss(z, prior, g).item() > 10 * own, name
    # more samples of the prior, closer to zero (the estimator's own noise shrinks)
    small = [swd_loss(prior_samples(prior, 64, d, gen(s), F64), prior, gen(s + 1000)).item() for s in range(20)]
    large = [swd_loss(prior_samples(prior, 4096, d, gen(s), F64), prior, gen(s + 1000)).item() for s in range(5)]
    assert sum(large) / len(large) < 0.2 * sum(small) / len(small)


def test_swd_of_a_shift_is_the_shifts_mean_square_per_direction():
    # shifting a sample by μ shifts every projected coordinate by (Wᵀμ)_k: with the prior's own sample and the same
    # draws, SWD(y + μ) − SWD(y) = ‖μ‖²/d + (cross term, small for a large sample)
    d, n = 8, 20000
    y = prior_samples("gaussian", n, d, gen(3), F64)
    mu = torch.full((d,), 0.5, dtype=F64)
    gap = swd_loss(y + mu, "gaussian", gen(4)).item() - swd_loss(y, "gaussian", gen(4)).item()
    assert math.isclose(gap, mu.pow(2).sum().item() / d, rel_tol=0.05)


def test_swd_has_a_gradient_that_moves_toward_the_prior():
    g = gen(0)
    z = (0.2 * prior_samples("gaussian", 256, 8, g)).requires_grad_()
    opt = torch.optim.SGD([z], lr=z.numel() / 4)  # the loss is a mean over N·d terms: undo that scale, half steps
    before = swd_loss(z.detach(), "gaussian", gen(99)).item()
    for _ in range(50):
        loss = swd_loss(z, "gaussian", g)
        opt.zero_grad(); loss.backward(); opt.step()
    assert torch.isfinite(z).all()
    assert swd_loss(z.detach(), "gaussian", gen(99)).item() < 0.2 * before


# ============================================================ 4. the generalized loss and the switchboard

def test_generalized_swd_is_alignment_plus_lambda_swd():
    z1, z2 = prior_samples("hypersphere", 8, 5, gen(0), F64), prior_samples("hypersphere", 8, 5, gen(1), F64)
    for prior in SWD_PRIORS:
        want = cll20_alignment(z1, z2) + 3.0 * swd_loss(torch.cat([z1, z2]), prior, gen(5))
        assert_close(generalized_loss(z1, z2, 3.0, "swd", prior=prior, generator=gen(5)), want)
    assert_close(generalized_loss(z1, z2, 3.0, "swd", generator=gen(5)),
                 cll20_alignment(z1, z2) + 3.0 * swd_loss(torch.cat([z1, z2]), "hypersphere", gen(5)))


def test_feature_loss_registry_covers_every_name_with_the_right_function():
    assert FEATURE_LOSS_NAMES == ("nt_xent", "dcl", "decoupled_nt_xent", "align_logsumexp", "align_swd")
    assert loss_spec("dcl").params == ("tau",) and loss_spec("decoupled_nt_xent").params == ("tau", "lam")
    assert not set(FEATURE_LOSS_NAMES) & set(loss_names("similarity"))
    assert set(DISTRIBUTION_LOSSES) == {"logsumexp", "swd"}
    z1, z2 = prior_samples("hypersphere", 6, 4, gen(0), F64), prior_samples("hypersphere", 6, 4, gen(1), F64)
    want = {
        "nt_xent": nt_xent_loss(z1, z2, 0.3),
        "dcl": dcl_loss(z1, z2, 0.3),
        "decoupled_nt_xent": cll20_alignment(z1, z2) + 2.0 * cll20_logsumexp(torch.cat([z1, z2]), 0.3),
        "align_logsumexp": alignment_loss(z1, z2) + 2.0 * logsumexp_loss(torch.cat([z1, z2]), 0.3),
        "align_swd": cll20_alignment(z1, z2) + 2.0 * swd_loss(torch.cat([z1, z2]), "hypersphere", gen(8)),
    }
    for name, params in ((n, loss_spec(n).params) for n in FEATURE_LOSS_NAMES):
        got = apply_feature_loss(name, z1, z2, gen(8), **{p: {"tau": 0.3, "lam": 2.0}[p] for p in params})
        assert_close(got, want[name], msg=name)


# ============================================================ 4b. the official colab, transcribed
# google-research/simclr @ 383d4143fd8cf7879ae10f1046a9baeb753ff438,
# colabs/intriguing_properties/generalized_contrastive_loss.ipynb. "cell c, line l" counts code lines within a cell.
# The transcription is plain Python on lists, written from the colab's TensorFlow, not from the package.

def _l2_normalize(rows):  # tf.math.l2_normalize(x, -1)
    return [[v / math.sqrt(math.fsum(u * u for u in r)) for v in r] for r in rows]


def _matmul(a, b):
    return [[math.fsum(a[i][k] * b[k][j] for k in range(len(b))) for j in range(len(b[0]))] for i in range(len(a))]


def _colab_sort(x):
    # cell 3, lines 11–21: each row sorted ascending, by the rank of every entry (no ties in continuous draws)
    return [sorted(row) for row in x]


def colab_logsumexp_loss(states, temperature):
    # cell 3, lines 4–8: scores over all pairs (self included), minus bias = log(d), mean over rows
    bias = math.log(len(states[0]))
    rows = [logsumexp_py([sim_py(a, b) / temperature for b in states]) - bias for a in states]
    return math.fsum(rows) / len(rows)


def colab_swd_loss(states, rand_w, prior_draw, prior, hidden_norm):
    # cell 3, lines 24–40; prior_draw is the raw tf.random.normal / tf.random.uniform(-1, 1) sample (lines 29–32)
    states_t = _colab_sort(list(map(list, zip(*_matmul(states, rand_w)))))        # (dim, bsz), lines 26–27
    states_prior = _l2_normalize(prior_draw) if hidden_norm else prior_draw          # lines 35–36
    prior_t = _colab_sort(list(map(list, zip(*_matmul(states_prior, rand_w)))))   # lines 37–38
    diffs = [(p - q) ** 2 for rp, rq in zip(prior_t, states_t) for p, q in zip(rp, rq)]
    return math.fsum(diffs) / len(diffs)                                             # line 40


def colab_generalized_contrastive_loss(hidden1, hidden2, lambda_weight=1.0, temperature=1.0, dist="normal",
                                       hidden_norm=True, loss_scaling=1.0, rand_w=None, prior_draw=None):
    # cell 2, lines 1–33
    if hidden_norm:                                                                   # lines 20–22
        hidden1, hidden2 = _l2_normalize(hidden1), _l2_normalize(hidden2)
    entries = [(a - b) ** 2 for r1, r2 in zip(hidden1, hidden2) for a, b in zip(r1, r2)]
    loss_align = math.fsum(entries) / len(entries) / 2.0                              # line 23
    hiddens = hidden1 + hidden2                                                       # line 24: concat on axis 0
    if dist == "logsumexp":
        loss_dist_match = colab_logsumexp_loss(hiddens, temperature)                 # line 26
    else:
        loss_dist_match = colab_swd_loss(hiddens, rand_w, prior_draw, dist, hidden_norm)  # lines 28–32
    return loss_scaling * (loss_align + lambda_weight * loss_dist_match)             # line 33


def _swd_draws(seed, n, d, prior):
    # the draws swd_loss makes from its generator, in its order: the orthogonal matrix, then the prior's raw samples
    g = gen(seed)
    w = random_orthogonal(d, g, F64)
    if prior == "hypercube": raw = 2 * torch.rand(n, d, generator=g, dtype=F64) - 1
    else: raw = torch.randn(n, d, generator=g, dtype=F64)
    return w.tolist(), raw.tolist()


@given(unit_embeddings(min_b=1, n_sets=2, normalise=False), log_uniform(0.05, 5.0), st.floats(0.0, 3.0), log_uniform(0.1, 10.0))
def test_decoupled_nt_xent_is_the_colabs_logsumexp_configuration(zs, tau, lam, scaling):
    x1, x2 = zs
    if (x1.norm(dim=1) < 1e-3).any() or (x2.norm(dim=1) < 1e-3).any(): return
    want = colab_generalized_contrastive_loss(x1.tolist(), x2.tolist(), lam, tau, "logsumexp", True, scaling)
    u1, u2 = F.normalize(x1, dim=1), F.normalize(x2, dim=1)  # our losses take the encoder's unit vectors
    got = decoupled_nt_xent_loss(u1, u2, tau, lam, loss_scaling=scaling)
    assert math.isclose(got.item(), want, rel_tol=1e-10, abs_tol=1e-10)
    assert math.isclose(apply_feature_loss("decoupled_nt_xent", u1, u2, tau=tau, lam=lam).item() * scaling, want,
                        rel_tol=1e-10, abs_tol=1e-10)
    assert math.isclose(generalized_loss(u1, u2, lam, "logsumexp", tau=tau, loss_scaling=scaling).item(), want,
                        rel_tol=1e-10, abs_tol=1e-10)


@pytest.mark.parametrize("prior, dist, hidden_norm", [("hypersphere", "normal", True), ("gaussian", "normal", False),
                                                      ("hypercube", "uniform", False)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_generalized_swd_is_the_colabs_swd_configuration(prior, dist, hidden_norm, seed):
    # the colab's docstring (cell 2, lines 15–17): SWD with the uniform hypersphere, the normal, the uniform hypercube
    b, d = 5, 4
    x1, x2 = (torch.randn(b, d, generator=gen(100 + seed + k), dtype=F64) for k in (0, 1))
    z1, z2 = (F.normalize(x1, dim=1), F.normalize(x2, dim=1)) if hidden_norm else (x1, x2)
    rand_w, prior_draw = _swd_draws(seed, 2 * b, d, prior)
    want = colab_generalized_contrastive_loss(x1.tolist(), x2.tolist(), 0.7, 1.0, dist, hidden_norm, 1.0, rand_w, prior_draw)
    got = generalized_loss(z1, z2, 0.7, "swd", prior=prior, generator=gen(seed))
    assert math.isclose(got.item(), want, rel_tol=1e-10, abs_tol=1e-12)


@given(unit_embeddings(min_b=1, n_sets=2), log_uniform(0.05, 5.0))
def test_colab_pieces_against_the_transcription(zs, tau):
    z1, z2 = zs
    rows1, rows2 = z1.tolist(), z2.tolist()
    entries = [(a - b) ** 2 for r1, r2 in zip(rows1, rows2) for a, b in zip(r1, r2)]
    assert math.isclose(cll20_alignment(z1, z2).item(), math.fsum(entries) / len(entries) / 2, rel_tol=1e-10, abs_tol=1e-14)
    assert_close(cll20_alignment(z1, z2), alignment_loss(z1, z2) / z1.shape[1])  # the textbook alignment over d
    assert math.isclose(cll20_logsumexp(torch.cat([z1, z2]), tau).item(), colab_logsumexp_loss(rows1 + rows2, tau),
                        rel_tol=1e-10, abs_tol=1e-10)


def nt_xent_with_self_py(z1, z2, tau):
    # NT-Xent whose denominator keeps the anchor's own similarity, averaged over the 2B anchors, in plain Python
    views, b = z1 + z2, len(z1)
    out = []
    for i, a in enumerate(views):
        logits = [sim_py(a, c) / tau for c in views]
        out.append(logsumexp_py(logits) - logits[(i + b) % (2 * b)])
    return math.fsum(out) / len(out)


@given(unit_embeddings(min_b=2, n_sets=2), log_uniform(0.05, 5.0))
def test_decoupled_nt_xent_at_lambda_tau_over_d_is_nt_xent_with_the_self_term(zs, tau):
    z1, z2 = zs
    d = z1.shape[1]
    got = decoupled_nt_xent_loss(z1, z2, tau, lam=tau / d).item()
    want = tau / d * nt_xent_with_self_py(z1.tolist(), z2.tolist(), tau) - (tau * math.log(d) - 1) / d
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-10)
    # and the self term is what separates it from SimCLR's NT-Xent: a positive gap
    assert nt_xent_with_self_py(z1.tolist(), z2.tolist(), tau) > nt_xent_loss(z1, z2, tau).item() - 1e-12


def test_dcl_and_decoupled_nt_xent_are_different_losses():
    z1, z2 = prior_samples("hypersphere", 8, 6, gen(0), F64), prior_samples("hypersphere", 8, 6, gen(1), F64)
    dcl = apply_feature_loss("dcl", z1, z2, tau=0.2)
    assert_close(dcl, dcl_loss(z1, z2, 0.2))
    for lam in (0.2 / 6, 0.2, 1.0):
        assert not math.isclose(apply_feature_loss("decoupled_nt_xent", z1, z2, tau=0.2, lam=lam).item(), dcl.item(), rel_tol=1e-3)


# ============================================================ 4c. float32 under autocast

@pytest.mark.parametrize("name", FEATURE_LOSS_NAMES)
def test_losses_compute_in_float32_under_bf16_autocast(name):
    x1, x2 = (F.normalize(torch.randn(12, 8, generator=gen(k)), dim=1).requires_grad_() for k in (1, 2))
    params = {p: {"tau": 0.07, "lam": 0.3}[p] for p in loss_spec(name).params}
    plain = apply_feature_loss(name, x1, x2, gen(0), **params)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = apply_feature_loss(name, x1, x2, gen(0), **params)
    assert auto.dtype == torch.float32 and auto.item() == plain.item()
    for a, b in zip(torch.autograd.grad(auto, (x1, x2)), torch.autograd.grad(plain, (x1, x2))): assert torch.equal(a, b)


def test_every_public_loss_leaves_autocast():
    z1, z2 = (F.normalize(torch.randn(6, 5, generator=gen(k)), dim=1) for k in (3, 4))
    z = torch.cat([z1, z2])
    calls = {
        "alignment_loss": lambda: alignment_loss(z1, z2), "logsumexp_loss": lambda: logsumexp_loss(z, 0.1),
        "nt_xent_loss": lambda: nt_xent_loss(z1, z2, 0.1), "dcl_loss": lambda: dcl_loss(z1, z2, 0.1),
        "cll20_alignment": lambda: cll20_alignment(z1, z2), "cll20_logsumexp": lambda: cll20_logsumexp(z, 0.1),
        "decoupled_nt_xent_loss": lambda: decoupled_nt_xent_loss(z1, z2, 0.1, 0.5),
        "swd_loss": lambda: swd_loss(z, "hypersphere", gen(0)),
        "generalized_loss": lambda: generalized_loss(z1, z2, 2.0, "swd", generator=gen(0)),
    }
    for name, call in calls.items():
        plain = call()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            auto = call()
            half = {"alignment_loss": lambda: alignment_loss(z1.bfloat16(), z2.bfloat16())}.get(name)
            if half: assert half().dtype == torch.float32  # bfloat16 inputs are computed in float32
        assert auto.dtype == torch.float32 and auto.item() == plain.item(), name


# ============================================================ 5. bad input

Z = prior_samples("hypersphere", 4, 3, gen(0))


@pytest.mark.parametrize("call, message", [
    (lambda: swd_loss(Z, prior="uniform"), "prior must be one of ('gaussian', 'hypersphere', 'hypercube'), got 'uniform'"),
    (lambda: prior_samples("laplace", 3, 2), "prior must be one of"),
    (lambda: swd_loss(Z[0]), "z must have shape [N, d]"),
    (lambda: swd_loss(Z[:0]), "at least one embedding"),
    (lambda: swd_loss(torch.full((3, 2), float("inf"))), "z must hold finite"),
    (lambda: swd_loss(torch.ones(3, 2, dtype=torch.long)), "floating-point"),
    (lambda: random_orthogonal(0), "d must be an integer >= 1"),
    (lambda: random_orthogonal(2.5), "d must be an integer >= 1"),
    (lambda: logsumexp_loss(Z, tau=0), "tau must be a finite number > 0"),
    (lambda: logsumexp_loss(Z, tau=float("nan")), "tau must be a finite number > 0"),
    (lambda: logsumexp_loss(Z[:1], tau=0.5), "at least 2 rows"),
    (lambda: logsumexp_loss(Z, 0.5, reduction="avg"), "reduction must be one of"),
    (lambda: alignment_loss(Z, Z[:3]), "same shape"),
    (lambda: alignment_loss(Z[:0], Z[:0]), "at least one pair"),
    (lambda: nt_xent_loss(Z[:1], Z[:1], 0.5), "at least 2 samples"),
    (lambda: nt_xent_loss(Z, Z, -1.0), "tau must be a finite number > 0"),
    (lambda: dcl_loss(Z, Z[:, :2], 0.5), "same shape"),
    (lambda: dcl_loss(Z, Z, 0.5, reduction="max"), "reduction must be one of"),
    (lambda: decoupled_nt_xent_loss(Z, Z[:, :2], 0.5, 1.0), "same shape"),
    (lambda: decoupled_nt_xent_loss(Z, Z, 0.0, 1.0), "tau must be a finite number > 0"),
    (lambda: decoupled_nt_xent_loss(Z, Z, 0.5, 1.0, loss_scaling=-1.0), "loss_scaling must be a finite number > 0"),
    (lambda: cll20_logsumexp(Z[0], 0.5), "z must have shape [N, d]"),
    (lambda: apply_feature_loss("decoupled_nt_xent", Z, Z, tau=0.1), "the decoupled_nt_xent loss needs lam"),
    (lambda: apply_feature_loss("dcl", Z, Z, tau=0.1, lam=1.0), "the dcl loss takes tau; it does not take lam"),
    (lambda: generalized_loss(Z, Z, 1.0, "wasserstein", tau=0.1), "distribution must be one of ('logsumexp', 'swd')"),
    (lambda: generalized_loss(Z, Z, 1.0, "logsumexp"), "the logsumexp distribution loss needs tau"),
    (lambda: generalized_loss(Z, Z, 1.0, "swd", tau=0.1), "the swd distribution loss takes generator, prior; it does not take tau"),
    (lambda: generalized_loss(Z, Z, 1.0, "logsumexp", tau=0.1, prior="gaussian"), "does not take prior"),
    (lambda: generalized_loss(Z, Z, 1.0, "swd", prior="sphere"), "prior must be one of"),
    (lambda: generalized_loss(Z, Z, -0.5, tau=0.1), "lam must be a finite number >= 0"),
    (lambda: generalized_loss(Z, Z, float("inf"), tau=0.1), "lam must be a finite number >= 0"),
    (lambda: apply_feature_loss("simclr", Z, Z, tau=0.1), "loss must be one of ('nt_xent', 'dcl', 'decoupled_nt_xent', 'align_logsumexp', 'align_swd')"),
    (lambda: apply_feature_loss("nt_xent", Z, Z, tau=0.1, alpha=0.5), "the nt_xent loss takes tau; it does not take alpha"),
    (lambda: apply_feature_loss("align_logsumexp", Z, Z, tau=0.1), "the align_logsumexp loss needs lam"),
])
def test_bad_input_is_a_value_error_that_says_what_is_allowed(call, message):
    with pytest.raises(ValueError) as e: call()
    assert message in str(e.value)


def test_non_tensor_input_is_a_type_error():
    with pytest.raises(TypeError, match="z must be a torch.Tensor"): swd_loss([[0.0, 1.0]])
    with pytest.raises(TypeError, match="z1 must be a torch.Tensor"): alignment_loss([[0.0]], Z)
