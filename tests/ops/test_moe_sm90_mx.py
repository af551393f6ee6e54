"""MXFP4 weights on ops.moe's Hopper path (gemm="sm90"): std.moe_sm90_mx's grouped GEMM, which copies
the packed E2M1 codes by TMA and decodes them (E8M0 scales per 32 along K, OCP MX v1.0) exactly to the
bf16 B tile the wgmmas read.

On the CPU target under emulate_wgmma (TMA, wgmma and mbarriers emulated; the 128-byte swizzle of the
decoded tile is the one the emulated wgmma reads, so a misplaced chunk is an O(1) error): the grouped
GEMM, gated and plain, against float64 numpy on weights decoded by kcompiler.numerics.mx (ml_dtypes'
E2M1 and E8M0, independent of the kernel's bit tricks), with K not a multiple of the 64-k step, N not
of the tile, scales above 128 (the second factor), persistent blocks and (slow) the benchmark's
BN 128 / 2-stage variant; the layer through ops.moe
against tests/ops/moe_sm90_util.py's float64 reference and bounds on the decoded weights. The sm_90a
PTX assembles without spills. On an H100 (marked gpu): gpt-oss's shape against a float64 torch loop
that decodes the codes through a table.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops, pipeline
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import moe_sm90
from kcompiler.ops.moe_types import ExpertWeights, dequantize_reference

from ..ptxas_util import needs_ptxas, ptxas
from .moe_sm90_util import U32, UB, check_grouped, f64, sm90_ref
from ..draws import fresh_rng

RNG = fresh_rng()
BF16 = ml_dtypes.bfloat16


def random_mxfp4(e_n, rows, k, lo=118, hi=124):
    """Random codes (every E2M1 code, both signs) and E8M0 scales in [lo, hi)."""
    packed = RNG.integers(0, 256, (e_n, rows, k // 2), dtype=np.uint8)
    scales = RNG.integers(lo, hi, (e_n, rows, k // 32), dtype=np.uint8)
    return ExpertWeights.mxfp4(packed, scales.view(ml_dtypes.float8_e8m0fnu))


@pytest.mark.parametrize("gated, sms, kk, tiles", [
    (True, 2, 96, {}), (False, 64, 160, {}), (False, 2, 96, {"BN": 192}), (True, 2, 96, {"BN": 192}),
    pytest.param(True, 3, 160, {"BN": 128, "STAGES": 2, "GROUP_M": 4}, marks=pytest.mark.slow(sample=0))],
    ids=["gated-persistent", "plain-surplus", "plain-bn192", "gated-bn192", "gated-bn128-s2"])
def test_grouped_gemm_mxfp4_cpu(gated, sms, kk, tiles):
    """Every slot of the tiles in use equals A[p] @ W[e]^T (gated: silu(gate) * up) for its tile's expert
    on the decoded weights, within f32 accumulation and one bf16 rounding; the slots past them keep their
    NaNs. Scales 118 to 130: factors 2^-9 to 2^3, some above 128 (mx_extra's second factor)."""
    t_n, k, e_n, n = 45, 3, 6, 192
    ids = np.stack([RNG.choice([0, 1, 3, 4, 5], k, replace=False) for _ in range(t_n)]).astype(np.int32)
    routing = ops.moe_align(ids, np.ones(ids.shape, np.float32), e_n, moe_sm90.BLOCK_M, target="cpu")
    P = routing.sorted_ids.shape[0]
    a = moe_sm90._empty(np.zeros(1, BF16), (P, kk), "bf16")
    a[...] = (RNG.standard_normal((P, kk)) / 4).astype(BF16)
    w = random_mxfp4(e_n, 2 * n if gated else n, kk, 118, 131)
    assert (np.asarray(w.scales).view(np.uint8) > 128).any()
    c = moe_sm90._empty(a, (P, n), "bf16")
    c[...] = np.nan
    moe_sm90.grouped_gemm_mxfp4(moe_sm90._mx_cpu_module(), a, w, routing, c, gated=gated, sms=sms, **tiles)
    check_grouped(c, a, dequantize_reference(w), routing, gated)


def test_bn_choice():
    """choose_bn: the grid's rounds times the dequantising warps' rounds a k-step (6 at BN 256, 4 at 192),
    256 unless 192 costs 5 % less; expected_tiles: each expert hit pads its run by half a tile on average.
    The widths bench_moe.py --sm90 --gemm-variants default,bn192 found faster on the H100."""
    assert moe_sm90.expected_tiles(1024, 4, 32) == pytest.approx((4096 + 32 * 63.5) / 128)
    assert moe_sm90.expected_tiles(1, 4, 32) == pytest.approx((4 + 4 * 63.5) / 128)  # 4 experts hit at most
    for t_n in (1, 256, 1024, 4096):  # gpt-oss (H = I = 2880): 192 throughout (1.07-1.17x from T 256)
        t = moe_sm90.expected_tiles(t_n, 4, 32)
        assert moe_sm90.choose_bn(2880, True, t, 132) == 192 and moe_sm90.choose_bn(2880, False, t, 132) == 192
    t = moe_sm90.expected_tiles(1024, 2, 8)  # Mixtral (H 4096, I 14336), T 1024: 192 (1.12x, 1.15x)
    assert moe_sm90.choose_bn(14336, True, t, 132) == 192 and moe_sm90.choose_bn(4096, False, t, 132) == 192
    t = moe_sm90.expected_tiles(256, 2, 8)  # T 256: 8 x 16 tiles of 256 are one round, 8 x 22 of 192 two
    assert moe_sm90.choose_bn(4096, False, t, 132) == 256 and moe_sm90.choose_bn(14336, True, t, 132) == 256
    assert moe_sm90.choose_bn(2880, False, 1, 12) == 256 and moe_sm90.choose_bn(2880, False, 1, 15) == 192


def check_layer(t_n, e_n, k, hid, inter, dt=BF16):
    x = RNG.standard_normal((t_n, hid)).astype(dt)
    logits = (RNG.standard_normal((t_n, e_n)) * 2).astype(np.float32)
    wg = random_mxfp4(e_n, 2 * inter, hid, 118, 122)
    wd = random_mxfp4(e_n, hid, inter, 119, 123)
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    ids, w = ops.moe_route(logits, k, target="cpu")
    ref, bound = sm90_ref(x, ids, w, dequantize_reference(wg), dequantize_reference(wd))
    assert got.dtype == np.dtype(dt) and got.shape == (t_n, hid)
    bound = bound + (UB if dt == BF16 else U32) * np.abs(ref) + 2.0 ** -126
    err = np.abs(f64(got) - ref)
    assert np.all(err <= bound), f"{int((err > bound).sum())} elements off, worst {float(np.max(err / bound)):.3g}x"


def test_moe_sm90_mxfp4_layer_cpu():
    """37 tokens, 5 experts, top_k 2, H 96 and I 160 (neither a multiple of the 64-k step nor of the
    tile), bf16."""
    check_layer(37, 5, 2, 96, 160)


@pytest.mark.slow(sample=0)
def test_moe_sm90_mxfp4_layer_f32_cpu():
    check_layer(130, 8, 2, 64, 224, np.float32)


@needs_ptxas
@pytest.mark.parametrize("fuse, bn", [pytest.param(0, 256, marks=pytest.mark.slow(sample=0)), (1, 256), (1, 192)],
                         ids=["plain", "gated", "gated-bn192"])
def test_grouped_mxfp4_ptx_assembles(fuse, bn):
    """sm_90a: 3-D / 4-D TMA copies of the codes, the exact decode's PRMT pairs, fence.proxy.async before
    the ready arrivals, the registers split 64 / 216 / 216 (the block's pool: test_setmaxnreg_pool.py), no spills."""
    ptx = pipeline.emit_file(stdlib_dir() / "moe_sm90_mx.kc", "asm", target="nvptx", arch="sm_90a",
                             kernel="matmul_sm90_grouped_mxfp4", comptime=dict(OUT="bf16", FUSE=fuse, BN=bn))
    assert "call" not in ptx and ".func" not in ptx
    assert (".4d" if fuse else ".3d") in ptx and "prmt.b32" in ptx and "fence.proxy.async.shared::cta" in ptx
    assert "setmaxnreg.dec.sync.aligned.u32 64" in ptx and "setmaxnreg.inc.sync.aligned.u32 216" in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


def test_reason_not_takes_mxfp4():
    x = np.zeros((3, 64), BF16)
    wg, wd = random_mxfp4(4, 128, 64), random_mxfp4(4, 64, 64)
    assert moe_sm90.reason_not(x, wg, wd) is None
    with pytest.raises(TypeError, match="both of one format"):
        ops.moe(x, np.zeros((3, 4), np.float32), wg, ExpertWeights.quantize(np.ones((4, 64, 64)), "fp8"), 2,
                gemm="sm90")


# --- on the GPU ----------------------------------------------------------------------------------------

def _decode_torch(torch, w):
    """float64 (E, N, K) of MXFP4 weights on the GPU through a table of the 16 E2M1 values."""
    lut = torch.tensor([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], dtype=torch.float64,
                       device=w.data.device)
    p = w.data.long()
    codes = torch.stack([lut[p & 15], lut[p >> 4]], dim=-1).flatten(-2)
    s = torch.exp2(w.scales.view(torch.uint8).double() - 127)
    return (codes.unflatten(-1, (-1, 32)) * s[..., None]).flatten(-2)


@pytest.mark.gpu
def test_moe_mxfp4_auto_on_cuda(monkeypatch):
    """gemm='auto' with MXFP4 weights takes the Hopper grouped GEMM from
    MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT assignments an expert (here 256) and the mma.sync decode below it;
    both, and gemm='sm90' and 'mma' given, are right against the float64 reference."""
    torch = pytest.importorskip("torch")
    assert ops.MOE_SM90_MXFP4_MIN_ROWS_PER_EXPERT == 64
    e_n, k, hid, inter, t_n = 8, 2, 256, 128, 1024
    g = torch.Generator(device="cuda").manual_seed(5)
    packed = lambda r, c: torch.randint(0, 256, (e_n, r, c // 2), device="cuda", dtype=torch.uint8, generator=g)
    scales = lambda r, c: torch.randint(120, 123, (e_n, r, c // 32), device="cuda", dtype=torch.uint8, generator=g)
    wg = ExpertWeights.mxfp4(packed(2 * inter, hid), scales(2 * inter, hid))
    wd = ExpertWeights.mxfp4(packed(hid, inter), scales(hid, inter))
    x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16, generator=g)
    logits = torch.randn(t_n, e_n, device="cuda", generator=g)
    calls = []
    real = moe_sm90.moe_sm90
    monkeypatch.setattr(moe_sm90, "moe_sm90", lambda *a, **kw: calls.append(a[0].shape[0]) or real(*a, **kw))
    for t in (t_n, 31):  # 256 assignments an expert (sm90), then 7.75 (mma.sync)
        check_gemms_cuda(torch, x[:t], logits[:t], wg, wd, k)
    assert calls == [t_n, t_n, 31]  # 'auto' and 'sm90' at T 1024; 'sm90' only at T 31


def check_gemms_cuda(torch, x, logits, wg, wd, k):
    """ops.moe's three choices of GEMM against a float64 torch loop over the experts (relative norm)."""
    t_n, hid = x.shape
    e_n, inter = wg.shape[0], wg.shape[1] // 2
    ids, w = ops.moe_route(logits, k)
    ref = torch.zeros(t_n, hid, dtype=torch.float64, device="cuda")
    for e in range(e_n):
        tok, j = (ids == e).nonzero(as_tuple=True)
        ge = _decode_torch(torch, ExpertWeights("mxfp4", wg.data[e:e + 1], wg.scales[e:e + 1]))[0]
        de = _decode_torch(torch, ExpertWeights("mxfp4", wd.data[e:e + 1], wd.scales[e:e + 1]))[0]
        gu = x[tok].double() @ ge.T
        h = gu[:, :inter] / (1 + torch.exp(-gu[:, :inter])) * gu[:, inter:]
        ref.index_add_(0, tok, w[tok, j].double()[:, None] * (h @ de.T))
    for gemm in ("auto", "sm90", "mma"):
        got = ops.moe(x, logits, wg, wd, k, gemm=gemm).double()
        assert float((got - ref).norm() / ref.norm()) < 2.0 ** -6, gemm


@pytest.mark.gpu
@pytest.mark.parametrize("t_n", [1, 37, 1024])
def test_moe_sm90_mxfp4_on_cuda(t_n):
    """gpt-oss (E 32, top_k 4, H = I = 2880), MXFP4 weights, bf16 x, against a float64 torch loop over
    the experts on ops.moe_route's routing and the table-decoded weights, within
    tests/ops/test_moe_sm90.py's bound (and a relative error of the whole below 2^-6)."""
    torch = pytest.importorskip("torch")
    e_n, k, hid, inter = 32, 4, 2880, 2880
    g = torch.Generator(device="cuda").manual_seed(t_n)

    def weights(rows, cols, lo):
        packed = torch.randint(0, 256, (e_n, rows, cols // 2), device="cuda", dtype=torch.uint8, generator=g)
        scales = torch.randint(lo, lo + 3, (e_n, rows, cols // 32), device="cuda", dtype=torch.uint8, generator=g)
        return ExpertWeights.mxfp4(packed, scales)

    x = torch.randn(t_n, hid, device="cuda", dtype=torch.bfloat16, generator=g)
    logits = torch.randn(t_n, e_n, device="cuda", generator=g)
    wg, wd = weights(2 * inter, hid, 120), weights(hid, inter, 120)
    ids, w = ops.moe_route(logits, k)
    got = ops.moe(x, logits, wg, wd, k, gemm="sm90")
    assert got.dtype == torch.bfloat16 and got.shape == (t_n, hid) and got.is_cuda
    x64 = x.double()
    ref = torch.zeros(t_n, hid, dtype=torch.float64, device="cuda")
    bound = torch.zeros_like(ref)
    for e in range(e_n):
        tok, j = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        ge = _decode_torch(torch, ExpertWeights("mxfp4", wg.data[e:e + 1], wg.scales[e:e + 1]))[0]
        de = _decode_torch(torch, ExpertWeights("mxfp4", wd.data[e:e + 1], wd.scales[e:e + 1]))[0]
        wt = w[tok, j].double()[:, None]
        gu = x64[tok] @ ge.T
        gm = x64[tok].abs() @ ge.abs().T
        gg, u = gu[:, :inter], gu[:, inter:]
        s = gg / (1 + torch.exp(-gg))
        h = s * u
        dh = (hid + 2) * U32 * (1.1 * gm[:, :inter] * u.abs() + s.abs() * gm[:, inter:]) + (4 * U32 + UB) * h.abs()
        ym = (h.abs() + dh) @ de.abs().T
        ref.index_add_(0, tok, wt * (h @ de.T))
        bound.index_add_(0, tok, wt * (dh @ de.abs().T + ((inter + 10) * U32 + UB) * ym))
    bound = 2 * bound + UB * ref.abs() + 2.0 ** -126
    err = (got.double() - ref).abs()
    assert bool((err <= bound).all()), float((err / bound).max())
    assert float(err.norm() / ref.norm()) < 2.0 ** -6
