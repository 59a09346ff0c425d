"""Issue 40, item 8: the hard losses read each anchor's k-th largest negative as the least of `topk(k, sorted=False)`,
not as the last of a sorted top k (at [WL21]'s CIFAR10 size a sort of 4,095 values per query that nothing reads).
The three selections with torch.topk (lesson 00's `informative_mask`, lesson 06's `bank_contrastive_loss`, lesson 14's
dense path) must ask for no sort, and keep exactly the negatives a sorted selection keeps, ties included."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ctl_explore.fast as fast
from ctl_explore.losses import hard_contrastive_loss, hard_simple_loss, informative_mask, n_informative
from ctl_explore.memory_bank import bank_contrastive_loss


@pytest.fixture
def topk_calls(monkeypatch):
    "Every call of Tensor.topk while the test runs: (k, whether it sorted)."
    calls, topk = [], torch.Tensor.topk
    def spy(self, k, *args, **kwargs):
        calls.append((k, kwargs.get("sorted", args[2] if len(args) > 2 else True)))
        return topk(self, k, *args, **kwargs)
    monkeypatch.setattr(torch.Tensor, "topk", spy)
    return calls


def _tied(rows: int, cols: int, levels: int, seed: int = 0) -> torch.Tensor:
    "Similarities in [-1, 1] that take only `levels` values: many ties at every quantile."
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, levels, (rows, cols), generator=g).float() / (levels - 1) * 2 - 1


def _kth_largest(x: torch.Tensor, k: int) -> torch.Tensor:
    "Each row's k-th largest value, by a sort (the reference the selection must match)."
    return x.sort(dim=1, descending=True).values[:, k - 1:k]


def test_informative_mask_sorts_nothing(topk_calls):
    neg = _tied(8, 300, 7)
    informative_mask(neg, 0.1)
    assert topk_calls == [(n_informative(300, 0.1), False)]


@pytest.mark.parametrize("levels", [3, 7, 1000])
@pytest.mark.parametrize("alpha", [0.0819, 0.5, 1.0, 1e-6])
def test_informative_mask_matches_sorted_selection(levels, alpha):
    neg = _tied(16, 257, levels, seed=levels)
    k = n_informative(257, alpha)
    expected = neg >= _kth_largest(neg, k)
    assert torch.equal(informative_mask(neg, alpha), expected)
    assert (expected.sum(dim=1) >= k).all()  # ties with the k-th largest come on top


def test_hard_losses_on_ties_match_sorted_selection():
    pos, neg = _tied(16, 1, 5, seed=1).squeeze(1), _tied(16, 200, 5, seed=2)
    k = n_informative(200, 0.0819)
    kept = neg >= _kth_largest(neg, k)
    logits = torch.cat([pos[:, None], neg.masked_fill(~kept, float("-inf"))], dim=1) / 0.2
    # the same kept negatives; the reference's arithmetic rounds in another order (a few float32 ulps)
    torch.testing.assert_close(hard_contrastive_loss(pos, neg, 0.2, 0.0819), -F.log_softmax(logits, 1)[:, 0].mean(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(hard_simple_loss(pos, neg, 0.0819, lam=0.5),
                               (0.5 * neg.masked_fill(~kept, 0).sum(1) - pos).mean(), rtol=1e-6, atol=1e-6)


def _bank_reference(q, bank, idx, tau, alpha):
    "Eq 9 against the bank with the k-th largest negative found by a sort."
    sim = q @ bank.T
    others = sim.scatter(1, idx[:, None], float("-inf"))
    s_alpha = _kth_largest(others, n_informative(bank.shape[0] - 1, alpha))
    sim = sim.masked_fill((others < s_alpha).scatter_(1, idx[:, None], False), float("-inf"))
    return F.cross_entropy(sim / tau, idx, reduction="none")


def _bank_inputs(levels: int):
    "Queries and a bank whose similarities tie often: rows of a few unit vectors."
    g = torch.Generator().manual_seed(3)
    atoms = F.normalize(torch.randn(levels, 8, generator=g), dim=1)
    bank = atoms[torch.randint(0, levels, (120,), generator=g)]
    idx = torch.randperm(120, generator=g)[:10]
    return bank[idx].clone(), bank, idx


@pytest.mark.parametrize("levels", [4, 50])
def test_bank_loss_sorts_nothing_and_matches_sorted_selection(topk_calls, levels):
    q, bank, idx = _bank_inputs(levels)
    loss = bank_contrastive_loss(q, bank, idx, 0.2, alpha=0.0819, reduction="none")
    assert topk_calls and all(not sorted_ for _, sorted_ in topk_calls)
    torch.testing.assert_close(loss, _bank_reference(q, bank, idx, 0.2, 0.0819), rtol=0, atol=0)


@pytest.mark.parametrize("levels", [4, 50])
def test_fast_bank_loss_dense_path_sorts_nothing(monkeypatch, topk_calls, levels):
    monkeypatch.setattr(fast, "can_select_fast", lambda sims: False)  # lesson 14's path without lesson 13's kernel
    q, bank, idx = _bank_inputs(levels)
    loss = fast.fast_bank_contrastive_loss(q, bank, idx, 0.2, alpha=0.0819, reduction="none")
    assert topk_calls and all(not sorted_ for _, sorted_ in topk_calls)
    torch.testing.assert_close(loss, _bank_reference(q, bank, idx, 0.2, 0.0819), rtol=1e-6, atol=1e-6)
