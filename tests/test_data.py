"""ctl_explore.data: every loader on small files fabricated in the real on-disk formats, and the batched augmentation.

The fabricated files follow the real datasets byte for byte where it matters: CIFAR's batches are Python 2 pickles
(protocol 2, `str` keys and a uint8 array of channel-planar rows, read by torchvision with `encoding="latin1"`),
SVHN's are MATLAB 5 files (`X` [32, 32, 3, n], `y` [n, 1] with 10 for the digit 0), ImageNet is JPEGs in
`train/<wnid>/` and `val/<wnid>/`. torchvision checks each file's MD5 against the real dataset's, which fabricated
files cannot match: the tests, and only the tests, replace torchvision's `check_integrity` by a test that the file
exists (the `no_md5` fixture). One test checks that without that bypass the library refuses the files.
"""
from __future__ import annotations

import os, pickle, struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
import torchvision.datasets.cifar
import torchvision.datasets.svhn
import torchvision.transforms.v2.functional as TF
from hypothesis import given, strategies as st
from PIL import Image

from ctl_explore.data import (
    DATASETS, IMAGENET100_CLASSES, NORMALIZATION, AugmentParams, CorruptImageError, DatasetNotFoundError, FullImages,
    ImageData, ImageFiles, TwoViewAugment,
    adjust_color, augment_params, augment_view, data_root, gaussian_blur, grayscale, hue_shift, image_stats,
    imagenet100_files, load_dataset, resized_crop, sample_crop_boxes, sample_view, stratified_split, to_float,
)
import ctl_explore.data as data_module

REPO = Path(__file__).resolve().parents[1]
CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


# ---------------------------------------------------------------- writing the real formats

class _Py2Pickler(pickle._Pickler):
    "Writes `bytes` as Python 2 `str` (SHORT_BINSTRING / BINSTRING), as cPickle did when CIFAR's files were made."
    dispatch = pickle._Pickler.dispatch.copy()

    def _save_py2_str(self, obj: bytes) -> None:
        n = len(obj)
        self.write(pickle.SHORT_BINSTRING + bytes([n]) + obj if n < 256 else pickle.BINSTRING + struct.pack("<i", n) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_py2_str


def _py2_pickle(path: Path, obj) -> None:
    with open(path, "wb") as f: _Py2Pickler(f, protocol=2).dump(obj)


def _cifar_pixels(n: int, offset: int) -> np.ndarray:
    "[n, 3072] uint8 channel-planar rows: image k has red = offset + k, green = 200, blue = 255 - (offset + k)."
    k = (offset + np.arange(n)).astype(np.uint8)
    data = np.empty((n, 3072), dtype=np.uint8)
    data[:, :1024], data[:, 1024:2048], data[:, 2048:] = k[:, None], 200, (255 - k)[:, None]
    return data


def write_cifar10(root: Path, per_batch: int = 3) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate([f"data_batch_{j}" for j in range(1, 6)] + ["test_batch"]):
        _py2_pickle(folder / name, {b"batch_label": name.encode(), b"data": _cifar_pixels(per_batch, 10 * i),
                                    b"labels": [(10 * i + k) % 10 for k in range(per_batch)],
                                    b"filenames": [f"img_{i}_{k}.png".encode() for k in range(per_batch)]})
    _py2_pickle(folder / "batches.meta", {b"num_cases_per_batch": per_batch, b"num_vis": 3072,
                                          b"label_names": [n.encode() for n in CIFAR10_NAMES]})


def write_cifar100(root: Path, n_train: int = 7, n_test: int = 4) -> None:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train", n_train), ("test", n_test)):
        _py2_pickle(folder / name, {b"filenames": [b"x.png"] * n, b"batch_label": name.encode(),
                                    b"fine_labels": [(13 * k) % 100 for k in range(n)], b"coarse_labels": [k % 20 for k in range(n)],
                                    b"data": _cifar_pixels(n, 0)})
    _py2_pickle(folder / "meta", {b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
                                  b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)]})


def write_svhn(root: Path, split: str, n: int) -> None:
    X = np.zeros((32, 32, 3, n), dtype=np.uint8)
    for k in range(n): X[:, :, 0, k], X[:, :, 1, k], X[:, :, 2, k] = 10 * k, 100, 7
    X[3, 5, 0, :] = 250  # row 3, column 5 of the red plane: checks the axes
    y = np.array([[k % 10 or 10] for k in range(n)], dtype=np.uint8)  # SVHN stores the digit 0 as label 10
    root.mkdir(parents=True, exist_ok=True)
    scipy.io.savemat(root / f"{split}_32x32.mat", {"X": X, "y": y})


def write_jpeg(path: Path, size=(12, 9), colour=(0, 0, 0)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path, quality=95)


@pytest.fixture
def no_md5(monkeypatch):
    "torchvision's MD5 test replaced by a test that the file exists: fabricated files cannot match real checksums."
    exists = lambda fpath, md5=None: os.path.isfile(fpath)
    monkeypatch.setattr(torchvision.datasets.cifar, "check_integrity", exists)
    monkeypatch.setattr(torchvision.datasets.svhn, "check_integrity", exists)


@pytest.fixture(scope="module")
def imagenet(tmp_path_factory) -> Path:
    "All 100 ImageNet100 classes (one image in train, one in val) plus two classes outside ImageNet100."
    root = tmp_path_factory.mktemp("imagenet")
    for split in ("train", "val"):
        for i, wnid in enumerate(IMAGENET100_CLASSES):
            write_jpeg(root / split / wnid / f"{wnid}_{split}.JPEG", colour=(2 * i, 100, 50))
        for wnid in ("n01440764", "n01443537"):  # tench, goldfish: not ImageNet100
            write_jpeg(root / split / wnid / f"{wnid}_0.JPEG", colour=(255, 255, 255))
    # a second training image for the first class, in another extension and aspect, and a file that is no image
    write_jpeg(root / "train" / IMAGENET100_CLASSES[0] / "extra.jpg", size=(30, 10), colour=(10, 20, 30))
    (root / "train" / IMAGENET100_CLASSES[0] / "notes.txt").write_text("not an image")
    return root


# ---------------------------------------------------------------- digits

def test_digits_split_is_fixed_stratified_and_complete():
    train, test = load_dataset("digits"), load_dataset("digits", train=False)
    assert (len(train), len(test)) == (1438, 359)
    assert train.images.dtype == torch.uint8 and train.images.shape[1:] == (1, 16, 16)
    assert train.labels.dtype == torch.int64 and train.classes == [str(d) for d in range(10)]
    assert int(train.images.min()) == 0 and int(train.images.max()) == 255
    counts = torch.bincount(test.labels, minlength=10) / torch.bincount(torch.cat([train.labels, test.labels]))
    assert ((counts - 0.2).abs() < 0.01).all()
    assert torch.equal(load_dataset("digits", train=False).images, test.images)
    from sklearn.datasets import load_digits
    original = torch.tensor(load_digits().images * 255 / 16).round().to(torch.uint8)
    tr, te = stratified_split(torch.tensor(load_digits().target))
    assert sorted(tr.tolist() + te.tolist()) == list(range(1797))
    assert torch.equal(load_dataset("digits", image_size=8).images[:, 0], original[tr])


