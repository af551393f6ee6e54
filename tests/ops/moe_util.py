"""Helpers of the MoE tests (test_moe.py, test_moe_fused.py, test_moe_gemm.py, test_moe_gemm_decode.py):
ops.moe's float64 references (routing, vLLM's aligned layout, the layer with its error bound, derived
in test_moe.py's module docstring) and its end-to-end check on random inputs; std.moe_gemm's numpy
routing, float64 references of the SwiGLU and down GEMMs with their bounds (test_moe_gemm.py's module
docstring), the bound check, the bounds-checked CPU module, and random expert weights of each format."""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np

import kcompiler as kc
from kcompiler import ops
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops.moe_types import ExpertWeights, MoERouting, dequantize_reference

from ..draws import fresh_rng

RNG = fresh_rng()
U32 = 2.0 ** -24
UNIT = {"f32": 2.0 ** -24, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}
DTYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}


def f64(a):
    return np.asarray(a).astype(np.float64)


# --- ops.moe (test_moe.py) -----------------------------------------------------------------------------

def route_ref(logits, top_k, mode, renormalize):
    """(ids, weights) in float64: NaN as -inf, an all -inf row as all equal, ties to the lower index."""
    lg = f64(logits)
    lg[np.isnan(lg)] = -np.inf
    dead = np.all(lg == -np.inf, axis=1)
    lg[dead] = 0.0
    ids = np.argsort(-lg, axis=1, kind="stable")[:, :top_k]
    e = np.exp(lg - lg.max(axis=1, keepdims=True))
    chosen = np.take_along_axis(e, ids, 1)
    full = mode == "softmax_topk" and not renormalize
    w = chosen / (e.sum(axis=1, keepdims=True) if full else chosen.sum(axis=1, keepdims=True))
    return ids.astype(np.int32), w


