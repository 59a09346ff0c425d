"""ctl_explore.checks: each helper returns the checked value and refuses bad input with "<name> must be ..., got ..."."""
import math
import re

import numpy as np
import pytest
import torch

from ctl_explore.checks import (check_bank_inputs, check_bool, check_choice, check_embeddings, check_finite, check_in_range, check_index_tensor, check_int,
                                check_interval, check_nonnegative, check_number, check_positive, check_probability,
                                check_similarities, check_tensor)


@pytest.mark.parametrize("bad", [0, -1.5, float("nan"), float("inf"), "x", None, [1.0], True, np.bool_(True)])
def test_check_positive_refuses(bad):
    with pytest.raises(ValueError, match=r"^tau must be a"):
        check_positive("tau", bad)


def test_check_positive_refuses_a_tensor_that_needs_a_gradient():
    with pytest.raises(ValueError, match="tau is a tensor that requires a gradient"):
        check_positive("tau", torch.tensor(0.1, requires_grad=True))


def test_numbers_come_back_as_floats():
    assert check_positive("tau", torch.tensor(0.25)) == 0.25 and type(check_positive("tau", 2)) is float
    assert check_nonnegative("lam", 0) == 0.0
    assert check_number("x", np.float32(-2.0)) == -2.0
    assert check_probability("p", 1) == 1.0
    with pytest.raises(ValueError, match=r"lam must be a finite number >= 0, got -1e-09"):
        check_nonnegative("lam", -1e-9)
    with pytest.raises(ValueError, match="x must be a finite number"):
        check_number("x", -math.inf)
    with pytest.raises(ValueError, match=r"p must be a probability in \[0, 1\], got 1.01"):
        check_probability("p", 1.01)
    with pytest.raises(ValueError, match=r"a must be an accuracy in \[0, 1\]"):
        check_probability("a", -0.1, "an accuracy")


@pytest.mark.parametrize("value, low_open, high_open, ok", [
    (0.0, False, False, True), (0.0, True, False, False), (1.0, False, True, False), (1.0, True, False, True),
    (0.5, True, True, True), (1.5, False, False, False), (float("nan"), False, False, False)])
def test_check_in_range_ends(value, low_open, high_open, ok):
    if ok:
        assert check_in_range("v", value, 0, 1, low_open, high_open) == value
    else:
        interval = ("(" if low_open else "[") + "0, 1" + (")" if high_open else "]")
        with pytest.raises(ValueError, match=r"v must lie in " + re.escape(interval) + r" \(why\), got"):
            check_in_range("v", value, 0, 1, low_open, high_open, why="why")


def test_check_int():
    assert check_int("k", np.int32(4)) == 4 and type(check_int("k", np.int32(4))) is int
    assert check_int("k", -3, minimum=None) == -3
    for bad, message in [(0, r"k must be an integer >= 1, got 0"), (2.0, r"k must be an integer >= 1, got 2.0"),
                         (True, r"k must be an integer >= 1, got True"), ("3", "k must be an integer")]:
        with pytest.raises(ValueError, match=message):
            check_int("k", bad)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 9\], got 10"):
        check_int("k", 10, 1, 9)
    with pytest.raises(ValueError, match=r"k must be an integer <= 9, got 10"):
        check_int("k", 10, None, 9)


def test_check_choice_bool_interval():
    assert check_choice("reduction", "none", ("mean", "sum", "none")) == "none"
    with pytest.raises(ValueError, match=r"reduction must be one of \('mean', 'sum'\), got 'avg'"):
        check_choice("reduction", "avg", ("mean", "sum"))
    with pytest.raises(ValueError, match="depth must be one of"):
        check_choice("depth", True, (1, 18))  # True == 1, but a bool is not a depth
    assert check_bool("flag", np.bool_(False)) is False
    with pytest.raises(ValueError, match="flag must be True or False, got 0"):
        check_bool("flag", 0)
    assert check_interval("scale", [0.2, 1], 0, 1) == (0.2, 1.0)
    for bad in [(0.5, 0.2), (0.1,), 0.5, (-0.1, 0.5), ("a", 0.5)]:
        with pytest.raises(ValueError, match=r"scale must be a pair \(lo, hi\) with 0 <= lo <= hi <= 1"):
            check_interval("scale", bad, 0, 1)


