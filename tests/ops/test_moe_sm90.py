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
from kcompiler.ops.moe_types import ExpertWeights, dequantize_reference

from ..ptxas_util import needs_ptxas, ptxas
from .moe_sm90_util import BF16, U32, UB, check_grouped, f64, sm90_ref
from ..draws import fresh_rng

RNG = fresh_rng()


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
    check_grouped(c, a, f64(w), routing, gated)


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
    mx = ExpertWeights.quantize(np.ones((4, 128, 64)), "mxfp4")
    with pytest.raises(TypeError, match="both of one format"):  # mxfp4 itself is taken (test_moe_sm90_mx.py)
        ops.moe(x, logits, mx, ExpertWeights.quantize(np.ones((4, 64, 64)), "fp8"), 2, gemm="sm90")
    fp8 = ExpertWeights.quantize(np.ones((4, 128, 64)), "fp8")
    with pytest.raises(TypeError, match="both of one format"):
        ops.moe(x, logits, fp8, np.zeros((4, 64, 64), BF16), 2, gemm="sm90")
    x = np.zeros((3, 68), BF16)
    wg = np.zeros((4, 128, 68), BF16)
    with pytest.raises(ValueError, match="multiples of 8"):
        ops.moe(x, logits, wg, np.zeros((4, 68, 64), BF16), 2, gemm="sm90")
    with pytest.raises(ValueError, match="'sm90'"):
        ops.moe(x, logits, wg, np.zeros((4, 68, 64), BF16), 2, gemm="wgmma")
    # FP8: TMA's 16-byte rows are 16 elements (H 72 and I 64: fine for bf16, not for E4M3)
    x = np.zeros((3, 72), BF16)
    with pytest.raises(ValueError, match="multiples of 16 with fp8"):
        ops.moe(x, logits, ExpertWeights.quantize(np.ones((4, 128, 72)), "fp8"),
                ExpertWeights.quantize(np.ones((4, 72, 64)), "fp8"), 2, gemm="sm90")


# --- FP8 weights (E4M3 activations quantised per row) ---------------------------------------------------
# Bounds of the FP8 path: the quantisation of x is reproduced bit for bit (checked below), so both GEMMs'
# inputs are exact E4M3 codes times f32 scales and the first GEMM errs by f32 accumulation only. h is
# rounded to bf16 and quantised again; where the kernel's f32 h and the reference's float64 one straddle
# a bf16 rounding boundary (an interval of the f32 error's width around h), the two may use different
# bf16 values, so different E4M3 codes (one E4M3 ulp of the row's scale apart at most) or, where that
# element can be the row's maximum, another scale: the reference takes the largest difference over every
# bf16 value the kernel can hold there (the interval's ends: the rounding is monotonic) and every scale
# those allow. The down projection carries |Wd| times that, its f32 accumulation and the bf16 rounding
# of y; the output its f32 sum and rounding.

F8 = ml_dtypes.float8_e4m3fn


def quant_rows_ref(v):
    """(codes, scales) of the rows of f32 ``v`` by moe_sm90_quant's rule, in numpy's f32 (each
    operation one IEEE rounding, as the kernel's): m = max |row|, codes e4m3(v * (448 / m)) saturated,
    scale m / 448; m = 0: zero codes, scale 1."""
    v = np.asarray(v, np.float32)
    m = np.abs(v).max(axis=-1)
    pos = m > 0
    safe = np.where(pos, m, np.float32(1))
    r = np.where(pos, np.float32(448) / safe, np.float32(1)).astype(np.float32)
    sc = np.where(pos, safe / np.float32(448), np.float32(1)).astype(np.float32)
    codes = np.clip(v * r[..., None], np.float32(-448), np.float32(448)).astype(F8)
    return codes, sc


def _dequant_with_max(c, m):
    """float64 values of f32 c quantised as moe_sm90_quant does in a row whose maximum is m (f32; each
    element with m's scale, whatever its own size)."""
    m = np.float32(m)
    r, sc = (np.float32(448) / m, m / np.float32(448)) if m > 0 else (np.float32(1), np.float32(1))
    q = np.clip(np.asarray(c, np.float32) * r, np.float32(-448), np.float32(448)).astype(F8)
    return f64(q) * float(sc)