def test_digits_sizes_and_device():
    assert load_dataset("digits", image_size=32).images.shape[1:] == (1, 32, 32)
    assert load_dataset("digits", device="cpu").images.device.type == "cpu"


# ---------------------------------------------------------------- CIFAR10, CIFAR100, SVHN

def test_cifar10_train_and_test(tmp_path, no_md5):
    write_cifar10(tmp_path)
    train = load_dataset("cifar10", root=tmp_path)
    test = load_dataset("cifar10", root=tmp_path, train=False)
    assert train.images.shape == (15, 3, 32, 32) and train.images.dtype == torch.uint8 and train.images.is_contiguous()
    assert test.images.shape == (3, 3, 32, 32)
    assert train.classes == CIFAR10_NAMES and test.classes == CIFAR10_NAMES
    assert train.labels.tolist() == [(10 * i + k) % 10 for i in range(5) for k in range(3)]
    assert train.images[4, :, 7, 9].tolist() == [11, 200, 244]  # batch 1, image 1: channel-planar rows -> [C, H, W]
    assert test.images[2, :, 0, 0].tolist() == [52, 200, 203]
    assert train.name == "cifar10" and train.train and not test.train


def test_cifar100_fine_labels(tmp_path, no_md5):
    write_cifar100(tmp_path)
    train = load_dataset("cifar100", root=tmp_path)
    test = load_dataset("cifar100", root=tmp_path, train=False)
    assert train.images.shape == (7, 3, 32, 32) and test.images.shape == (4, 3, 32, 32)
    assert train.labels.tolist() == [(13 * k) % 100 for k in range(7)]
    assert len(train.classes) == 100 and train.classes[5] == "fine5"


def test_svhn_labels_and_axes(tmp_path, no_md5):
    write_svhn(tmp_path, "train", 12); write_svhn(tmp_path, "test", 3)
    train = load_dataset("svhn", root=tmp_path)
    test = load_dataset("svhn", root=tmp_path, train=False)
    assert train.images.shape == (12, 3, 32, 32) and test.images.shape == (3, 3, 32, 32)
    assert train.labels.tolist() == [k % 10 for k in range(12)]       # label 10 read back as the digit 0
    assert train.classes == [str(d) for d in range(10)]
    assert train.images[4, :, 0, 0].tolist() == [40, 100, 7] and train.images[4, 0, 3, 5] == 250


def test_resizing_a_torchvision_dataset(tmp_path, no_md5):
    write_cifar10(tmp_path)
    big = load_dataset("cifar10", root=tmp_path, image_size=48)
    assert big.images.shape == (15, 3, 48, 48) and big.images[4, :, 20, 20].tolist() == [11, 200, 244]


