"""The embedding pictures: t-SNE per run, similarity histograms, the uniformity–tolerance plane; and their errors."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ctl_explore.viz import similarity_histograms, tsne_figure, uniformity_tolerance_plane


def fake_run(n=60, d=16, classes=3, seed=0, views=True):
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(n) % classes
    centres = F.normalize(torch.randn(classes, d, generator=g), dim=1)
    z = F.normalize(centres[labels] + 0.3 * torch.randn(n, d, generator=g), dim=1)
    out = dict(z=z, labels=labels)
    if views:
        out["z1"] = F.normalize(z + 0.05 * torch.randn(n, d, generator=g), dim=1)
        out["z2"] = F.normalize(z + 0.05 * torch.randn(n, d, generator=g), dim=1)
    return out


def test_tsne_one_trace_per_class_per_run():
    fig = tsne_figure({"a": fake_run(seed=0), "b": fake_run(seed=1)})
    assert len(fig.data) == 6 and sum(len(t.x) for t in fig.data) == 120
    with pytest.raises(ValueError, match="at least one run"):
        tsne_figure({})


def test_histograms_hold_every_positive_and_negative():
    run = fake_run()
    fig = similarity_histograms({"a": run})
    pos, neg = fig.data
    assert len(pos.x) == 60 and len(neg.x) == 60 * 59
    torch.testing.assert_close(torch.tensor(pos.x, dtype=torch.float32), (run["z1"] * run["z2"]).sum(1))
    with pytest.raises(ValueError, match="needs views"):
        similarity_histograms({"a": fake_run(views=False)})


def test_plane_has_one_point_per_run():
    rows = [dict(loss=l, tau=t, uniformity=1.0 + i, tolerance=0.5 - 0.1 * i)
            for i, (l, t) in enumerate([("contrastive", 0.1), ("contrastive", 0.5), ("hard_contrastive", 0.5), ("simple", None)])]
    fig = uniformity_tolerance_plane(rows)
    assert sum(len(t.x) for t in fig.data) == 4
    assert [t.name for t in fig.data] == ["contrastive", "hard_contrastive", "simple"]
