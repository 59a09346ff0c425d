"""Property tests of `ctl_explore.selection`: the compiled k-th-largest selection and Eq 9 logits of the memory bank.

The reference is the definition: sort each row (the own column left out), read the k-th value from the top, set what
lies below it to -inf and divide the rest by tau. Rows are drawn with many ties (values from a small set, or rounded
to bfloat16) and with layouts that fool the sampled bracket, whose fallback must keep the result exact.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import ctl_explore.fast as fast_module
import ctl_explore.selection as selection
from ctl_explore.fast import fast_bank_contrastive_loss
from ctl_explore.losses import hard_contrastive_loss
from ctl_explore.memory_bank import bank_similarities
from ctl_explore.selection import (
    _STRIDE, can_select_fast, compact_top_k, mask_below_kth_, numba_kernels,
)

pytestmark = pytest.mark.skipif(not numba_kernels(), reason="numba is not installed: the compiled selection is not used")
# numba_kernels() replaced the module's kernels by compiled ones: read them from the module, not from an early import
_select_rows = lambda *args: selection._select_rows(*args)
_trailing_zeros_de_bruijn = lambda mask: selection._trailing_zeros_de_bruijn(mask)


def reference(x: torch.Tensor, k: int, tau: float, own: torch.Tensor | None):
    "(logits, thresholds [B, 1]) by sorting."
    x = x.clone()
    rows = torch.arange(len(x))
    kept = None
    if own is not None:
        kept = x[rows, own].clone()
        x[rows, own] = float("-inf")
    t = x.sort(dim=1, descending=True).values[:, k - 1:k]
    out = x.masked_fill(x < t, float("-inf")) / tau
    if own is not None: out[rows, own] = kept / tau
    return out, t


@st.composite
def selection_cases(draw):
    "(x, k, tau, own): rows of continuous, tied or bfloat16-rounded values; an own column or none."
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    b = draw(st.integers(1, 5))
    n = draw(st.sampled_from([2, 3, 9, 64, 257, 1000, 5003]))
    dtype = draw(st.sampled_from([torch.float32, torch.float64]))
    kind = draw(st.sampled_from(["normal", "ties", "bf16", "periodic"]))
    x = torch.randn(b, n, generator=gen, dtype=torch.float64)
    if kind == "ties": x = torch.tensor([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0], dtype=torch.float64)[torch.randint(0, 6, (b, n), generator=gen)]
    if kind == "bf16": x = x.bfloat16().double()
    if kind == "periodic": x[:, ::_STRIDE] += 10.0  # the sample sees only the large quarter of each row
    has_own = draw(st.booleans())
    own = torch.randint(0, n, (b,), generator=gen) if has_own else None
    k = draw(st.integers(1, n - has_own))
    tau = draw(st.sampled_from([0.05, 0.5, 1.0, 3.0]))
    return x.to(dtype).contiguous(), k, tau, own


@settings(max_examples=150, deadline=None)
@given(selection_cases())
def test_mask_below_kth_matches_sorting(case):
    x, k, tau, own = case
    ref_x, ref_t = reference(x, k, tau, own)
    y = x.clone()
    t = mask_below_kth_(y, k, tau, own=own)
    assert torch.equal(t, ref_t)
    assert torch.equal(y, ref_x)
    # the k-th largest by counting: at least k values (own column aside) reach it, fewer than k exceed it
    vals = x.clone()
    if own is not None: vals[torch.arange(len(x)), own] = float("-inf")
    assert ((vals >= t).sum(dim=1) >= k).all() and ((vals > t).sum(dim=1) < k).all()
    assert torch.equal(torch.isfinite(y).sum(dim=1), (vals >= t).sum(dim=1) + int(own is not None))


@settings(max_examples=150, deadline=None)
@given(selection_cases(), st.sampled_from([0, 3, 256]))
def test_compact_top_k_holds_the_same_logits(case, slack):
    x, k, tau, own = case
    ref_x, _ = reference(x, k, tau, own)
    before = x.clone()
    vals, cols = compact_top_k(x, k, tau, own=own, slack=slack)
    assert torch.equal(x, before)  # left unchanged
    assert vals.dtype == x.dtype and cols.dtype == torch.int64 and vals.shape == cols.shape
    for r in range(len(x)):
        kept = torch.nonzero(torch.isfinite(ref_x[r])).flatten()  # column order
        if own is not None: kept = torch.cat([own[r:r + 1], kept[kept != own[r]]])
        assert torch.equal(cols[r, :len(kept)], kept)
        assert torch.equal(vals[r, :len(kept)], ref_x[r, kept])
        assert (vals[r, len(kept):] == float("-inf")).all()  # padding: no weight in a softmax ...
        assert ((cols[r, len(kept):] >= 0) & (cols[r, len(kept):] < x.shape[1])).all()  # ... and a real column


def test_de_bruijn_trailing_zeros():
    "The fallback for numba versions without the trailing-zero intrinsic."
    for i in range(64):
        assert _trailing_zeros_de_bruijn(np.uint64(1) << np.uint64(i)) == i
        assert _trailing_zeros_de_bruijn((np.uint64(1) << np.uint64(i)) | np.uint64(1 << 63)) == i


def dense_mode(rows: int):
    "The (vals, cols) arguments of `_select_rows` that ask for dense logits: arrays without columns."
    return np.empty((rows, 0), np.float32), np.empty((rows, 0), np.int64)


def test_fallback_is_counted_and_exact():
    gen = torch.Generator().manual_seed(0)
    x = -1.0 - torch.rand(6, 8000, generator=gen)
    x[:, ::_STRIDE] = 1.0 + torch.rand(6, 2000, generator=gen)  # the sample brackets the 4000th largest far too high
    lo, hi = x.amin(1).numpy(), x.amax(1).numpy()
    out = np.empty(6, np.float32)
    y = x.clone()
    misses, _ = _select_rows(y.numpy(), np.full(6, -1), lo, hi, 4000, np.float32(1.0), _STRIDE, out, *dense_mode(6))
    assert misses == 6
    ref_x, ref_t = reference(x, 4000, 1.0, None)
    assert torch.equal(torch.from_numpy(out)[:, None], ref_t) and torch.equal(y, ref_x)
    y = torch.randn(16, 50_000, generator=gen)
    assert _select_rows(y.numpy(), np.full(16, -1), y.amin(1).numpy(), y.amax(1).numpy(), 4095, np.float32(1.0), _STRIDE,
                        np.empty(16, np.float32), *dense_mode(16))[0] == 0


def test_threaded_rows_match_single_thread():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(37, 40_000, generator=gen)  # above the size at which rows are split over threads
    own = torch.randint(0, 40_000, (37,), generator=gen)
    ref_x, ref_t = reference(x, 3277, 0.07, own)
    y = x.clone()
    assert torch.equal(mask_below_kth_(y, 3277, 0.07, own=own), ref_t) and torch.equal(y, ref_x)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        z = x.clone()
        mask_below_kth_(z, 3277, 0.07, own=own)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(z, y)


def test_bank_loss_compact_path_agrees_with_the_dense_path():
    gen = torch.Generator().manual_seed(2)
    bank = F.normalize(torch.randn(9000, 32, generator=gen), dim=1)
    q = F.normalize(torch.randn(20, 32, generator=gen), dim=1)
    idx = torch.randint(0, 9000, (20,), generator=gen)
    assert can_select_fast(q @ bank.T)
    a, b = q.clone().requires_grad_(), q.clone().requires_grad_()
    fast = fast_bank_contrastive_loss(a, bank, idx, 0.07, alpha=0.0819, reduction="none")
    original = fast_module.can_select_fast
    fast_module.can_select_fast = lambda x: False  # the dense path, torch.topk
    try:
        slow = fast_bank_contrastive_loss(b, bank, idx, 0.07, alpha=0.0819, reduction="none")
    finally:
        fast_module.can_select_fast = original
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)  # same terms, summed in another order
    fast.sum().backward(); slow.sum().backward()
    torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    # and both equal the two-step definition (float64)
    q64, bank64 = q.double(), bank.double()
    torch.testing.assert_close(fast_bank_contrastive_loss(q64, bank64, idx, 0.07, 0.0819, "none"),
                               hard_contrastive_loss(*bank_similarities(q64, bank64, idx), 0.07, 0.0819, "none"), rtol=0, atol=1e-12)


def test_bad_input_is_named():
    x = torch.randn(3, 10)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 10\]"): mask_below_kth_(x, 11)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 9\]"): mask_below_kth_(x, 10, own=torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="k must be an integer"): mask_below_kth_(x, 2.0)
    with pytest.raises(ValueError, match=r"own must be an integer tensor of shape \[3\]"): mask_below_kth_(x, 2, own=torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match=r"own must hold column indices of x, in \[0, 10\)"): mask_below_kth_(x, 2, own=torch.tensor([-1, 2, 3]))
    with pytest.raises(ValueError, match="x must be a float32 or float64 CPU tensor"): mask_below_kth_(x.bfloat16(), 2)
    with pytest.raises(ValueError, match="x must be a float32 or float64 CPU tensor"): mask_below_kth_(x[0], 2)
    with pytest.raises(ValueError, match="x must be contiguous"): mask_below_kth_(x.T, 2)
    with pytest.raises(ValueError, match="x must not require grad"): mask_below_kth_(x.clone().requires_grad_(), 2)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"): mask_below_kth_(x, 2, tau=float("inf"))
    with pytest.raises(ValueError, match="x must be finite"): mask_below_kth_(torch.tensor([[0.0, float("inf"), 1.0]]), 1)
    assert mask_below_kth_(torch.empty(0, 5), 2).shape == (0, 1)


def test_selection_reads_no_value_when_checks_are_off():
    from ctl_explore.checks import value_checks
    from ctl_explore.debug import count_host_syncs
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, 3000, generator=gen)
    own = torch.randint(0, 3000, (6,), generator=gen)
    with value_checks(False), count_host_syncs() as off:
        vals, cols = compact_top_k(x, 40, 0.1, own=own)
        kth = mask_below_kth_(x.clone(), 40, 0.1, own=own)
    assert off.total == 0, off.ops
    assert vals.shape[0] == 6 and kth.shape == (6, 1)
    bad = x.clone(); bad[2, 5] = float("nan")
    with pytest.raises(ValueError, match="x must be finite"):
        compact_top_k(bad, 40, 0.1, own=own)  # the default keeps the check