def test_default_root_is_the_environment_variable(tmp_path, no_md5, monkeypatch):
    write_cifar10(tmp_path)
    monkeypatch.setenv("CTL_EXPLORE_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert len(load_dataset("cifar10", train=False)) == 3
    monkeypatch.delenv("CTL_EXPLORE_DATA")
    assert data_root() == Path.home() / ".cache" / "ctl_explore" / "data"


@pytest.mark.parametrize("name, expected", [
    ("cifar10", "cifar-10-batches-py/data_batch_1"), ("cifar100", "cifar-100-python/train"), ("svhn", "train_32x32.mat")])
def test_missing_dataset_says_where_and_how(tmp_path, name, expected):
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(name, root=tmp_path / "nowhere")
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert expected in message and str(tmp_path / "nowhere") in message and "download=True" in message


def test_partial_cifar_names_the_missing_file(tmp_path, no_md5):
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    for train in (True, False):  # torchvision reads a split only when both are complete
        with pytest.raises(DatasetNotFoundError, match="missing cifar-10-batches-py/data_batch_3[.]"):
            load_dataset("cifar10", root=tmp_path, train=train)


def test_library_keeps_torchvision_checksums(tmp_path):
    "Without the tests' bypass, fabricated files fail torchvision's MD5 check, and the error says so."
    write_cifar10(tmp_path)
    with pytest.raises(DatasetNotFoundError, match="failed torchvision's integrity check"):
        load_dataset("cifar10", root=tmp_path)


def test_download_goes_through_torchvision(tmp_path, no_md5, monkeypatch):
    "download=True calls torchvision's downloader (here a stand-in that writes the files) for a missing dataset."
    calls = []
    def fake_download(url, download_root, filename=None, md5=None, **kwargs):
        calls.append(url); write_cifar10(Path(download_root))
    monkeypatch.setattr(torchvision.datasets.cifar, "download_and_extract_archive", fake_download)
    data = load_dataset("cifar10", root=tmp_path, download=True)
    assert len(data) == 15 and calls == [torchvision.datasets.CIFAR10.url]


# ---------------------------------------------------------------- ImageNet100

def test_class_list_matches_the_shipped_file():
    assert tuple((REPO / "data" / "imagenet100.txt").read_text().split()) == IMAGENET100_CLASSES
    assert len(set(IMAGENET100_CLASSES)) == 100 and IMAGENET100_CLASSES[0] == "n02869837"


def test_imagenet100_reads_the_100_classes_and_ignores_others(imagenet):
    train = load_dataset("imagenet100", root=imagenet, image_size=8, progress=False)
    val = load_dataset("imagenet100", root=imagenet, train=False, image_size=8, progress=False)
    assert train.classes == sorted(IMAGENET100_CLASSES) and val.classes == train.classes
    assert (len(train), len(val)) == (101, 100)
    assert train.images.shape == (101, 3, 8, 8) and train.images.dtype == torch.uint8
    assert val.labels.tolist() == list(range(100))
    for i in (0, 37, 99):  # image of sorted class i was written with red = 2 * (its index in the CMC list)
        red = 2 * IMAGENET100_CLASSES.index(val.classes[i])
        assert abs(int(val.images[i, 0].float().mean()) - red) <= 2 and abs(int(val.images[i, 1].float().mean()) - 100) <= 2
    assert not (train.images == 255).all(dim=(1, 2, 3)).any()  # the white non-ImageNet100 images were not read


def test_imagenet100_files_subset_and_limit(imagenet):
    first = IMAGENET100_CLASSES[0]
    files, labels, classes = imagenet100_files(imagenet, classes=[first, IMAGENET100_CLASSES[5]])
    assert classes == sorted([first, IMAGENET100_CLASSES[5]])
    assert [f.name for f in files if f.parent.name == first] == ["extra.jpg", f"{first}_train.JPEG"]  # sorted, .txt skipped
    assert len(files) == 3 and labels.tolist() == sorted(labels.tolist())
    assert len(imagenet100_files(imagenet, max_per_class=1)[0]) == 100


def test_imagenet100_resizes_the_shorter_side_and_crops_the_centre(tmp_path):
    wnid = IMAGENET100_CLASSES[3]
    img = np.zeros((40, 120, 3), dtype=np.uint8)                # 120 wide, 40 high: thirds red, green, blue
    img[:, :40, 0] = img[:, 40:80, 1] = img[:, 80:, 2] = 255
    for split in ("train", "val"):
        (tmp_path / split / wnid).mkdir(parents=True)
        Image.fromarray(img).save(tmp_path / split / wnid / "a.png")
    data = load_dataset("imagenet100", root=tmp_path, classes=[wnid], image_size=20, progress=False)
    assert data.images.shape == (1, 3, 20, 20)
    assert data.images[0, :, 10, 10].tolist() == [0, 255, 0]   # the centre square is the green third
    assert data.images[0, 1].float().mean() > 240


def test_imagenet100_cache_is_reused(imagenet, tmp_path, monkeypatch):
    kwargs = dict(root=imagenet, train=False, image_size=8, classes=IMAGENET100_CLASSES[:4], cache_dir=tmp_path, progress=False)
    first = load_dataset("imagenet100", **kwargs)
    assert len(list(tmp_path.glob("imagenet100_val_8px_*.pt"))) == 1
    monkeypatch.setattr(data_module, "_decode_square", lambda *a: (_ for _ in ()).throw(AssertionError("decoded again")))
    assert torch.equal(load_dataset("imagenet100", **kwargs).images, first.images)
    with pytest.raises(AssertionError, match="decoded again"):  # another size is another cache entry
        load_dataset("imagenet100", **{**kwargs, "image_size": 6})


def test_imagenet100_missing_and_malformed_folders(imagenet, tmp_path):
    with pytest.raises(DatasetNotFoundError, match="no folder .*train.*image-net.org"):
        load_dataset("imagenet100", root=tmp_path / "nowhere")
    for wnid in IMAGENET100_CLASSES[:2]: write_jpeg(tmp_path / "train" / wnid / "a.JPEG")
    with pytest.raises(DatasetNotFoundError, match="98 of the 100 classes have no folder"):
        load_dataset("imagenet100", root=tmp_path)
    write_jpeg(tmp_path / "val" / "ILSVRC2012_val_00000001.JPEG")  # ImageNet's flat validation folder
    with pytest.raises(DatasetNotFoundError, match="sort them into class folders"):
        load_dataset("imagenet100", root=tmp_path, train=False, classes=IMAGENET100_CLASSES[:1])
    (tmp_path / "train" / IMAGENET100_CLASSES[2]).mkdir()
    with pytest.raises(DatasetNotFoundError, match="no images in"):
        imagenet100_files(tmp_path, classes=IMAGENET100_CLASSES[:3])


@pytest.mark.parametrize("kwargs, message", [
    (dict(classes=["n01440764"]), "classes must be distinct ImageNet100 class ids"),
    (dict(classes=[IMAGENET100_CLASSES[0]] * 2), "classes must be distinct"),
    (dict(max_per_class=0), "max_per_class must be an integer >= 1"),
    (dict(classes=IMAGENET100_CLASSES[0]), "classes must be a sequence of class ids"),
])
def test_imagenet100_bad_arguments(imagenet, kwargs, message):
    with pytest.raises(ValueError, match=message):
        imagenet100_files(imagenet, **kwargs)


# ---------------------------------------------------------------- load_dataset's arguments

def test_unknown_name_lists_the_valid_ones():
    with pytest.raises(ValueError) as info:
        load_dataset("fashion_mnist")
    assert all(name in str(info.value) for name in DATASETS) and "fashion_mnist" in str(info.value)


@pytest.mark.parametrize("kwargs, message", [
    (dict(image_size=0), "image_size must be an integer >= 1"),
    (dict(image_size=16.0), "image_size must be an integer >= 1"),
    (dict(classes=IMAGENET100_CLASSES[:2]), "classes only apply to imagenet100"),
    (dict(cache_dir="/tmp", num_workers=2), "num_workers, cache_dir only apply to imagenet100"),
])
def test_load_dataset_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_dataset("digits", **kwargs)


def test_image_data_validates():
    images = torch.zeros(3, 1, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="images must have dtype torch.uint8"):
        ImageData(images.float(), torch.zeros(3, dtype=torch.int64), ["a"], "x")
    with pytest.raises(ValueError, match="images must have shape"):
        ImageData(images[0], torch.zeros(3, dtype=torch.int64), ["a"], "x")
    with pytest.raises(ValueError, match="labels must be an int64 tensor of shape"):
        ImageData(images, torch.zeros(3, dtype=torch.int32), ["a"], "x")
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 1\)"):
        ImageData(images, torch.ones(3, dtype=torch.int64), ["a"], "x")


# ---------------------------------------------------------------- augmentation

def _images(name: str, n: int = 16, seed: int = 0) -> torch.Tensor:
    c, size = {"digits": (1, 16), "mnist": (1, 28), "mnist5k": (1, 28), "imagenet100": (3, 48)}.get(name, (3, 32))
    smooth = torch.rand(n, c, 6, 6, generator=torch.Generator().manual_seed(seed))
    return (torch.nn.functional.interpolate(smooth, size=size, mode="bilinear") * 255).round().to(torch.uint8)


@pytest.mark.parametrize("name", DATASETS)
def test_two_views_shapes_ranges_difference_and_seed(name):
    images = _images(name)
    augment = TwoViewAugment(name)
    v1, v2 = augment(images, torch.Generator().manual_seed(0))
    assert v1.shape == v2.shape == images.shape and v1.dtype == v2.dtype == torch.float32
    mean, std = (torch.tensor(s).view(1, -1, 1, 1) for s in NORMALIZATION[name])
    for v in (v1, v2):
        pixels = v * std + mean
        assert pixels.min() >= -1e-5 and pixels.max() <= 1 + 1e-5
    assert ((v1 - v2).flatten(1).abs().amax(dim=1) > 1e-3).all()          # every image's two views differ
    w1, w2 = augment(images, torch.Generator().manual_seed(0))
    assert torch.equal(v1, w1) and torch.equal(v2, w2)                    # reproducible under a seed
    u1, _ = augment(images, torch.Generator().manual_seed(1))
    assert not torch.equal(u1, v1)


def test_output_size_and_dtype():
    images = _images("cifar10", n=5)
    v1, v2 = TwoViewAugment("cifar10", size=24)(images, torch.Generator().manual_seed(0), dtype=torch.bfloat16)
    assert v1.shape == (5, 3, 24, 24) and v1.dtype == torch.bfloat16


def test_chunking_does_not_change_the_views():
    images = _images("imagenet100", n=21)
    params = augment_params("imagenet100")
    draws = sample_view(params, 21, 48, 48, torch.Generator().manual_seed(3))
    whole = augment_view(images, params, draws, chunk_size=21)
    torch.testing.assert_close(augment_view(images, params, draws, chunk_size=4), whole, rtol=0, atol=1e-6)


