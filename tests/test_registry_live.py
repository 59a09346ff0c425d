"""The registries are read when they are used, never copied when a module is imported: a loss and datasets registered
after every module of the package has been imported reach configuration checks, pretraining, the linear probe, the
feature-suppression lesson, data loading, the memory bank and the figures, and every error message lists them; once
unregistered they are refused everywhere again. The fixtures register and remove them around each test."""
from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch
import torch.nn.functional as F

import ctl_explore

for _module in pkgutil.walk_packages(ctl_explore.__path__, "ctl_explore."):  # every module imported before anything is registered
    importlib.import_module(_module.name)

from ctl_explore.data import DATASETS, DatasetSpec, ImageData, TwoViewAugment, load_dataset, register_dataset, stratified_split  # noqa: E402
from ctl_explore.losses import LOSSES, LossSpec, loss_names, reduce_loss, register_loss  # noqa: E402

LOSS, GREY, RGB = "live_triplet", "live_grey", "live_rgb"


def live_triplet(pos, neg, tau, lam, reduction="mean"):
    "A smooth triplet loss with a weight: λ · mean over the negatives of softplus((s_ij − s_ii)/τ)."
    return reduce_loss(lam * F.softplus((neg - pos[:, None]) / tau).mean(dim=1), reduction)


def _loader(channels: int):
    def load(root, train: bool, image_size: int, download: bool, **options) -> ImageData:
        "60 random images of 3 classes, each class a little brighter; a stratified 80/20 split."
        g = torch.Generator().manual_seed(channels)
        labels = torch.arange(60) % 3
        images = (torch.randint(0, 128, (60, channels, 8, 8), generator=g) + 60 * labels.view(-1, 1, 1, 1)).to(torch.uint8)
        if image_size != 8: images = F.interpolate(images.float(), size=image_size, mode="nearest").to(torch.uint8)
        idx = stratified_split(labels)[0 if train else 1]
        return ImageData(images[idx], labels[idx], ["a", "b", "c"], GREY if channels == 1 else RGB, train)
    return load


GREY_SPEC = DatasetSpec(GREY, _loader(1), 8, 1, 3, (0.45,), (0.3,), augment=dict(flip_p=0.0, jitter_p=0.0, grayscale_p=0.0),
                        source="made up by the test")
RGB_SPEC = DatasetSpec(RGB, _loader(3), 8, 3, 3, (0.45,) * 3, (0.3,) * 3, source="made up by the test",
                       options=("full_images",))  # it declares that it can keep full-resolution files
LOSS_SPEC = LossSpec(LOSS, live_triplet, ("tau", "lam"), label="live triplet", color="#abcdef", paper="made up by the test",
                     default_lam=lambda n_negatives, alpha: 0.25)


@pytest.fixture
def live():
    "The loss and the two datasets, registered for one test and removed afterwards (even when it fails)."
    assert LOSS not in LOSSES and GREY not in DATASETS and RGB not in DATASETS
    register_loss(LOSS_SPEC); register_dataset(GREY_SPEC); register_dataset(RGB_SPEC)
    try: yield
    finally:
        LOSSES.pop(LOSS, None); DATASETS.pop(GREY, None); DATASETS.pop(RGB, None)


def test_pretrain_configuration_takes_them_and_names_them(live):
    from ctl_explore.train import PretrainConfig, default_lam
    cfg = PretrainConfig(dataset=GREY, loss=LOSS)
    assert cfg.loss_params(10) == {"tau": 0.2, "lam": 0.25} and default_lam(LOSS) == 0.25  # λ from the declaration
    with pytest.raises(ValueError, match=f"loss must be one of .*'{LOSS}'"): PretrainConfig(loss="nope")
    with pytest.raises(ValueError, match=f"dataset must be one of .*'{GREY}', '{RGB}'"): PretrainConfig(dataset="nope")
    with pytest.raises(ValueError, match=f"the memory bank serves only .*{LOSS}"): PretrainConfig(loss="nt_xent", negatives="bank")
    assert PretrainConfig(dataset=RGB, full_images=True).full_images  # the declaration says it can, not its name
    with pytest.raises(ValueError, match=f"full_images applies to imagenet100, {RGB} only, not '{GREY}'"):
        PretrainConfig(dataset=GREY, full_images=True)


