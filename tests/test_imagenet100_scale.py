"""Issue 40, item 7: ImageNet100 at its real size. A study of 126,689 training JPEGs must not decode them to count them,
must measure a finished run of full-resolution files (the augmentation takes decoded batches, never the file list), and
under torchrun each process decodes only its share of the global batch. Run on a fabricated ImageNet100 folder: the 100
class folders with a few tiny JPEG and PNG files of differing sizes each (train 3, val 2 per class)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tqdm.auto import tqdm

import ctl_explore.data as data
import ctl_explore.train as train_module
from ctl_explore.data import IMAGENET100_CLASSES, CorruptImageError, FullImages, ImageFiles, TwoViewAugment, load_dataset
from ctl_explore.train import PretrainConfig, TrainState, pretrain


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    from PIL import Image
    root, rng = tmp_path_factory.mktemp("imagenet"), np.random.default_rng(0)
    for split, per_class in (("train", 3), ("val", 2)):
        for c, wnid in enumerate(sorted(IMAGENET100_CLASSES)):
            folder = root / split / wnid
            folder.mkdir(parents=True)
            for j in range(per_class):
                pixels = rng.integers(0, 256, (9 + (c + j) % 7, 11 + c % 5, 3), dtype=np.uint8)  # heights 9-15, widths 11-15
                Image.fromarray(pixels).save(folder / f"{wnid}_{j}.{'png' if j % 2 else 'jpeg'}")
    return root


def _no_decoding(monkeypatch):
    "Any decoding of an image file fails the test."
    def refuse(*args, **kwargs): raise AssertionError("an image file was decoded")
    monkeypatch.setattr(data, "_decode_square", refuse)
    monkeypatch.setattr(data, "decode_image_file", refuse)


def test_a_study_counts_imagenet100_without_decoding(imagenet, monkeypatch):
    from ctl_explore.study.plan import get_preset
    from ctl_explore.study.runner import _n_train
    _no_decoding(monkeypatch)
    assert _n_train(get_preset("imagenet100-paper").with_base(data_root=str(imagenet))) == 300


def test_image_sizes_come_from_the_headers_and_match_the_decoded_images(imagenet, monkeypatch):
    files = load_dataset("imagenet100", train=False, root=imagenet, full_images=True).images
    rows = torch.tensor([0, 5, 199, 42, 5])
    decoded = files[rows]
    with monkeypatch.context() as m:
        _no_decoding(m)
        heights, widths = files.image_sizes(rows)
    assert torch.equal(heights, decoded.heights) and torch.equal(widths, decoded.widths)
    assert len(set(heights.tolist())) > 1  # the sizes differ from file to file
    broken = imagenet / "broken.jpeg"
    broken.write_bytes(b"not an image")
    with pytest.raises(CorruptImageError, match=r"^cannot decode the image file .*broken\.jpeg \(UnidentifiedImageError"):
        ImageFiles([broken]).image_sizes([0])


def test_a_finished_imagenet100_run_is_measured(imagenet, tmp_path):
    "measure_run embeds two augmented views of the test files batch by batch: a row, not `ValueError: ... ImageFiles`."
    from ctl_explore.study.measure import VIEW_BATCH, measure_run, run_embeddings
    config = PretrainConfig(dataset="imagenet100", data_root=str(imagenet), full_images=True, image_size=8, width=4, out_dim=8,
                            epochs=1, batch_size=64, eval_batch_size=64, knn_k=5, device="cpu")
    pretrain(config, tmp_path / "run", quiet=True)
    row = measure_run(tmp_path / "run", linear_epochs=1)
    assert (row["n_train"], row["n_test"]) == (300, 200) and 0 <= row["linear_top1"] <= 1 and -1 <= row["pos_similarity"] <= 1
    again = run_embeddings(tmp_path / "run", views=True)
    assert again["z1"].shape == again["z2"].shape == (200, 8) and VIEW_BATCH < 1000
    assert not torch.equal(again["z1"], again["z2"])  # two views, each drawn anew


def _steps(imagenet, rank: int, world: int, monkeypatch, steps: int = 2) -> tuple[list, list[str]]:
    "What `_train_epoch` hands each of `steps` steps as process `rank` of `world` (the share it augments, its draws), and the files it decoded."
    files = load_dataset("imagenet100", train=True, root=imagenet, full_images=True, num_workers=1)
    decoded, decode = [], data.decode_image_file
    def counted(path):
        decoded.append(Path(path).name)
        return decode(path)
    monkeypatch.setattr(data, "decode_image_file", counted)
    monkeypatch.setattr(train_module, "_distributed", lambda: (rank, world))
    seen = []
    def step(state, images, idx, params, draws, part):
        share = images[part]
        seen.append((share.images, [d[part] for d in draws], idx.clone(), part))
        return torch.zeros(())
    config = PretrainConfig(dataset="imagenet100", data_root=str(imagenet), full_images=True, image_size=8, batch_size=16, device="cpu")
    state = TrainState(config, None, None, None, torch.Generator().manual_seed(0), {}, TwoViewAugment("imagenet100", size=8), step=step)
    train_module._train_epoch(state, files, tqdm(range(steps), disable=True))
    return seen, decoded


def test_each_process_decodes_only_its_share_of_the_global_batch(imagenet, monkeypatch):
    with monkeypatch.context() as m: alone, decoded_alone = _steps(imagenet, 0, 1, m)
    with monkeypatch.context() as m: second, decoded_second = _steps(imagenet, 1, 2, m)
    assert len(decoded_alone) == 2 * 16 and len(decoded_second) == 2 * 8  # its 8 of each step's 16 files, no more
    for (images, draws, idx, _), (share, share_draws, share_idx, part) in zip(alone, second):
        assert part == slice(8, 16) and torch.equal(idx, share_idx)
        assert len(share) == 8 and all(torch.equal(a, b) for a, b in zip(images[8:16], share))
        for d, s in zip(draws, share_draws):  # the same random numbers as one process draws for the whole batch
            for name in d.__dataclass_fields__: assert torch.equal(getattr(d, name)[part], getattr(s, name)), name