def test_identity_recipe_is_to_float():
    images = _images("cifar10", n=6)
    params = AugmentParams(crop_scale=(1.0, 1.0), crop_ratio=(1.0, 1.0), flip_p=0.0, jitter_p=0.0, grayscale_p=0.0,
                           mean=NORMALIZATION["cifar10"][0], std=NORMALIZATION["cifar10"][1])
    view = TwoViewAugment(params).view(images, torch.Generator().manual_seed(0))
    torch.testing.assert_close(view, to_float(images, *NORMALIZATION["cifar10"]), rtol=0, atol=1e-5)
    flipped = TwoViewAugment(params, flip_p=1.0).view(images, torch.Generator().manual_seed(0))
    torch.testing.assert_close(flipped, to_float(images.flip(-1), *NORMALIZATION["cifar10"]), rtol=0, atol=1e-5)
    gray = TwoViewAugment(params, grayscale_p=1.0).view(images)
    assert torch.allclose(gray[:, 0] * 0.2470 + 0.4914, gray[:, 1] * 0.2435 + 0.4822, atol=1e-5)


def test_draw_frequencies_and_digit_recipe():
    draws = sample_view(augment_params("imagenet100"), 20_000, 64, 64, torch.Generator().manual_seed(0))
    for value, p in ((draws.flip.float(), 0.5), (draws.gray, 0.2), ((draws.blur_sigma > 0).float(), 0.5),
                     ((draws.brightness != 1).float(), 0.8)):
        assert abs(value.mean().item() - p) < 0.02
    assert draws.blur_sigma.max() <= 64 * 2.0 / 224 + 1e-6 and draws.hue.abs().max() <= 0.1
    digits = sample_view(augment_params("digits"), 20_000, 16, 16, torch.Generator().manual_seed(0))
    assert not digits.flip.any() and digits.angle.abs().max() <= 15 and (digits.saturation == 1).all()
    assert digits.angle.abs().max() > 14


@given(height=st.integers(1, 64), width=st.integers(1, 64), lo=st.floats(0.01, 1.0), span=st.floats(0.0, 1.0),
       r_lo=st.floats(0.2, 2.0), r_span=st.floats(0.0, 2.0), seed=st.integers(0, 2**31))
def test_crop_boxes_lie_inside_and_follow_the_ranges(height, width, lo, span, r_lo, r_span, seed):
    scale, ratio = (lo, min(1.0, lo + span)), (r_lo, r_lo + r_span)
    boxes = sample_crop_boxes(64, height, width, scale, ratio, torch.Generator().manual_seed(seed))
    top, left, h, w = boxes.double().unbind(1)
    tol = 1e-4 * max(height, width)
    assert (top >= -tol).all() and (left >= -tol).all() and (h > 0).all() and (w > 0).all()
    assert (top + h <= height + tol).all() and (left + w <= width + tol).all()
    centred = ((top - (height - h) / 2).abs() < tol) & ((left - (width - w) / 2).abs() < tol)
    sampled = ~centred  # boxes from the ten tries obey both ranges; the fallback obeys only the ratio when it can
    area = h * w / (height * width)
    assert (area[sampled] >= scale[0] * (1 - 1e-4)).all() and (area[sampled] <= scale[1] * (1 + 1e-4)).all()
    aspect = w / h
    assert (aspect[sampled] >= ratio[0] * (1 - 1e-4)).all() and (aspect[sampled] <= ratio[1] * (1 + 1e-4)).all()


@given(b=st.floats(0.0, 2.0), c=st.floats(0.0, 2.0), s=st.floats(0.0, 2.0), h=st.floats(-0.5, 0.5), seed=st.integers(0, 99))
def test_adjust_color_matches_torchvision(b, c, s, h, seed):
    x = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(seed))
    x[0, :, :2] = 0.5; x[1, 0] = x[1, 1]; x[2] = (x[2] * 3).round() / 3               # grey pixels, ties, plateaus
    ref = torch.stack([TF.adjust_hue(TF.adjust_saturation(TF.adjust_contrast(TF.adjust_brightness(im, b), c), s), h) for im in x])
    full = lambda v: torch.full((3,), v)
    torch.testing.assert_close(adjust_color(x, full(b), full(c), full(s), full(h)), ref, rtol=0, atol=2e-5)