def test_pretrain_and_linear_eval_run_them(live, tmp_path):
    from ctl_explore.linear_eval import LinearEvalConfig, linear_eval, probe_augment_params
    from ctl_explore.train import PretrainConfig, pretrain
    cfg = PretrainConfig(dataset=GREY, loss=LOSS, negatives="batch", epochs=1, batch_size=16, width=4, out_dim=8, knn_k=5,
                         device="cpu", precision="fp32")
    last = pretrain(cfg, tmp_path / "run", quiet=True)
    assert last["epoch"] == 1 and torch.isfinite(torch.tensor(last["loss"]))
    assert probe_augment_params(GREY).mean == (0.45,)
    assert 0 <= linear_eval(tmp_path / "run", LinearEvalConfig(epochs=2), write=False)["top1"] <= 1


def test_data_memory_bank_and_figures_use_them(live):
    from ctl_explore.memory_bank import MemoryBank, batch_loss
    from ctl_explore.losses import apply_loss, pair_similarities
    from ctl_explore.viz import uniformity_tolerance_plane
    train = load_dataset(GREY)
    assert train.images.shape == (48, 1, 8, 8) and load_dataset(RGB, train=False).images.shape == (12, 3, 8, 8)
    assert TwoViewAugment(GREY)(train.images[:4], torch.Generator().manual_seed(0))[0].shape == (4, 1, 8, 8)
    with pytest.raises(ValueError, match=f"classes only apply to imagenet100, not '{GREY}'"): load_dataset(GREY, classes=["a"])
    g = torch.Generator().manual_seed(0)
    q, z2 = (F.normalize(torch.randn(6, 5, generator=g), dim=1) for _ in range(2))
    bank = MemoryBank(20, 5, generator=g)
    torch.testing.assert_close(bank.loss(q, torch.arange(6), LOSS, tau=0.5, lam=0.5),
                               live_triplet(*bank.similarities(q, torch.arange(6)), 0.5, 0.5))
    torch.testing.assert_close(batch_loss(q, z2, LOSS, tau=0.5, lam=0.5), apply_loss(LOSS, *pair_similarities(q, z2), tau=0.5, lam=0.5))
    fig = uniformity_tolerance_plane([dict(loss=LOSS, tau=0.5, uniformity=3.0, tolerance=0.4)])
    assert fig.data[0].marker.color == "#abcdef" and fig.data[0].name == LOSS


def test_feature_suppression_takes_a_grey_dataset_by_its_declaration(live):
    from ctl_explore.suppression import SuppressionConfig, randbit_augment, randbit_run, suppression_datasets
    assert suppression_datasets() == ("digits", "mnist", "mnist5k", GREY)  # one channel, as declared; the RGB one is not
    with pytest.raises(ValueError, match=f"dataset must be one of \\('digits', 'mnist', 'mnist5k', '{GREY}'\\), got '{RGB}'"):
        SuppressionConfig(dataset=RGB)
    config = SuppressionConfig(dataset=GREY, epochs=1, batch_size=16, width=2, out_dim=8, linear_epochs=1)
    assert randbit_augment(SuppressionConfig(dataset=GREY, augment="crop"), GREY, 8).params.mean == (0.0,)
    row = randbit_run(2, config, progress=False)
    assert row["dataset"] == GREY and row["n_test"] == 12 and 0 <= row["digit_top1"] <= 1


def test_they_are_gone_once_unregistered(live):
    from ctl_explore.suppression import SuppressionConfig, suppression_datasets
    from ctl_explore.train import PretrainConfig
    assert LOSS in loss_names("similarity") and GREY in suppression_datasets()
    LOSSES.pop(LOSS); DATASETS.pop(GREY); DATASETS.pop(RGB)
    assert LOSS not in loss_names() and GREY not in suppression_datasets()
    with pytest.raises(ValueError, match="loss must be one of") as e: PretrainConfig(loss=LOSS)
    assert LOSS not in str(e.value).split(", got")[0]  # the names it lists
    with pytest.raises(ValueError, match="dataset must be one of") as e: PretrainConfig(dataset=GREY)
    assert GREY not in str(e.value).split(", got")[0] and RGB not in str(e.value)
    with pytest.raises(ValueError, match=f"must be one of .*got '{GREY}'"): load_dataset(GREY)
    with pytest.raises(ValueError, match=f"dataset must be one of \\('digits', 'mnist', 'mnist5k'\\), got '{GREY}'"): SuppressionConfig(dataset=GREY)
    with pytest.raises(ValueError, match="full_images applies to imagenet100 only"): PretrainConfig(dataset="digits", full_images=True)
