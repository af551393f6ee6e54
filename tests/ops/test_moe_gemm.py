"""kcompiler.ops.moe_gemm_swiglu / moe_gemm_down (std.moe_gemm) on the CPU target against float64
references built from ``dequantize_reference``: bf16, FP8 (per-channel) and MXFP4 expert weights, the
SIMT path and the tensor-core path (the CPU target's ``emulate_mma``, every access bounds-checked), odd
sizes (T = 1, 3, 17; K a multiple of 32, not of 64; I not a multiple of the 16-row tile), experts that
get no token, MXFP4 scales at the edges (0, above 128, NaN). GPU tests (marked ``gpu``) run the
gpt-oss-like shapes on CUDA tensors.

The routing is built by a small numpy routine (moe_util.py's make_routing: sort the assignments by
expert, pad each expert's run to block_m with the sentinel T * top_k), independent of ops/moe.py.

Tolerances: the kernels multiply bf16 operands (x, H, and the weights, whose bf16 dequantisation is
exact for every format: an E2M1 or E4M3 value times a power of two fits bf16's 8 significant bits), so
every product is exact in f32, and sum K of them in f32: the sum's error is at most K 2^-24 sum|x w|
(the recursive-summation bound, any order; the tensor core's internal order is not specified). The
FP8 channel scale and the routing weight are f32 multiplies (2^-24 each). SwiGLU's SiLU is std.math's
(a few ulp of f32) and H is rounded once to bf16 (2^-9 relative); the bounds (moe_util.py's ref_swiglu
and ref_down) add these terms per element, with the sums' error propagated through silu(g) u
(|silu'| <= 1.1).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import moe_gemm as moe_gemm_mod
from kcompiler.ops.moe_types import ExpertWeights, MoERouting, MXActivations

from ..ptxas_util import needs_ptxas, ptxas
from .moe_util import (U, _module, _mxfp4_variant_case, bf16, check, make_routing, random_routing, ref_down,
                       ref_swiglu)
from .moe_util import gemm_weights as weights


@pytest.fixture(params=["simt", "mma"])
def path(request, monkeypatch):
    """The path under test: ops' module replaced by one compiled with bounds checks (and emulate_mma)."""
    mod = _module(request.param == "mma")
    real = moe_gemm_mod._common.stdlib_module  # the others (ops.mx_dequantize's std.mx) as they are
    monkeypatch.setattr(moe_gemm_mod._common, "stdlib_module",
                        lambda name, target: mod if name == "moe_gemm" else real(name, target))
    return request.param


FORMATS = ["bf16", "fp8", "mxfp4"]

#: (T, top_k, E, experts used, H (= K of the gate/up GEMM), I, block_m)
CASES = [(3, 2, 6, 4, 96, 40, 8),   # K = 96: a partial chunk on every path; I = 40: a partial 16-row tile
         (1, 1, 4, 4, 160, 24, 8),  # one token
         (17, 4, 8, 5, 96, 16, 16),  # three experts get nothing
         (17, 4, 4, 4, 32, 40, 32)]  # block_m 32: the tensor-core path loads x on demand (FP8, MXFP4)


@pytest.mark.parametrize("fmt", FORMATS)
def test_swiglu(path, fmt):
    T, top_k, E, used, Hd, I, bm = CASES[0]
    rng = np.random.default_rng(1)
    x = bf16(rng.standard_normal((T, Hd)))
    w = weights(rng, E, 2 * I, Hd, fmt)
    r = random_routing(rng, T, top_k, E, bm, used)
    H = ops.moe_gemm_swiglu(x, w, r, target="cpu")
    assert H.dtype == ml_dtypes.bfloat16 and H.shape == (T * top_k, I)
    want, bound = ref_swiglu(x, w, r)
    check(H, want, bound, f"{fmt} {path}")


@pytest.mark.slow(sample=6)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("fmt, reduce", [("bf16", "atomic"), ("fp8", "separate"), ("mxfp4", "atomic"),
                                         ("mxfp4", "separate")])