def test_adjust_color_is_per_image_and_keeps_grey_images():
    x = torch.rand(4, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    factors = torch.tensor([0.6, 1.0, 1.2, 1.4])
    out = adjust_color(x, brightness=factors)
    for i in range(4): torch.testing.assert_close(out[i], TF.adjust_brightness(x[i], factors[i].item()))
    grey = x[:, :1].expand(-1, 3, -1, -1)
    torch.testing.assert_close(hue_shift(grey, torch.tensor([0.1, -0.2, 0.3, 0.5])), grey, rtol=0, atol=1e-6)
    one_channel = x[:, :1]
    torch.testing.assert_close(adjust_color(one_channel, saturation=factors, hue=factors - 1), one_channel)


def test_hue_shift_keeps_value_and_saturation():
    x = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    y = hue_shift(x, torch.linspace(-0.5, 0.5, 8))
    torch.testing.assert_close(y.amax(1), x.amax(1), rtol=0, atol=1e-5)
    torch.testing.assert_close(y.amin(1), x.amin(1), rtol=0, atol=1e-5)
    torch.testing.assert_close(hue_shift(x, torch.full((8,), -1 / 3)), x.roll(-1, dims=1), rtol=0, atol=1e-5)


def test_gaussian_blur_matches_torchvision_per_image():
    x = torch.rand(4, 3, 20, 20, generator=torch.Generator().manual_seed(2))
    sigma = torch.tensor([0.0, 0.3, 1.0, 2.5])
    out = gaussian_blur(x, sigma, 7)
    torch.testing.assert_close(out[0], x[0])
    for i in (1, 2, 3):
        torch.testing.assert_close(out[i], TF.gaussian_blur(x[i], [7, 7], [sigma[i].item()] * 2), rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="kernel_size must be an odd integer"):
        gaussian_blur(x, sigma, 6)


def test_resized_crop_matches_torchvision_inside_the_box():
    x = torch.rand(3, 3, 32, 32, generator=torch.Generator().manual_seed(4))
    for top, left, h, w, size in ((3, 5, 20, 17, 32), (0, 0, 32, 32, 40), (10, 2, 8, 30, 16)):
        ref = TF.resized_crop(x, top, left, h, w, [size, size], antialias=False)
        ours = resized_crop(x, torch.tensor([[top, left, h, w]] * 3, dtype=torch.float32), size)
        torch.testing.assert_close(ours[..., 1:-1, 1:-1], ref[..., 1:-1, 1:-1], rtol=0, atol=1e-5)
    whole = torch.tensor([[0.0, 0.0, 32.0, 32.0]] * 3)
    torch.testing.assert_close(resized_crop(x, whole, 32, angle=torch.full((3,), 180.0)), x.flip(-1, -2), rtol=0, atol=1e-5)


@pytest.mark.parametrize("call, message", [
    (lambda: TwoViewAugment("cifar10")(torch.rand(2, 3, 8, 8)), "images must have dtype torch.uint8"),
    (lambda: TwoViewAugment("cifar10")(torch.zeros(3, 8, 8, dtype=torch.uint8)), r"images must have shape \[N, C, H, W\]"),
    (lambda: TwoViewAugment("cifar10")(torch.zeros(2, 1, 8, 8, dtype=torch.uint8)), "params.mean has 3 channels but images have 1"),
    (lambda: TwoViewAugment("fashion_mnist"), "dataset must be one of"),
    (lambda: TwoViewAugment(42), "params must be an AugmentParams"),
    (lambda: AugmentParams(jitter_p=-0.1), "jitter_p must be a probability"),
    (lambda: AugmentParams(brightness=1.5), "brightness must lie in"),
    (lambda: AugmentParams(max_rotation=200), "max_rotation must lie in"),
    (lambda: AugmentParams(size=0), "size must be an integer >= 1"),
    (lambda: AugmentParams(mean=(0.5,), std=(0.5, 0.5)), "mean and std must have one entry per channel"),
    (lambda: augment_view(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), AugmentParams(),
                          sample_view(AugmentParams(), 3, 8, 8)), "draws holds 3 images but images has 2"),
    (lambda: to_float(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), mean=(0.5, 0.5, 0.5)), "mean and std must be given together"),
    (lambda: resized_crop(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), torch.zeros(2, 4), 8), "x must be a floating-point tensor"),
    (lambda: resized_crop(torch.zeros(2, 3, 8, 8), torch.zeros(3, 4), 8), r"boxes must be a tensor of shape \[2, 4\]"),
    (lambda: adjust_color(torch.zeros(2, 3, 8, 8), brightness=torch.ones(3)), r"brightness must be a tensor of shape \[2\]"),
    (lambda: gaussian_blur(torch.zeros(2, 3, 8, 8), torch.ones(2), 17), "kernel_size must be < 2 [*] min"),
    (lambda: sample_crop_boxes(4, 8, 8, scale=(0.0, 1.0)), "scale must be a pair"),
    (lambda: sample_crop_boxes(0, 8, 8), "n must be an integer >= 1"),
])
def test_augmentation_bad_arguments(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_to_float_and_image_stats():
    images = torch.tensor([0, 51, 255], dtype=torch.uint8).view(3, 1, 1, 1).expand(3, 3, 2, 2).contiguous()
    torch.testing.assert_close(to_float(images)[:, 0, 0, 0], torch.tensor([0.0, 0.2, 1.0]))
    mean, std = image_stats(images)
    assert len(mean) == 3 and abs(mean[0] - 0.4) < 1e-9
    normalised = to_float(images, mean, std)
    torch.testing.assert_close(normalised.mean(dim=(0, 2, 3)), torch.zeros(3), rtol=0, atol=1e-6)


# ---------------------------------------------------------------- a failed download, a corrupt image file

def test_download_without_a_network_says_why_and_where(tmp_path, monkeypatch):
    "No network: urllib's URLError becomes a DatasetNotFoundError naming the dataset, the reason and the folder."
    import urllib.error, urllib.request
    def offline(*args, **kwargs): raise urllib.error.URLError(OSError(-3, "Temporary failure in name resolution"))
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    for name in ("cifar10", "svhn"):
        with pytest.raises(DatasetNotFoundError) as info:
            load_dataset(name, root=tmp_path / name, download=True)
        message = str(info.value)
        assert message.startswith(f"could not download {name} (URLError: ")
        assert "name resolution" in message and f"put it in {tmp_path / name}" in message
        assert "download it on a machine with a network" in message


def _corrupt_folder(root: Path) -> Path:
    "One ImageNet100 class in val/ with a good JPEG, a truncated copy of it and a text file named .JPEG."
    wnid = IMAGENET100_CLASSES[7]
    good = root / "val" / wnid / "good.JPEG"
    write_jpeg(good, size=(40, 30), colour=(200, 10, 10))
    (good.parent / "cut.JPEG").write_bytes(good.read_bytes()[:120])
    (good.parent / "text.JPEG").write_text("this is not a JPEG")
    return good.parent


def test_corrupt_jpeg_is_named_by_the_loader(tmp_path):
    folder = _corrupt_folder(tmp_path)
    with pytest.raises(CorruptImageError) as info:
        load_dataset("imagenet100", root=tmp_path, train=False, classes=[folder.name], image_size=8, progress=False)
    message = str(info.value)
    assert message.startswith("2 of 3 image files cannot be decoded")                 # every bad file, not just the first
    assert str(folder / "cut.JPEG") in message and str(folder / "text.JPEG") in message
    assert isinstance(info.value, DatasetNotFoundError)     # handled wherever a missing dataset is (the command line too)


def test_corrupt_jpeg_is_named_when_decoded_on_demand(tmp_path):
    folder = _corrupt_folder(tmp_path)
    data = load_dataset("imagenet100", root=tmp_path, train=False, classes=[folder.name], full_images=True)
    order = [p.name for p in data.images.files]
    assert order == ["cut.JPEG", "good.JPEG", "text.JPEG"]
    assert data.images[[1]].images[0].shape == (3, 30, 40)                             # the good file decodes
    with pytest.raises(CorruptImageError, match=r"cannot decode the image file .*cut\.JPEG"):
        data.images[[1, 0]]
    with pytest.raises(CorruptImageError, match="2 of 3 image files cannot be decoded"):
        data.images.verify(progress=False)


# ---------------------------------------------------------------- ImageNet100 at full resolution ([WL21]'s protocol)

FULL_SIZES = [(500, 375), (375, 500), (333, 500), (64, 48), (1024, 683)]   # width x height, as ImageNet's vary


@pytest.fixture(scope="module")
def imagenet_full(tmp_path_factory) -> Path:
    "Two ImageNet100 classes, train and val, JPEGs of the sizes above: smooth random colour fields, so that crops show."
    root = tmp_path_factory.mktemp("imagenet_full")
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c, wnid in enumerate(IMAGENET100_CLASSES[:2]):
            for k, (w, h) in enumerate(FULL_SIZES[c::2] if split == "val" else FULL_SIZES):
                small = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
                path = root / split / wnid / f"{wnid}_{k}.JPEG"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(small).resize((w, h), Image.Resampling.BILINEAR).save(path, quality=95)
    return root


def _full(root, train=True, **kw):
    return load_dataset("imagenet100", root=root, train=train, classes=IMAGENET100_CLASSES[:2], full_images=True, **kw)


def test_full_images_keep_the_files_and_their_sizes(imagenet_full):
    train = _full(imagenet_full)
    assert isinstance(train.images, ImageFiles) and len(train) == 10 and train.labels.tolist() == [0] * 5 + [1] * 5
    assert train.images.size == 224 and train.images.shape == (10, 3, None, None)       # 224-px crops by default
    assert "image files decoded on demand (224-px crops)" in repr(train)
    batch = train.images[torch.tensor([6, 0, 4])]                                         # an index tensor, as a training loop has
    assert isinstance(batch, FullImages) and len(batch) == 3
    sorted_sizes = [FULL_SIZES[k] for k in (0, 1, 2, 3, 4)]                               # files sort by name: k = 0..4
    assert [tuple(im.shape) for im in batch.images] == [(3, h, w) for w, h in (sorted_sizes[1], sorted_sizes[0], sorted_sizes[4])]
    assert batch.heights.tolist() == [500, 375, 683] and batch.widths.tolist() == [375, 500, 1024]
    assert np.array_equal(batch.images[1].permute(1, 2, 0).numpy(), np.array(Image.open(train.images.files[0]).convert("RGB")))
    assert train.images[3].shape == (3, 48, 64) and len(train.images[2:5]) == 3
    assert _full(imagenet_full, image_size=96).images.size == 96
    moved = train.to("cpu")
    assert isinstance(moved.images, ImageFiles) and moved.images.device == torch.device("cpu")


def test_full_image_views_are_224px_crops_of_the_full_image(imagenet_full):
    "What the training loop does with a batch: index, then TwoViewAugment; [B, 3, 224, 224] normalised floats."
    train = _full(imagenet_full)
    augment = TwoViewAugment("imagenet100")                                               # no size: the batch's 224
    idx = torch.randperm(len(train), generator=torch.Generator().manual_seed(0))[:8]
    v1, v2 = augment(train.images[idx], torch.Generator().manual_seed(1))
    assert v1.shape == v2.shape == (8, 3, 224, 224) and v1.dtype == torch.float32
    assert ((v1 - v2).flatten(1).abs().amax(dim=1) > 1e-3).all()
    mean, std = (torch.tensor(s).view(1, -1, 1, 1) for s in NORMALIZATION["imagenet100"])
    assert (v1 * std + mean).min() >= -1e-5 and (v1 * std + mean).max() <= 1 + 1e-5
    w1, _ = augment(train.images[idx], torch.Generator().manual_seed(1))
    assert torch.equal(v1, w1)                                                            # reproducible under a seed
    assert TwoViewAugment("imagenet100", size=160).view(train.images[idx]).shape == (8, 3, 160, 160)


def test_full_image_crops_match_torchvision(imagenet_full):
    "Without colour changes a view is torchvision's RandomResizedCrop (antialiased) of the full image, box for box."
    batch = _full(imagenet_full).images[[0, 1, 2, 3, 4]]
    params = replace(augment_params("imagenet100", 224), jitter_p=0.0, grayscale_p=0.0, blur_p=0.0, mean=(0.0,) * 3, std=(1.0,) * 3)
    draws = sample_view(params, 5, batch.heights, batch.widths, torch.Generator().manual_seed(2))
    view = augment_view(batch, params, draws)
    for i, (im, (top, left, h, w)) in enumerate(zip(batch.images, draws.boxes.tolist())):
        assert 0 <= top and top + h <= im.shape[1] + 1e-3 and 0 <= left and left + w <= im.shape[2] + 1e-3
        ref = TF.resized_crop(im.float(), round(top), round(left), round(h), round(w), [224, 224], antialias=True) / 255
        torch.testing.assert_close(view[i], ref.flip(-1) if draws.flip[i] else ref, rtol=0, atol=1e-4)


def test_full_images_evaluate_on_the_resize_256_centre_224_view(imagenet_full):
    val = _full(imagenet_full, train=False)
    batch = val.images[0:len(val)]
    centre = batch.center_crop()
    assert centre.shape == (len(val), 3, 224, 224) and centre.dtype == torch.uint8
    for i, im in enumerate(batch.images):
        ref = TF.center_crop(TF.resize(im, [256], antialias=True), [224])                  # torchvision's evaluation transform
        assert (centre[i].int() - ref.int()).abs().max() <= 1
    torch.testing.assert_close(to_float(batch, *NORMALIZATION["imagenet100"]), to_float(centre, *NORMALIZATION["imagenet100"]))


def test_full_images_prefetch_returns_the_same_batch(imagenet_full):
    files = _full(imagenet_full).images
    files.prefetch(torch.tensor([4, 2]))
    ahead = files[[4, 2]]
    assert files._pending is None                                                         # the prefetched batch was used
    again = files[[4, 2]]
    assert all(torch.equal(a, b) for a, b in zip(ahead.images, again.images))


def test_one_copy_to_the_device_gives_the_same_images():
    "The GPU path's single buffer and per-image views, checked on the CPU."
    rng = np.random.default_rng(1)
    arrays = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(5, 7), (3, 2), (9, 4)]]
    one = data_module._to_device(arrays, torch.device("cpu"), one_copy=True)
    assert [tuple(t.shape) for t in one] == [(3, 5, 7), (3, 3, 2), (3, 9, 4)]
    assert all(np.array_equal(t.permute(1, 2, 0).numpy(), a) for t, a in zip(one, arrays))