def align_ref(ids, e, bm):
    """(sorted_ids, tile_expert, num_tiles) built directly: assignments by expert, in order within one."""
    t, k = ids.shape
    n = t * k
    flat = ids.reshape(-1)
    slots = MoERouting.padded_slots(t, k, e, bm)
    sorted_ids = np.full(slots, n, np.int32)
    tile_expert = np.full(slots // bm, -1, np.int32)
    at = 0
    for x in range(e):
        mine = np.nonzero(flat == x)[0]
        sorted_ids[at:at + len(mine)] = mine
        tiles = -(-len(mine) // bm)
        tile_expert[at // bm:at // bm + tiles] = x
        at += tiles * bm
    return sorted_ids, tile_expert, at // bm


def moe_ref(x, logits, wg, wd, top_k, mode, renormalize, h_unit):
    """(out, bound): the float64 layer on the reference routing and decoded weights, and the bound on
    a kernel result's error (test_moe.py's module docstring), for intermediate values rounded to h_unit."""
    ids, w = route_ref(logits, top_k, mode, renormalize)
    g_all, d_all = dequantize_reference(wg), dequantize_reference(wd)
    x64 = f64(x)
    t_n, hid = x64.shape
    inter = g_all.shape[1] // 2
    e_n = logits.shape[1]
    out = np.zeros((t_n, hid))
    bound = np.zeros((t_n, hid))
    for t in range(t_n):
        for j in range(top_k):
            e = ids[t, j]
            g, u = g_all[e, :inter] @ x64[t], g_all[e, inter:] @ x64[t]
            gm, um = np.abs(g_all[e, :inter]) @ np.abs(x64[t]), np.abs(g_all[e, inter:]) @ np.abs(x64[t])
            s = g / (1 + np.exp(-g))
            h = s * u
            dh = (hid + 2) * U32 * (1.1 * gm * np.abs(u) + np.abs(s) * um) + (4 * U32 + h_unit) * np.abs(h)
            y = d_all[e] @ h
            ym = np.abs(d_all[e]) @ (np.abs(h) + dh)
            out[t] += w[t, j] * y
            bound[t] += w[t, j] * ((inter + 2) * U32 * ym + np.abs(d_all[e]) @ dh
                                   + ((e_n + 12) * U32 + (top_k + 1) * U32) * ym)
    return out, ids, 2 * bound


def layer_weights(e, n, k, fmt, scale=0.1):
    return ExpertWeights.quantize(RNG.standard_normal((e, n, k)) * scale, fmt)


def check_moe(fmt, t, e, top_k, mode, hid=96, inter=160, dt="f32", reduce="atomic", renormalize=True):
    x = RNG.standard_normal((t, hid)).astype(DTYPES[dt])
    logits = (RNG.standard_normal((t, e)) * 2).astype(np.float32)
    wg, wd = layer_weights(e, 2 * inter, hid, fmt), layer_weights(e, hid, inter, fmt)
    got = ops.moe(x, logits, wg, wd, top_k, mode=mode, renormalize=renormalize, reduce=reduce, target="cpu")
    ref, ids, bound = moe_ref(x, logits, wg, wd, top_k, mode, renormalize, UNIT[dt] if dt != "f32" else 0.0)
    np.testing.assert_array_equal(ops.moe_route(logits, top_k, mode=mode, target="cpu")[0], ids)
    assert got.dtype == DTYPES[dt] and got.shape == (t, hid)
    bound = bound + UNIT[dt] * np.abs(ref) + 2.0 ** -126
    err = np.abs(f64(got) - ref)
    at = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{fmt}: {int((err > bound).sum())} elements off, worst {err[at]:.3g} "
                                  f"(bound {bound[at]:.3g}, value {ref[at]:.3g}) at {at}")
    return x, logits, wg, wd, got


# --- std.moe_gemm (test_moe_gemm.py) -------------------------------------------------------------------

U = 2.0 ** -24  # f32's unit roundoff


def make_routing(topk_ids: np.ndarray, topk_weights: np.ndarray, num_experts: int, block_m: int) -> MoERouting:
    """vLLM's moe_align_block_size layout, in numpy: assignments a = t * top_k + j grouped by expert
    (ascending a within an expert), each run padded to a multiple of block_m with T * top_k."""
    T, top_k = topk_ids.shape
    numel = T * top_k
    flat = topk_ids.reshape(-1)
    ids, tiles = [], []
    for e in range(num_experts):
        a = np.nonzero(flat == e)[0].tolist()
        n = -(-len(a) // block_m) * block_m
        ids += a + [numel] * (n - len(a))
        tiles += [e] * (n // block_m)
    P = MoERouting.padded_slots(T, top_k, num_experts, block_m)
    ids += [numel] * (P - len(ids))
    tiles += [-1] * (P // block_m - len(tiles))
    return MoERouting(topk_ids.astype(np.int32), topk_weights.astype(np.float32), np.array(ids, np.int32),
                      np.array(tiles, np.int32), np.array([len([t for t in tiles if t >= 0])], np.int32), block_m,
                      top_k, num_experts)


def random_routing(rng, T: int, top_k: int, E: int, block_m: int, used: int | None = None) -> MoERouting:
    """Each token picks top_k distinct experts among the first ``used`` (the rest get no token)."""
    used = E if used is None else used
    ids = np.stack([rng.choice(used, top_k, replace=False) for _ in range(T)]).reshape(T, top_k)
    w = rng.random((T, top_k)).astype(np.float32) + 0.25
    return make_routing(ids, w, E, block_m)


def bf16(a) -> np.ndarray:
    return np.asarray(a, np.float32).astype(ml_dtypes.bfloat16)


def ref_swiglu(x, w: ExpertWeights, r: MoERouting):
    """(H float64, bound): silu(x[t] Wg[e]^T) * (x[t] Wu[e]^T) for every assignment, and its error
    bound per element (see test_moe_gemm.py's module docstring)."""
    W = dequantize_reference(w)
    I = W.shape[1] // 2
    K = W.shape[2]
    xr = np.asarray(x).astype(np.float64)
    flat = r.topk_ids.reshape(-1)
    H = np.zeros((flat.size, I))
    bound = np.zeros_like(H)
    for a, e in enumerate(flat):
        xa = xr[a // r.top_k]
        g, u = W[e, :I] @ xa, W[e, I:] @ xa
        ga, ua = np.abs(W[e, :I]) @ np.abs(xa), np.abs(W[e, I:]) @ np.abs(xa)
        with np.errstate(over="ignore"):  # exp(-g) overflows to inf for g below -709: s is then -0
            s = g / (1 + np.exp(-g))
        H[a] = s * u
        dg, du = (K + 2) * U * ga, (K + 2) * U * ua
        bound[a] = 2.0 ** -8 * np.abs(H[a]) + 1.1 * dg * (np.abs(u) + du) + np.abs(s) * du + 1e-30
    return H, bound


def ref_down(h, w: ExpertWeights, r: MoERouting):
    """(Y float64 (T * top_k, Hd), bound of each Y element, out float64 (T, Hd), its bound)."""
    W = dequantize_reference(w)
    K = W.shape[2]
    hr = np.asarray(h).astype(np.float64)
    flat = r.topk_ids.reshape(-1)
    p = r.topk_weights.reshape(-1).astype(np.float64)
    Y = np.zeros((flat.size, W.shape[1]))
    bY = np.zeros_like(Y)
    for a, e in enumerate(flat):
        Y[a] = p[a] * (W[e] @ hr[a])
        bY[a] = (K + 3) * U * p[a] * (np.abs(W[e]) @ np.abs(hr[a])) + 1e-30
    T = r.tokens
    out = Y.reshape(T, r.top_k, -1).sum(1)
    bout = bY.reshape(T, r.top_k, -1).sum(1) + r.top_k * U * np.abs(Y).reshape(T, r.top_k, -1).sum(1)
    return Y, bY, out, bout


def check(got, want, bound, what):
    got = np.asarray(got).astype(np.float64)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all(), f"{what}: NaN where the reference has none, or the reverse"
    err = np.abs(got - want)[~nan]
    bad = err > bound[~nan]
    assert not bad.any(), f"{what}: {bad.sum()} of {err.size} beyond the bound, worst {np.max(err - bound[~nan]):.3g}"


@functools.lru_cache(maxsize=None)
def _module(mma: bool):
    opts = {"emulate_mma": True} if mma else {}
    # every global access checked as a GPU would fault on it (in bounds; 16-byte loads aligned)
    return kc.compile_file(stdlib_dir() / "moe_gemm.kc", target="cpu", target_options=opts, check_bounds=True)


def gemm_weights(rng, E, N, K, fmt, scale=0.3):
    return ExpertWeights.quantize(rng.standard_normal((E, N, K)) * scale, fmt)


def _mxfp4_variant_case(rng, E, N, K):
    """MXFP4 weights whose scales mix blocks below 128, above it and NaN, so that DEC = 2 takes both
    of its passes (a warp's step with and without a scale above 128)."""
    w = gemm_weights(rng, E, N, K, "mxfp4")
    s = rng.integers(115, 128, size=np.asarray(w.scales).shape).astype(np.uint8)
    s[:, 1, 0] = 131   # row 1's first block: above 128 (the steps of chunk 0 take the second pass)
    s[:, 6, -1] = 255  # NaN in the last block of row 6 (a partial chunk where K % 128 != 0)
    return ExpertWeights.mxfp4(w.data, s)
