"""The appendix's fast memory-bank loss (`ctl_explore.fast`, lesson 14) against lesson 06's plain one, and numba as an
optional extra: the early lessons' modules and the training code import without it."""
from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

import ctl_explore.fast as fast_module
from ctl_explore.fast import fast_bank_contrastive_loss
from ctl_explore.memory_bank import bank_contrastive_loss
from ctl_strategies import log_uniform, unit_embeddings

F64 = torch.float64


def _fast_and_plain(q, bank, idx, tau, alpha, weights=None):
    "(fast loss, plain loss, fast gradients, plain gradients), gradients to the queries and to the bank."
    out = []
    for loss_fn in (fast_bank_contrastive_loss, bank_contrastive_loss):
        a, v = q.clone().requires_grad_(), bank.clone().requires_grad_()
        loss = loss_fn(a, v, idx, tau, alpha, reduction="none")
        (loss * (weights if weights is not None else 1)).sum().backward()
        out.append((loss.detach(), a.grad, v.grad))
    return out


@given(unit_embeddings(n_sets=1), st.integers(2, 40), st.integers(0, 2**32 - 1), log_uniform(0.05, 5.0),
       st.one_of(st.none(), st.integers(1, 1000).map(lambda m: m / 1000)), st.booleans())
def test_fast_bank_loss_equals_the_plain_one(qs, n_rows, seed, tau, alpha, tied):
    (q,) = qs
    b, d = q.shape
    gen = torch.Generator().manual_seed(seed)
    bank = F.normalize(torch.randn(n_rows, d, generator=gen, dtype=F64), dim=1)
    if tied and n_rows > 3: bank[n_rows // 2:] = bank[1]  # many rows tied at one similarity
    idx = torch.randint(0, n_rows, (b,), generator=gen)
    (fast, fq, fv), (plain, pq, pv) = _fast_and_plain(q, bank, idx, tau, alpha, torch.arange(1.0, b + 1, dtype=F64))
    assert_close(fast, plain, rtol=1e-10, atol=1e-10)
    assert_close(fq, pq, rtol=1e-9, atol=1e-10)
    assert_close(fv, pv, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("compiled", [True, False])
def test_float32_compact_and_dense_paths_equal_the_plain_loss(monkeypatch, compiled):
    if not compiled: monkeypatch.setattr(fast_module, "can_select_fast", lambda x: False)  # the path without numba
    gen = torch.Generator().manual_seed(4)
    bank = F.normalize(torch.randn(5000, 16, generator=gen), dim=1)
    q = F.normalize(torch.randn(10, 16, generator=gen), dim=1)
    idx = torch.randint(0, 5000, (10,), generator=gen)
    for alpha in (None, 0.0819):
        (fast, fq, fv), (plain, pq, pv) = _fast_and_plain(q, bank, idx, 0.07, alpha)
        assert_close(fast, plain, rtol=1e-5, atol=1e-5)
        assert_close(fq, pq, rtol=1e-4, atol=1e-5)
        assert_close(fv, pv, rtol=1e-4, atol=1e-5)


def test_fast_bank_loss_gradcheck():
    gen = torch.Generator().manual_seed(0)
    q = F.normalize(torch.randn(4, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    bank = F.normalize(torch.randn(20, 5, generator=gen, dtype=F64), dim=1).requires_grad_()
    idx = torch.tensor([0, 3, 3, 19])
    for alpha in (None, 0.2):
        assert torch.autograd.gradcheck(lambda a, v: fast_bank_contrastive_loss(a, v, idx, 0.3, alpha, "none"), (q, bank))


def test_fast_bank_loss_second_backward_and_low_precision_bank():
    gen = torch.Generator().manual_seed(2)
    bank = F.normalize(torch.randn(300, 16, generator=gen), dim=1)
    q = F.normalize(torch.randn(8, 16, generator=gen), dim=1).requires_grad_()
    idx = torch.randperm(300, generator=gen)[:8]
    loss = fast_bank_contrastive_loss(q, bank, idx, 0.1, 0.05)
    first, = torch.autograd.grad(loss, q, retain_graph=True)
    second, = torch.autograd.grad(loss, q)  # the first pass consumed the buffer in place: the second recomputes it
    assert torch.equal(first, second)
    # a bfloat16 bank: similarities rounded to bf16, loss and gradient in the queries' dtype, close to float32
    low = fast_bank_contrastive_loss(q, bank.bfloat16(), idx, 0.1, 0.05)
    assert low.dtype == torch.float32 and abs(low.item() - loss.item()) < 0.05
    g_low, = torch.autograd.grad(low, q)
    assert g_low.dtype == torch.float32 and F.cosine_similarity(g_low.flatten(), first.flatten(), dim=0) > 0.99


def test_fast_bank_loss_argument_errors():
    bank = F.normalize(torch.randn(6, 4, dtype=F64, generator=torch.Generator().manual_seed(3)), dim=1)
    q = bank[:3].clone()
    idx = torch.tensor([0, 1, 2])
    bad = q.clone(); bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="tau must be a finite number > 0"): fast_bank_contrastive_loss(q, bank, idx, 0.0)
    with pytest.raises(ValueError, match=r"alpha must lie in \(0, 1\]"): fast_bank_contrastive_loss(q, bank, idx, 0.1, 1.5)
    with pytest.raises(ValueError, match="reduction must be one of"): fast_bank_contrastive_loss(q, bank, idx, 0.1, reduction="avg")
    with pytest.raises(ValueError, match="idx must hold rows of bank"): fast_bank_contrastive_loss(q, bank, torch.tensor([0, 1, 6]), 0.1)
    with pytest.raises(ValueError, match="same feature size"): fast_bank_contrastive_loss(q[:, :3], bank, idx, 0.1)
    with pytest.raises(ValueError, match="q must hold finite values"): fast_bank_contrastive_loss(bad, bank, idx, 0.1)
    with pytest.raises(ValueError, match="q must hold at least one query"):
        fast_bank_contrastive_loss(q[:0], bank, idx[:0], 0.1)


@pytest.mark.slow
def test_the_course_modules_and_training_import_without_numba():
    "numba is an optional extra, imported only when the compiled selection is first used."
    # one fresh process (each costs ~4 CPU-s of imports) checks both, in an order that keeps each check's meaning:
    # first lesson 00's module alone imports no later lesson's module (only the checks, and its registry, appendix 31),
    # then the course modules and the training code, on top of it, import no numba
    code = ("import sys\nimport ctl_explore.losses\n"
            "later = sorted(m for m in sys.modules if m.startswith('ctl_explore.') and m not in "
            "('ctl_explore.losses', 'ctl_explore.checks', 'ctl_explore.loss_registry'))\n"
            "assert not later, later\n"
            "import ctl_explore.gradients, ctl_explore.memory_bank, ctl_explore.train\n"
            "import ctl_explore.fast, ctl_explore.selection\n"
            "assert 'numba' not in sys.modules, 'numba was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)


# --- the similarities' dtype, autocast, and no host sync (issue 16) ---
from ctl_explore.checks import value_checks
from ctl_explore.debug import count_host_syncs
from ctl_explore.fast import similarity_dtype


def test_similarity_dtype_rule():
    for device in ("cpu", "meta"):  # "meta" stands for any non-CPU device: the rule only looks at the device type
        for dtype in (torch.float32, torch.float64):
            assert similarity_dtype(torch.empty(2, 2, device=device, dtype=dtype)) == dtype
    assert similarity_dtype(torch.empty(2, 2, dtype=torch.bfloat16)) == torch.bfloat16            # CPU: the faster products
    assert similarity_dtype(torch.empty(2, 2, device="meta", dtype=torch.bfloat16)) == torch.float32  # GPU: float32
    assert similarity_dtype(torch.empty(2, 2, device="meta", dtype=torch.float16)) == torch.float32


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("bank_dtype", [torch.float32, torch.bfloat16])
def test_fast_bank_loss_inside_autocast_equals_outside(monkeypatch, compiled, bank_dtype):
    if not compiled: monkeypatch.setattr(fast_module, "can_select_fast", lambda x: False)
    gen = torch.Generator().manual_seed(5)
    bank = F.normalize(torch.randn(400, 16, generator=gen), dim=1).to(bank_dtype)
    q0 = F.normalize(torch.randn(8, 16, generator=gen), dim=1)
    idx = torch.randperm(400, generator=gen)[:8]
    for alpha in (None, 0.1):
        out = []
        for autocast in (False, True):
            q = q0.clone().requires_grad_()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                loss = fast_bank_contrastive_loss(q, bank, idx, 0.05, alpha)
                loss.backward()
            out.append((loss.detach(), q.grad))
        assert out[1][0].dtype == torch.float32
        assert torch.equal(out[1][0], out[0][0]) and torch.equal(out[1][1], out[0][1])


def test_fast_bank_loss_takes_autocasts_bf16_queries_in_float32():
    gen = torch.Generator().manual_seed(6)
    bank = F.normalize(torch.randn(100, 8, generator=gen), dim=1)
    q = F.normalize(torch.randn(4, 8, generator=gen), dim=1).bfloat16().requires_grad_()
    idx = torch.tensor([1, 5, 9, 13])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = fast_bank_contrastive_loss(q, bank, idx, 0.1)
    assert loss.dtype == torch.float32
    assert_close(loss, bank_contrastive_loss(q.detach().float(), bank, idx, 0.1), rtol=1e-6, atol=1e-6)
    loss.backward()
    assert q.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("compiled", [True, False])
def test_fast_bank_loss_reads_no_value_when_checks_are_off(monkeypatch, compiled):
    if not compiled: monkeypatch.setattr(fast_module, "can_select_fast", lambda x: False)
    gen = torch.Generator().manual_seed(7)
    bank = F.normalize(torch.randn(500, 16, generator=gen), dim=1)
    q = F.normalize(torch.randn(8, 16, generator=gen), dim=1).requires_grad_()
    idx = torch.randperm(500, generator=gen)[:8]
    for alpha in (None, 0.05):
        with value_checks(False), count_host_syncs() as off:
            fast_bank_contrastive_loss(q, bank, idx, 0.07, alpha).backward()
        assert off.total == 0, off.ops


# --- the training epoch with a stretch of steps' views made at once (appendix 14) ---------------------------------------

from ctl_explore.data import TwoViewAugment, sample_view  # noqa: E402
from ctl_explore.train import PretrainConfig, pretrain  # noqa: E402

_TIMING = ("images_per_s", "epoch_time_s", "wall_time_s")


@pytest.mark.parametrize("views", [1, 2])
@pytest.mark.parametrize("dataset,size", [("digits", 8), ("cifar10", 12)])
def test_stacked_view_draws_are_the_step_by_step_draws(views, dataset, size):
    recipe = TwoViewAugment(dataset, size=size).params  # cifar10's recipe jitters, greys and blurs: every field drawn
    g1, g2 = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    one_by_one = [[sample_view(recipe, 24, 16, 16, g1) for _ in range(views)] for _ in range(5)]
    at_once = fast_module.stacked_view_draws(recipe, 5, 24, views, 16, 16, g2)
    assert len(at_once) == views
    for v in range(views):
        for field in ("boxes", "flip", "angle", "brightness", "contrast", "saturation", "hue", "gray", "blur_sigma"):
            assert torch.equal(getattr(at_once[v], field), torch.cat([getattr(s[v], field) for s in one_by_one])), field
    assert torch.equal(g1.get_state(), g2.get_state())  # the generator ends where the steps would leave it
    assert not torch.equal(at_once[0].boxes, fast_module.stacked_view_draws(recipe, 5, 24, views, 16, 16, g2)[0].boxes)


def _trained(tmp_path, config: PretrainConfig, plain: bool, name: str) -> dict:
    out = tmp_path / name
    if plain:
        with fast_module.plain_epochs(): pretrain(config, out, quiet=True)
    else: pretrain(config, out, quiet=True)
    return torch.load(out / "checkpoint.pt", weights_only=False)


def _assert_same_run(a: dict, b: dict) -> None:
    for k in a["model"]: assert torch.equal(a["model"][k], b["model"][k]), k
    assert torch.equal(a["bank"]["features"], b["bank"]["features"]) and torch.equal(a["generator"], b["generator"])
    for s, t in zip(a["optimizer"]["state"].values(), b["optimizer"]["state"].values()):
        assert torch.equal(s["momentum_buffer"], t["momentum_buffer"])
    strip = lambda h: [{k: v for k, v in r.items() if k not in _TIMING} for r in h]
    assert strip(a["history"]) == strip(b["history"])  # losses, uniformity, tolerance, alignment, kNN of every epoch


@pytest.mark.parametrize("changes", [dict(), pytest.param(dict(loss="hard_contrastive", tau=0.1), marks=pytest.mark.slow),
                                     pytest.param(dict(loss="simple"), marks=pytest.mark.slow), dict(negatives="batch", batch_size=64)])
def test_the_fast_epoch_trains_the_plain_epochs_weights(tmp_path, monkeypatch, changes):
    "The default study's kind of run, 3 epochs: the fast epoch gives bit-identical weights, bank, generator, optimizer and records."
    config = PretrainConfig(width=4, image_size=8, epochs=3, eval_every=2, **changes)
    calls = []
    real = fast_module.fast_train_epoch
    monkeypatch.setattr(fast_module, "fast_train_epoch", lambda *a, **k: calls.append(1) or real(*a, **k))
    plain = _trained(tmp_path, config, True, "plain")
    assert calls == []
    fast = _trained(tmp_path, config, False, "fast")
    assert len(calls) == 3  # the fast path really ran, every epoch
    _assert_same_run(plain, fast)


@pytest.mark.slow
def test_the_fast_epoch_across_stretches_and_a_resume(tmp_path, monkeypatch):
    "Stretches of 2 steps over an epoch of 5 (the last one short), stopped after 2 epochs and resumed: still the plain run."
    config = PretrainConfig(width=4, image_size=8, epochs=3, batch_size=256)  # 1438 // 256 = 5 steps
    monkeypatch.setattr(fast_module, "VIEW_BYTES", 2 * 256 * 64 * 4)
    plain = _trained(tmp_path, config, True, "plain")
    pretrain(config, tmp_path / "fast", quiet=True, until_epoch=2)
    _assert_same_run(plain, _trained(tmp_path, config, False, "fast"))


def test_the_fast_epoch_is_not_taken_where_it_would_change_the_numbers():
    from ctl_explore.train import _load_data, new_state
    config = PretrainConfig(width=4, image_size=8, epochs=1)
    train, _ = _load_data(config, torch.device("cpu"), True)
    state = new_state(config, train, torch.device("cpu"))
    assert fast_module.fast_epoch_applies(state, train)
    with fast_module.plain_epochs(): assert not fast_module.fast_epoch_applies(state, train)
    state.step = lambda *a: None  # any step but lesson 07's own, e.g. one a test put in place of train.training_step
    assert not fast_module.fast_epoch_applies(state, train)
    state.step = None
    state.config = PretrainConfig(width=4, image_size=8, epochs=1, compile="step")  # torch.compile(training_step)
    assert not fast_module.fast_epoch_applies(state, train)
    swd = PretrainConfig(width=4, image_size=8, epochs=1, loss="align_swd", negatives="batch")  # draws projections in the step
    assert not fast_module.fast_epoch_applies(new_state(swd, train, torch.device("cpu")), train)