def test_crop_boxes_per_image_lie_inside_each_image():
    heights, widths = torch.tensor([375, 500, 48, 683] * 500), torch.tensor([500, 375, 64, 1024] * 500)
    boxes = sample_crop_boxes(2000, heights, widths, generator=torch.Generator().manual_seed(0))
    top, left, h, w = boxes.unbind(1)
    assert (top >= 0).all() and (left >= 0).all() and (top + h <= heights + 1e-3).all() and (left + w <= widths + 1e-3).all()
    area = h * w / (heights * widths)
    assert area.min() >= 0.2 - 1e-4 and area.max() <= 1 + 1e-4
    same = sample_crop_boxes(6, torch.full((6,), 40), torch.full((6,), 30), generator=torch.Generator().manual_seed(4))
    assert torch.equal(same, sample_crop_boxes(6, 40, 30, generator=torch.Generator().manual_seed(4)))


@pytest.mark.parametrize("call, message", [
    (lambda root: load_dataset("cifar10", full_images=True), "full_images only apply to imagenet100"),
    (lambda root: _full(root, cache_dir=root), "cache_dir does not apply with full_images=True"),
    (lambda root: load_dataset("imagenet100", root=root, full_images="yes"), "full_images must be True or False"),
    (lambda root: sample_view(AugmentParams(), 2, torch.tensor([4, 5]), torch.tensor([6, 7])), "params.size must be set"),
    (lambda root: sample_crop_boxes(2, torch.tensor([4.0, 5.0]), 8), r"height must be an integer >= 1, or an integer tensor of shape \[2\]"),
    (lambda root: sample_crop_boxes(2, 8, torch.tensor([4, 0])), "width must be an integer >= 1"),
    (lambda root: FullImages([torch.zeros(3, 4, 4)], 8), r"images must be uint8 tensors \[C, H, W\]"),
    (lambda root: FullImages([], 8), "images must hold at least one image"),
    (lambda root: ImageFiles([], 224), "files must list at least one image file"),
    (lambda root: ImageFiles(["a.JPEG"], 224, crop_fraction=1.5), r"crop_fraction must lie in \(0, 1\]"),
    (lambda root: _full(root).images[torch.tensor([0.5])], "index must be a 1-D integer tensor"),
    (lambda root: ImageData([1, 2], torch.zeros(2, dtype=torch.int64), ["a"], "x"), "images must be a uint8 tensor .* or an ImageFiles"),
])
def test_full_image_bad_arguments(imagenet_full, call, message):
    with pytest.raises(ValueError, match=message):
        call(imagenet_full)


