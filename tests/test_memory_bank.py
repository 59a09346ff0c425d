"""The memory bank: EMA update and renormalisation, validation, the bank's similarities and its plain loss (Eq 1, Eq 9)
against lesson 00's losses on the split similarities, and the hard top-k against a brute-force reference."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from ctl_explore.losses import contrastive_loss, hard_contrastive_loss
from ctl_explore.memory_bank import MemoryBank, bank_contrastive_loss, bank_similarities, batch_loss
from ctl_strategies import log_uniform, unit_embeddings

F64 = torch.float64
NAN = float("nan")
Z = F.normalize(torch.randn(3, 4, dtype=F64, generator=torch.Generator().manual_seed(0)), dim=1)


def _with(t: torch.Tensor, index, value) -> torch.Tensor:
    t = t.clone()
    t[index] = value
    return t


def _bank(size=40, dim=6, momentum=0.5, seed=0):
    return MemoryBank(size, dim, momentum=momentum, generator=torch.Generator().manual_seed(seed))


def _queries(n, dim, seed=1):
    return F.normalize(torch.randn(n, dim, generator=torch.Generator().manual_seed(seed), dtype=torch.float32), dim=1)


@pytest.mark.parametrize("momentum", [0.0, 0.5, 0.9])
def test_update_is_the_renormalised_moving_average(momentum):
    bank = _bank(momentum=momentum)
    old = bank.features.clone()
    idx = torch.tensor([0, 5, 39])
    z = _queries(3, 6)
    bank.update(idx, z)
    expected = F.normalize(momentum * old[idx] + (1 - momentum) * z, dim=1)
    torch.testing.assert_close(bank.features[idx], expected)
    untouched = torch.ones(40, dtype=torch.bool)
    untouched[idx] = False
    assert torch.equal(bank.features[untouched], old[untouched])
    torch.testing.assert_close(bank.features.norm(dim=1), torch.ones(40))


def test_momentum_zero_copies_the_embedding():
    bank = _bank(momentum=0.0)
    z = _queries(2, 6)
    bank.update(torch.tensor([3, 4]), z)
    torch.testing.assert_close(bank.features[[3, 4]], z)


def test_state_dict_round_trip_and_initial_rows_are_unit_and_seeded():
    a, b = _bank(seed=7), _bank(seed=7)
    assert torch.equal(a.features, b.features)
    torch.testing.assert_close(a.features.norm(dim=1), torch.ones(40))
    a.update(torch.tensor([1]), _queries(1, 6))
    c = _bank(seed=8)
    c.load_state_dict(a.state_dict())
    assert torch.equal(c.features, a.features)


def _hard_reference(q, rows, idx, tau, alpha):
    "Anchor by anchor: sort the other rows' similarities and keep the ceil(alpha * (N - 1)) largest."
    out = []
    for i, row in enumerate(idx.tolist()):
        others = torch.cat([rows[:row], rows[row + 1:]]) @ q[i]
        kept = others.sort(descending=True).values[: math.ceil(alpha * len(others))]
        logits = torch.cat([(q[i] @ rows[row]).reshape(1), kept]) / tau
        out.append(-torch.log_softmax(logits, 0)[0])
    return torch.stack(out)


@pytest.mark.parametrize("alpha", [0.05, 0.0819, 0.3, 1.0])
@pytest.mark.parametrize("tau", [0.05, 0.2, 1.0])
def test_hard_loss_against_bank_matches_brute_force(alpha, tau):
    bank = MemoryBank(300, 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    q = _queries(12, 16).double()
    idx = torch.randperm(300, generator=torch.Generator().manual_seed(4))[:12]
    got = bank.loss(q, idx, "hard_contrastive", reduction="none", tau=tau, alpha=alpha)
    torch.testing.assert_close(got, _hard_reference(q, bank.features, idx, tau, alpha), rtol=1e-10, atol=1e-10)


def test_ordinary_loss_uses_every_other_row():
    bank = MemoryBank(30, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q = _queries(4, 5).double()
    idx = torch.tensor([0, 7, 8, 29])
    pos = (q * bank.features[idx]).sum(1)
    neg = torch.stack([torch.cat([bank.features[:r], bank.features[r + 1:]]) @ q[i] for i, r in enumerate(idx.tolist())])
    torch.testing.assert_close(bank.loss(q, idx, tau=0.1), contrastive_loss(pos, neg, 0.1))


def test_gradient_reaches_queries_not_bank():
    bank = _bank()
    q = _queries(3, 6).requires_grad_()
    bank.loss(q, torch.tensor([1, 2, 3]), tau=0.1).backward()
    assert q.grad is not None and torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0
    assert bank.features.grad is None and not bank.features.requires_grad


def test_batch_loss_matches_pair_formulation():
    z1, z2 = _queries(5, 8, seed=1), _queries(5, 8, seed=2)
    z = torch.cat([z1, z2])
    full = (z @ z.T).fill_diagonal_(float("-inf"))
    targets = torch.cat([torch.arange(5, 10), torch.arange(5)])
    torch.testing.assert_close(batch_loss(z1, z2, tau=0.3), F.cross_entropy(full / 0.3, targets))


@pytest.mark.parametrize("kwargs, message", [
    (dict(size=1, dim=4), r"size must be an integer >= 2 \(every sample needs a negative\)"),
    (dict(size=10, dim=0), "dim must be an integer >= 1"),
    (dict(size=10, dim=4, momentum=1.0), r"momentum must lie in \[0, 1\)"),
    (dict(size=10, dim=4, momentum=-0.1), "momentum"),
])
def test_bad_construction(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MemoryBank(**kwargs)


def test_bad_updates_and_queries():
    bank = _bank()
    z = _queries(2, 6)
    with pytest.raises(ValueError, match="must not repeat a row"):
        bank.update(torch.tensor([4, 4]), z)
    with pytest.raises(ValueError, match=r"in \[0, 40\)"):
        bank.update(torch.tensor([4, 40]), z)
    with pytest.raises(ValueError, match="z must have shape"):
        bank.update(torch.tensor([4, 5]), _queries(2, 5))
    with pytest.raises(ValueError, match="idx must be an integer tensor"):
        bank.loss(z, torch.tensor([1.0, 2.0]), tau=0.1)
    with pytest.raises(ValueError, match="does not take alpha"):
        bank.loss(z, torch.tensor([1, 2]), "contrastive", tau=0.1, alpha=0.5)


# ------------------------------------------------------------ the bank's similarities and its plain loss

@given(unit_embeddings(n_sets=1), st.integers(2, 12), st.integers(0, 2**32 - 1), st.booleans())
def test_bank_similarities_match_naive_loop(qs, n_rows, seed, int32):
    (q,) = qs
    b, d = q.shape
    gen = torch.Generator().manual_seed(seed)
    bank = F.normalize(torch.randn(n_rows, d, generator=gen, dtype=F64), dim=1)
    idx = torch.randint(0, n_rows, (b,), generator=gen, dtype=torch.int32 if int32 else torch.int64)
    pos, neg = bank_similarities(q, bank, idx)
    assert pos.shape == (b,) and neg.shape == (b, n_rows - 1)
    for i in range(b):
        own = int(idx[i])
        assert pos[i].item() == pytest.approx(float(q[i] @ bank[own]), abs=1e-12)
        expected = [float(q[i] @ bank[j]) for j in range(n_rows) if j != own]  # bank order, own row removed
        assert neg[i].tolist() == pytest.approx(expected, abs=1e-12)


def test_bank_similarities_keep_bank_order_around_own_row():
    # one-hot bank rows make every similarity identify its column
    bank = torch.eye(5, dtype=F64) * torch.arange(1, 6, dtype=F64)[:, None]
    q = torch.ones(3, 5, dtype=F64)
    pos, neg = bank_similarities(q, bank, torch.tensor([0, 2, 4]))
    assert pos.tolist() == [1.0, 3.0, 5.0]
    assert neg.tolist() == [[2, 3, 4, 5], [1, 2, 4, 5], [1, 2, 3, 4]]


def test_bank_similarities_argument_errors():
    bank = F.normalize(torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(1)), dim=1)
    idx = torch.tensor([0, 5, 2])
    with pytest.raises(ValueError, match="idx"):
        bank_similarities(Z, bank, torch.tensor([0, 6, 2]))
    with pytest.raises(ValueError, match="idx"):
        bank_similarities(Z, bank, torch.tensor([0, -1, 2]))
    with pytest.raises(ValueError, match="idx"):
        bank_similarities(Z, bank, idx.double())
    with pytest.raises(ValueError, match="idx"):
        bank_similarities(Z, bank, idx[:2])
    with pytest.raises(ValueError, match="bank"):
        bank_similarities(Z, bank[:, :3], idx)  # feature sizes differ
    with pytest.raises(ValueError, match="bank"):
        bank_similarities(Z, bank[:1], torch.tensor([0, 0, 0]))  # N = 1: no negatives
    with pytest.raises(ValueError, match="q"):
        bank_similarities(_with(Z, (1, 1), NAN), bank, idx)
    with pytest.raises(TypeError, match="q"):
        bank_similarities(Z.tolist(), bank, idx)
    with pytest.raises(TypeError, match="bank"):
        bank_similarities(Z, bank.tolist(), idx)


def test_bank_similarities_rejects_non_finite_bank():
    bank = F.normalize(torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(1)), dim=1)
    with pytest.raises(ValueError, match="bank"):
        bank_similarities(Z, _with(bank, (4, 0), NAN), torch.tensor([0, 5, 2]))


def test_bank_similarities_non_tensor_idx_raises_type_error():
    bank = F.normalize(torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(1)), dim=1)
    with pytest.raises(TypeError, match="idx"):
        bank_similarities(Z, bank, [0, 5, 2])


@given(unit_embeddings(n_sets=1), st.integers(2, 40), st.integers(0, 2**32 - 1), log_uniform(0.05, 5.0),
       st.one_of(st.none(), st.integers(1, 1000).map(lambda m: m / 1000)), st.booleans())
def test_bank_contrastive_loss_equals_the_loss_of_the_split_similarities(qs, n_rows, seed, tau, alpha, tied):
    (q,) = qs
    b, d = q.shape
    gen = torch.Generator().manual_seed(seed)
    bank = F.normalize(torch.randn(n_rows, d, generator=gen, dtype=F64), dim=1)
    if tied and n_rows > 3: bank[n_rows // 2:] = bank[1]  # many rows tied at one similarity
    idx = torch.randint(0, n_rows, (b,), generator=gen)
    a, c = q.clone().requires_grad_(), q.clone().requires_grad_()
    one = bank_contrastive_loss(a, bank, idx, tau, alpha, reduction="none")
    p, n = bank_similarities(c, bank, idx)
    two = contrastive_loss(p, n, tau, "none") if alpha is None else hard_contrastive_loss(p, n, tau, alpha, "none")
    assert_close(one, two, rtol=1e-10, atol=1e-10)
    (one * torch.arange(1, b + 1)).sum().backward()  # unequal weights: each anchor's gradient must be its own
    (two * torch.arange(1, b + 1)).sum().backward()
    assert_close(a.grad, c.grad, rtol=1e-9, atol=1e-10)


def test_bank_contrastive_loss_gradcheck_and_argument_errors():
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(4, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    bank = F.normalize(torch.randn(20, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    idx = torch.tensor([0, 3, 3, 19])
    for alpha in (None, 0.2):
        assert torch.autograd.gradcheck(lambda a, v: bank_contrastive_loss(a, v, idx, 0.3, alpha, "none"), (q, bank))
    q, bank = q.detach(), bank.detach()
    for args, kwargs, message in [((0.0,), {}, "tau must be a finite number > 0"), ((0.1, 1.5), {}, r"alpha must lie in \(0, 1\]"),
                                  ((0.1,), dict(reduction="avg"), "reduction must be one of")]:
        with pytest.raises(ValueError, match=message):
            bank_contrastive_loss(q, bank, idx, *args, **kwargs)
    with pytest.raises(ValueError, match=r"idx must hold rows of bank, in \[0, 20\)"):
        bank_contrastive_loss(q, bank, torch.tensor([0, 1, 2, 20]), 0.1)
    with pytest.raises(ValueError, match="same feature size"):
        bank_contrastive_loss(q[:, :3], bank, idx, 0.1)
    with pytest.raises(ValueError, match="q must hold finite values"):
        bank_contrastive_loss(_with(q, (1, 2), NAN), bank, idx, 0.1)


@pytest.mark.parametrize("name, params", [("contrastive", dict(tau=0.2)), ("hard_contrastive", dict(tau=0.2, alpha=0.1))])
def test_bank_loss_fast_and_plain_agree(name, params):
    bank = _bank(size=300, dim=16)
    q = _queries(8, 16).requires_grad_()
    idx = torch.randperm(300, generator=torch.Generator().manual_seed(2))[:8]
    plain = bank.loss(q, idx, name, fast=False, **params)
    (g_plain,) = torch.autograd.grad(plain, q)
    fast = bank.loss(q, idx, name, **params)
    (g_fast,) = torch.autograd.grad(fast, q)
    assert_close(fast, plain, rtol=1e-5, atol=1e-6)
    assert_close(g_fast, g_plain, rtol=1e-4, atol=1e-6)
