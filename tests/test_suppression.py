"""Feature suppression (lesson 12): RandBit's bits are the same in both views and can be read back, MultiDigits' labels
match what is drawn on each canvas, bad arguments raise clear errors, and the cached grid, the findings and the explorer
work on miniature runs."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ctl_explore.data import TwoViewAugment, load_dataset
from ctl_explore.data import ImageData
from ctl_explore.study.stats import direction_verdict
from ctl_explore.suppression import (
    RANDBIT_CONFIG, RANDBIT_MNIST_PAPER, SCALES, MultiDigits, RandBit, SuppressionConfig, SuppressionExplorer,
    accuracy_direction, append_bits, at_chance, cached_result, features, make_multidigits, multidigits_figure, paper_table,
    random_bits, randbit_figure, randbit_mnist_paper, randbit_run, read_bits, run_grid, run_path, suppression_findings,
    train_contrastive, twin_share, zero_bit_confound)

TINY = SuppressionConfig(epochs=1, width=4, out_dim=16, linear_epochs=5)


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits")


# ---------------------------------------------------------------- RandBit

@settings(max_examples=25)
@given(k=st.integers(0, 12), seed=st.integers(0, 1000), batch=st.integers(2, 24), view_seed=st.integers(0, 1000))
def test_randbit_views_carry_the_same_recoverable_bits(digits, k, seed, batch, view_seed):
    rb = RandBit(digits, k, seed=seed)
    idx = torch.randperm(len(digits), generator=torch.Generator().manual_seed(view_seed))[:batch]
    v1, v2 = rb.views(idx, torch.Generator().manual_seed(view_seed))
    assert v1.shape == v2.shape == (batch, 1 + k, 16, 16) and rb.in_channels == 1 + k
    assert torch.equal(v1[:, 1:], v2[:, 1:])                       # bit channels identical in both views
    assert torch.equal(read_bits(v1, k), rb.bits[idx])             # and they are this image's bits
    assert torch.equal(read_bits(v2, k), rb.bits[idx])
    plain1, plain2 = TwoViewAugment("digits")(digits.images[idx], torch.Generator().manual_seed(view_seed))
    assert torch.equal(v1[:, :1], plain1) and torch.equal(v2[:, :1], plain2)  # image channels: the augmentation, untouched


def test_randbit_bits_are_seeded_balanced_and_per_image(digits):
    a, b = RandBit(digits, 16, seed=3), RandBit(digits, 16, seed=3)
    assert torch.equal(a.bits, b.bits) and a.bits.dtype == torch.bool and a.bits.shape == (len(digits), 16)
    assert not torch.equal(a.bits, RandBit(digits, 16, seed=4).bits)
    assert abs(a.bits.float().mean().item() - 0.5) < 0.02          # fair bits
    assert len({tuple(row) for row in a.bits.tolist()}) > 0.97 * len(digits)  # 2^16 codes: nearly all images distinct


def test_randbit_eval_inputs(digits):
    rb = RandBit(digits, 5, seed=0)
    zero, own = rb.inputs("zero"), rb.inputs("own")
    assert torch.equal(zero[:, :1], own[:, :1])
    assert zero[:, 1:].abs().sum().item() == 0
    assert torch.equal(read_bits(own, 5), rb.bits)


@given(st.integers(0, 8), st.integers(1, 6))
def test_append_and_read_bits_round_trip(k, n):
    bits = random_bits(n, k, seed=k * 10 + n)
    x = append_bits(torch.randn(n, 2, 5, 7), bits)
    assert x.shape == (n, 2 + k, 5, 7) and torch.equal(read_bits(x, k), bits)


def test_read_bits_rejects_channels_without_bits():
    x = append_bits(torch.randn(3, 1, 4, 4), random_bits(3, 2))
    x[0, 2, 1, 1] = 0.5
    with pytest.raises(ValueError, match="do not carry bits"): read_bits(x, 2)
    with pytest.raises(ValueError, match="do not carry bits"): read_bits(torch.randn(3, 3, 4, 4), 2)
    with pytest.raises(ValueError, match="k must be at most"): read_bits(x, 4)


def test_twin_share_matches_a_simulation_and_is_monotone():
    g = torch.Generator().manual_seed(0)
    codes = torch.randint(0, 2**5, (1000, 64), generator=g)
    twins = ((codes[:, :, None] == codes[:, None, :]).sum(dim=2) > 1).float().mean().item()
    assert abs(twins - twin_share(5, 64)) < 0.01
    shares = [twin_share(k, 128) for k in range(0, 24)]
    assert shares[0] == 1.0 and shares[-1] < 1e-4
    assert all(a >= b for a, b in zip(shares, shares[1:])) and all(a > b for a, b in zip(shares[6:], shares[7:]))
    assert twin_share(8, 1000) > twin_share(8, 128)


@pytest.mark.parametrize("call, message", [
    (lambda d: RandBit(d, -1), "k must be an integer >= 0"),
    (lambda d: RandBit(d, 2.5), "k must be an integer >= 0"),
    (lambda d: RandBit(d, True), "k must be an integer >= 0"),
    (lambda d: RandBit(d.images, 2), "data must be an ImageData"),
    (lambda d: RandBit(d, 2).inputs("noise"), "bits must be one of"),
    (lambda d: random_bits(4, -3), "k must be an integer >= 0"),
    (lambda d: twin_share(-1, 128), "k must be an integer >= 0"),
    (lambda d: twin_share(4, 0), "batch_size must be an integer >= 1"),
    (lambda d: append_bits(torch.randn(4, 1, 3, 3), torch.zeros(3, 2)), "bits must be a tensor"),
    (lambda d: append_bits(torch.zeros(4, 1, 3, 3, dtype=torch.uint8), torch.zeros(4, 2)), "x must be a floating-point"),
    (lambda d: randbit_run(-1, TINY, progress=False), "k must be an integer >= 0"),
])
def test_randbit_bad_inputs(digits, call, message):
    with pytest.raises(ValueError, match=message): call(digits)


# ---------------------------------------------------------------- MultiDigits

@settings(max_examples=8)
@given(scale=st.sampled_from(SCALES), seed=st.integers(0, 50), train=st.booleans())
def test_multidigits_labels_match_the_canvas(scale, seed, train):
    md = make_multidigits(train=train, scale=scale, seed=seed)
    small = load_dataset("digits", train=train, image_size=8)
    big = load_dataset("digits", train=train, image_size=round(8 * scale))
    n, side = len(small), md.images.shape[-1]
    assert isinstance(md, MultiDigits) and len(md) == n and md.images.shape == (n, 1, 24, 24)
    assert torch.equal(md.small_labels, small.labels)
    assert torch.equal(md.big_labels, small.labels[md.big_source])  # same split: the big digit's own label
    assert not (md.big_source == torch.arange(n)).any()
    assert torch.equal(md.images, torch.maximum(md.small_only, md.big_only))
    # boxes inside the canvas and never overlapping
    for boxes, size in ((md.small_boxes, 8), (md.big_boxes, round(8 * scale))):
        assert (boxes[:, 2:] == size).all() and (boxes[:, :2] >= 0).all() and (boxes[:, :2] + size <= side).all()
    s, b = md.small_boxes, md.big_boxes
    apart = (s[:, 0] + s[:, 2] <= b[:, 0]) | (b[:, 0] + b[:, 2] <= s[:, 0]) | (s[:, 1] + s[:, 3] <= b[:, 1]) | (b[:, 1] + b[:, 3] <= s[:, 1])
    assert apart.all()
    # each box of the canvas holds exactly its source digit, and nothing is drawn outside the two boxes
    inside = torch.zeros_like(md.images, dtype=torch.bool)
    for i in range(n):
        t, l, h, w = s[i].tolist()
        assert torch.equal(md.images[i, :, t:t + h, l:l + w], small.images[i])
        inside[i, :, t:t + h, l:l + w] = True
        t, l, h, w = b[i].tolist()
        assert torch.equal(md.images[i, :, t:t + h, l:l + w], big.images[md.big_source[i]])
        inside[i, :, t:t + h, l:l + w] = True
    assert md.images[~inside].sum().item() == 0


def test_multidigits_is_seeded():
    a, b, c = make_multidigits(scale=1.5, seed=2), make_multidigits(scale=1.5, seed=2), make_multidigits(scale=1.5, seed=3)
    assert torch.equal(a.images, b.images) and torch.equal(a.big_source, b.big_source)
    assert not torch.equal(a.images, c.images)
    assert not torch.equal(make_multidigits(train=False, seed=2).small_boxes[:10], a.small_boxes[:10])


@pytest.mark.parametrize("kwargs, message", [
    (dict(scale=0.9), "scale must lie in"), (dict(scale=2.5), r"scale must lie in \[1, 2\]"),
    (dict(scale="2"), "scale must lie in"), (dict(scale=3.5, canvas_size=32), r"scale must lie in \[1, 3\]"),
    (dict(small_size=0), "small_size must be an integer >= 1"), (dict(canvas_size=-4), "canvas_size must be an integer >= 1"),
])
def test_multidigits_bad_inputs(kwargs, message):
    with pytest.raises(ValueError, match=message): make_multidigits(**kwargs)


def test_larger_canvas_fits_a_larger_digit():
    md = make_multidigits(scale=3.0, canvas_size=32, seed=0)
    assert md.images.shape[-1] == 32 and int(md.big_boxes[0, 2]) == 24


# ---------------------------------------------------------------- configuration, training, grid

@pytest.mark.parametrize("kwargs, message", [
    (dict(tau=0), "tau must be a finite number > 0"), (dict(tau=-0.1), "tau must be a finite number > 0"),
    (dict(tau=float("nan")), "tau must be a finite number > 0"), (dict(lr=0), "lr must be a finite number > 0"),
    (dict(epochs=0), "epochs must be an integer >= 1"), (dict(batch_size=1), "batch_size must be an integer >= 2"),
    (dict(head="deep"), "head must be one of"), (dict(crop_scale=(0.0, 1.0)), "crop_scale must be a pair"),
    (dict(crop_scale=(0.5,)), "crop_scale must be a pair"), (dict(seed=-1), "seed must be an integer >= 0"),
])
def test_config_bad_inputs(kwargs, message):
    with pytest.raises(ValueError, match=message): SuppressionConfig(**kwargs)


def test_training_is_deterministic_and_bits_make_the_task_easy(digits):
    cfg = replace(TINY, epochs=2)
    histories = []
    for k in (0, 16, 16):
        rb = RandBit(digits, k)
        model, history, probe = train_contrastive(rb.views, len(rb), rb.in_channels, cfg, progress=False)
        assert not model.training and all(math.isfinite(h) for h in history) and probe is None
        histories.append(history)
    assert histories[1] == histories[2]                  # same seed, same run
    assert histories[1][-1] < histories[0][-1]           # the bits solve much of instance discrimination
    with pytest.raises(ValueError, match="n must be an integer >= 128"):
        train_contrastive(rb.views, 100, rb.in_channels, cfg, progress=False)


def test_each_step_is_lesson_07s_gradient_step(digits, monkeypatch):
    import ctl_explore.suppression as suppression
    from ctl_explore.train import gradient_step
    calls = []
    def counted(*args, **kw):
        calls.append(kw.get("penalty") is not None)
        return gradient_step(*args, **kw)
    monkeypatch.setattr(suppression, "gradient_step", counted)
    rb = RandBit(digits, 2)
    steps = len(rb) // TINY.batch_size
    train_contrastive(rb.views, len(rb), rb.in_channels, TINY, progress=False)
    assert calls == [False] * steps                      # no probe, no weight decay: the loss alone
    calls.clear()
    train_contrastive(rb.views, len(rb), rb.in_channels, replace(TINY, weight_decay=1e-4), progress=False, labels=digits.labels)
    assert calls == [True] * steps                       # the L2 penalty and the online probe ride along with the update


def test_shared_fields_mean_what_pretrain_config_says():
    from dataclasses import fields
    from ctl_explore.suppression import SHARED_WITH_PRETRAIN
    from ctl_explore.train import PretrainConfig
    ours, theirs = ({f.name: f.type for f in fields(c)} for c in (SuppressionConfig, PretrainConfig))
    assert {name: ours[name] for name in SHARED_WITH_PRETRAIN} == {name: theirs[name] for name in SHARED_WITH_PRETRAIN}
    with pytest.raises(ValueError, match=r"width must be an integer in \[1, 1024\]"): SuppressionConfig(width=2000)
    assert SuppressionConfig().key() == "0a8a56ee" and RANDBIT_CONFIG.key() == "5aa37de1"  # the cache's keys are unchanged


def test_a_damaged_cache_file_is_named(tmp_path):
    path = run_path(tmp_path, "randbit", 2, TINY)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="is not valid JSON") as e: cached_result(tmp_path, "randbit", 2, TINY)
    assert str(path) in str(e.value)


def test_grid_caches_each_run_and_resumes(tmp_path):
    rows = run_grid("randbit", (0, 2), (0.1,), tmp_path, TINY, progress=False)
    assert [r["k"] for r in rows] == [0, 2] and all(0 <= r["digit_top1"] <= 1 for r in rows)
    files = sorted(tmp_path.glob("randbit-*.json"))
    assert [f.name for f in files] == sorted(run_path(tmp_path, "randbit", k, TINY).name for k in (0, 2))
    stamps = {f: f.stat().st_mtime_ns for f in files}
    assert run_grid("randbit", (0, 2), (0.1,), tmp_path, TINY, progress=False) == rows  # read back, nothing retrained
    assert stamps == {f: f.stat().st_mtime_ns for f in files}
    killed = run_path(tmp_path, "randbit", 2, TINY)
    killed.unlink()                                      # as if the grid had been killed during this run
    again = run_grid("randbit", (0, 2), (0.1,), tmp_path, TINY, progress=False)
    assert files[0].stat().st_mtime_ns == stamps[files[0]] and killed.exists()
    strip = lambda r: {k: v for k, v in r.items() if k != "wall_time_s"}
    assert [strip(r) for r in again] == [strip(r) for r in rows]   # the rerun gives the same numbers
    assert cached_result(tmp_path, "randbit", 2, replace(TINY, epochs=2)) is None  # other settings: not this cache
    assert json.loads(killed.read_text())["config"]["epochs"] == 1


@pytest.mark.parametrize("args, message", [
    (("randbits", (0,), (0.1,)), "experiment must be one of"),
    (("randbit", (-2,), (0.1,)), "k must be an integer >= 0"),
    (("randbit", (0,), (0.0,)), "tau must be a finite number > 0"),
    (("multidigits", (2.5,), (0.1,)), "scale must lie in"),
])
def test_grid_bad_inputs(tmp_path, args, message):
    with pytest.raises(ValueError, match=message): run_grid(*args, tmp_path, TINY, progress=False)


# ---------------------------------------------------------------- findings, figures, explorer

def _rows(randbit_end: float, own_end: float, small_end: float, small_alone_end: float):
    rb = [dict(tau=tau, k=k, digit_top1_shared=acc, online_top1=own, random_init_top1_shared=0.78, random_init_top1_own_bits=0.3,
               chance=0.1, n_test=359)
          for tau in (0.05, 0.2) for k, acc, own in ((0, 0.96, 0.96), (8, 0.8 if tau == 0.05 else 0.6, 0.5), (16, randbit_end, own_end))]
    md = [dict(tau=tau, scale=s, small_top1=0.45 if s == 1.0 else small_end, big_top1=0.3 if s == 1.0 else 0.8,
               small_alone_top1=0.7 if s == 1.0 else small_alone_end, random_init_small_alone_top1=0.36, n_test=359)
          for tau in (0.05, 0.2) for s in (1.0, 2.0)]
    return rb, md


def test_findings_follow_the_stated_rules():
    assert [f.verdict for f in suppression_findings(*_rows(0.6, 0.1, 0.17, 0.36))] == ["reproduced"] * 6
    verdicts = [f.verdict for f in suppression_findings(*_rows(0.95, 0.9, 0.44, 0.7))]
    assert verdicts[0] == "inconclusive at this scale"   # no fall from k = 0
    assert verdicts[1] == verdicts[2] == "not reproduced"
    # 6: something to suppress at scale 1 (+1 at each τ), not suppressed at scale 2 (-1): the rule's mixed verdict
    assert verdicts[4] == "inconclusive at this scale" and verdicts[5] == direction_verdict([1, -1, 1, -1]) != "reproduced"
    assert {f.verdict for f in suppression_findings([], [])} == {"inconclusive at this scale"}


def test_accuracy_rules():
    assert accuracy_direction(0.9, 0.5, 359, 359) == 1 and accuracy_direction(0.5, 0.9, 359, 359) == -1
    assert accuracy_direction(0.50, 0.55, 359, 359) == 0
    assert accuracy_direction(0.50, 0.55, 100_000, 100_000) == -1   # with many test images 5 points is clear
    assert at_chance(0.1, 0.1, 359) and not at_chance(0.5, 0.1, 359)
    for call in (lambda: accuracy_direction(-0.1, 0.5, 10, 10), lambda: accuracy_direction(0.5, 0.5, 0, 10),
                 lambda: at_chance(0.5, 1.5, 10)):
        with pytest.raises(ValueError, match="must be"): call()


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("suppression")
    rb = run_grid("randbit", (0, 16), (0.1,), out, TINY, progress=False)
    md = run_grid("multidigits", (1.0, 2.0), (0.1,), out, replace(TINY, crop_scale=(0.8, 1.0)), progress=False)
    return out, rb, md


@pytest.mark.slow
def test_figures_show_the_rows_and_the_reference(tiny_dir):
    _, rb, md = tiny_dir
    f = randbit_figure(rb)
    ours = [t for t in f.data if t.name == "ours (digits), τ=0.1"]
    assert len(ours) == 3 and list(ours[0].x) == [0, 16]
    assert [t.y[1] for t in ours] == [rb[1]["online_top1"], rb[1]["digit_top1_shared"], rb[1]["digit_top1"]]
    assert {t.xaxis for t in f.data if t.name.startswith("[CLL20]")} == {"x"}  # beside the online probe, the same measurement
    ref = [t for t in f.data if t.name.startswith("[CLL20] MNIST reference")]
    assert [list(t.y) for t in ref] == [[0.899, 0.706, 0.330, 0.143, 0.099], [0.892, 0.612, 0.187, 0.098, 0.103],
                                        [0.900, 0.330, 0.104, 0.100, 0.099]]
    g = multidigits_figure(md)
    small = [t for t in g.data if t.name == "small digit, τ=0.1"]
    assert [list(t.y) for t in small] == [[r["small_top1"] for r in md], [r["small_alone_top1"] for r in md]]


def test_explorer_shows_cached_runs_and_trains_missing_ones(tiny_dir):
    out, rb, md = tiny_dir
    md_cfg = replace(TINY, crop_scale=(0.8, 1.0))
    w = SuppressionExplorer(out, TINY, md_cfg, k=16, tau=0.1, scale=2.0)
    assert f"{rb[1]['online_top1']:.3f}" in w.readout.value and f"{md[1]['small_top1']:.3f}" in w.readout.value
    assert list(w.fig.data[4].x) == [16] and list(w.fig.data[4].y) == [rb[1]["online_top1"]]
    assert list(w.fig.data[2].y) == [r["digit_top1_shared"] for r in rb]
    assert list(w.fig.data[10].y) == [md[1]["small_top1"], md[1]["big_top1"]]
    w.scale_dropdown.value = 1.0
    assert list(w.fig.data[10].y) == [md[0]["small_top1"], md[0]["big_top1"]]
    w.k_dropdown.value = 2
    assert "k = 2, τ = 0.1</b>: not run with these settings yet" in w.readout.value and len(w.fig.data[4].x) == 0
    w.run_selected()
    trained = cached_result(out, "randbit", 2, TINY)
    assert trained is not None and list(w.fig.data[0].x) == [0, 2, 16]
    assert f"{trained['online_top1']:.3f}" in w.readout.value
    w.tau_dropdown.value = 0.05
    assert len(w.fig.data[0].x) == 0 and list(w.fig.data[1].y) == [0.899, 0.706, 0.330, 0.143, 0.099]


@pytest.mark.parametrize("kwargs, message", [
    (dict(k=3), "k must be one of"), (dict(tau=0.3), "tau must be one of"), (dict(scale=3.0), "scale must be one of")])
def test_explorer_bad_inputs(tmp_path, kwargs, message):
    with pytest.raises(ValueError, match=message): SuppressionExplorer(tmp_path, RANDBIT_CONFIG, **kwargs)


# ---------------------------------------------------------------- eval bits, online probe, the MNIST preset

def test_shared_and_random_codes(digits):
    rb = RandBit(digits, 6, seed=0)
    shared, fresh = read_bits(rb.inputs("shared"), 6), read_bits(rb.inputs("random"), 6)
    assert (shared == shared[:1]).all()                                   # one code for all
    assert torch.equal(fresh, read_bits(rb.inputs("random"), 6))         # seeded
    assert not torch.equal(fresh, rb.bits)                               # not the images' own codes
    assert not torch.equal(read_bits(rb.inputs("shared", seed=1), 6), shared)
    with pytest.raises(ValueError, match="bits must be one of"): rb.inputs("half")


def test_zero_one_coding_round_trip(digits):
    rb = RandBit(digits, 5, seed=2, coding="01")
    v1, v2 = rb.views(torch.arange(8), torch.Generator().manual_seed(0))
    assert set(v1[:, 1:].unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(read_bits(v1, 5, "01"), rb.bits[:8]) and torch.equal(v1[:, 1:], v2[:, 1:])
    with pytest.raises(ValueError, match="coding must be one of"): RandBit(digits, 2, coding="pm")


def test_online_probe_is_a_stop_gradient_head(digits):
    rb = RandBit(digits, 0)
    cfg = replace(TINY, epochs=1)
    with_probe = train_contrastive(rb.views, len(rb), rb.in_channels, cfg, progress=False, labels=digits.labels)
    without = train_contrastive(rb.views, len(rb), rb.in_channels, cfg, progress=False)
    assert with_probe[1] == without[1]      # the probe's loss changes nothing in the encoder's training
    for a, b in zip(with_probe[0].state_dict().values(), without[0].state_dict().values()): assert torch.equal(a, b)
    assert with_probe[2].out_features == 10
    with pytest.raises(ValueError, match="labels must hold one label per training image"):
        train_contrastive(rb.views, len(rb), rb.in_channels, cfg, progress=False, labels=digits.labels[:10])


def test_randbit_row_has_every_probe_and_the_confound(tmp_path):
    (row,) = run_grid("randbit", (4,), (0.1,), tmp_path, TINY, progress=False)
    for key in ("online_top1", "digit_top1", "digit_top1_shared", "digit_top1_own_bits", "random_init_top1",
                "random_init_top1_shared", "random_init_top1_own_bits"):
        assert 0 <= row[key] <= 1, key
    (c,) = zero_bit_confound([row])
    assert c["out_of_distribution_drop"] == row["digit_top1_shared"] - row["digit_top1"]


def _fake_mnist(n: int, train: bool) -> ImageData:
    g = torch.Generator().manual_seed(int(train))
    labels = torch.arange(n) % 10
    images = (30 * torch.rand(n, 1, 28, 28, generator=g)).to(torch.uint8)
    for c in range(10): images[labels == c, :, 2 + 2 * c:5 + 2 * c, 4:24] = 255
    return ImageData(images, labels, [str(c) for c in range(10)], "mnist", train)


TOY_PAPER = replace(RANDBIT_MNIST_PAPER, epochs=1, batch_size=100, linear_epochs=3)


def test_paper_preset_follows_the_colab():
    p = RANDBIT_MNIST_PAPER
    assert (p.batch_size, p.epochs, p.lr, p.weight_decay, p.schedule) == (1000, 10, 1e-3, 1e-4, "linear")
    assert (p.loss, p.arch, p.bit_coding, p.augment, p.crop_scale, p.dataset) == ("cross_view", "convn", "01", "crop", (0.5, 1.0), "mnist")


def test_paper_preset_runs_on_mnist_shaped_data_in_memory(tmp_path, capsys):
    rows = randbit_mnist_paper(tmp_path, ks=(0, 5), taus=(0.05,), config=TOY_PAPER, progress=False,
                               data=(_fake_mnist(300, True), _fake_mnist(100, False)))
    assert [r["k"] for r in rows] == [0, 5] and all(r["dataset"] == "mnist" and r["n_test"] == 100 for r in rows)
    out = capsys.readouterr().out
    assert f"{100 * rows[0]['online_top1']:.1f} / 89.9" in out and f"{100 * rows[1]['online_top1']:.1f} / 70.6" in out
    assert paper_table(rows) in out


def _write_idx(path, array, magic):
    import struct
    dims = array.shape
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims))
        f.write(array.astype("uint8").tobytes())


def test_paper_preset_runs_on_fabricated_mnist_files(tmp_path, capsys):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    for split, n, prefix in ((True, 300, "train"), (False, 100, "t10k")):
        fake = _fake_mnist(n, split)
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", fake.images[:, 0].numpy(), 2051)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", fake.labels.numpy(), 2049)
    assert torch.equal(load_dataset("mnist", root=tmp_path, train=False).images, _fake_mnist(100, False).images)
    rows = randbit_mnist_paper(tmp_path / "runs", root=tmp_path, ks=(0, 5), taus=(0.1,), config=TOY_PAPER, progress=False)
    assert [r["k"] for r in rows] == [0, 5] and rows[0]["n_test"] == 100
    assert "/ 89.2" in capsys.readouterr().out


# ---------------------------------------------------------------- the shared-code probe over codes and seeds

def test_code_seen_probability_matches_a_simulation_and_its_limits():
    from ctl_explore.suppression import code_seen_probability
    g = torch.Generator().manual_seed(1)
    train = torch.randint(0, 2**5, (20000, 40), generator=g)       # k = 5: 40 training codes, 20000 trials
    probe = torch.randint(0, 2**5, (20000, 1), generator=g)
    simulated = (train == probe).any(dim=1).float().mean().item()
    assert abs(simulated - code_seen_probability(5, 40)) < 0.01
    assert math.isclose(code_seen_probability(16, 1438), 1 - (1 - 2**-16) ** 1438, rel_tol=1e-12)
    assert code_seen_probability(16, 0) == 0.0 and code_seen_probability(0, 3) == 1.0
    assert code_seen_probability(60, 10**6) > 0                    # no underflow to 0 where 2^-k is tiny
    for k, n, message in ((-1, 5, "k must be an integer >= 0"), (4, -2, "n_train must be an integer >= 0")):
        with pytest.raises(ValueError, match=message): code_seen_probability(k, n)


def _probe_row(tau, seed, probes, n_test=359):
    return dict(tau=tau, seed=seed, k=16, n_test=n_test,
                probes=[dict(how="seen" if seen else "drawn", code="0", in_training=seen, trained=t, random_init=r) for seen, t, r in probes])


def test_shared_code_summary_keeps_seen_and_unseen_codes_apart():
    from ctl_explore.suppression import shared_code_summary
    # built to fool a pooled mean: never-seen codes far below the random network, seen codes level with it
    rows = [_probe_row(0.2, s, [(False, 0.40, 0.80), (False, 0.42, 0.80), (True, 0.80, 0.80), (True, 0.81, 0.80)]) for s in range(3)]
    out = {s["seen"]: s for s in shared_code_summary(rows)}
    assert math.isclose(out[False]["gap"]["mean"], -0.39) and out[False]["below"] == 6 and out[False]["within"] == 0
    assert math.isclose(out[True]["gap"]["mean"], 0.005) and out[True]["within"] == 6 and out[True]["below"] == 0
    assert out[False]["n_seeds"] == 3 and out[False]["seed_means"]["n"] == 3 and math.isclose(out[False]["seed_means"]["sd"], 0, abs_tol=1e-12)
    # the spread over seeds is the spread of the per-seed means, not of the single probes
    rows = [_probe_row(0.1, 0, [(False, 0.5, 0.8), (False, 0.9, 0.8)]), _probe_row(0.1, 1, [(False, 0.6, 0.8), (False, 0.8, 0.8)])]
    (s,) = shared_code_summary(rows)
    assert math.isclose(s["seed_means"]["mean"], -0.1) and math.isclose(s["seed_means"]["sd"], 0.0, abs_tol=1e-12) and s["gap"]["sd"] > 0.1
    assert shared_code_summary([]) == []


def test_shared_code_run_is_randbit_runs_probe_and_flags_seen_codes(tmp_path):
    from ctl_explore.suppression import run_shared_codes, shared_code_run, shared_codes_figure
    cfg = SuppressionConfig(epochs=1, width=4, out_dim=16, linear_epochs=5)
    one = randbit_run(16, cfg, progress=False)
    (row,) = run_shared_codes(16, (cfg.tau,), (0,), tmp_path, cfg, n_drawn=2, n_seen=2, progress=False)
    first = row["probes"][0]
    assert (first["trained"], first["random_init"]) == (one["digit_top1_shared"], one["random_init_top1_shared"])
    assert [p["how"] for p in row["probes"]] == ["drawn", "drawn", "seen", "seen"] and all(p["in_training"] for p in row["probes"][2:])
    bits = RandBit(load_dataset("digits"), 16, seed=0).bits
    codes = {"".join("1" if b else "0" for b in r.tolist()) for r in bits}
    assert all(p["in_training"] == (p["code"] in codes) for p in row["probes"])
    files = list(tmp_path.glob("sharedcodes-*.json"))
    assert len(files) == 1
    assert run_shared_codes(16, (cfg.tau,), (0,), tmp_path, cfg, n_drawn=2, n_seen=2, progress=False) == [row]  # read back
    fig = shared_codes_figure([row])
    assert sum(len(t.y) for t in fig.data) == 4
    with pytest.raises(ValueError, match="k must be an integer >= 1"): shared_code_run(0, cfg)
    with pytest.raises(ValueError, match="tau must be a finite number > 0"): run_shared_codes(16, (0.0,), (0,), tmp_path, cfg)


# ---------------------------------------------------------------- the judgements, frozen

def _random_grid(seed: int) -> tuple[list[dict], list[dict]]:
    "A seeded random RandBit and MultiDigits grid (accuracies anywhere, a few test-set sizes and grids), to probe the rules' edges."
    import random
    rng = random.Random(seed)
    acc = lambda: round(rng.uniform(0.05, 0.99), 3)
    n = rng.choice([100, 359, 1000])
    taus = rng.choice([(0.05, 0.2), (0.05, 0.1, 0.2), (0.1,)])
    rb = [dict(tau=t, k=k, digit_top1_shared=acc(), online_top1=acc(), random_init_top1_shared=acc(),
               random_init_top1_own_bits=acc(), chance=rng.choice([0.1, 0.11, 0.5]), n_test=n)
          for t in taus for k in rng.choice([(0, 8, 16), (0, 16), (1, 16)])]
    md = [dict(tau=t, scale=s, small_top1=acc(), big_top1=acc(), small_alone_top1=acc(), random_init_small_alone_top1=acc(), n_test=n)
          for t in taus for s in rng.choice([(1.0, 2.0), (1.0, 1.5, 2.0), (1.5, 2.0)])]
    return rb, md


def test_findings_match_the_frozen_judgements():
    "The shipped RandBit grid and 60 random grids give the findings (verdicts and texts) frozen before the findings registry."
    from pathlib import Path
    frozen = json.loads((Path(__file__).parent / "frozen/suppression_findings.json").read_text())["cases"]
    shipped = json.loads((Path(__file__).parents[1] / "data/suppression/randbit-digits.json").read_text())["rows"]
    cases = {"shipped randbit-digits.json": (shipped, []), **{f"random grid {s}": _random_grid(s) for s in range(60)}}
    assert sorted(cases) == sorted(frozen)
    for name, rows in cases.items():
        found = [dict(number=f.number, claim=f.claim, measured=f.measured, verdict=f.verdict) for f in suppression_findings(*rows)]
        assert found == [{k: f[k] for k in ("number", "claim", "measured", "verdict")} for f in frozen[name]["findings"]], name


def test_each_claim_is_declared_once_with_its_rule_generated_from_z():
    from ctl_explore.suppression import SUPPRESSION_FINDINGS, SUPPRESSION_Z
    assert list(SUPPRESSION_FINDINGS) == [1, 2, 3, 4, 5, 6] and SUPPRESSION_Z == 2.0
    found = suppression_findings(*_rows(0.6, 0.1, 0.17, 0.36))
    for f, spec in zip(found, SUPPRESSION_FINDINGS.values()):
        assert (f.claim, f.rule) == (spec.claim, spec.rule) and "2 standard errors" in f.rule
    assert "3 standard errors" in SUPPRESSION_FINDINGS[1].statement(z=3)
    # a wider margin is another rule: judged at z = 15 the same rows no longer show a clear fall from k = 0
    from ctl_explore.suppression import SuppressionGrid
    spec = SUPPRESSION_FINDINGS[1]
    assert spec.judge(SuppressionGrid(*_rows(0.6, 0.1, 0.17, 0.36)), z=15).parts[0].verdict == "inconclusive at this scale"


def test_accuracy_direction_is_the_study_difference_at_z():
    "accuracy_direction is lesson 09's Difference of two single runs (accuracy_gap) judged at z standard errors."
    from ctl_explore.study.stats import accuracy_gap
    for a, b, n in ((0.9, 0.5, 359), (0.5, 0.55, 359), (0.5, 0.55, 100_000), (0.3, 0.3, 10), (1.0, 0.0, 5)):
        d = accuracy_gap(a, b, n, n)
        assert math.isclose(d.value, a - b) and accuracy_direction(a, b, n, n) == d.sign(critical=2.0)
    with pytest.raises(ValueError, match="give one of level and critical"):
        accuracy_gap(0.5, 0.4, 10, 10).sign()