def test_full_image_index_out_of_range(imagenet_full):
    with pytest.raises(IndexError, match="index 10 is out of range for 10 image files"):
        _full(imagenet_full).images[[0, 10]]


# --- the augmentation reads no value and copies nothing from the host once its constants are made (issue 16) ---
from ctl_explore.checks import value_checks
from ctl_explore.debug import count_host_syncs


@pytest.mark.parametrize("preset", ["digits", "cifar10", "imagenet100"])
def test_augmentation_makes_no_host_sync(preset):
    channels = 1 if preset == "digits" else 3
    images = torch.randint(0, 256, (6, channels, 20, 20), dtype=torch.uint8)
    aug = TwoViewAugment(preset, size=12)
    aug(images, torch.Generator().manual_seed(0))  # the first call makes the per-channel constants, once
    with value_checks(False), count_host_syncs() as off:
        v1, v2 = aug(images, torch.Generator().manual_seed(1))
        params = aug.params
        augment_view(images, params, sample_view(params, 6, 20, 20, torch.Generator().manual_seed(2)))
    assert off.total == 0, off.ops
    assert v1.shape == v2.shape == (6, channels, 12, 12)


def test_augmentation_constants_are_made_once_per_device():
    images = torch.randint(0, 256, (3, 3, 10, 10), dtype=torch.uint8)
    params = replace(augment_params("cifar10"), mean=(0.1, 0.2, 0.3), std=(0.3, 0.2, 0.1))  # values no other test uses
    with count_host_syncs() as first:
        augment_view(images, params, sample_view(params, 3, 10, 10, torch.Generator().manual_seed(0)))
    with count_host_syncs() as second:
        augment_view(images, params, sample_view(params, 3, 10, 10, torch.Generator().manual_seed(0)))
    assert first.ops["aten.lift_fresh"] == 2 and second.total == 0


# ---------------------------------------------------------------- MNIST, in its real IDX format (issue 15)
import gzip

MNIST_FILES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def _idx_bytes(array: np.ndarray) -> bytes:
    "LeCun's IDX format: 0x00000800 + number of dimensions (uint8 data), each size a big-endian int32, then the bytes."
    return struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + b"".join(struct.pack(">i", s) for s in array.shape) + array.astype(np.uint8).tobytes()


def _mnist_split(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)


@pytest.fixture
def mnist_root(tmp_path):
    "Fabricated MNIST files (7 training, 3 test digits of random pixels) where torchvision looks: root/MNIST/raw/."
    raw = tmp_path / "MNIST" / "raw"; raw.mkdir(parents=True)
    splits = {"train": _mnist_split(7, 0), "t10k": _mnist_split(3, 1)}
    for split, (images, labels) in splits.items():
        (raw / f"{split}-images-idx3-ubyte").write_bytes(_idx_bytes(images))
        (raw / f"{split}-labels-idx1-ubyte").write_bytes(_idx_bytes(labels))
    return tmp_path, splits


def test_idx_header_is_the_real_one():
    header = _idx_bytes(np.zeros((2, 28, 28), np.uint8))[:16]
    assert header[:4] == bytes([0, 0, 8, 3]) and struct.unpack(">iii", header[4:]) == (2, 28, 28)
    assert _idx_bytes(np.zeros(5, np.uint8))[:8] == bytes([0, 0, 8, 1, 0, 0, 0, 5])


def test_mnist_loads_both_splits(mnist_root):
    root, splits = mnist_root
    assert "mnist" in DATASETS and "digits" == next(iter(DATASETS))
    for train, split in ((True, "train"), (False, "t10k")):
        data = load_dataset("mnist", root=root, train=train)
        images, labels = splits[split]
        assert data.name == "mnist" and data.train == train and data.classes == [str(d) for d in range(10)]
        assert data.images.dtype == torch.uint8 and data.images.shape == (len(images), 1, 28, 28)
        assert torch.equal(data.images[:, 0], torch.from_numpy(images))  # rows and columns as stored
        assert torch.equal(data.labels, torch.from_numpy(labels).long())


def test_mnist_resizes_and_moves(mnist_root):
    root, _ = mnist_root
    data = load_dataset("mnist", root=root, image_size=16, device="cpu")
    assert data.images.shape == (7, 1, 16, 16) and data.images.dtype == torch.uint8


def test_mnist_reads_gz_files_alone(mnist_root):
    root, splits = mnist_root
    raw = root / "MNIST" / "raw"
    for name in MNIST_FILES:
        f = raw / name
        (raw / f"{name}.gz").write_bytes(gzip.compress(f.read_bytes())); f.unlink()
    data = load_dataset("mnist", root=root, train=False)
    assert torch.equal(data.images[:, 0], torch.from_numpy(splits["t10k"][0]))
    assert all((raw / name).is_file() for name in MNIST_FILES)  # extracted once, next to the .gz
    assert not [p for p in raw.iterdir() if p.suffix == ".tmp"]


