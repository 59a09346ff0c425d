"""Linear evaluation: the configuration's checks, the normalised and raw probes on cached features, and the augmented
probe of [WL21]'s released code, which must leave the frozen backbone untouched and run it in evaluation mode."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import pytest
import torch
import torch.nn.functional as F

from ctl_explore.cli import main
from ctl_explore.data import DATASETS, TwoViewAugment, load_dataset
from ctl_explore.linear_eval import (LinearEvalConfig, augmented_linear_probe, linear_eval, linear_probe,
                                     probe_augment_params)
from ctl_explore.train import PretrainConfig, build_model, load_checkpoint, pretrain


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    "A tiny digits pretraining run (two epochs of a narrow ConvNet)."
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("digits_run")
    pretrain(PretrainConfig(epochs=2, width=8, out_dim=32, knn_k=20), folder, quiet=True)
    return folder


def _features(n: int = 300, dim: int = 16, classes: int = 3, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=g)
    labels = torch.randint(0, classes, (n,), generator=g)
    return centres[labels] + 0.5 * torch.randn(n, dim, generator=g), labels


# ---------------------------------------------------------------- the configuration

def test_defaults_are_the_course_probe_with_the_paper_optimiser():
    cfg = LinearEvalConfig()
    assert (cfg.normalize, cfg.augment) == (True, False)
    assert (cfg.epochs, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.lr_drops, cfg.drop_factor) == (100, 30.0, 0.9, 0.0, (0.4, 0.6, 0.8), 0.2)
    assert {"normalize", "augment"} <= set(dataclasses.asdict(cfg))


@pytest.mark.parametrize("kwargs, message", [
    (dict(weight_decay=math.nan), "weight_decay must be a finite number >= 0"),
    (dict(weight_decay=math.inf), "weight_decay must be a finite number >= 0"),
    (dict(weight_decay=-1e-4), "weight_decay must be a finite number >= 0"),
    (dict(weight_decay=True), "weight_decay must be a number, got the boolean True"),
    (dict(lr_drops=(-1, 5)), r"each of lr_drops must lie in \(0, 1\] \(fractions of the epochs\)"),
    (dict(lr_drops=(0.0,)), r"each of lr_drops must lie in \(0, 1\] \(fractions of the epochs\)"),
    (dict(lr_drops=(0.5, 1.5)), r"each of lr_drops must lie in \(0, 1\] \(fractions of the epochs\)"),
    (dict(lr_drops=(math.nan,)), r"each of lr_drops must lie in \(0, 1\] \(fractions of the epochs\)"),
    (dict(lr_drops=(True,)), "each of lr_drops must be a number, got the boolean True"),
    (dict(lr_drops=0.5), "lr_drops must be a sequence of fractions"),
    (dict(momentum=True), "momentum must be a number, got the boolean True"),
    (dict(momentum=math.nan), r"momentum must lie in \[0, 1\)"),
    (dict(momentum=1.0), r"momentum must lie in \[0, 1\)"),
    (dict(lr=True), "lr must be a number, got the boolean True"),
    (dict(lr=math.nan), "lr must be a finite number > 0"),
    (dict(lr=math.inf), "lr must be a finite number > 0"),
    (dict(drop_factor=math.nan), r"drop_factor must lie in \(0, 1\]"),
    (dict(drop_factor=False), "drop_factor must be a number, got the boolean False"),
    (dict(epochs=True), "epochs must be an integer >= 1"),
    (dict(seed=1.5), "seed must be an integer"),
    (dict(normalize="no"), "normalize must be True or False"),
    (dict(augment=1), "augment must be True or False"),
])
def test_bad_configuration_is_refused_naming_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LinearEvalConfig(**kwargs)


def test_command_line_refuses_nan_weight_decay(run_dir, capsys):
    "Issue #13: `--weight-decay nan` used to train to accuracy 0.100 and exit 0."
    with pytest.raises(SystemExit) as info:
        main(["linear-eval", str(run_dir), "--weight-decay", "nan"])
    assert info.value.code == 2 and "weight_decay must be a finite number >= 0" in capsys.readouterr().err


# ---------------------------------------------------------------- the probe on cached features

def _old_linear_probe(train_x, train_y, test_x, test_y, config):
    "The probe as it was before `normalize` and `augment` existed: the default must compute exactly this."
    n_classes = int(max(train_y.max(), test_y.max())) + 1
    train_x, test_x = F.normalize(train_x.float(), dim=1), F.normalize(test_x.float(), dim=1)
    g = torch.Generator().manual_seed(config.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        layer = torch.nn.Linear(train_x.shape[1], n_classes)
    opt = torch.optim.SGD(layer.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay)
    for epoch in range(config.epochs):
        for group in opt.param_groups: group["lr"] = config.lr_at(epoch)
        order = torch.randperm(len(train_x), generator=g)
        for start in range(0, len(order), config.batch_size):
            idx = order[start:start + config.batch_size]
            loss = F.cross_entropy(layer(train_x[idx]), train_y[idx])
            opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
    with torch.no_grad():
        accuracy = lambda x, y: (layer(x).argmax(dim=1) == y).float().mean().item()
        return dict(top1=accuracy(test_x, test_y), train_top1=accuracy(train_x, train_y))


def test_default_probe_is_unchanged():
    x, y = _features(n=500, seed=1)
    x = x + 0.8 * torch.randn(x.shape, generator=torch.Generator().manual_seed(2))  # noisy enough that the layer matters
    cfg = LinearEvalConfig(epochs=7, batch_size=64, seed=3)
    assert linear_probe(x[:400], y[:400], x[400:], y[400:], cfg) == _old_linear_probe(x[:400], y[:400], x[400:], y[400:], cfg)


def test_normalised_probe_ignores_the_scale_and_the_raw_one_sees_it():
    "Two classes on one ray, at norms 1 and 3: only the feature's length tells them apart."
    g = torch.Generator().manual_seed(0)
    direction = F.normalize(torch.randn(8, generator=g), dim=0)
    y = torch.randint(0, 2, (400,), generator=g)
    x = (1 + 2 * y.float())[:, None] * direction + 0.05 * torch.randn(400, 8, generator=g)
    cfg = dict(epochs=30, lr=1.0)
    raw = linear_probe(x[:300], y[:300], x[300:], y[300:], LinearEvalConfig(normalize=False, **cfg))
    normalised = linear_probe(x[:300], y[:300], x[300:], y[300:], LinearEvalConfig(**cfg))
    assert raw["top1"] > 0.95 and normalised["top1"] < 0.75, (raw, normalised)
    scaled = linear_probe(10 * x[:300], y[:300], 10 * x[300:], y[300:], LinearEvalConfig(**cfg))
    assert scaled["top1"] == pytest.approx(normalised["top1"], abs=0.02)               # normalised: scale does not matter


def test_cached_probe_refuses_augment():
    x, y = _features()
    with pytest.raises(ValueError, match="config.augment=True needs the images"):
        linear_probe(x[:200], y[:200], x[200:], y[200:], LinearEvalConfig(augment=True))


# ---------------------------------------------------------------- the augmented probe

def _model_and_data(run_dir):
    state = load_checkpoint(run_dir / "checkpoint.pt")
    pcfg = PretrainConfig.from_dict(state["config"])
    train, test = load_dataset("digits"), load_dataset("digits", train=False)
    model = build_model(pcfg, 1, torch.device("cpu"))
    model.load_state_dict(state["model"])
    return model, train, test


@pytest.mark.parametrize("normalize", [True, False])
def test_augmented_probe_keeps_the_backbone_frozen_and_in_eval_mode(run_dir, monkeypatch, normalize):
    model, train, test = _model_and_data(run_dir)
    model.train()                                                    # as a training loop would leave it
    before = {k: v.clone() for k, v in model.state_dict().items()}   # weights and batch-norm statistics
    seen = []
    def record(module, inputs):
        seen.append((all(not m.training for m in model.modules()), torch.is_grad_enabled(), inputs[0].shape[0]))
    model.backbone.register_forward_pre_hook(record)
    views = []
    original_view = TwoViewAugment.view
    def counting_view(self, images, generator=None, dtype=torch.float32):
        views.append(len(images)); return original_view(self, images, generator, dtype)
    monkeypatch.setattr(TwoViewAugment, "view", counting_view)

    cfg = LinearEvalConfig(epochs=2, batch_size=512, augment=True, normalize=normalize)
    result = augmented_linear_probe(model, train, test, cfg, eval_batch_size=1000)

    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())      # nothing in the backbone moved
    assert all(p.grad is None for p in model.parameters())
    assert model.training                                                              # its mode given back
    assert seen and all(eval_mode and not grad for eval_mode, grad, _ in seen)
    assert views == [512, 512, 414] * 2                           # every training image augmented anew in each epoch
    assert [n for *_, n in seen] == views + [1000, 438, 359]      # then the plain train and test images, once
    assert 0 <= result["top1"] <= 1 and 0 <= result["train_top1"] <= 1


def test_augmented_probe_is_seeded(run_dir):
    model, train, test = _model_and_data(run_dir)
    cfg = LinearEvalConfig(epochs=1, augment=True, seed=5)
    assert augmented_linear_probe(model, train, test, cfg) == augmented_linear_probe(model, train, test, cfg)


def test_probe_augmentation_is_geometric_only():
    for name in DATASETS:
        params = probe_augment_params(name)
        assert params.jitter_p == params.grayscale_p == params.blur_p == 0.0
    assert probe_augment_params("cifar10").crop_scale == (1.0, 1.0) and probe_augment_params("cifar10").flip_p == 0.5
    assert probe_augment_params("imagenet100", 224).crop_scale == (0.08, 1.0) and probe_augment_params("imagenet100", 224).size == 224
    assert probe_augment_params("digits").flip_p == 0.0
    x = torch.randint(0, 256, (6, 3, 32, 32), dtype=torch.uint8)
    view = TwoViewAugment(probe_augment_params("cifar10")).view(x, torch.Generator().manual_seed(0))
    mean, std = (torch.tensor(s).view(1, 3, 1, 1) for s in (probe_augment_params("cifar10").mean, probe_augment_params("cifar10").std))
    plain = (x.float() / 255 - mean) / std
    for v, a, b in zip(view, plain, plain.flip(-1)):                                     # each image, or its mirror image
        assert torch.allclose(v, a, atol=1e-4) or torch.allclose(v, b, atol=1e-4)
    with pytest.raises(ValueError, match="dataset must be one of"):
        probe_augment_params("imagenet1k")
    assert probe_augment_params("mnist").crop_scale == (1.0, 1.0) and probe_augment_params("mnist").flip_p == 0.0  # the plain image


def test_linear_eval_with_the_papers_options(run_dir):
    ckpt = run_dir / "checkpoint.pt"
    digest = hashlib.sha256(ckpt.read_bytes()).hexdigest()
    result = linear_eval(run_dir, LinearEvalConfig(epochs=10, normalize=False, augment=True))
    saved = json.loads((run_dir / "linear_eval.json").read_text())
    assert saved["config"]["normalize"] is False and saved["config"]["augment"] is True
    assert saved["top1"] == result["top1"] > 0.15                                     # above chance (0.1), for a barely trained net
    assert hashlib.sha256(ckpt.read_bytes()).hexdigest() == digest                    # the run's checkpoint untouched
    baseline = linear_eval(run_dir, LinearEvalConfig(epochs=3, augment=True), random_init=True, write=False)
    assert 0 <= baseline["top1"] <= 1


# ---------------------------------------------------------------- ImageNet100 at full resolution, end to end

def test_full_images_through_pretrain_and_linear_eval(tmp_path, monkeypatch):
    "The training loop and both probes take ImageNet100's files decoded per batch (the switch lesson 07 would make)."
    import functools
    import numpy as np
    from PIL import Image
    import ctl_explore.linear_eval as linear_eval_module
    import ctl_explore.train as train_module
    from ctl_explore.data import IMAGENET100_CLASSES, ImageFiles
    rng, classes = np.random.default_rng(0), list(IMAGENET100_CLASSES[:2])
    for split, per_class in (("train", 6), ("val", 3)):
        for wnid in classes:
            for k in range(per_class):
                path = tmp_path / "imagenet" / split / wnid / f"{k}.JPEG"
                path.parent.mkdir(parents=True, exist_ok=True)
                size = [(120, 90), (90, 120), (200, 150)][k % 3]
                Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)).resize(size).save(path)
    loaded = []
    def full_images(*args, **kwargs):
        data = load_dataset(*args, full_images=True, classes=classes, **kwargs)
        loaded.append(data); return data
    monkeypatch.setattr(train_module, "load_dataset", full_images)
    monkeypatch.setattr(linear_eval_module, "load_dataset", full_images)
    cfg = PretrainConfig(dataset="imagenet100", data_root=str(tmp_path / "imagenet"), image_size=32, width=4, out_dim=16,
                         batch_size=8, epochs=2, knn_k=5, device="cpu")
    last = pretrain(cfg, tmp_path / "run", quiet=True)
    assert last["epoch"] == 2 and all(math.isfinite(last[k]) for k in ("loss", "uniformity", "knn_accuracy"))
    assert loaded and all(isinstance(d.images, ImageFiles) and d.images.size == 32 for d in loaded)
    for probe in (LinearEvalConfig(epochs=2), LinearEvalConfig(epochs=2, augment=True, normalize=False)):
        assert 0 <= linear_eval(tmp_path / "run", probe, write=False)["top1"] <= 1


def test_probe_random_numbers_are_drawn_on_the_data_device(run_dir, monkeypatch):
    "Every generator the probes use lives on the device of the data it shuffles or augments: no random number crosses from the host."
    model, train, test = _model_and_data(run_dir)
    generators, permutations = [], []
    original_view, original_randperm = TwoViewAugment.view, torch.randperm
    def spy_view(self, images, generator=None, dtype=torch.float32):
        generators.append((generator.device if generator is not None else None, images.device))
        return original_view(self, images, generator, dtype)
    def spy_randperm(n, *args, generator=None, device=None, **kwargs):
        permutations.append((generator.device if generator is not None else None, torch.device(device) if device is not None else None))
        return original_randperm(n, *args, generator=generator, device=device, **kwargs)
    monkeypatch.setattr(TwoViewAugment, "view", spy_view)
    monkeypatch.setattr(torch, "randperm", spy_randperm)
    augmented_linear_probe(model, train, test, LinearEvalConfig(epochs=2, batch_size=512, augment=True))
    assert generators and all(g == d for g, d in generators)                     # each view drawn where its images are
    assert permutations == [(train.labels.device, train.labels.device)] * 2        # each epoch's shuffle made on the labels' device


def test_cpu_results_are_those_of_the_host_generator():
    "On the CPU a generator made for the data's device is the host generator the probes used before: the same draws, so the same results."
    for seed in (0, 5, 12345):
        old, new = torch.Generator().manual_seed(seed), torch.Generator(device=torch.device("cpu")).manual_seed(seed)
        assert torch.equal(torch.randperm(1438, generator=old), torch.randperm(1438, generator=new, device="cpu"))
        assert torch.equal(torch.rand(64, 10, generator=old), torch.rand(64, 10, generator=new))