def test_check_tensor():
    x = torch.zeros(2, 3)
    assert check_tensor("neg", x, 2, "[B, K]") is x
    with pytest.raises(TypeError, match=r"neg must be a torch.Tensor of shape \[B, K\], got ndarray"):
        check_tensor("neg", x.numpy(), 2, "[B, K]")
    with pytest.raises(ValueError, match=r"neg must have shape \[B, K\], got shape \(3,\)"):
        check_tensor("neg", x[0], 2, "[B, K]")
    with pytest.raises(ValueError, match="neg must be a floating-point tensor, got dtype torch.int64"):
        check_tensor("neg", x.long(), 2, "[B, K]")
    assert check_tensor("labels", x.long(), 2, floating=False).dtype == torch.int64


def test_check_finite_counts_bad_entries_and_passes_an_overflowing_sum():
    x = torch.zeros(3, 3)
    x[0, 0], x[1, 2], x[2, 1] = float("nan"), float("inf"), -float("inf")
    with pytest.raises(ValueError, match="s must hold finite similarities, but 3 of its 9 entries are NaN or infinite"):
        check_finite("s", x, "similarities")
    big = torch.full((8,), 3e38)
    assert not torch.isfinite(big.sum()) and check_finite("big", big) is big


def test_check_index_tensor():
    out = check_index_tensor("idx", torch.tensor([3, 0], dtype=torch.int32), 2, 4)
    assert out.dtype == torch.int64 and out.tolist() == [3, 0]
    assert check_index_tensor("idx", torch.empty(0, dtype=torch.int64), 0, 4).shape == (0,)
    with pytest.raises(TypeError, match=r"idx must be a torch.Tensor of shape \[2\], got list"):
        check_index_tensor("idx", [3, 0], 2, 4)
    with pytest.raises(ValueError, match=r"idx must be an integer tensor of shape \[2\], got torch.float32 \(2,\)"):
        check_index_tensor("idx", torch.tensor([3.0, 0.0]), 2, 4)
    with pytest.raises(ValueError, match=r"idx must be an integer tensor of shape \[3\]"):
        check_index_tensor("idx", torch.tensor([3, 0]), 3, 4)
    with pytest.raises(ValueError, match=r"idx must hold rows of the bank, in \[0, 4\), got values in \[-1, 3\]"):
        check_index_tensor("idx", torch.tensor([3, -1]), 2, 4, "rows of the bank")


def test_check_similarities_and_embeddings():
    pos, neg = torch.tensor([0.9, 0.5]), torch.tensor([[0.1, 0.3, -0.2], [0.4, 0.0, 0.2]])
    check_similarities(pos, neg)
    cases = [((pos, neg[:1]), ValueError, "pos and neg must describe the same batch"),
             ((pos[:0], neg[:0]), ValueError, r"at least one anchor \(B >= 1\), got B=0"),
             ((pos, neg[:, :0]), ValueError, r"neg must hold at least one negative per anchor \(K >= 1\), got K=0"),
             ((pos[:, None], neg), ValueError, r"pos must have shape \[B\]"),
             ((pos, neg.tolist()), TypeError, r"neg must be a torch.Tensor of shape \[B, K\], got list"),
             ((pos.long(), neg), ValueError, "pos must be a floating-point tensor"),
             ((pos, neg.masked_fill(neg > 0.35, float("inf"))), ValueError, "neg must hold finite similarities, but 1 of its 6")]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            check_similarities(*args)
    z = torch.zeros(3, 4)
    assert check_embeddings("z", z) is z
    with pytest.raises(ValueError, match=r"bank must have shape \[N, d\]"):
        check_embeddings("bank", z[0], "[N, d]")
    with pytest.raises(ValueError, match="z must hold finite values, but 1 of its 12"):
        check_embeddings("z", z.index_fill(0, torch.tensor([1]), 0).index_put((torch.tensor(1), torch.tensor(2)), torch.tensor(float("nan"))))