def test_down(path, fmt, reduce):
    T, top_k, E, used, Hd, I, bm = CASES[0]
    rng = np.random.default_rng(2)
    K, N = 64 + 32, 40  # I = 96 as K, Hd = 40 rows
    h = bf16(rng.standard_normal((T * top_k, K)))
    w = weights(rng, E, N, K, fmt)
    r = random_routing(rng, T, top_k, E, bm, used)
    Y, bY, out, bout = ref_down(h, w, r)
    got = ops.moe_gemm_down(h, w, r, reduce=reduce, target="cpu")
    if reduce == "atomic":
        assert got.dtype == np.float32 and got.shape == (T, N)
        check(got, out, bout, f"{fmt} {path} atomic")
    else:
        assert got.dtype == np.float32 and got.shape == (T * top_k, N)
        check(got, Y, bY, f"{fmt} {path} separate")


@pytest.mark.slow(sample=2)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", range(1, len(CASES)))
def test_layer_sweep(path, fmt, case):
    """Both GEMMs, chained as a layer runs them, on the other shapes: H from the kernel (bf16) feeds the
    down projection; its reference takes the same H."""
    T, top_k, E, used, Hd, I, bm = CASES[case]
    rng = np.random.default_rng(10 + case)
    x = bf16(rng.standard_normal((T, Hd)))
    w1 = weights(rng, E, 2 * I, Hd, fmt)
    w2 = weights(rng, E, Hd, I, fmt) if I % 32 == 0 or fmt != "mxfp4" else weights(rng, E, Hd, 32 * (I // 32 + 1), fmt)
    r = random_routing(rng, T, top_k, E, bm, used)
    H = ops.moe_gemm_swiglu(x, w1, r, target="cpu")
    want, bound = ref_swiglu(x, w1, r)
    check(H, want, bound, f"{fmt} {path} swiglu")
    K2 = w2.shape[2]
    h = H if K2 == I else bf16(np.concatenate([H.astype(np.float32), np.ones((H.shape[0], K2 - I), np.float32)], 1))
    Y, bY, out, bout = ref_down(h, w2, r)
    check(ops.moe_gemm_down(h, w2, r, target="cpu"), out, bout, f"{fmt} {path} down atomic")
    got = ops.moe_gemm_down(h, w2, r, reduce="separate", out_dtype="bf16", target="cpu")
    check(got, Y, bY + 2.0 ** -8 * np.abs(Y), f"{fmt} {path} down separate bf16")


def test_mxfp4_scale_edges(path):
    """E8M0 scales 0 (2^-127), above 128 (the tensor-core path's second factor), 255 (NaN: the whole
    block's values, so its rows' sums, are NaN) against the reference's decoding."""
    T, top_k, E, Hd, I = 3, 2, 4, 96, 16
    rng = np.random.default_rng(3)
    x = bf16(rng.standard_normal((T, Hd)) * 2.0 ** -10)
    w = weights(rng, E, 2 * I, Hd, "mxfp4")
    s = rng.integers(120, 140, size=np.asarray(w.scales).shape).astype(np.uint8)
    s[:, 0, 0] = 0
    s[:, 3, 1] = 255
    s[:, I + 5, 2] = 255
    w = ExpertWeights.mxfp4(w.data, s)
    r = random_routing(rng, T, top_k, E, 8)
    H = ops.moe_gemm_swiglu(x, w, r, target="cpu")
    want, bound = ref_swiglu(x, w, r)
    assert np.isnan(want[:, 3]).all() and np.isnan(want[:, 5]).all()
    check(H, want, bound, f"mxfp4 {path} edge scales")


@pytest.mark.parametrize("decode", ["mul", "split", pytest.param("shift", marks=pytest.mark.slow(sample=0))])
def test_mxfp4_decode_exact(path, decode):
    """Every E2M1 code (all 16, signed zero and the subnormal 0.5 included) at E8M0 scales 0, 1, 126,
    127, 128 (the largest the first bf16 factor holds alone), 129, 200, 254 (values past bf16's range:
    inf) and 255 (NaN), against kcompiler.numerics.mx's f32 decoding: row n of the down projection's
    weights holds code n % 16 in all 32 elements of its one block, scale number n // 16, and a token
    of ones sums them: 32 times the value, exact in f32 (a power of two times the value), inf (past
    f32's range) or NaN where the reference is."""
    from kcompiler.numerics import mx
    scales = [0, 1, 126, 127, 128, 129, 200, 254, 255]
    N, K = 16 * len(scales), 32
    codes = np.repeat((np.arange(N) % 16).astype(np.uint8)[:, None], K, 1)
    s = np.repeat(np.array(scales, np.uint8), 16)[:, None]
    w = ExpertWeights.mxfp4(mx.pack_fp4(codes)[None], s[None])
    r = make_routing(np.zeros((1, 1), np.int64), np.ones((1, 1), np.float32), 1, 8)
    got = ops.moe_gemm_down(bf16(np.ones((1, K))), w, r, reduce="separate", target="cpu", decode=decode)[0]
    with np.errstate(over="ignore"):
        vals = mx.dequantize(codes.view(ml_dtypes.float4_e2m1fn), s, "f4e2m1")
        want = (np.float32(32) * vals[:, 0]).astype(np.float64)  # f32 sums overflow past 2^128
    assert np.isinf(want).any() and np.isnan(want).any() and (want == 2.0 ** -123).any()  # edges covered
    np.testing.assert_array_equal(np.asarray(got, np.float64), want, err_msg=f"{path} {decode}")


#: Benchmark variants of the tensor-core path (benchmarks/bench_moe_gemm.py --variants): (decode, tuning).
VARIANTS = {"split chk0 pf": ("split", dict(CHK=0, PF=1)), "split": ("split", {}), "mul chk0": ("mul", dict(CHK=0)),
            "split chk0 U4 KW2": ("split", dict(CHK=0, U=4, KW=2)),
            "split chk0 pf U1": ("split", dict(CHK=0, PF=1, U=1)),
            "mul pf MT2": ("mul", dict(PF=1, MT=2))}


def _variant(variant, fn, *args, **kw):
    decode, tuning = VARIANTS[variant]
    return fn(*args, target="cpu", decode=decode, tuning=tuning, **kw)


@pytest.mark.parametrize("variant", ["split chk0 pf"])
def test_mxfp4_variant_swiglu(variant, monkeypatch):
    """The tensor-core path's benchmark variants (DEC = 2's two passes, CHK = 0's unchecked steps and
    clamped rows, PF = 1's loads a step ahead) on the CPU target (emulate_mma, every access
    bounds-checked) against the float64 reference: K = 96 (a partial chunk), I = 40 (a partial
    16-row tile), empty slots, NaN and above-128 scales. The sweep over the other variants and the
    down projection is test_mxfp4_variant_sweep."""
    monkeypatch.setattr(moe_gemm_mod._common, "stdlib_module", lambda name, target: _module(True))
    T, top_k, E, used, Hd, I, bm = CASES[0]
    rng = np.random.default_rng(20)
    x = bf16(rng.standard_normal((T, Hd)))
    w = _mxfp4_variant_case(rng, E, 2 * I, Hd)
    r = random_routing(rng, T, top_k, E, bm, used)
    H = _variant(variant, ops.moe_gemm_swiglu, x, w, r)
    want, bound = ref_swiglu(x, w, r)
    assert np.isnan(want).any()
    check(H, want, bound, f"mxfp4 {variant} swiglu")


@pytest.mark.slow(sample=0)  # a compile a case; test_mxfp4_variant_swiglu runs the combined variant by default
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("case", [0, 3])
def test_mxfp4_variant_sweep(variant, case, monkeypatch):
    """Every variant, both GEMMs, on CASES 0 (block_m 8) and 3 (block_m 32, x loaded on demand)."""
    monkeypatch.setattr(moe_gemm_mod._common, "stdlib_module", lambda name, target: _module(True))
    T, top_k, E, used, Hd, I, bm = CASES[case]
    rng = np.random.default_rng(21 + case)
    x = bf16(rng.standard_normal((T, Hd)))
    w1 = _mxfp4_variant_case(rng, E, 2 * I, Hd)
    r = random_routing(rng, T, top_k, E, bm, used)
    H = _variant(variant, ops.moe_gemm_swiglu, x, w1, r)
    want, bound = ref_swiglu(x, w1, r)
    check(H, want, bound, f"mxfp4 {variant} swiglu")
    K2 = 32 * (I // 32 + 1)
    h = bf16(rng.standard_normal((T * top_k, K2)))
    w2 = _mxfp4_variant_case(rng, E, Hd, K2)
    Y, bY, out, bout = ref_down(h, w2, r)
    check(_variant(variant, ops.moe_gemm_down, h, w2, r, reduce="separate"), Y, bY, f"mxfp4 {variant} down")


def _mx_x(rng, T, Hd):
    """MXFP8 activations whose blocks span scales 2^-20 .. 2^20 (one block NaN), and their float64 values."""
    raw = rng.standard_normal((T, Hd)) * 2.0 ** rng.integers(-20, 21, size=(T, Hd // 32)).repeat(32, 1)
    xq = MXActivations.quantize(raw)
    s = np.asarray(xq.scales).view(np.uint8).copy()
    s[0, -1] = 255
    xq = MXActivations.mxfp8(xq.codes, s)
    return xq, xq.dequantize_reference()


def _mxfp8_case(path, fmt, seed):
    """Both ways into the kernel (ops.moe_gemm.MOE_MXFP8_X_IN_REGISTERS): dequantised first, decoded in
    registers."""
    for registers in (False, True):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(moe_gemm_mod, "MOE_MXFP8_X_IN_REGISTERS", registers)
            _mxfp8_check(path, fmt, seed, registers)


def _mxfp8_check(path, fmt, seed, registers):
    T, top_k, E, used, Hd, I, bm = CASES[0]
    rng = np.random.default_rng(seed)
    xq, xv = _mx_x(rng, T, Hd)
    w = weights(rng, E, 2 * I, Hd, fmt)
    r = random_routing(rng, T, top_k, E, bm, used)
    H = ops.moe_gemm_swiglu(xq, w, r, target="cpu")
    want, bound = ref_swiglu(xv, w, r)
    assert np.isnan(want).any() and not np.isnan(want).all()
    check(H, want, bound, f"{fmt} {path} MXFP8 x{' in registers' if registers else ''}")


@pytest.mark.parametrize("path", ["mma"], indirect=True)
def test_mxfp8_activations(path):
    """MXFP8 x (E4M3 codes, an E8M0 scale per 32, OCP MX v1.0) into the gate/up GEMM, dequantised first
    and decoded in registers, against the float64 reference on the exactly dequantised x: scales over 2^-20 .. 2^20 (the products
    exact in f32 either way), a NaN scale (that token's rows NaN), K = 96 (a partial chunk)."""
    _mxfp8_case(path, "mxfp4", 30)


@pytest.mark.slow(sample=0)  # a compile a case; test_mxfp8_activations runs the tensor-core path by default
@pytest.mark.parametrize("fmt", FORMATS)
def test_mxfp8_activations_sweep(path, fmt):
    _mxfp8_case(path, fmt, 31)


@pytest.mark.parametrize("gemm", ["mma", pytest.param("auto", marks=pytest.mark.slow(sample=0))])
def test_moe_layer_takes_mxfp8_activations(gemm):
    """ops.moe with MXFP8 x gives the bits it gives for x's exact bf16 values (the CPU target: 'auto'
    dequantises x for std.moe's SIMT GEMMs; 'mma' is std.moe_gemm's SIMT path decoding x itself; the
    same f32 operations in the same order either way)."""
    rng = np.random.default_rng(32)
    T, E, Hd, I, top_k = 5, 4, 64, 32, 2
    xq, xv = _mx_x(rng, T, Hd)
    s = np.asarray(xq.scales).view(np.uint8).copy()
    s[0, -1] = 127  # no NaN here: compare bits
    xq = MXActivations.mxfp8(xq.codes, s)
    xv = xq.dequantize_reference()
    logits = rng.standard_normal((T, E)).astype(np.float32)
    wg, wd = weights(rng, E, 2 * I, Hd, "mxfp4"), weights(rng, E, Hd, I, "mxfp4")
    got = ops.moe(xq, logits, wg, wd, top_k, gemm=gemm, target="cpu")
    want = ops.moe(bf16(xv), logits, wg, wd, top_k, gemm=gemm, target="cpu")
    assert got.dtype == ml_dtypes.bfloat16 and np.abs(np.asarray(want, np.float64)).max() > 0
    np.testing.assert_array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))


def test_mxfp8_activations_errors():
    codes = np.zeros((2, 64), ml_dtypes.float8_e4m3fn)
    with pytest.raises(TypeError, match="f8e4m3"):
        MXActivations.mxfp8(codes.view(np.uint8), np.zeros((2, 2), np.uint8))
    with pytest.raises(ValueError, match="multiple of 32"):
        MXActivations.mxfp8(codes, np.zeros((2, 3), np.uint8))
    with pytest.raises(TypeError, match="E8M0"):
        MXActivations.mxfp8(codes, np.zeros((2, 2), np.float32))


def test_atomic_adds_into_given_out():
    rng = np.random.default_rng(4)
    T, top_k, E, K, N = 3, 2, 4, 32, 16
    h = bf16(rng.standard_normal((T * top_k, K)))
    w = weights(rng, E, N, K, "bf16")
    r = random_routing(rng, T, top_k, E, 8)
    base = rng.standard_normal((T, N)).astype(np.float32)
    out = base.copy()
    got = ops.moe_gemm_down(h, w, r, out=out, target="cpu")
    assert got is out
    _, _, want, bound = ref_down(h, w, r)
    check(out, want + base, bound + 4 * U * np.abs(want + base), "atomic into a given out")


def test_plans():
    assert ops.moe_block_m(1, 4, 32) == 8
    assert ops.moe_block_m(64, 4, 32) == 8
    assert ops.moe_block_m(100, 4, 32) == 16
    assert ops.moe_block_m(4096, 4, 32) == 32
    # MXFP4: 8 slots only up to a mean of 4 assignments an expert (ops.MOE_GEMM_FORMAT_TILES)
    assert ops.moe_block_m(32, 4, 32, "mxfp4") == 8
    assert ops.moe_block_m(33, 4, 32, "mxfp4") == 16
    assert ops.moe_block_m(64, 4, 32, "mxfp4") == 16
    assert ops.moe_block_m(64, 4, 32, "bf16") == 8
    t = ops.moe_gemm_tiles(24)
    assert t["BM"] == 24 and t == dict(BM=24, **ops.MOE_GEMM_TILES[32])
    with pytest.raises(ValueError, match="multiple of 8"):
        ops.moe_gemm_tiles(12)


def test_errors():
    rng = np.random.default_rng(5)
    x = bf16(rng.standard_normal((3, 32)))
    w = weights(rng, 4, 32, 32, "bf16")
    r = random_routing(rng, 3, 2, 4, 8)
    with pytest.raises(TypeError, match="x must be a 2-D bf16"):
        ops.moe_gemm_swiglu(x.astype(np.float32), w, r, target="cpu")
    with pytest.raises(ValueError, match="features"):
        ops.moe_gemm_swiglu(bf16(np.zeros((3, 64))), w, r, target="cpu")
    with pytest.raises(ValueError, match="tokens"):
        ops.moe_gemm_swiglu(bf16(np.zeros((4, 32))), w, r, target="cpu")
    with pytest.raises(ValueError, match="experts"):
        ops.moe_gemm_swiglu(x, weights(rng, 5, 32, 32, "bf16"), r, target="cpu")
    with pytest.raises(TypeError, match="ExpertWeights"):
        ops.moe_gemm_swiglu(x, np.zeros((4, 32, 32)), r, target="cpu")
    with pytest.raises(ValueError, match="decode"):
        ops.moe_gemm_swiglu(x, w, r, target="cpu", decode="lut")
    with pytest.raises(ValueError, match="reduce"):
        ops.moe_gemm_down(bf16(np.zeros((6, 16))), w, r, reduce="sum", target="cpu")
    for bad_tuning in ({"PF": 2}, {"XX": 1}, {"CHK": True}, {"U": 5}):
        with pytest.raises(ValueError, match="tuning"):
            ops.moe_gemm_swiglu(x, w, r, target="cpu", tuning=bad_tuning)
    with pytest.raises(ValueError, match=r"h must have shape"):
        ops.moe_gemm_down(bf16(np.zeros((3, 16))), w, r, target="cpu")
    bad = MoERouting(r.topk_ids, r.topk_weights, r.sorted_ids, r.tile_expert, r.num_tiles, 12, 2, 4)
    with pytest.raises(ValueError, match="multiple of 8"):
        ops.moe_gemm_swiglu(x, w, bad, target="cpu")


# --- on the GPU (the lead's H100) --------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("T", [1, 16, 300])
def test_gpu_gpt_oss_shapes(fmt, T):
    """E = 32, top_k = 4, H = 2880, I = 1440 (gpt-oss's hidden, half its intermediate: the references
    are float64 on the host) on CUDA tensors, the tensor-core path, both reductions."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    E, top_k, Hd, I = 32, 4, 2880, 1440
    rng = np.random.default_rng(T)
    bm = ops.moe_block_m(T, top_k, E)
    r = random_routing(rng, T, top_k, E, bm)
    x = bf16(rng.standard_normal((T, Hd)))
    w1 = weights(rng, E, 2 * I, Hd, fmt, 0.05)
    w2 = weights(rng, E, Hd, I, fmt, 0.05)

    def cuda(a):
        if a is None:
            return None
        a = np.asarray(a)
        if a.dtype == ml_dtypes.bfloat16:
            return torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16)
        if a.dtype == ml_dtypes.float8_e4m3fn:
            return torch.from_numpy(a.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        if a.dtype == ml_dtypes.float8_e8m0fnu:
            return torch.from_numpy(a.view(np.uint8)).cuda()
        return torch.from_numpy(a).cuda()

    dw1 = ExpertWeights(w1.format, cuda(w1.data), cuda(w1.scales))
    dw2 = ExpertWeights(w2.format, cuda(w2.data), cuda(w2.scales))
    dr = MoERouting(cuda(r.topk_ids), cuda(r.topk_weights), cuda(r.sorted_ids), cuda(r.tile_expert), cuda(r.num_tiles),
                    r.block_m, r.top_k, r.num_experts)
    H = ops.moe_gemm_swiglu(cuda(x), dw1, dr)
    Hh = H.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    want, bound = ref_swiglu(x, w1, r)
    check(Hh, want, bound, f"{fmt} cuda swiglu")
    Y, bY, out, bout = ref_down(Hh, w2, r)
    check(ops.moe_gemm_down(H, dw2, dr).cpu().numpy(), out, bout, f"{fmt} cuda down atomic")
    check(ops.moe_gemm_down(H, dw2, dr, reduce="separate").cpu().numpy(), Y, bY, f"{fmt} cuda down separate")


@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 64, 300])
def test_gpu_mxfp8_activations_and_variants(T):
    """On CUDA tensors, gpt-oss's H = 2880 (I = 1440), MXFP4 weights: MXFP8 x (ops.mx_quantize on the
    device) gives the bits that its bf16 values (ops.mx_dequantize) give, dequantised first or
    decoded in registers (exact); every benchmark variant (VARIANTS) gives the bits of the default decode with the variant's
    KW (the warps' split of K fixes the order of the f32 sums; the variants otherwise change loads,
    branches and scale factors, not the order) for gate/up and the separate down projection."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    E, top_k, Hd, I = 32, 4, 2880, 1440
    rng = np.random.default_rng(40 + T)
    bm = ops.moe_block_m(T, top_k, E)
    r = random_routing(rng, T, top_k, E, bm)
    dr = MoERouting(*(torch.from_numpy(np.asarray(a)).cuda() for a in (r.topk_ids, r.topk_weights, r.sorted_ids,
                                                                       r.tile_expert, r.num_tiles)),
                    r.block_m, r.top_k, r.num_experts)

    def mx(w):
        s = rng.integers(118, 132, size=np.asarray(w.scales).shape).astype(np.uint8)  # some above 128
        return ExpertWeights.mxfp4(torch.from_numpy(np.asarray(w.data)).cuda(), torch.from_numpy(s).cuda())

    w1 = mx(weights(rng, E, 2 * I, Hd, "mxfp4", 0.05))
    w2 = mx(weights(rng, E, Hd, I, "mxfp4", 0.05))
    x = torch.from_numpy(rng.standard_normal((T, Hd)).astype(np.float32)).cuda()
    codes, scales = ops.mx_quantize(x, "f8e4m3")
    xb = ops.mx_dequantize(codes, scales, "bf16")
    H = ops.moe_gemm_swiglu(xb, w1, dr)
    for registers in (False, True):  # ops.moe_gemm.MOE_MXFP8_X_IN_REGISTERS
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(moe_gemm_mod, "MOE_MXFP8_X_IN_REGISTERS", registers)
            got = ops.moe_gemm_swiglu(MXActivations.mxfp8(codes, scales), w1, dr)
        assert torch.equal(got.view(torch.int16), H.view(torch.int16)), registers
    for name, (decode, tuning) in VARIANTS.items():
        kw = {k: v for k, v in tuning.items() if k == "KW"}
        Hd_ = ops.moe_gemm_swiglu(xb, w1, dr, tuning=kw)
        Hv = ops.moe_gemm_swiglu(xb, w1, dr, decode=decode, tuning=tuning)
        assert torch.equal(Hv.view(torch.int16), Hd_.view(torch.int16)), name
        Yd = ops.moe_gemm_down(H, w2, dr, reduce="separate", tuning=kw)
        Yv = ops.moe_gemm_down(H, w2, dr, reduce="separate", decode=decode, tuning=tuning)
        assert torch.equal(Yv, Yd), name


@needs_ptxas
@pytest.mark.parametrize("kernel, W, WS, BM, extra", [
    ("moe_gemm1", "u8", "u8", 8, {}), ("moe_gemm1", "f8e4m3", "f32", 32, {}), ("moe_gemm2", "bf16", "f32", 16, {}),
    # the heaviest benchmark variant: MXFP8 x, DEC 2's two passes, unchecked steps, loads a step ahead
    # (-m slow: CI's time; ptxas 13.0 gives it 254 registers, no spills)
    pytest.param("moe_gemm1", "u8", "u8", 8, dict(X="f8e4m3", DEC=2, CHK=0, PF=1), marks=pytest.mark.slow(sample=0))],
    ids=["gemm1-mxfp4", "gemm1-fp8", "gemm2-bf16", "gemm1-mxfp4-mxfp8x-split-chk0-pf"])
def test_ptx_assembles(kernel, W, WS, BM, extra):
    """sm_90a PTX of the tensor-core path: mma.sync and 16-byte weight loads present, the decode on
    bf16x2 words (MXFP4: the scale multiplies; MXFP8 x: prmt), no calls, and ptxas accepts it without
    spilling at the planned tiles."""
    from kcompiler import pipeline

    tiles = ops.moe_gemm_tiles(BM)
    ptx = pipeline.emit_file(stdlib_dir() / "moe_gemm.kc", "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=dict(W=W, WS=WS, MMA=True, **tiles, **extra))
    if "X" in extra:
        assert "prmt.b32" in ptx
    assert "mma.sync.aligned.m16n8k16" in ptx and "ld.global.v4" in ptx
    assert "call" not in ptx and ".func" not in ptx
    if W == "u8":
        assert "mul.bf16x2" in ptx or "fma.rn.bf16x2" in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


@needs_ptxas
@pytest.mark.parametrize("kernel, gemm", [("moe_gemm1", "gate_up"), ("moe_gemm2", "down")])
def test_mxfp4_block_m16_tiles_fill_the_sm(kernel, gemm):
    """The planned MXFP4 tiles at block_m 16 (ops.MOE_GEMM_FORMAT_TILES: gate/up in blocks of 2 warps,
    the down projection with launch bounds of 4 blocks) assemble for sm_90a without spills in at most
    16 warps' worth of registers an SM (65536 / 512 = 128 a thread): the down kernel took 130 without
    the bounds, one block an SM fewer."""
    import re

    from kcompiler import pipeline

    tiles = ops.moe_gemm_tiles(16, "mxfp4", gemm)
    assert tiles.get("NTD") == 1 and (tiles["KW"] == 2 if gemm == "gate_up" else tiles["LB"] == 4)
    dec = moe_gemm_mod.MOE_MXFP4_DECODES[moe_gemm_mod.MOE_MXFP4_DECODE]
    ptx = pipeline.emit_file(stdlib_dir() / "moe_gemm.kc", "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=dict(W="u8", WS="u8", MMA=True, DEC=dec, **tiles))
    log = ptxas(ptx, verbose=True)
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert "0 bytes spill stores" in log and regs <= 128, log
