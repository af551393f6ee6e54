"""ops.moe's Hopper path (gemm="sm90", kcompiler/ops/moe_sm90.py): std.matmul_sm90's grouped GEMM
(kernel matmul_sm90_grouped) and the layer around it (std.moe_sm90's gather and ordered weighted sum).

On the CPU target under emulate_wgmma (TMA, wgmma and mbarriers emulated, every access bounds checked):
the grouped GEMM, gated and plain, against float64 numpy slot by slot on moe_align's layout, including
the slots past the tiles in use (never written: the units past the device-side tile count do nothing)
and persistent blocks taking several units; the layer against a float64 numpy reference on
ops.moe_route's routing, odd T, E 5 to 8, top_k 2 to 3, H and I multiples of 64 but not of the tile,
an expert without tokens. The sm_90a PTX of both grouped variants assembles without spills. On an H100
(marked gpu): against a float64 torch loop.

Bounds (tests/ops/test_moe.py's derivation, u32 = 2^-24, ub = 2^-8 for bf16): a dot product of K
terms in f32 within (K + 2) u32 of the sum of the terms' magnitudes; h = silu(g) u carries the gate's
and up's errors (|silu'| <= 1.1), 4 u32 of f32 work and its rounding to bf16 (ub |h|); y = Wd h carries
|Wd| dh, its own accumulation and its rounding to bf16 (ub |y|); the weighted sum a few u32; the total
doubled, plus the output's rounding. x is rounded to bf16 first (the path's documented behaviour), in
the reference too. A wrong expert, slot or weight is an O(1) error, far above the bounds.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops, pipeline
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import matmul_sm90, moe_sm90
from kcompiler.ops.moe_types import ExpertWeights

from ..ptxas_util import needs_ptxas, ptxas

RNG = np.random.default_rng()
U32 = 2.0 ** -24
UB = 2.0 ** -8
BF16 = ml_dtypes.bfloat16


def f64(a):
    return np.asarray(a).astype(np.float64)


def sm90_ref(x, ids, w, g_all, d_all):
    """(out, bound) in float64 for x rounded to bf16, routing (ids, w), weights g_all (E, 2 I, H) and
    d_all (E, H, I) (float64 values of the bf16 weights)."""
    x64 = f64(np.asarray(x).astype(BF16))
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


# --- the grouped GEMM ----------------------------------------------------------------------------------

@pytest.mark.parametrize("gated, sms", [(True, 2), (False, 64)], ids=["gated-persistent", "plain-surplus"])
def test_grouped_gemm_cpu(gated, sms):
    """Every slot of the tiles in use equals A[p] @ W[e]^T (gated: silu(gate) * up) for its tile's
    expert; the slots past them keep their NaNs. sms 2: each block walks several units; 64: more blocks
    than units (the grid is sized for P / BM rows of tiles, the count read on the device is smaller)."""
    t_n, k, e_n, kk, n = 45, 3, 6, 192, 320
    # distinct experts a token, expert 2 without any (no tile)
    ids = np.stack([RNG.choice([0, 1, 3, 4, 5], k, replace=False) for _ in range(t_n)]).astype(np.int32)
    routing = ops.moe_align(ids, np.ones(ids.shape, np.float32), e_n, moe_sm90.BLOCK_M, target="cpu")
    P = routing.sorted_ids.shape[0]
    a = moe_sm90._empty(np.zeros(1, BF16), (P, kk), "bf16")
    a[...] = RNG.standard_normal((P, kk)).astype(BF16)
    w = moe_sm90._aligned((RNG.standard_normal((e_n, 2 * n if gated else n, kk)) / 8).astype(BF16))
    c = moe_sm90._empty(a, (P, n), "bf16")
    c[...] = np.nan
    moe_sm90.grouped_gemm(matmul_sm90._cpu_module(), a, w, routing, c, gated=gated, sms=sms)
    used = int(routing.num_tiles[0]) * moe_sm90.BLOCK_M
    assert used < P and np.isnan(f64(c[used:])).all()
    te = np.repeat(routing.tile_expert[:used // moe_sm90.BLOCK_M], moe_sm90.BLOCK_M)
    a64, w64 = f64(a[:used]), f64(w)[te]
    acc = np.einsum("pk,pnk->pn", a64, w64)
    mag = np.einsum("pk,pnk->pn", np.abs(a64), np.abs(w64))
    if gated:
        g, u, gm, um = acc[:, :n], acc[:, n:], mag[:, :n], mag[:, n:]
        s = g / (1 + np.exp(-g))
        ref = s * u
        tol = (kk + 2) * U32 * (1.1 * gm * np.abs(u) + np.abs(s) * um) + 8 * U32 * np.abs(ref)
    else:
        ref, tol = acc, (kk + 2) * U32 * mag
    err = np.abs(f64(c[:used]) - ref)
    assert np.all(err <= 2 * tol + UB * np.abs(ref) + 2.0 ** -126), float(np.max(err - 2 * tol - UB * np.abs(ref)))


def test_gather_pads_with_zero_rows_and_inverts_the_order():
    """std.moe_sm90's gather: slot p of the tiles in use holds x[a // top_k] in bf16 for its assignment
    a (and inv[a] = p), a padding slot zeros; the slots past the tiles in use keep what they held."""
    from kcompiler.ops import _common
    t_n, k, e_n, hid = 29, 2, 5, 72
    x = RNG.standard_normal((t_n, hid)).astype(np.float32)
    ids = np.stack([RNG.choice([0, 2, 3, 4], k, replace=False) for _ in range(t_n)]).astype(np.int32)
    routing = ops.moe_align(ids, np.ones(ids.shape, np.float32), e_n, moe_sm90.BLOCK_M, target="cpu")
    P = routing.sorted_ids.shape[0]
    xp = np.full((P, hid), np.nan, BF16)
    inv = np.full(t_n * k, -1, np.int32)
    _common.stdlib_module("moe_sm90", "cpu").moe_sm90_gather[P, moe_sm90.THREADS](
        x, hid, routing.sorted_ids, routing.num_tiles, moe_sm90.BLOCK_M, t_n * k, k, hid, xp, inv, T="f32", VEC=4)
    used = int(routing.num_tiles[0]) * moe_sm90.BLOCK_M
    sid = routing.sorted_ids[:used]
    real = sid < t_n * k
    assert used < P and np.isnan(f64(xp[used:])).all()
    np.testing.assert_array_equal(f64(xp[:used][real]), f64(x[sid[real] // k].astype(BF16)))
    assert (f64(xp[:used][~real]) == 0).all() and (~real).any()
    np.testing.assert_array_equal(np.sort(inv), np.sort(np.nonzero(real)[0]))
    np.testing.assert_array_equal(sid[inv], np.arange(t_n * k))


# --- the layer -----------------------------------------------------------------------------------------

def check_layer(t_n, e_n, k, hid, inter, dt=BF16, empty_expert=None):
    x = RNG.standard_normal((t_n, hid)).astype(dt)
    logits = (RNG.standard_normal((t_n, e_n)) * 2).astype(np.float32)
    if empty_expert is not None:
        logits[:, empty_expert] = -30.0  # never among the top_k
    wg = ExpertWeights.bf16((RNG.standard_normal((e_n, 2 * inter, hid)) / np.sqrt(hid)).astype(BF16))
    wd = ExpertWeights.bf16((RNG.standard_normal((e_n, hid, inter)) / np.sqrt(inter)).astype(BF16))
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    ids, w = ops.moe_route(logits, k, target="cpu")
    if empty_expert is not None:
        assert not (ids == empty_expert).any()
    ref, bound = sm90_ref(x, ids, w, f64(wg.data), f64(wd.data))
    assert got.dtype == np.dtype(dt) and got.shape == (t_n, hid)
    unit = UB if dt == BF16 else U32
    bound = bound + unit * np.abs(ref) + 2.0 ** -126
    err = np.abs(f64(got) - ref)
    at = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{int((err > bound).sum())} elements off, worst {err[at]:.3g} (bound "
                                  f"{bound[at]:.3g}, value {ref[at]:.3g}) at {at}")


def test_moe_sm90_layer_cpu():
    """37 tokens, 6 experts of which one gets none, top_k 3, H 192 and I 320 (not multiples of the
    128 x 256 tile), bf16."""
    check_layer(37, 6, 3, 192, 320, empty_expert=4)


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("t_n, e_n, k, hid, inter, dt", [
    (1, 5, 2, 192, 320, BF16), (300, 8, 2, 320, 192, BF16), (37, 5, 3, 128, 64, np.float32),
    (64, 7, 2, 64, 448, np.float16)])
def test_moe_sm90_layer_shapes_cpu(t_n, e_n, k, hid, inter, dt):
    check_layer(t_n, e_n, k, hid, inter, dt, empty_expert=e_n - 1)


def test_moe_sm90_errors():
    x = np.zeros((3, 64), BF16)
    logits = np.zeros((3, 4), np.float32)
    fp8 = ExpertWeights.quantize(np.ones((4, 128, 64)), "fp8")
    with pytest.raises(TypeError, match="bf16 weights"):
        ops.moe(x, logits, fp8, ExpertWeights.quantize(np.ones((4, 64, 64)), "fp8"), 2, gemm="sm90")
    x = np.zeros((3, 68), BF16)
    wg = np.zeros((4, 128, 68), BF16)
    with pytest.raises(ValueError, match="multiples of 8"):
        ops.moe(x, logits, wg, np.zeros((4, 68, 64), BF16), 2, gemm="sm90")
    with pytest.raises(ValueError, match="'sm90'"):
        ops.moe(x, logits, wg, np.zeros((4, 68, 64), BF16), 2, gemm="wgmma")


@needs_ptxas
@pytest.mark.parametrize("fuse", [pytest.param(0, marks=pytest.mark.slow(sample=0)), 1], ids=["plain", "gated"])
def test_grouped_ptx_assembles(fuse):
    """sm_90a: the grouped variants inlined, 3-D / 4-D TMA copies, without spills."""
    ptx = pipeline.emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", target="nvptx", arch="sm_90a",
                             kernel="matmul_sm90_grouped", comptime=dict(T="bf16", OUT="bf16", FUSE=fuse))
    assert "call" not in ptx and ".func" not in ptx
    assert (".4d" if fuse else ".3d") in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


# --- on the GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["gpt-oss", "mixtral"])
@pytest.mark.parametrize("t_n", [1, 37, 1024])
def test_moe_sm90_on_cuda(shape, t_n):
    """gpt-oss (E 32, top_k 4, H = I = 2880) and a Mixtral-like shape at a smaller I (E 8, top_k 2, H
    4096, I 2048), bf16, against a float64 torch loop over the experts on ops.moe_route's routing,
    within the bound of the module docstring (also the whole result's relative error, about 2^-9)."""
    torch = pytest.importorskip("torch")
    e_n, k, hid, inter = (32, 4, 2880, 2880) if shape == "gpt-oss" else (8, 2, 4096, 2048)
    x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(t_n, e_n, device="cuda")
    wg = (torch.randn(e_n, 2 * inter, hid, device="cuda") / hid ** 0.5).to(torch.bfloat16)
    wd = (torch.randn(e_n, hid, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    assert got.dtype == torch.bfloat16 and got.shape == (t_n, hid) and got.is_cuda
    ids, w = ops.moe_route(logits, k)
    x64, g_all, d_all = x.double(), wg.double(), wd.double()
    ref = torch.zeros(t_n, hid, dtype=torch.float64, device="cuda")
    bound = torch.zeros_like(ref)
    for e in range(e_n):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        wt = w[tok, j].double()[:, None]
        gu = x64[tok] @ g_all[e].T
        gm = x64[tok].abs() @ g_all[e].abs().T
        g, u = gu[:, :inter], gu[:, inter:]
        s = g / (1 + torch.exp(-g))
        h = s * u
        dh = (hid + 2) * U32 * (1.1 * gm[:, :inter] * u.abs() + s.abs() * gm[:, inter:]) + (4 * U32 + UB) * h.abs()
        ym = (h.abs() + dh) @ d_all[e].abs().T
        ref.index_add_(0, tok, wt * (h @ d_all[e].T))
        bound.index_add_(0, tok, wt * (dh @ d_all[e].abs().T + ((inter + 10) * U32 + UB) * ym))
    bound = 2 * bound + UB * ref.abs() + 2.0 ** -126
    err = (got.double() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert float(err.norm() / ref.norm()) < 2.0 ** -6


@pytest.mark.gpu
def test_auto_takes_sm90_from_the_measured_rows_per_expert():
    """gemm='auto' on an sm_90 GPU with bf16 x and weights: the Hopper grouped GEMMs from
    ops.MOE_SM90_MIN_ROWS_PER_EXPERT assignments an expert (the same bits as gemm='sm90'), the mma.sync
    path below it (the same bits as gemm='mma' with reduce='separate')."""
    torch = pytest.importorskip("torch")
    e_n, k, hid, inter = 8, 2, 512, 256
    wg = (torch.randn(e_n, 2 * inter, hid, device="cuda") / hid ** 0.5).to(torch.bfloat16)
    wd = (torch.randn(e_n, hid, inter, device="cuda") / inter ** 0.5).to(torch.bfloat16)
    edge = ops.MOE_SM90_MIN_ROWS_PER_EXPERT * e_n // k
    for t_n, want in ((edge, "sm90"), (edge - 1, "mma")):
        x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16)
        logits = torch.randn(t_n, e_n, device="cuda")
        got = ops.moe(x, logits, wg, wd, k, reduce="separate")
        other = {"sm90": "mma", "mma": "sm90"}[want]
        same = ops.moe(x, logits, wg, wd, k, reduce="separate", gemm=want)
        assert torch.equal(got, same), (t_n, want)
        assert not torch.equal(got, ops.moe(x, logits, wg, wd, k, reduce="separate", gemm=other)), (t_n, other)
