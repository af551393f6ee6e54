"""Helpers of the Hopper MoE tests (test_moe_sm90.py, test_moe_sm90_mx.py): the float64 reference of
ops.moe's sm90 layer with its error bound (derived in test_moe_sm90.py's module docstring) and the
check of the grouped GEMM's output slot by slot against float64 on moe_align's layout (the tiles in
use within f32 accumulation and one bf16 rounding, the slots past them untouched)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from kcompiler.ops import moe_sm90

U32 = 2.0 ** -24
UB = 2.0 ** -8
BF16 = ml_dtypes.bfloat16


def f64(a):
    return np.asarray(a).astype(np.float64)


def sm90_ref(x, ids, w, g_all, d_all, round_x=True):
    """(out, bound) in float64 for x rounded to bf16 (``round_x``; else as it is), routing (ids, w),
    weights g_all (E, 2 I, H) and d_all (E, H, I) (float64 values of the bf16 weights)."""
    x64 = f64(np.asarray(x).astype(BF16)) if round_x else f64(x)
    t_n, hid = x64.shape
    inter = g_all.shape[1] // 2
    out = np.zeros((t_n, hid))
    bound = np.zeros((t_n, hid))
    for t in range(t_n):
        for j in range(ids.shape[1]):
            e, wt = ids[t, j], float(w[t, j])
            g, u = g_all[e, :inter] @ x64[t], g_all[e, inter:] @ x64[t]
            gm, um = np.abs(g_all[e, :inter]) @ np.abs(x64[t]), np.abs(g_all[e, inter:]) @ np.abs(x64[t])
            s = g / (1 + np.exp(-g))
            h = s * u
            dh = (hid + 2) * U32 * (1.1 * gm * np.abs(u) + np.abs(s) * um) + (4 * U32 + UB) * np.abs(h)
            ym = np.abs(d_all[e]) @ (np.abs(h) + dh)
            out[t] += wt * (d_all[e] @ h)
            bound[t] += wt * ((inter + 2 + 8) * U32 * ym + np.abs(d_all[e]) @ dh + UB * ym)
    return out, 2 * bound


def check_grouped(c, a, w64, routing, gated):
    """The grouped GEMM's result ``c`` (P, n) against float64: every slot of the tiles in use equals
    A[p] @ W[e]^T (gated: silu(gate) * up) for its tile's expert, ``w64`` the weights as float64 (E, N,
    K), within f32 accumulation and one bf16 rounding; the slots past them keep their NaNs."""
    n, kk = c.shape[1], a.shape[1]
    used = int(routing.num_tiles[0]) * moe_sm90.BLOCK_M
    assert used < c.shape[0] and np.isnan(f64(c[used:])).all()
    te = np.repeat(routing.tile_expert[:used // moe_sm90.BLOCK_M], moe_sm90.BLOCK_M)
    a64, w64 = f64(a[:used]), w64[te]
    acc = np.einsum("pk,pnk->pn", a64, w64)
    mag = np.einsum("pk,pnk->pn", np.abs(a64), np.abs(w64))
    if gated:
        g, u, gm, um = acc[:, :n], acc[:, n:], mag[:, :n], mag[:, n:]
        s = g * 0.5 * (1 + np.tanh(g / 2))  # silu without exp's overflow
        ref = s * u
        tol = (kk + 2) * U32 * (1.1 * gm * np.abs(u) + np.abs(s) * um) + 8 * U32 * np.abs(ref)
    else:
        ref, tol = acc, (kk + 2) * U32 * mag
    err = np.abs(f64(c[:used]) - ref)
    assert np.all(err <= 2 * tol + UB * np.abs(ref) + 2.0 ** -126), float(np.max(err - 2 * tol - UB * np.abs(ref)))
