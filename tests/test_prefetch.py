"""ImageNet100's full images are decoded ahead (appendix 29): while batch k trains, batch k + 1's JPEG files are decoded
in the background (`ImageFiles.prefetch`), and the epoch computes the same numbers as with every batch decoded on demand.
Small JPEG files fabricated in ImageNet's folder format (train/<wnid>/*.JPEG)."""
from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from PIL import Image
from tqdm.auto import tqdm

import ctl_explore.data as data
from ctl_explore.data import IMAGENET100_CLASSES, ImageFiles, load_dataset
from ctl_explore.train import PretrainConfig, _train_epoch, new_state


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("imagenet100")
    rng = np.random.default_rng(0)
    for c, wnid in enumerate(IMAGENET100_CLASSES[:2]):
        for k in range(8):
            path = root / "train" / wnid / f"{wnid}_{k}.JPEG"
            path.parent.mkdir(parents=True, exist_ok=True)
            w, h = (40, 30) if k % 2 else (30, 44)  # ImageNet's sizes vary from file to file
            Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path, quality=90)
    return root


def _epoch(root, monkeypatch=None):
    torch.manual_seed(0)
    config = PretrainConfig(dataset="imagenet100", data_root=str(root), full_images=True, image_size=16, backbone="convnet",
                            width=4, out_dim=8, batch_size=4, knn_k=2, device="cpu")
    train = load_dataset("imagenet100", root=root, train=True, classes=IMAGENET100_CLASSES[:2], full_images=True, image_size=16, progress=False)
    state = new_state(config, train, torch.device("cpu"))
    steps = len(train) // config.batch_size
    return _train_epoch(state, train, tqdm(range(steps), disable=True)), state


def test_the_next_batch_is_decoded_while_this_one_trains(jpegs, monkeypatch):
    log, real_prefetch, real_decode = [], ImageFiles.prefetch, ImageFiles._decode
    def prefetch(self, index):
        log.append(("prefetch", list(map(int, index))))
        return real_prefetch(self, index)
    def decode(self, positions):
        log.append(("decode", list(positions), threading.current_thread() is threading.main_thread()))
        return real_decode(self, positions)
    monkeypatch.setattr(ImageFiles, "prefetch", prefetch)
    monkeypatch.setattr(ImageFiles, "_decode", decode)
    ahead, _ = _epoch(jpegs)
    decodes = [e for e in log if e[0] == "decode" and len(e[1]) == 4]  # the batches (new_state decodes two images to check the encoder)
    assert len(decodes) == 4 and decodes[0][2] and not any(d[2] for d in decodes[1:])  # the first on demand, the others in the background
    prefetched = [e[1] for e in log if e[0] == "prefetch"]
    assert prefetched == [d[1] for d in decodes[1:]]  # each batch after the first was asked for ahead of its step
    monkeypatch.setattr(ImageFiles, "prefetch", None)  # the same epoch without prefetching
    log.clear()
    on_demand, _ = _epoch(jpegs)
    assert all(e[2] for e in log if e[0] == "decode") and len(log) == 5
    assert torch.equal(ahead, on_demand)  # the same numbers
