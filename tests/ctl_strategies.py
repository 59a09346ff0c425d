"""Hypothesis strategies over similarity sets, and plain-Python references, shared by the property tests.

A similarity set is ``(pos, neg)``: ``pos`` [B] holds each anchor's positive similarity, ``neg`` [B, K] its
negatives. Values lie in [-1, 1] (cosine similarities). Strategies return float64 tensors; tests cast as needed.

The references below use only ``math`` on Python floats (``math.fsum`` for sums), so that they share no code path
with torch.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

MAX_B, MAX_K = 6, 40

unit_floats = st.floats(-1.0, 1.0, allow_nan=False, allow_infinity=False)
# few distinct values, so that draws are full of ties (at the hard loss's threshold, between pos and neg, ...)
tie_floats = st.sampled_from([-1.0, -0.5, 0.0, 0.25, 0.5, 1.0])


def log_uniform(lo: float, hi: float) -> st.SearchStrategy[float]:
    "Floats in [lo, hi], uniform in log scale (temperatures)."
    return st.floats(math.log(lo), math.log(hi)).map(lambda x: min(max(math.exp(x), lo), hi))


@st.composite
def sims(draw, min_b=1, max_b=MAX_B, min_k=1, max_k=MAX_K, elements=unit_floats):
    "Arbitrary similarity sets: values from `elements` (ties, ±1 and 0 are common draws)."
    b = draw(st.integers(min_b, max_b))
    k = draw(st.integers(min_k, max_k))
    pos = draw(arrays(np.float64, (b,), elements=elements))
    neg = draw(arrays(np.float64, (b, k), elements=elements))
    return torch.tensor(pos), torch.tensor(neg)


def spread_rows(gen: torch.Generator, rows: int, n: int, min_gap: float) -> torch.Tensor:
    "[rows, n] float64 values in [-1, 1], any two in a row at least `min_gap` apart, in random order."
    room = 2.0 - (n - 1) * min_gap
    assert room > 0, "min_gap too large for n values in [-1, 1]"
    u = torch.rand(rows, n, generator=gen, dtype=torch.float64).sort(dim=1).values * room
    vals = u + torch.arange(n, dtype=torch.float64) * min_gap - 1.0
    perm = torch.rand(rows, n, generator=gen).argsort(dim=1)
    return vals.gather(1, perm).clamp(-1.0, 1.0)


def top_gap_rows(gen: torch.Generator, rows: int, n: int, gap: float) -> torch.Tensor:
    "[rows, n] float64 values in [-1, 1] whose largest value exceeds every other one by at least `gap`."
    vals = torch.rand(rows, n, generator=gen, dtype=torch.float64) * (2.0 - gap) - 1.0  # in [-1, 1 - gap]
    top = vals.argmax(dim=1, keepdim=True)
    return vals.scatter_add(1, top, torch.full((rows, 1), gap, dtype=torch.float64))


def _drawn_rows(draw, make, gap, min_k, max_k, max_b):
    "Draw B, K and a seed, then `make(generator, B, K, gap)`."
    b = draw(st.integers(1, max_b))
    k = draw(st.integers(min_k, max_k))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    return make(gen, b, k, gap)


@st.composite
def distinct_neg(draw, min_gap=1e-3, min_k=2, max_k=MAX_K, max_b=MAX_B):
    "neg [B, K] whose values in each row are pairwise at least `min_gap` apart."
    return _drawn_rows(draw, spread_rows, min_gap, min_k, max_k, max_b)


@st.composite
def top_gap_neg(draw, gap, min_k=1, max_k=MAX_K, max_b=MAX_B):
    "neg [B, K] whose largest value per row exceeds the others by at least `gap`."
    return _drawn_rows(draw, top_gap_rows, gap, min_k, max_k, max_b)


@st.composite
def top_gap_sims(draw, gap, min_k=1, max_k=MAX_K, max_b=MAX_B):
    """(pos, neg) whose largest similarity per anchor (over pos and neg together) beats all others by `gap`.

    About half the anchors have the positive on top, the others a negative.
    """
    b = draw(st.integers(1, max_b))
    k = draw(st.integers(min_k, max_k))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    vals = top_gap_rows(gen, b, k + 1, gap)
    pos_on_top = torch.rand(b, generator=gen) < 0.5
    for i in torch.nonzero(pos_on_top).flatten().tolist():
        j = int(vals[i].argmax())
        vals[i, 0], vals[i, j] = vals[i, j].clone(), vals[i, 0].clone()
    return vals[:, 0].contiguous(), vals[:, 1:].contiguous()


@st.composite
def unit_embeddings(draw, min_b=1, max_b=MAX_B, max_d=8, n_sets=1, normalise=True):
    "`n_sets` float64 tensors [B, d] (same B, d) of (by default L2-normalised) Gaussian rows."
    b = draw(st.integers(min_b, max_b))
    d = draw(st.integers(1, max_d))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**32 - 1)))
    out = []
    for _ in range(n_sets):
        z = torch.randn(b, d, generator=gen, dtype=torch.float64)
        out.append(torch.nn.functional.normalize(z, dim=1) if normalise else z)
    return out


# ---------------------------------------------------------------- plain-Python references


def logsumexp_py(xs) -> float:
    m = max(xs)
    return m + math.log(math.fsum(math.exp(x - m) for x in xs))


def ref_anchor_loss(p: float, row: list[float], tau: float) -> float:
    "Eq 1 of [WL21] for one anchor: -log( exp(p/τ) / (exp(p/τ) + Σ_row exp(s/τ)) )."
    return logsumexp_py([p / tau] + [s / tau for s in row]) - p / tau


def ref_contrastive(pos, neg, tau: float) -> list[float]:
    "Per-anchor Eq 1 of [WL21] for tensors pos [B], neg [B, K]."
    return [ref_anchor_loss(p, row, tau) for p, row in zip(pos.tolist(), neg.tolist())]


def ref_n_informative(k: int, num: int, den: int) -> int:
    "⌈(num/den)·k⌉ clipped to [1, k], in exact integer arithmetic."
    return max(1, min(k, -(-num * k // den)))


def ref_kept(row: list[float], n_keep: int) -> list[float]:
    "The values of `row` at or above its `n_keep`-th largest value (sorting; ties at the threshold all kept)."
    threshold = sorted(row, reverse=True)[n_keep - 1]
    return [v for v in row if v >= threshold]


def ref_entropy(probs: list[float]) -> float:
    return -math.fsum(p * math.log(p) for p in probs if p > 0)
