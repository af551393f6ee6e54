"""Helpers of the sampling tests (test_sampling.py, test_sampling_paths.py, test_sampling_lists.py):
the sorting reference in numpy float64 (softmax rows, the top-k / top-p / min-p allowed set), logits
on a grid of ties, the chi-square test of a drawn distribution against the renormalised one, per-row
sampling parameters covering every combination, and numpy to torch conversion for bf16."""
from __future__ import annotations

import ml_dtypes
import mpmath
import numpy as np

from kcompiler.ops import sampling as S

BF16 = ml_dtypes.bfloat16


def ref_probs(logits, temperature):
    """softmax(logits / temperature) in float64, row by row."""
    x = logits.astype(np.float64) / np.asarray(temperature, np.float64).reshape(-1, 1)
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def ref_allowed(p, top_k, top_p, min_p, slack=1e-5):
    """The allowed set of each row by sorting (float64), ties included: top-k (fewer than k larger),
    top-p (the larger ones hold less than top_p; ``slack`` absorbs f32 rounding at the boundary), min-p
    (p >= min_p max p, the same slack)."""
    rows, v = p.shape
    ok = np.ones_like(p, bool)
    for b in range(rows):
        order = np.argsort(-p[b], kind="stable")
        ps = p[b][order]
        csum = np.concatenate([[0.0], np.cumsum(ps)])
        # tokens strictly larger than p_j: the first index of p_j's value in the sorted list
        first = np.searchsorted(-ps, -ps, side="left")
        above_cnt = np.empty(v, np.int64)
        above_mass = np.empty(v)
        above_cnt[order] = first
        above_mass[order] = csum[first]
        if 0 < top_k[b] < v:
            ok[b] &= above_cnt < top_k[b]
        if top_p[b] < 1.0:
            ok[b] &= above_mass < top_p[b] + slack
        if min_p[b] > 0:
            ok[b] &= p[b] >= min_p[b] * p[b].max() * (1 - slack)
    return ok


def grid_logits(rng, rows, vocab, dtype):
    """Logits on a grid of 1/8 (many ties, distinct values far apart in f32 and bf16)."""
    return (rng.integers(-64, 24, (rows, vocab)) / 8.0).astype(dtype)


def chi_square_p(counts, expected):
    """The chi-square test's p-value (upper tail, df = cells - 1) by mpmath's regularised gamma."""
    keep = expected > 0
    assert counts[~keep].sum() == 0, "a token outside the allowed set was drawn"
    c, e = counts[keep], expected[keep]
    small = e < 5                       # cells expected fewer than 5 times pooled into one
    if small.any():
        c, e = np.append(c[~small], c[small].sum()), np.append(e[~small], e[small].sum())
    stat = float(((c - e) ** 2 / e).sum())
    return float(mpmath.gammainc((len(c) - 1) / 2.0, stat / 2.0, mpmath.inf, regularized=True))


def distribution_case(draws_per_call, calls, target, dtype=np.float32, probs=False):
    rng = np.random.default_rng(25)
    vocab = 37
    row = (rng.normal(0, 1.5, vocab)).astype(np.float32)
    row[[4, 9]] = row[2]                                # ties inside the set
    cases = [dict(top_k=0, top_p=1.0, min_p=0.0), dict(top_k=8, top_p=1.0, min_p=0.0),
             dict(top_k=0, top_p=0.7, min_p=0.0), dict(top_k=0, top_p=1.0, min_p=0.1),
             dict(top_k=12, top_p=0.8, min_p=0.05)]
    for c in cases:
        temp = 0.8
        p = ref_probs(row[None], [temp])
        allowed = ref_allowed(p, [c["top_k"]], [c["top_p"]], [c["min_p"]], slack=0.0)[0]
        want = np.where(allowed, p[0], 0.0)
        want /= want.sum()
        x = np.repeat(row[None], draws_per_call, 0).astype(dtype)
        if probs:
            x = np.repeat(p.astype(np.float32), draws_per_call, 0)
        counts = np.zeros(vocab)
        for off in range(calls):
            kw = dict(probs=x) if probs else dict(logits=x, temperature=temp)
            tok = S.sample(**kw, seed=1234, offset=off, target=target, **c)
            counts += np.bincount(np.asarray(tok), minlength=vocab)
        pv = chi_square_p(counts, want * counts.sum())
        assert pv > 1e-3, (c, pv)


def to_torch(torch, a):
    """A torch CPU tensor of numpy ``a`` (f32 or ml_dtypes bf16: torch reads no ml_dtypes array)."""
    a = np.ascontiguousarray(a)
    if a.dtype == BF16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def row_params(rng, rows, vocab):
    """Per-row temperature, top-k, top-p, min-p: every combination of on and off."""
    on = np.array([(i >> b) & 1 for i in range(rows) for b in range(3)]).reshape(rows, 3).astype(bool)
    temp = rng.uniform(0.4, 1.5, rows).astype(np.float32)
    top_k = np.where(on[:, 0], rng.integers(1, 60, rows), 0).astype(np.int32)
    top_p = np.where(on[:, 1], rng.uniform(0.1, 0.95, rows), 1.0).astype(np.float32)
    min_p = np.where(on[:, 2], rng.uniform(0.01, 0.3, rows), 0.0).astype(np.float32)
    return temp, top_k, top_p, min_p