def test_check_bank_inputs():
    q, bank = torch.zeros(3, 4), torch.zeros(6, 4)
    idx = check_bank_inputs(q, bank, torch.tensor([0, 5, 2], dtype=torch.int32))
    assert idx.dtype == torch.int64 and idx.tolist() == [0, 5, 2]
    for args, error, message in [
            ((q, bank[:, :3], torch.tensor([0, 5, 2])), ValueError, "q and bank must have the same feature size d, got 4 and 3"),
            ((q[:0], bank, torch.zeros(0, dtype=torch.long)), ValueError, r"q must hold at least one query \(B >= 1\)"),
            ((q, bank[:1], torch.tensor([0, 0, 0])), ValueError, "bank must have at least 2 rows"),
            ((q, bank, torch.tensor([0, 6, 2])), ValueError, r"idx must hold rows of bank, in \[0, 6\)"),
            ((q, bank, [0, 5, 2]), TypeError, r"idx must be a torch.Tensor of shape \[3\]"),
            ((q.tolist(), bank, torch.tensor([0, 5, 2])), TypeError, "q must be a torch.Tensor"),
            ((q, bank / 0, torch.tensor([0, 5, 2])), ValueError, "bank must hold finite values")]:
        with pytest.raises(error, match=message):
            check_bank_inputs(*args)


# --- value checks that can be switched off, and the host-sync counter (issue 16) ---
import os
import threading
from collections import Counter

from ctl_explore.checks import CHECK_VALUES_ENV, checking_values, value_checks
from ctl_explore.debug import count_host_syncs


def test_value_checks_switch_nests_and_restores():
    nan = torch.tensor([0.0, float("nan")])
    assert checking_values()
    with value_checks(False):
        assert not checking_values()
        assert check_finite("x", nan) is nan
        assert check_index_tensor("idx", torch.tensor([0, 7]), 2, 3).tolist() == [0, 7]
        with pytest.raises(ValueError, match="idx must be an integer tensor of shape"):  # free checks stay
            check_index_tensor("idx", torch.tensor([0, 7]), 3, 3)
        with value_checks(True):
            with pytest.raises(ValueError, match="x must hold finite values"):
                check_finite("x", nan)
        assert not checking_values()
    assert checking_values()
    with pytest.raises(ValueError, match="x must hold finite values"):
        check_finite("x", nan)


def test_value_checks_restore_after_an_exception():
    with pytest.raises(RuntimeError):
        with value_checks(False):
            raise RuntimeError("boom")
    assert checking_values()


def test_value_checks_are_per_thread():
    seen = []
    with value_checks(False):
        t = threading.Thread(target=lambda: seen.append(checking_values()))
        t.start(); t.join()
        assert not checking_values()
    assert seen == [True]


def test_environment_forces_the_value_checks(monkeypatch):
    monkeypatch.setenv(CHECK_VALUES_ENV, "1")
    with value_checks(False):
        assert checking_values()
        with pytest.raises(ValueError, match="idx must hold rows, in \\[0, 3\\)"):
            check_index_tensor("idx", torch.tensor([0, 7]), 2, 3, "rows")
    monkeypatch.setenv(CHECK_VALUES_ENV, "0")
    with value_checks(False):
        assert not checking_values()


def test_value_checks_refuse_a_non_bool():
    with pytest.raises(ValueError, match="enabled must be True or False"):
        with value_checks("no"):
            pass