def fp8_ref(x, ids, w, wg, wd):
    """(out, bound) in float64 of the FP8 path for x, routing (ids, w) and FP8 ExpertWeights (the
    section's derivation)."""
    xq, sx = quant_rows_ref(np.asarray(x).astype(np.float32))
    cg, sg, cd, sd = f64(wg.data), f64(wg.scales), f64(wd.data), f64(wd.scales)
    t_n, hid = xq.shape
    inter = cg.shape[1] // 2
    out, bound, mag = (np.zeros((t_n, hid)) for _ in range(3))
    for t in range(t_n):
        for j in range(ids.shape[1]):
            e, wt = ids[t, j], float(w[t, j])
            sc = float(sx[t]) * sg[e]
            gu, gum = (cg[e] @ f64(xq[t])) * sc, (np.abs(cg[e]) @ np.abs(f64(xq[t]))) * sc
            g, u, gm, um = gu[:inter], gu[inter:], gum[:inter], gum[inter:]
            sl = g / (1 + np.exp(-g))
            h = sl * u
            dh = (hid + 4) * U32 * (1.1 * gm * np.abs(u) + np.abs(sl) * um) + 4 * U32 * np.abs(h)
            lo, hi = ((h - dh).astype(np.float32).astype(BF16), (h + dh).astype(np.float32).astype(BF16))
            hb = h.astype(np.float32).astype(BF16)
            hq, sh = quant_rows_ref(hb.astype(np.float32))
            hv = f64(hq) * float(sh)
            # the row maxima the kernel can see: the largest candidate magnitude of each element that can
            # reach the least possible maximum
            amin = np.where((f64(lo) <= 0) & (f64(hi) >= 0), 0.0, np.minimum(np.abs(f64(lo)), np.abs(f64(hi))))
            amax = np.maximum(np.abs(f64(lo)), np.abs(f64(hi)))
            low = amin.max()
            cand = {float(v) for v in np.concatenate([amax, amin]) if v >= low}
            dq = np.zeros(inter)
            for m in cand:
                for c in (lo, hi):
                    dq = np.maximum(dq, np.abs(_dequant_with_max(c.astype(np.float32), m) - hv))
            y = sd[e] * (cd[e] @ hv)
            dy = sd[e] * (np.abs(cd[e]) @ dq) + (inter + 4) * U32 * sd[e] * (np.abs(cd[e]) @ (np.abs(hv) + dq))
            ym = np.abs(y) + dy
            out[t] += wt * y
            bound[t] += wt * (dy + UB * ym)
            mag[t] += wt * (ym + UB * ym)
    return out, bound + (ids.shape[1] + 2) * U32 * mag


