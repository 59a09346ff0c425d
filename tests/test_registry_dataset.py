"""A dataset declared in one place is found everywhere a dataset name is taken: `load_dataset`, the augmentation presets,
`PretrainConfig` and `pretrain`, the linear probe, the command line's `--dataset` and a study. The toy dataset is 60
random 8x8 grey images of 3 classes; it is registered for each test and removed afterwards."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F

from ctl_explore.data import (DATASETS, NORMALIZATION, DatasetSpec, ImageData, TwoViewAugment, augment_params, dataset_spec,
                              load_dataset, register_dataset, stratified_split)
from ctl_explore.linear_eval import LinearEvalConfig, linear_eval, probe_augment_params
from ctl_explore.train import PretrainConfig, pretrain


def _toy_load(root, train: bool, image_size: int, download: bool) -> ImageData:
    "60 random 8x8 grey images, 20 per class, each class a little brighter than the one before; a stratified 80/20 split."
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(60) % 3
    images = (torch.randint(0, 128, (60, 1, 8, 8), generator=g) + 60 * labels.view(-1, 1, 1, 1)).to(torch.uint8)
    if image_size != 8: images = F.interpolate(images.float(), size=image_size, mode="nearest").to(torch.uint8)
    idx = stratified_split(labels)[0 if train else 1]
    return ImageData(images[idx], labels[idx], ["a", "b", "c"], "toy", train)


TOY = DatasetSpec("toy", _toy_load, image_size=8, channels=1, n_classes=3, mean=(0.45,), std=(0.3,),
                  augment=dict(crop_scale=(0.6, 1.0), flip_p=0.0, jitter_p=0.0, saturation=0.0, hue=0.0, grayscale_p=0.0),
                  probe_augment=dict(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0)),
                  source="made up by the test: random pixels, nothing to download")


@pytest.fixture
def toy():
    assert "toy" not in DATASETS
    spec = register_dataset(TOY)
    try: yield spec
    finally: DATASETS.pop("toy", None)


def test_toy_is_loaded_and_augmented_by_name(toy):
    assert dataset_spec("toy") is toy and "toy" in DATASETS and "toy" in tuple(DATASETS)
    train, test = load_dataset("toy"), load_dataset("toy", train=False)
    assert (train.name, train.images.shape, test.images.shape) == ("toy", (48, 1, 8, 8), (12, 1, 8, 8))
    assert train.labels.bincount().tolist() == [16, 16, 16]
    assert load_dataset("toy", image_size=16).images.shape == (48, 1, 16, 16)
    with pytest.raises(ValueError, match="classes only apply to imagenet100, not 'toy'"):
        load_dataset("toy", classes=["a"])
    params = augment_params("toy")
    assert (params.crop_scale, params.jitter_p, params.mean, params.std) == ((0.6, 1.0), 0.0, (0.45,), (0.3,))
    assert NORMALIZATION["toy"] == ((0.45,), (0.3,))
    v1, v2 = TwoViewAugment("toy")(train.images, torch.Generator().manual_seed(0))
    assert v1.shape == v2.shape == (48, 1, 8, 8) and not torch.equal(v1, v2)
    probe = probe_augment_params("toy")
    assert (probe.crop_scale, probe.crop_ratio, probe.flip_p, probe.jitter_p) == ((1.0, 1.0), (1.0, 1.0), 0.0, 0.0)


def test_toy_is_gone_once_unregistered():
    assert "toy" not in DATASETS
    with pytest.raises(ValueError, match=r"dataset must be one of \('digits'.*got 'toy'"):
        dataset_spec("toy")
    with pytest.raises(ValueError, match="name must be one of"):
        load_dataset("toy")
    with pytest.raises(ValueError, match="dataset must be one of"):
        PretrainConfig(dataset="toy")


def test_registration_refuses_another_dataset_under_a_taken_name(toy):
    assert register_dataset(TOY) is TOY  # the same declaration again (a notebook cell run twice) changes nothing
    other = dataclasses.replace(TOY, n_classes=4)
    with pytest.raises(ValueError, match="'toy' is already registered: pass overwrite=True"):
        register_dataset(other)
    assert register_dataset(other, overwrite=True) is dataset_spec("toy")
    with pytest.raises(ValueError, match="spec must be a DatasetSpec"):
        register_dataset("toy")


@pytest.mark.parametrize("change, message", [
    (dict(name=""), "name must be a non-empty string"),
    (dict(name="two words"), "name must be a non-empty string"),
    (dict(load=None), "load must be callable"),
    (dict(image_size=0), "image_size must be an integer >= 1"),
    (dict(n_classes=1), "n_classes must be an integer >= 2"),
    (dict(mean=(0.5, 0.5)), r"mean and std must have one entry per channel \(1\)"),
    (dict(std=(0.0,)), "std > 0"),
    (dict(augment=[("flip_p", 0.0)]), "augment must be a mapping"),
    (dict(options=("classes", "colour")), "options must be a tuple of names from"),
])
def test_a_bad_declaration_is_refused_naming_the_field(change, message):
    with pytest.raises(ValueError, match=message):
        dataclasses.replace(TOY, **change)


def test_an_unknown_recipe_field_is_named_when_the_recipe_is_built(toy):
    register_dataset(dataclasses.replace(TOY, augment=dict(flip=0.5)), overwrite=True)
    with pytest.raises(ValueError, match=r"dataset 'toy': augment sets \['flip'\], which are not among the recipe's fields"):
        augment_params("toy")


def test_a_loader_that_returns_no_image_data_is_named(toy):
    register_dataset(dataclasses.replace(TOY, load=lambda root, train, image_size, download: torch.zeros(3)), overwrite=True)
    with pytest.raises(ValueError, match="the loader of dataset 'toy' returned a Tensor, not an ImageData"):
        load_dataset("toy")


def test_toy_pretrains_and_is_probed(toy, tmp_path):
    torch.set_num_threads(1)
    config = PretrainConfig(dataset="toy", epochs=1, width=4, out_dim=8, batch_size=16, knn_k=5, device="cpu")
    record = pretrain(config, tmp_path / "run", quiet=True)
    assert record["epoch"] == 1
    assert json.loads((tmp_path / "run" / "config.json").read_text())["dataset"] == "toy"
    result = linear_eval(tmp_path / "run", LinearEvalConfig(epochs=2, batch_size=16))
    assert 0.0 <= result["top1"] <= 1.0 and result["pretrain_epochs"] == 1
    augmented = linear_eval(tmp_path / "run", LinearEvalConfig(epochs=1, batch_size=16, augment=True), write=False)
    assert 0.0 <= augmented["top1"] <= 1.0


def test_toy_is_a_choice_of_the_command_line(toy, tmp_path):
    from ctl_explore.cli import build_parser
    args = build_parser().parse_args(["pretrain", "--dataset", "toy", "--out", str(tmp_path / "run")])
    assert args.dataset == "toy"


def test_a_one_run_study_runs_on_toy_and_reports_it(toy, tmp_path):
    "A 1-run study on the toy dataset, named as on the command line (`--dataset toy`): its run trains on the toy's images, its row has the loss's τ, and the report names the dataset."
    from ctl_explore.cli import study_preset
    from ctl_explore.study.report import write_report
    from ctl_explore.study.runner import run_study
    torch.set_num_threads(1)
    preset = study_preset("smoke", [0.5], losses=["contrastive"], seeds=[0], dataset="toy").with_base(batch_size=16)  # 48 training images
    assert preset.name == "smoke-lossescontrastive-taus0.5-seeds0-datasettoy"
    rows = run_study(preset, tmp_path / "study", quiet=True, device="cpu", workers=1)
    assert len(rows) == 1 and "failed" not in rows[0], rows
    assert (rows[0]["tau"], rows[0]["alpha"], rows[0]["lam"], rows[0]["n_train"]) == (0.5, None, None, len(load_dataset("toy", train=True)))
    configs = [json.loads(p.read_text()) for p in (tmp_path / "study" / "runs").glob("*/config.json")]
    assert len(configs) == 1 and configs[0]["dataset"] == "toy"
    assert "The temperature study on toy" in write_report(rows, tmp_path / "study", preset).read_text()
