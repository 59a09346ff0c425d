"""The memory bank: EMA update and renormalisation, validation, and the hard top-k against a brute-force reference."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ctl_explore.losses import contrastive_loss
from ctl_explore.memory_bank import MemoryBank, batch_loss


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
    (dict(size=1, dim=4), "size must be at least 2"),
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
