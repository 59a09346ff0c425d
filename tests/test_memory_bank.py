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


# --- a training step's loss and update with no host sync, and autocast-safe losses (issue 16) ---
from ctl_explore.checks import value_checks
from ctl_explore.debug import count_host_syncs
from ctl_explore.losses import loss_names, loss_spec

LOSS_NAMES = loss_names("similarity")  # lesson 00's losses, read from the registry

_PARAMS = {"tau": 0.1, "alpha": 0.3, "lam": 0.5}


def _params(name):
    return {p: _PARAMS[p] for p in loss_spec(name).params}


def _bank_case(seed=0):
    gen = torch.Generator().manual_seed(seed)
    bank = MemoryBank(300, 16, generator=gen)
    q = F.normalize(torch.randn(8, 16, generator=gen), dim=1)
    return bank, q, torch.randperm(300, generator=gen)[:8]


@pytest.mark.parametrize("name", LOSS_NAMES)
@pytest.mark.parametrize("fast", [True, False])
def test_bank_loss_and_update_read_no_value_when_checks_are_off(name, fast):
    bank, q, idx = _bank_case()
    q.requires_grad_()
    with count_host_syncs() as on:  # the default: the argument checks read values
        bank.loss(q, idx, name, fast=fast, **_params(name))
    assert on.total > 0
    with value_checks(False), count_host_syncs() as off:
        bank.loss(q, idx, name, fast=fast, **_params(name)).backward()
        bank.update(idx, q)
    assert off.total == 0, off.ops


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_batch_loss_reads_no_value_when_checks_are_off(name):
    gen = torch.Generator().manual_seed(1)
    z1, z2 = [F.normalize(torch.randn(6, 8, generator=gen), dim=1).requires_grad_() for _ in range(2)]
    with value_checks(False), count_host_syncs() as off:
        batch_loss(z1, z2, name, **_params(name)).backward()
    assert off.total == 0, off.ops


def test_update_keeps_its_repeated_row_check_by_default_only():
    bank, q, _ = _bank_case()
    with pytest.raises(ValueError, match="must not repeat a row"):
        bank.update(torch.tensor([1, 1, 2, 3, 4, 5, 6, 7]), q)
    with value_checks(False):
        bank.update(torch.tensor([1, 2, 3, 4, 5, 6, 7, 8]), q)  # runs, and reads nothing (above)


def _value_and_grads(fn, *xs, autocast):
    xs = [x.clone().requires_grad_() for x in xs]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = fn(*xs)
        loss.backward()
    return loss.detach(), [x.grad for x in xs]


@pytest.mark.parametrize("name", LOSS_NAMES)
def test_losses_compute_in_float32_inside_autocast(name):
    bank, q, idx = _bank_case(2)
    gen = torch.Generator().manual_seed(3)
    z1, z2 = [F.normalize(torch.randn(8, 16, generator=gen), dim=1) for _ in range(2)]
    cases = [(lambda a, fast=fast: bank.loss(a, idx, name, fast=fast, **_params(name)), (q,)) for fast in (True, False)]
    cases.append((lambda a, b: batch_loss(a, b, name, **_params(name)), (z1, z2)))
    for fn, xs in cases:
        ref, ref_grads = _value_and_grads(fn, *xs, autocast=False)
        got, grads = _value_and_grads(fn, *xs, autocast=True)
        assert got.dtype == torch.float32
        assert_close(got, ref, rtol=1e-6, atol=1e-7)
        for g, r in zip(grads, ref_grads): assert_close(g, r, rtol=1e-6, atol=1e-7)


def test_plain_bank_loss_computes_in_float32_inside_autocast():
    bank, q, idx = _bank_case(4)
    for alpha in (None, 0.2):
        fn = lambda a: bank_contrastive_loss(a, bank.features, idx, 0.05, alpha)
        (ref, (rg,)), (got, (g,)) = [_value_and_grads(fn, q, autocast=ac) for ac in (False, True)]
        assert_close(got, ref, rtol=1e-6, atol=1e-7); assert_close(g, rg, rtol=1e-6, atol=1e-7)
        # what the bf16 products would have cost: a visibly different gradient
        with torch.autocast("cpu", dtype=torch.bfloat16):
            a = q.clone().requires_grad_()
            F.cross_entropy((a @ bank.features.T) / 0.05, idx).backward()
        assert (a.grad - rg).abs().max() > 1e-4


# ------------------------------------------------------------ non-finite features and tiny temperatures (issue 24's messages)

def test_update_refuses_non_finite_features_and_leaves_the_bank_as_it_was():
    bank = _bank()
    before = bank.features.clone()
    for bad in (float("nan"), float("inf")):
        z = _queries(2, 6)
        z[1, 3] = bad
        with pytest.raises(ValueError, match=r"z must hold finite features .* but 1 of its 12 entries are NaN or infinite"):
            bank.update(torch.tensor([4, 5]), z)
    assert torch.equal(bank.features, before)


def test_update_non_finite_check_follows_the_value_check_switch():
    from ctl_explore.checks import value_checks
    from ctl_explore.debug import count_host_syncs
    bank = _bank()
    z = _queries(2, 6)
    z[0, 0] = float("nan")
    idx = torch.tensor([4, 5])
    with value_checks(False), count_host_syncs() as syncs:
        bank.update(idx, z)  # the hot path reads nothing: the check is off, as the switch says
    assert syncs.total == 0


@pytest.mark.parametrize("fast", [True, False])
def test_bank_loss_refuses_a_tau_below_the_dtype_range(fast):
    bank = _bank()
    with pytest.raises(ValueError, match="tau must be at least 5.88e-39 for float32"):
        bank.loss(_queries(2, 6), torch.tensor([1, 2]), "contrastive", fast=fast, tau=1e-40)
    with pytest.raises(ValueError, match="tau must be at least 5.88e-39 for float32"):
        bank_contrastive_loss(_queries(2, 6), bank.features, torch.tensor([1, 2]), 1e-40)