def test_mnist_missing_files_say_where_and_how(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", root=tmp_path)
    message = str(info.value)
    assert "MNIST/raw/train-images-idx3-ubyte" in message and str(tmp_path) in message and "download=True" in message


def test_mnist_file_in_another_format_is_refused(mnist_root):
    root, _ = mnist_root
    (root / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x09\x03" + bytes(12))
    with pytest.raises(DatasetNotFoundError, match="not in MNIST's IDX format"):
        load_dataset("mnist", root=root)
    (root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"not gzip")
    (root / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DatasetNotFoundError, match="cannot extract"):
        load_dataset("mnist", root=root, train=False)


def test_mnist_download_without_network_is_a_clear_error(tmp_path, monkeypatch):
    import torchvision.datasets.mnist as tv_mnist
    def offline(*args, **kwargs): raise tv_mnist.URLError("no network")
    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", offline)
    with pytest.raises(DatasetNotFoundError, match="could not download mnist"):
        load_dataset("mnist", root=tmp_path, download=True)


def test_mnist_preset_and_normalisation(mnist_root):
    root, _ = mnist_root
    params = augment_params("mnist")
    assert params.crop_scale == (0.5, 1.0) and params.crop_ratio == (3 / 4, 4 / 3)
    assert params.flip_p == params.jitter_p == params.grayscale_p == params.blur_p == params.max_rotation == 0.0
    assert NORMALIZATION["mnist"] == ((0.1307,), (0.3081,)) and params.mean == (0.1307,)
    images = load_dataset("mnist", root=root).images
    v1, v2 = TwoViewAugment("mnist")(images, torch.Generator().manual_seed(0))
    assert v1.shape == (7, 1, 28, 28) and not torch.equal(v1, v2)


# ---------------------------------------------------------------- ImageNet100 decoded once, by default (issue 16)
import threading
import warnings

from ctl_explore.data import CACHE_ENV, imagenet_cache_dir


def _small_imagenet(root: Path, n_classes: int = 3, per_class: int = 2) -> Path:
    for i, wnid in enumerate(IMAGENET100_CLASSES[:n_classes]):
        for k in range(per_class):
            write_jpeg(root / "val" / wnid / f"{wnid}_{k}.JPEG", size=(20 + 4 * k, 16), colour=(30 * i, 10 * k, 90))
    return root


def _no_decoding(monkeypatch):
    monkeypatch.setattr(data_module, "_decode_square", lambda *a: (_ for _ in ()).throw(AssertionError("decoded again")))


def test_imagenet100_is_cached_in_its_folder_by_default(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    root = _small_imagenet(tmp_path / "imagenet")
    kwargs = dict(root=root, train=False, classes=IMAGENET100_CLASSES[:3], image_size=8, progress=False)
    first = load_dataset("imagenet100", **kwargs)
    assert imagenet_cache_dir(root) == root / ".cache" and len(list((root / ".cache").glob("imagenet100_val_8px_*.pt"))) == 1
    assert not [p for p in (root / ".cache").iterdir() if p.suffix == ".tmp"]
    _no_decoding(monkeypatch)
    assert torch.equal(load_dataset("imagenet100", **kwargs).images, first.images)
    with pytest.raises(AssertionError, match="decoded again"):  # cache_dir=False: no cache, read or written
        load_dataset("imagenet100", **kwargs, cache_dir=False)
    with pytest.raises(AssertionError, match="decoded again"):  # other files: another cache entry
        load_dataset("imagenet100", **{**kwargs, "classes": IMAGENET100_CLASSES[:2]})


def test_imagenet100_cache_folder_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "shared_cache"))
    root = _small_imagenet(tmp_path / "imagenet")
    assert imagenet_cache_dir(root) == tmp_path / "shared_cache"
    load_dataset("imagenet100", root=root, train=False, classes=IMAGENET100_CLASSES[:3], image_size=8, progress=False)
    assert len(list((tmp_path / "shared_cache").glob("*.pt"))) == 1 and not (root / ".cache").exists()


def test_imagenet100_cache_opt_out_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    root = _small_imagenet(tmp_path / "imagenet")
    for off in (False, None):
        load_dataset("imagenet100", root=root, train=False, classes=IMAGENET100_CLASSES[:3], image_size=8, progress=False,
                     cache_dir=off)
    assert not (root / ".cache").exists()
    load_dataset("imagenet100", root=root, train=False, classes=IMAGENET100_CLASSES[:3], full_images=True)  # the default cache does not conflict with full_images
    assert not (root / ".cache").exists()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "other_images", "bare_tensor"])
def test_imagenet100_damaged_cache_is_rebuilt_not_trusted(tmp_path, monkeypatch, damage):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    root = _small_imagenet(tmp_path / "imagenet")
    kwargs = dict(root=root, train=False, classes=IMAGENET100_CLASSES[:3], image_size=8, progress=False)
    good = load_dataset("imagenet100", **kwargs).images
    (cache,) = (root / ".cache").glob("*.pt")
    if damage == "truncated": cache.write_bytes(cache.read_bytes()[:len(cache.read_bytes()) // 2])
    elif damage == "garbage": cache.write_bytes(b"\x00" * 64)
    elif damage == "other_images": torch.save({"key": "another", "images": good.flip(0)}, cache)
    else: torch.save(good.flip(0), cache)  # the format of earlier versions: a bare tensor
    with pytest.warns(UserWarning, match="ignoring the cache file"):
        again = load_dataset("imagenet100", **kwargs).images
    assert torch.equal(again, good)
    _no_decoding(monkeypatch)  # rewritten whole: the next call trusts it
    assert torch.equal(load_dataset("imagenet100", **kwargs).images, good)


def test_imagenet100_unwritable_cache_warns_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.delenv(CACHE_ENV, raising=False)
    root = _small_imagenet(tmp_path / "imagenet")
    def refuse(path, write): raise PermissionError(13, "Permission denied", str(path))
    monkeypatch.setattr(data_module, "write_atomic", refuse)
    with pytest.warns(UserWarning, match="could not write the cache"):
        data = load_dataset("imagenet100", root=root, train=False, classes=IMAGENET100_CLASSES[:3], image_size=8, progress=False)
    assert data.images.shape == (6, 3, 8, 8)


def test_concurrent_writers_leave_one_whole_cache_file(tmp_path, monkeypatch):
    "Two loaders decoding at once (threads here; separate processes rename the same way) each write a whole file."
    monkeypatch.delenv(CACHE_ENV, raising=False)
    root = _small_imagenet(tmp_path / "imagenet", n_classes=4, per_class=3)
    kwargs = dict(root=root, train=False, classes=IMAGENET100_CLASSES[:4], image_size=8, progress=False, num_workers=1)
    barrier, real_save, results = threading.Barrier(2), torch.save, []
    def slow_save(obj, f):  # both writers reach the write together, and write slowly
        barrier.wait(timeout=30)
        real_save(obj, f)
    monkeypatch.setattr(torch, "save", slow_save)
    threads = [threading.Thread(target=lambda: results.append(load_dataset("imagenet100", **kwargs).images)) for _ in range(2)]
    for t in threads: t.start()
    for t in threads: t.join(timeout=60)
    monkeypatch.setattr(torch, "save", real_save)
    assert len(results) == 2 and torch.equal(results[0], results[1])
    files = list((root / ".cache").iterdir())
    assert len(files) == 1 and files[0].suffix == ".pt"  # no temporary file left behind
    _no_decoding(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a damaged file would warn
        assert torch.equal(load_dataset("imagenet100", **kwargs).images, results[0])


def test_write_atomically_cleans_up_after_a_failed_write(tmp_path):
    target = tmp_path / "sub" / "file.bin"
    target.parent.mkdir()  # write_atomic (ctl_explore.run_folders) writes into an existing folder
    data_module.write_atomic(target, lambda f: f.write(b"first"))
    with pytest.raises(RuntimeError, match="boom"):
        data_module.write_atomic(target, lambda f: (f.write(b"half"), (_ for _ in ()).throw(RuntimeError("boom"))))
    assert target.read_bytes() == b"first" and [p.name for p in target.parent.iterdir()] == ["file.bin"]


def test_mnist_files_whose_counts_disagree_are_named(mnist_root):
    # issue 24: labels of another split (or a truncated download) beside the images: both files and both counts, not a usage error
    root, splits = mnist_root
    raw = root / "MNIST" / "raw"
    (raw / "train-labels-idx1-ubyte").write_bytes(_idx_bytes(splits["t10k"][1]))  # 3 labels beside 7 images
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("mnist", root=root, train=True)
    message = str(info.value)
    for part in ("train-images-idx3-ubyte holds 7 images", "train-labels-idx1-ubyte holds 3 labels", str(root), "download"):
        assert part in message, part
    assert not isinstance(info.value, ValueError)  # the command line reports it as a failed run (exit 1), not a usage error
    assert load_dataset("mnist", root=root, train=False).labels.shape == (3,)  # the other split still loads