def test_count_host_syncs_counts_each_kind_of_read():
    x = torch.randn(5, 3, requires_grad=True)
    with count_host_syncs() as syncs:
        (x @ x.T).logsumexp(dim=1).mean().backward()
        x.detach().sort(dim=1); x.detach().topk(2, dim=1); torch.full((3,), 0.5); x.detach().to(torch.float64)
    assert syncs.total == 0 and syncs.ops == Counter()
    with count_host_syncs() as syncs:
        x.detach().sum().item()
    assert syncs.total == 1 and syncs.ops["aten._local_scalar_dense"] == 1
    with count_host_syncs() as syncs:
        torch.tensor([1.0, 2.0])
    assert syncs.ops == Counter({"aten.lift_fresh": 1})
    with count_host_syncs() as syncs:
        float(x.detach()[0, 0]); bool(x[0, 0] > 0); x.detach().tolist(); x.detach().nonzero(); x.detach().unique()
        x[x > 0]; torch.equal(x, x); x.detach().repeat_interleave(torch.tensor([1, 0, 2, 1, 1]), dim=0)
    assert syncs.ops == Counter({"aten._local_scalar_dense": 2, "tolist": 1, "aten.nonzero": 1, "aten._unique2": 1,
                                 "aten.index (boolean mask)": 1, "aten.equal": 1, "aten.lift_fresh": 1,
                                 "aten.repeat_interleave": 1})
    assert syncs.total == 9


def test_count_host_syncs_traces_the_calling_line():
    with count_host_syncs(trace=True) as syncs:
        check_finite("x", torch.ones(3))
    ((op, where),) = syncs.where
    assert op == "aten._local_scalar_dense" and where.split(os.sep)[-1].startswith("checks.py:")


def test_value_checks_off_read_nothing():
    q, bank, idx = torch.randn(4, 8), torch.randn(10, 8), torch.tensor([1, 3, 5, 7])
    with count_host_syncs() as on:
        check_bank_inputs(q, bank, idx)
    assert on.total == 4  # finite q, finite bank, idx.min(), idx.max()
    with value_checks(False), count_host_syncs() as off:
        check_bank_inputs(q, bank, idx); check_similarities(q[:, 0], q)
    assert off.total == 0


def test_host_copies_are_counted_by_direction():
    "No GPU here: the classification of a copy is checked on the arguments the dispatcher would pass on one."
    from ctl_explore.debug import _sync_of
    aten = torch.ops.aten
    cpu = torch.zeros(3)

    class OnCuda:  # stands in for a CUDA tensor as a copy's destination
        device = torch.device("cuda", 0)

    assert _sync_of(aten._to_copy.default, (cpu,), {"device": torch.device("cuda", 0)}) == "copy cpu->cuda"
    assert _sync_of(aten._to_copy.default, (cpu,), {"device": torch.device("cuda"), "non_blocking": True}) == "copy cpu->cuda"  # not pinned
    assert _sync_of(aten.copy_.default, (OnCuda(), cpu), {}) == "copy cpu->cuda"
    assert _sync_of(aten._to_copy.default, (cpu,), {"dtype": torch.float64}) is None            # same device: no copy across
    assert _sync_of(aten._to_copy.default, (cpu,), {"device": torch.device("meta")}) is None     # meta tensors hold no data
    assert _sync_of(aten.add.Tensor, (cpu, cpu), {}) is None


def test_the_sync_counters_blind_spots_are_the_ones_its_docstring_names():
    # issue 24: syncs inside C++ kernels are not seen (on CUDA each of these waits for the GPU to size its output)
    from ctl_explore.debug import count_host_syncs
    x, idx = torch.rand(16), torch.arange(5) % 3
    with count_host_syncs() as syncs:
        torch.multinomial(x, 4, replacement=False)
        torch.bincount(idx)
        torch.histc(x, bins=4)
    assert syncs.total == 0, syncs
    with count_host_syncs() as seen:  # what it does see: a boolean mask, a read, a shape from values
        x[x > 0.5]; x.sum().item(); x.nonzero()
    assert seen.total == 3, seen
    doc = count_host_syncs.__doc__
    for name in ("multinomial", "bincount", "histc", "nonzero", "torch.cuda.synchronize", "Event", "barrier", "collectives",
                 "device-to-device copies"):
        assert name in doc, name


def test_debugging_tools_live_in_debug_only():
    "count_host_syncs lives in ctl_explore.debug (appendix 96), which imports the checks; the checks do not forward to it (no circle)."
    import ctl_explore.checks as checks, ctl_explore.debug as debug
    assert "count_host_syncs" in debug.__all__ and not hasattr(checks, "count_host_syncs") and not hasattr(checks, "HostSyncs")
    with pytest.raises(ImportError): from ctl_explore.checks import count_host_syncs  # noqa: F401
