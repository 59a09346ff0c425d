"""Tests of ctl_explore.metrics against brute-force definitions, across block sizes, and on bad input."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings, strategies as st

from ctl_explore.metrics import (
    BLOCK_ELEMENTS, SimilarityProfile, alignment, knn_accuracy, knn_predict, similarity_profile,
    sphere_uniformity_limit, tolerance, uniformity,
)

# example counts come from the Hypothesis profile (tests/conftest.py when present, else Hypothesis' default of 100)
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def unit(n, d, seed=0, dtype=torch.float64):
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=dtype), dim=1)


def labels(n, n_classes, seed=0):
    return torch.randint(0, n_classes, (n,), generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- brute-force definitions

def uniformity_bf(z, t):
    "−log of the mean over ordered pairs i ≠ j of exp(−t‖z_i − z_j‖²), from explicit distances."
    n = len(z)
    sq = ((z[:, None, :] - z[None, :, :]) ** 2).sum(-1)
    off = ~torch.eye(n, dtype=torch.bool)
    return -math.log(torch.exp(-t * sq[off]).mean().item())


def tolerance_bf(z, y):
    total, count = 0.0, 0
    for i in range(len(z)):
        for j in range(len(z)):
            if i != j and y[i] == y[j]:
                total += float(z[i] @ z[j]); count += 1
    return total / count


def profile_bf(z, z_pos, k):
    n = len(z)
    positive = sum(float(z[i] @ z_pos[i]) for i in range(n)) / n
    tops = []
    for i in range(n):
        negatives = sorted((float(z[i] @ z_pos[j]) for j in range(n) if j != i), reverse=True)
        tops.append(negatives[:k])
    return positive, torch.tensor(tops, dtype=torch.float64).mean(0)


def knn_bf(train_z, train_y, test_z, k, t):
    out = []
    for x in test_z:
        sims = [float(x @ v) for v in train_z]
        order = sorted(range(len(sims)), key=lambda j: -sims[j])[:k]
        scores = {}
        for j in order:
            scores[int(train_y[j])] = scores.get(int(train_y[j]), 0.0) + math.exp(sims[j] / t)
        out.append(max(sorted(scores), key=scores.get))  # ties: smallest label
    return torch.tensor(out)


# ---------------------------------------------------------------- uniformity

@SETTINGS
@given(n=st.integers(2, 40), d=st.integers(1, 6), t=st.floats(0.1, 10.0), chunk=st.integers(1, 45), seed=st.integers(0, 10**6))
def test_uniformity_matches_definition_in_any_block_size(n, d, t, chunk, seed):
    z = unit(n, d, seed)
    expected = uniformity_bf(z, t)
    assert uniformity(z, t) == pytest.approx(expected, abs=1e-9)
    assert uniformity(z, t, chunk_size=chunk) == pytest.approx(expected, abs=1e-9)
    assert 0 <= uniformity(z, t) <= 2 * t * n / (n - 1) + 1e-9


def test_uniformity_returns_python_float_and_matches_pdist_in_float32():
    z = unit(300, 16, dtype=torch.float32)
    u = uniformity(z, chunk_size=37)
    assert type(u) is float
    assert u == pytest.approx(-torch.pdist(z.double()).pow(2).mul(-2.0).exp().mean().log().item(), abs=1e-5)


def test_uniformity_extremes():
    assert uniformity(torch.tensor([[0.0, 1.0]] * 4)) == 0.0  # collapsed
    assert uniformity(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), t=2.0) == pytest.approx(8.0)  # antipodal: 4t
    for n in (3, 7, 20):  # regular simplex: 2tN/(N−1)
        simplex = F.normalize(torch.eye(n, dtype=torch.float64) - 1 / n, dim=1)
        assert uniformity(simplex, t=1.5) == pytest.approx(2 * 1.5 * n / (n - 1), abs=1e-9)


def test_uniformity_is_invariant_to_rotation_and_order():
    z = unit(50, 5, 1)
    q, _ = torch.linalg.qr(torch.randn(5, 5, generator=torch.Generator().manual_seed(2), dtype=torch.float64))
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(3))
    assert uniformity(z @ q) == pytest.approx(uniformity(z), abs=1e-10)
    assert uniformity(z[perm], chunk_size=9) == pytest.approx(uniformity(z), abs=1e-10)


def test_uniformity_large_t_does_not_overflow():
    z = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    # pairs at squared distance 4, 2, 2: mean of e^{-4t}, e^{-2t}, e^{-2t}; dominated by e^{-2t}·(2/3)
    assert uniformity(z, t=500.0) == pytest.approx(1000 - math.log(2 / 3), abs=1e-9)


def test_uniformity_16bit_inputs_are_computed_in_float32():
    z = unit(64, 8, dtype=torch.float32)
    assert uniformity(z.bfloat16()) == pytest.approx(uniformity(z), abs=0.05)
    assert uniformity(z.half()) == pytest.approx(uniformity(z), abs=0.01)


def test_uniformity_does_not_track_gradients():
    z = unit(10, 3).requires_grad_()
    assert type(uniformity(z)) is float


def test_sphere_uniformity_limit_closed_forms_and_random_points():
    assert sphere_uniformity_limit(3) == pytest.approx(4 - math.log(math.sinh(4) / 4), abs=1e-8)
    assert sphere_uniformity_limit(3, t=1.0) == pytest.approx(2 - math.log(math.sinh(2) / 2), abs=1e-8)
    assert sphere_uniformity_limit(256) == pytest.approx(4 - 8 / 256, abs=5e-4)
    # many uniform points reach the limit
    assert uniformity(unit(4000, 3, 5, torch.float32)) == pytest.approx(sphere_uniformity_limit(3), abs=0.02)
    with pytest.raises(ValueError, match="dim must be an int >= 2"):
        sphere_uniformity_limit(1)


# ---------------------------------------------------------------- alignment

@SETTINGS
@given(n=st.integers(1, 30), d=st.integers(1, 6), alpha=st.floats(0.25, 4.0), seed=st.integers(0, 10**6))
def test_alignment_matches_definition(n, d, alpha, seed):
    z1, z2 = unit(n, d, seed), unit(n, d, seed + 1)
    expected = np.mean([float(torch.dot(z1[i] - z2[i], z1[i] - z2[i])) ** (alpha / 2) for i in range(n)])
    assert alignment(z1, z2, alpha) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert 0 <= alignment(z1, z2, alpha) <= 2 ** alpha + 1e-9


def test_alignment_alpha2_is_two_minus_two_mean_positive_similarity():
    z1, z2 = unit(100, 8, 1), unit(100, 8, 2)
    assert alignment(z1, z2) == pytest.approx(2 - 2 * (z1 * z2).sum(1).mean().item(), abs=1e-12)
    assert alignment(z1, z1) == 0.0


# ---------------------------------------------------------------- tolerance

@SETTINGS
@given(n=st.integers(2, 40), d=st.integers(1, 6), n_classes=st.integers(1, 8), seed=st.integers(0, 10**6))
def test_tolerance_matches_definition(n, d, n_classes, seed):
    z, y = unit(n, d, seed), labels(n, n_classes, seed) * 3 - 5  # labels need not be 0..C−1
    if torch.bincount(y + 5).max() < 2:
        with pytest.raises(ValueError, match="at least one class two or more samples"):
            tolerance(z, y)
        return
    assert tolerance(z, y) == pytest.approx(tolerance_bf(z, y), abs=1e-10)


def test_tolerance_closed_form_is_accurate_for_large_unstructured_classes():
    # random features: ‖S_c‖² and Σ‖z_i‖² are both ≈ n_c and nearly cancel; the float64 class sums keep the digits
    z, y = unit(6000, 64, 3, torch.float32), labels(6000, 3, 4)
    total, pairs = 0.0, 0
    for c in range(3):
        zc = z[y == c].double()
        total += ((zc @ zc.T).sum() - zc.pow(2).sum()).item(); pairs += len(zc) * (len(zc) - 1)
    assert abs(total / pairs) < 1e-3  # nothing to find in random features
    assert tolerance(z, y) == pytest.approx(total / pairs, abs=1e-10)


def test_tolerance_accepts_arrays_lists_and_ignores_singletons():
    z = unit(6, 3)
    y = [4, 4, 4, 9, 1, 1]
    assert tolerance(z, y) == pytest.approx(tolerance(z, np.array(y)))
    assert tolerance(z, y) == pytest.approx(tolerance_bf(z, y), abs=1e-12)
    assert tolerance(z, torch.tensor([1, 1, 2, 3, 4, 5])) == pytest.approx(float(z[0] @ z[1]))


def test_tolerance_extremes():
    assert tolerance(torch.tensor([[0.0, 1.0]] * 5), [0] * 5) == pytest.approx(1.0)
    assert tolerance(torch.tensor([[1.0, 0.0], [-1.0, 0.0]]), [3, 3]) == pytest.approx(-1.0)


# ---------------------------------------------------------------- similarity profile

@SETTINGS
@given(n=st.integers(2, 25), d=st.integers(1, 6), data=st.data(), seed=st.integers(0, 10**6))
def test_similarity_profile_matches_definition(n, d, data, seed):
    k = data.draw(st.integers(1, n - 1))
    chunk = data.draw(st.one_of(st.none(), st.integers(1, n + 3)))
    z, z_pos = unit(n, d, seed), unit(n, d, seed + 1)
    profile = similarity_profile(z, z_pos, k=k, chunk_size=chunk)
    positive, top = profile_bf(z, z_pos, k)
    assert isinstance(profile, SimilarityProfile) and type(profile.positive) is float
    assert profile.positive == pytest.approx(positive, abs=1e-12)
    assert profile.top_negatives.shape == (k,) and profile.top_negatives.dtype == torch.float64
    torch.testing.assert_close(profile.top_negatives, top, atol=1e-12, rtol=0)
    assert (profile.top_negatives.diff() <= 1e-15).all()
    assert profile.gap == pytest.approx(positive - top[0].item(), abs=1e-12)


def test_similarity_profile_against_itself_has_positive_one():
    z = unit(30, 4)
    assert similarity_profile(z, z, k=3).positive == pytest.approx(1.0)


# ---------------------------------------------------------------- kNN

@SETTINGS
@given(n_train=st.integers(1, 30), n_test=st.integers(1, 12), d=st.integers(2, 5), data=st.data(), seed=st.integers(0, 10**6))
def test_knn_matches_definition(n_train, n_test, d, data, seed):
    # d >= 2: on the 1-D "sphere" {−1, 1} exact ties between class scores are common, and their winner would
    # depend on the order of floating-point additions
    k = data.draw(st.integers(1, n_train))
    t = data.draw(st.sampled_from([0.01, 0.07, 0.5, 5.0]))
    chunk = data.draw(st.one_of(st.none(), st.integers(1, n_test + 2)))
    train_z, test_z = unit(n_train, d, seed), unit(n_test, d, seed + 1)
    train_y, test_y = labels(n_train, 4, seed) - 1, labels(n_test, 4, seed + 1) - 1
    expected = knn_bf(train_z, train_y, test_z, k, t)
    # the brute force breaks ties between equal similarities by index, topk may not: only compare tie-free cases
    sims = test_z @ train_z.T
    kth = sims.sort(dim=1, descending=True).values
    if k < n_train and ((kth[:, k - 1] - kth[:, k]).abs() < 1e-12).any():
        return
    predicted = knn_predict(train_z, train_y, test_z, k=k, t=t, chunk_size=chunk)
    torch.testing.assert_close(predicted, expected)
    assert knn_accuracy(train_z, train_y, test_z, test_y, k=k, t=t, chunk_size=chunk) == pytest.approx(
        (expected == test_y).double().mean().item())


def test_knn_temperature_decides_between_nearest_and_majority():
    deg = lambda a: torch.tensor([[math.cos(math.radians(x)), math.sin(math.radians(x))] for x in a], dtype=torch.float64)
    train, y, test = deg([0, 10, 30, 40, 50]), torch.tensor([0, 0, 1, 1, 1]), deg([15])
    assert knn_predict(train, y, test, k=5, t=0.07).tolist() == [0]
    assert knn_predict(train, y, test, k=5, t=100.0).tolist() == [1]


def test_knn_tiny_temperature_does_not_overflow():
    train_z, test_z = unit(50, 4, 1), unit(10, 4, 2)
    y = labels(50, 3, 1)
    nearest = y[(test_z @ train_z.T).argmax(dim=1)]
    torch.testing.assert_close(knn_predict(train_z, y, test_z, k=10, t=1e-4), nearest)


def test_knn_accuracy_on_separable_and_shuffled_labels():
    g = torch.Generator().manual_seed(0)
    centres = F.normalize(torch.randn(5, 16, generator=g), dim=1)
    y = torch.arange(5).repeat_interleave(60)
    z = F.normalize(centres[y] + 0.1 * torch.randn(300, 16, generator=g), dim=1)
    perm = torch.randperm(300, generator=g)
    tr, te = perm[:200], perm[200:]
    assert knn_accuracy(z[tr], y[tr], z[te], y[te], k=20) == 1.0
    assert knn_accuracy(z[tr], y[tr][torch.randperm(200, generator=g)], z[te], y[te], k=20) < 0.45


# ---------------------------------------------------------------- blocks bigger than the default

def test_default_block_size_splits_large_inputs():
    n = 6000  # more rows than one default block holds: BLOCK_ELEMENTS // 6000 = 5592
    assert BLOCK_ELEMENTS // n < n
    z = unit(n, 4, 9, torch.float32)
    assert uniformity(z) == pytest.approx(uniformity(z, chunk_size=n), abs=1e-5)
    assert uniformity(z) == pytest.approx(uniformity(z, chunk_size=1001), abs=1e-5)
    p_default, p_small = similarity_profile(z, z.flip(0)), similarity_profile(z, z.flip(0), chunk_size=1001)
    torch.testing.assert_close(p_default.top_negatives, p_small.top_negatives, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- errors

Z = unit(8, 3)
Y = labels(8, 2)


@pytest.mark.parametrize("call, message", [
    (lambda: uniformity(Z[:1]), "z must have at least 2 rows"),
    (lambda: uniformity(Z[:0]), "z must have at least 2 rows"),
    (lambda: uniformity(3 * Z), "normalise first: z = torch.nn.functional.normalize"),
    (lambda: uniformity(Z.index_fill(0, torch.tensor([2]), float("nan"))), "z must hold finite features.*row 2"),
    (lambda: uniformity(Z.index_fill(0, torch.tensor([5]), float("inf"))), "row 5"),
    (lambda: uniformity(Z, t=0.0), "t must be a finite number > 0"),
    (lambda: uniformity(Z, t=float("nan")), "t must be"),
    (lambda: uniformity(Z, chunk_size=0), "chunk_size must be an integer >= 1"),
    (lambda: uniformity(Z, chunk_size=2.5), "chunk_size"),
    (lambda: uniformity(Z[0]), r"z must have shape \[N, d\]"),
    (lambda: uniformity(Z.long()), "floating-point"),
    (lambda: alignment(Z, Z[:5]), "z1 and z2 must have the same shape"),
    (lambda: alignment(Z, 2 * Z), "z2 must have L2-normalised rows"),
    (lambda: alignment(Z, Z, alpha=-1), "alpha must be a finite number > 0"),
    (lambda: tolerance(Z, Y[:5]), r"labels must have one label per row of the features, shape \[8\]"),
    (lambda: tolerance(Z, Y.float()), "labels must hold integer class labels"),
    (lambda: tolerance(Z, torch.arange(8)), "at least one class two or more samples"),
    (lambda: tolerance(Z, "abc"), "labels must be"),
    (lambda: tolerance(Z * 0.5, Y), "z must have L2-normalised rows"),
    (lambda: similarity_profile(Z, Z, k=8), r"k must be an integer in \[1, 7\] \(at most the number of negatives per anchor, N − 1\)"),
    (lambda: similarity_profile(Z, Z, k=0), "k must be an integer in \\[1, 7\\]"),
    (lambda: similarity_profile(Z[:1], Z[:1]), "each anchor needs a negative"),
    (lambda: similarity_profile(Z, Z[:4]), "z and z_pos must have the same shape"),
    (lambda: knn_accuracy(Z, Y, Z, Y, k=9), r"k must be an integer in \[1, 8\] \(at most the number of training samples\)"),
    (lambda: knn_accuracy(Z, Y[:3], Z, Y), "train_y must have one label per row"),
    (lambda: knn_accuracy(Z, Y, Z, Y[:3]), "test_y must have one label per row"),
    (lambda: knn_accuracy(Z, Y, Z[:, :2], Y), "test_z must have L2-normalised rows"),
    (lambda: knn_accuracy(Z, Y, unit(8, 4), Y), "same feature size d"),
    (lambda: knn_accuracy(Z, Y, Z, Y, t=0), "t must be a finite number > 0"),
    (lambda: knn_predict(Z, Y, Z[:0]), "test_z must have at least 1 row, got N=0"),
])
def test_errors_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_mixed_precision_inputs_are_promoted():
    train32, test64 = unit(40, 6, 1, torch.float32), unit(9, 6, 2)
    y = labels(40, 3)
    torch.testing.assert_close(knn_predict(train32, y, test64, k=5), knn_predict(train32.double(), y, test64, k=5))
    p = similarity_profile(test64, unit(9, 6, 3, torch.float32), k=2)
    assert p.positive == pytest.approx(similarity_profile(test64, unit(9, 6, 3, torch.float32).double(), k=2).positive)
    assert alignment(test64, test64.float()) == pytest.approx(0.0, abs=1e-12)


def test_uniformity_is_never_negative_for_rows_a_hair_off_unit_norm():
    z = torch.tensor([[0.6, 0.8]] * 6) * (1 + 5e-4)  # within the allowed 1e-3 of norm 1, all at one point
    assert uniformity(z) == 0.0
    assert uniformity(unit(30, 3, 1, torch.float32) * (1 + 5e-4)) > 0