@pytest.mark.parametrize("src", [np.float32, BF16])
def test_quantize_rows_bit_exact(src):
    """moe_sm90_quant, gathering (x's rows by slot, inv written) and not (h's rows): codes and scales
    bit for bit those of numpy's f32 (quant_rows_ref), a zero token's row zero codes and scale 1,
    padding slots zero codes, the slots past the tiles in use untouched. H 80: 16-element rows, not 128."""
    from kcompiler.ops import _common
    t_n, k, e_n, hid = 29, 2, 5, 80
    x = (RNG.standard_normal((t_n, hid)) * np.exp(RNG.uniform(-12, 12, (t_n, 1)))).astype(src)
    x[3] = 0
    ids = np.stack([RNG.choice([0, 2, 3, 4], k, replace=False) for _ in range(t_n)]).astype(np.int32)
    routing = ops.moe_align(ids, np.ones(ids.shape, np.float32), e_n, moe_sm90.BLOCK_M, target="cpu")
    P = routing.sorted_ids.shape[0]
    used = int(routing.num_tiles[0]) * moe_sm90.BLOCK_M
    mod = _common.stdlib_module("moe_sm90", "cpu")
    q = moe_sm90._empty(np.zeros(1, BF16), (P, hid), "f8e4m3")
    q[...] = np.nan
    sq = np.full(P, np.nan, np.float32)
    inv = np.full(t_n * k, -1, np.int32)
    moe_sm90.quantize_rows(mod, x, routing, q, sq, inv)
    sid = routing.sorted_ids[:used]
    real = sid < t_n * k
    want_q, want_s = quant_rows_ref(x.astype(np.float32)[sid[real] // k])
    assert used < P and np.isnan(f64(q[used:])).all() and np.isnan(sq[used:]).all()
    np.testing.assert_array_equal(q[:used][real].view(np.uint8), want_q.view(np.uint8))
    np.testing.assert_array_equal(sq[:used][real].view(np.uint32), want_s.view(np.uint32))
    assert (f64(q[:used][~real]) == 0).all() and (sq[:used][~real] == 1).all() and (~real).any()
    np.testing.assert_array_equal(sid[inv], np.arange(t_n * k))
    zero = real & (sid // k == 3)
    assert zero.any() and (f64(q[:used][zero]) == 0).all() and (sq[:used][zero] == 1).all()
    # not gathering: row p of a (P, H) matrix
    hrows = moe_sm90._empty(x, (P, hid), "bf16")
    hrows[...] = RNG.standard_normal((P, hid)).astype(BF16)
    q[...] = np.nan
    moe_sm90.quantize_rows(mod, hrows, routing, q, sq)
    want_q, want_s = quant_rows_ref(hrows[:used].astype(np.float32))
    np.testing.assert_array_equal(q[:used].view(np.uint8), want_q.view(np.uint8))
    np.testing.assert_array_equal(sq[:used].view(np.uint32), want_s.view(np.uint32))


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "plain"])
def test_grouped_gemm_fp8_cpu(gated):
    """E4M3 operands with a scale per slot and per (expert, channel) of W (each expert's scales
    distinct, so a wrong expert's or the up half's scale is an O(1) error): every slot of the tiles in
    use equals sa[p] * sw[e, n] * (A[p] . W[e, n]) (gated: silu of the scaled gate times the scaled up),
    K 144 and N 176 (multiples of 16, not of the tile), an expert without tokens."""
    t_n, k, e_n, kk, n = 45, 3, 6, 144, 176
    ids = np.stack([RNG.choice([0, 1, 3, 4, 5], k, replace=False) for _ in range(t_n)]).astype(np.int32)
    routing = ops.moe_align(ids, np.ones(ids.shape, np.float32), e_n, moe_sm90.BLOCK_M, target="cpu")
    P = routing.sorted_ids.shape[0]
    a = moe_sm90._empty(np.zeros(1, BF16), (P, kk), "f8e4m3")
    # clipped to E4M3's largest finite value: a normal draw past 7.25 sigma (x 64 > 464) casts to NaN in
    # ml_dtypes (no saturation), which poisons its row; some 7e5 draws a run made that ~3e-7 a run
    a[...] = np.clip(RNG.standard_normal((P, kk)) * 64, -448, 448).astype(F8)
    sa = RNG.uniform(0.5, 2, P).astype(np.float32) / 64
    rows = 2 * n if gated else n
    w = moe_sm90._aligned(np.clip(RNG.standard_normal((e_n, rows, kk)) * 64, -448, 448).astype(F8))
    sw = (RNG.uniform(0.5, 2, (e_n, rows)) / 64 / np.sqrt(kk)).astype(np.float32)
    c = moe_sm90._empty(np.zeros(1, BF16), (P, n), "bf16")
    c[...] = np.nan
    moe_sm90.grouped_gemm(matmul_sm90._cpu_module(), a, w, routing, c, gated=gated, sms=3, scale_a=sa,
                          scale_w=sw)
    used = int(routing.num_tiles[0]) * moe_sm90.BLOCK_M
    assert used < P and np.isnan(f64(c[used:])).all()
    te = np.repeat(routing.tile_expert[:used // moe_sm90.BLOCK_M], moe_sm90.BLOCK_M)
    a64, w64 = f64(a[:used]), f64(w)[te]
    sc = f64(sa[:used])[:, None] * f64(sw)[te]
    acc = np.einsum("pk,pnk->pn", a64, w64) * sc
    mag = np.einsum("pk,pnk->pn", np.abs(a64), np.abs(w64)) * sc
    if gated:
        g, u, gm, um = acc[:, :n], acc[:, n:], mag[:, :n], mag[:, n:]
        s = g / (1 + np.exp(-g))
        ref = s * u
        tol = (kk + 4) * U32 * (1.1 * gm * np.abs(u) + np.abs(s) * um) + 4 * U32 * np.abs(ref)
    else:
        ref, tol = acc, (kk + 4) * U32 * mag
    err = np.abs(f64(c[:used]) - ref)
    bound = tol + UB * (np.abs(ref) + tol) + 2.0 ** -126
    assert np.all(err <= bound), float(np.max(err - bound))


def check_fp8_layer(t_n, e_n, k, hid, inter, dt=BF16, empty_expert=None):
    x = RNG.standard_normal((t_n, hid)).astype(dt)
    logits = (RNG.standard_normal((t_n, e_n)) * 2).astype(np.float32)
    if empty_expert is not None:
        logits[:, empty_expert] = -30.0  # never among the top_k
    wg = ExpertWeights.quantize(RNG.standard_normal((e_n, 2 * inter, hid)) / np.sqrt(hid), "fp8")
    wd = ExpertWeights.quantize(RNG.standard_normal((e_n, hid, inter)) / np.sqrt(inter), "fp8")
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    ids, w = ops.moe_route(logits, k, target="cpu")
    if empty_expert is not None:
        assert not (ids == empty_expert).any()
    ref, bound = fp8_ref(x, ids, w, wg, wd)
    assert got.dtype == np.dtype(dt) and got.shape == (t_n, hid)
    unit = UB if dt == BF16 else U32
    bound = bound + unit * (np.abs(ref) + bound) + 2.0 ** -126
    err = np.abs(f64(got) - ref)
    at = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (f"{int((err > bound).sum())} elements off, worst {err[at]:.3g} (bound "
                                  f"{bound[at]:.3g}, value {ref[at]:.3g}) at {at}")
    # the bound is below the activations' quantisation error (it holds E4M3's ulp only where h's bf16
    # rounding was uncertain, about 1 element in 10 at these sizes): the same layer without that
    # quantisation (x and h in float64, the weights as their codes say) lies outside it mostly (70%)
    exact, _ = sm90_ref(x.astype(np.float32), ids, w, dequantize_reference(wg), dequantize_reference(wd),
                        round_x=False)
    assert np.mean(np.abs(exact - ref) > bound) > 0.5, float(np.mean(np.abs(exact - ref) > bound))


def test_moe_sm90_fp8_layer_cpu():
    """FP8 weights: 37 tokens, 6 experts of which one gets none, top_k 3, H 208 and I 176 (multiples
    of 16, not of the 128-column tiles), padding rows in every expert's last tile."""
    check_fp8_layer(37, 6, 3, 208, 176, empty_expert=4)


@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("t_n, e_n, k, hid, inter, dt", [
    (1, 5, 2, 144, 80, BF16), (130, 8, 2, 256, 272, np.float32), (21, 7, 2, 48, 400, np.float16)])
def test_moe_sm90_fp8_layer_shapes_cpu(t_n, e_n, k, hid, inter, dt):
    check_fp8_layer(t_n, e_n, k, hid, inter, dt, empty_expert=e_n - 1)


@needs_ptxas
@pytest.mark.parametrize("t, fuse", [pytest.param("bf16", 0, marks=pytest.mark.slow(sample=0)), ("bf16", 1),
                                     pytest.param("f8e4m3", 0, marks=pytest.mark.slow(sample=0)), ("f8e4m3", 1)],
                         ids=["plain", "gated", "fp8-plain", "fp8-gated"])
def test_grouped_ptx_assembles(t, fuse):
    """sm_90a: the grouped variants inlined, 3-D / 4-D TMA copies, without spills (FP8: e4m3 wgmma,
    scaled per row and per expert's channel)."""
    fp8 = t == "f8e4m3"
    ptx = pipeline.emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", target="nvptx", arch="sm_90a",
                             kernel="matmul_sm90_grouped",
                             comptime=dict(T=t, OUT="bf16", FUSE=fuse, BK=128 if fp8 else 64, SCALE=2 if fp8 else 0))
    assert "call" not in ptx and ".func" not in ptx
    assert (".4d" if fuse else ".3d") in ptx
    assert ("e4m3.e4m3" in ptx) == fp8
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


@needs_ptxas
def test_quant_ptx_rounds_correctly():
    """moe_sm90_quant on sm_90a: the scale and its reciprocal by div.rn.f32 (what the host reproduces
    bit for bit), the codes by cvt.rn.satfinite, no spills."""
    ptx = pipeline.emit_file(stdlib_dir() / "moe_sm90.kc", "asm", target="nvptx", arch="sm_90a",
                             kernel="moe_sm90_quant", comptime=dict(T="bf16", VEC=8, GATHER=True))
    assert ptx.count("div.rn.f32") == 2 and "div.approx" not in ptx and "div.full" not in ptx
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    assert "0 bytes spill stores" in ptxas(ptx, verbose=True)


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


def _e4m3_torch(torch, v):
    """float32 ``v`` (|v| <= 448) rounded to E4M3 to nearest even, as float64 (torch's own conversion on
    the CPU rounds ties away from zero: not the kernels' cvt.rn)."""
    _, ex = torch.frexp(v.double())
    ulp = torch.exp2((ex - 4).clamp(min=-9).double())  # 3 fraction bits; subnormals' 2^-9
    return torch.round(v.double() / ulp) * ulp  # torch.round: ties to even


def _quant_rows_torch(torch, v):
    """quant_rows_ref on torch float32 rows: (codes as float64, scales as float64), the same f32 steps."""
    m = v.abs().amax(dim=-1)
    pos = m > 0
    safe = torch.where(pos, m, torch.ones_like(m))
    # f32 quotients correctly rounded: in float64, then rounded (53 >= 2 * 24 + 2 bits: no double-rounding
    # error); torch's own f32 division on the CPU is not always
    r = torch.where(pos, (448.0 / safe.double()).float(), torch.ones_like(m))
    sc = torch.where(pos, (safe.double() / 448.0).float(), torch.ones_like(m))
    return _e4m3_torch(torch, (v * r[..., None]).clamp(-448.0, 448.0)), sc.double()


@pytest.mark.gpu
@pytest.mark.parametrize("shape", ["gpt-oss", "mixtral"])
@pytest.mark.parametrize("t_n", [1, 37, 1024])
def test_moe_sm90_fp8_on_cuda(shape, t_n):
    """FP8 weights on the H100 against a float64 torch reference that quantises x and h as the kernels
    do (the FP8 section's bound; rows whose h maximum is uncertain take E4M3's half ulp at any scale
    the kernel can have), gpt-oss's and a Mixtral-like shape as test_moe_sm90_on_cuda."""
    torch = pytest.importorskip("torch")
    e_n, k, hid, inter = (32, 4, 2880, 2880) if shape == "gpt-oss" else (8, 2, 4096, 2048)
    x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(t_n, e_n, device="cuda")
    wgq = ExpertWeights.quantize(RNG.standard_normal((e_n, 2 * inter, hid), np.float32) / hid ** 0.5, "fp8")
    wdq = ExpertWeights.quantize(RNG.standard_normal((e_n, hid, inter), np.float32) / inter ** 0.5, "fp8")
    dev = [torch.from_numpy(np.asarray(a).view(np.uint8)).cuda().view(torch.float8_e4m3fn)
           for a in (wgq.data, wdq.data)]
    wg = ExpertWeights.fp8(dev[0], torch.from_numpy(wgq.scales).cuda())
    wd = ExpertWeights.fp8(dev[1], torch.from_numpy(wdq.scales).cuda())
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    assert got.dtype == torch.bfloat16 and got.shape == (t_n, hid) and got.is_cuda
    ids, w = ops.moe_route(logits, k)
    xq, sx = _quant_rows_torch(torch, x.float())
    ref = torch.zeros(t_n, hid, dtype=torch.float64, device="cuda")
    bound, mag, exact = torch.zeros_like(ref), torch.zeros_like(ref), torch.zeros_like(ref)
    for e in range(e_n):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        wt = w[tok, j].double()[:, None]
        cg, cd = wg.data[e].double(), wd.data[e].double()
        sg, sd = wg.scales[e].double(), wd.scales[e].double()
        sc = sx[tok, None] * sg
        gu, gum = (xq[tok] @ cg.T) * sc, (xq[tok].abs() @ cg.abs().T) * sc
        g, u, gm, um = gu[:, :inter], gu[:, inter:], gum[:, :inter], gum[:, inter:]
        sl = g / (1 + torch.exp(-g))
        h = sl * u
        dh = (hid + 4) * U32 * (1.1 * gm * u.abs() + sl.abs() * um) + 4 * U32 * h.abs()
        lo, hi, hb = ((v.float().to(torch.bfloat16).float()) for v in (h - dh, h + dh, h))
        hq, sh = _quant_rows_torch(torch, hb)
        hv = hq * sh[:, None]
        amin = torch.where((lo <= 0) & (hi >= 0), torch.zeros_like(lo), torch.minimum(lo.abs(), hi.abs()))
        mlo, mhi = amin.amax(dim=1), torch.maximum(lo.abs(), hi.abs()).amax(dim=1)
        dq = torch.zeros_like(hv)
        for c in (lo, hi):
            cq, cs = _quant_rows_torch(torch, torch.cat([c, mlo[:, None]], dim=1))  # maximum forced where certain
            dq = torch.maximum(dq, (cq[:, :-1] * cs[:, None] - hv).abs())
        loose = torch.maximum((lo.double() - hv).abs(), (hi.double() - hv).abs()) + 2.0 ** -4 * torch.maximum(
            lo.abs(), hi.abs()).double() + 2.0 ** -10 * (mhi.double() / 448 * (1 + U32))[:, None]
        dq = torch.where((mlo == mhi)[:, None], dq, loose)
        y = (hv @ cd.T) * sd
        dy = (dq @ cd.abs().T) * sd + (inter + 4) * U32 * ((hv.abs() + dq) @ cd.abs().T) * sd
        ym = y.abs() + dy
        ref.index_add_(0, tok, wt * y)
        bound.index_add_(0, tok, wt * (dy + UB * ym))
        mag.index_add_(0, tok, wt * ym * (1 + UB))
        xe = x[tok].double()
        ge = xe @ (cg * sg[:, None]).T
        he = ge[:, :inter] / (1 + torch.exp(-ge[:, :inter])) * ge[:, inter:]
        exact.index_add_(0, tok, wt * (he @ (cd * sd[:, None]).T))
    bound = bound + (k + 2) * U32 * mag
    bound = bound + UB * (ref.abs() + bound) + 2.0 ** -126
    err = (got.double() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    # the activations' quantisation: a few % of the unquantised layer (x and h in float64)
    assert float((got.double() - exact).norm() / exact.norm()) < 2.0 ** -3


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


@pytest.mark.gpu
def test_auto_keeps_fp8_off_sm90():
    """gemm='auto' with FP8 weights past ops.MOE_SM90_MIN_ROWS_PER_EXPERT rows an expert: the mma.sync
    path (the same bits as gemm='mma'), not sm90's, which would quantise the activations."""
    torch = pytest.importorskip("torch")
    e_n, k, hid, inter = 8, 2, 512, 256
    wgq = ExpertWeights.quantize(RNG.standard_normal((e_n, 2 * inter, hid), np.float32) / hid ** 0.5, "fp8")
    wdq = ExpertWeights.quantize(RNG.standard_normal((e_n, hid, inter), np.float32) / inter ** 0.5, "fp8")
    wg, wd = (ExpertWeights.fp8(torch.from_numpy(np.asarray(w.data).view(np.uint8)).cuda().view(torch.float8_e4m3fn),
                                torch.from_numpy(w.scales).cuda()) for w in (wgq, wdq))
    t_n = 4 * ops.MOE_SM90_MIN_ROWS_PER_EXPERT * e_n // k
    x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16)
    logits = torch.randn(t_n, e_n, device="cuda")
    got = ops.moe(x, logits, wg, wd, k, reduce="separate")
    assert torch.equal(got, ops.moe(x, logits, wg, wd, k, reduce="separate", gemm="mma"))
    assert not torch.equal(got, ops.moe(x, logits, wg, wd, k, gemm="sm90"))
