"""The row-wise fused epilogues of ops.matmul (kcompiler/ops/matmul_fused.py, std.epilogue's FUSE):
gated activations of a (K, 2 N) gate-and-up b (silu_and_mul, gelu_and_mul, gelu_tanh_and_mul) and
RMSNorm of the output rows (with a residual added, and written back), against numpy in float64 on
fresh random inputs of odd shapes (M 1, 7, 130; N not a multiple of the tile; K odd multiples of 8),
bf16 and f16 operands.

On the CPU target: ops.matmul (the SIMT path), std.matmul's tensor-core path under emulate_mma
(every access bounds checked), std.matmul_sm90 under emulate_wgmma; the sm_90a PTX of both kernels
assembled by ptxas; the errors. On an H100 (marked gpu): ops.matmul on torch tensors, the Hopper path
(K-major b) and the mma.sync path (row-major b, or tiles given).

Tolerances: the product's f32 accumulation error e = 4 K u32 (|a| @ |b|) (tests/ops/test_matmul.py);
gated: act(g) u carries |act'(g)| e_g |u| + |act(g)| e_u (|act'| < 1.2) plus a few f32 roundings (8
u32) and the output's rounding; RMSNorm: h's error e (plus one ulp of the residual's type where h is
rounded to it, which a different f32 sum may round the other way) carried through h / rms(h) as e /
rms + |h| / rms times the row's relative error of rms (at most sum |h| e / sum h^2), then 16 u32 of
f32 work and the output's rounding.
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops, pipeline
from kcompiler.frontend.program import stdlib_dir
from kcompiler.ops import matmul_sm90

from ..ptxas_util import needs_ptxas, ptxas
from ..draws import fresh_rng

RNG = fresh_rng()
U32 = 2.0 ** -24
DT = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}
EPS = 1e-5


def _u(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).eps) / 2


def _silu(x):
    return x / (1 + np.exp(-x))


def _gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


ACTS = {"silu_and_mul": _silu, "gelu_and_mul": _gelu, "gelu_tanh_and_mul": _gelu_tanh}


def _check(c, ref, tol):
    got = c.astype(np.float64)
    assert np.isfinite(got).all(), "an element left unwritten (NaN poison) or not finite"
    err = np.abs(got - ref)
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), f"C{list(worst)} = {got[worst]}, want {ref[worst]} ({err[worst]:.3g} > {tol[worst]:.3g})"


def check_gated(c, a, w, name):
    """c against act(a @ Wg^T) * (a @ Wu^T), w the (2 N, K) weight (module docstring's tolerance)."""
    N, K = w.shape[0] // 2, a.shape[1]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    p, e = a64 @ w64.T, 4 * K * U32 * (np.abs(a64) @ np.abs(w64).T)
    g, u, eg, eu = p[:, :N], p[:, N:], e[:, :N], e[:, N:]
    act = ACTS[name](g)
    ref = act * u
    tol = 1.2 * eg * np.abs(u) + np.abs(act) * eu + (8 * U32 + _u(c.dtype)) * (np.abs(ref) + np.abs(g * u)) + 1e-30
    _check(c, ref, tol)


def norm_reference(a, w, weight, residual):
    """(reference, tolerance of the result, h, tolerance of h) of RMSNorm over the rows of a @ w^T, with
    the residual (of its type) added first where given (module docstring). h's tolerance is the f32
    accumulation's error bound plus one ulp of h's type: where p + r nearly cancels, the product's error
    spans several ulps of the small h (seen on the CPU target and the H100)."""
    K = a.shape[1]
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    p, e = a64 @ w64.T, 4 * K * U32 * (np.abs(a64) @ np.abs(w64).T)
    h = p
    if residual is not None:
        h = (p + residual.astype(np.float64)).astype(residual.dtype).astype(np.float64)
        # one ulp of h's type (subnormals: the smallest step)
        ulp = np.maximum(2 * _u(residual.dtype) * np.abs(h), float(ml_dtypes.finfo(residual.dtype).smallest_subnormal))
        e = e + ulp
    rms = np.sqrt((h * h).mean(1, keepdims=True) + EPS)
    wt = np.abs(weight.astype(np.float64))
    rel = (np.abs(h) * e).sum(1, keepdims=True) / (h * h).sum(1, keepdims=True).clip(1e-300)
    ref = h / rms * weight.astype(np.float64)
    tol = wt * (e / rms + np.abs(h) / rms * rel) + 16 * U32 * wt * np.abs(h) / rms
    return ref, tol, h, e


# --- ops.matmul on the CPU target (the SIMT path) ----------------------------------------------------------

GATED_CASES = [  # (name, M, N, K, dtype, b K-major)
    ("silu_and_mul", 1, 21, 40, "bf16", True),
    ("gelu_and_mul", 7, 37, 24, "f16", False),
    ("gelu_tanh_and_mul", 130, 45, 72, "bf16", True),
]


@pytest.mark.parametrize("name, M, N, K, dt, kmajor", GATED_CASES)
def test_gated_cpu(name, M, N, K, dt, kmajor):
    a = RNG.standard_normal((M, K)).astype(DT[dt])
    w = RNG.standard_normal((2 * N, K)).astype(DT[dt])
    b = w.T if kmajor else np.ascontiguousarray(w.T)
    c = ops.matmul(a, b, epilogue=name, out_dtype=np.float32, target="cpu")
    assert c.shape == (M, N)
    check_gated(c, a, w, name)
    c16 = ops.matmul(a, b, epilogue=ops.Epilogue(name), target="cpu")  # rounded once into a's dtype
    assert c16.dtype == a.dtype
    check_gated(c16, a, w, name)


NORM_CASES = [  # (M, N, K, dtype, residual: None / "read" / "write", out dtype)
    (1, 45, 40, "bf16", None, "f32"),
    (7, 100, 24, "f16", "read", "f16"),
    (130, 200, 56, "bf16", "write", "bf16"),
]


@pytest.mark.parametrize("M, N, K, dt, res, out", NORM_CASES)
def test_rms_norm_cpu(M, N, K, dt, res, out):
    a = RNG.standard_normal((M, K)).astype(DT[dt])
    w = RNG.standard_normal((N, K)).astype(DT[dt])
    weight = RNG.uniform(0.5, 1.5, N).astype(np.float32)
    r = RNG.standard_normal((M, N)).astype(DT[dt]) if res else None
    r0 = None if r is None else r.copy()
    ep = ops.rms_norm_epilogue(weight, EPS, r, write_residual=res == "write")
    assert ep.fn == {None: "rms_norm", "read": "add_rms_norm", "write": "fused_add_rms_norm"}[res]
    c = ops.matmul(a, w.T, epilogue=ep, out_dtype=DT[out], target="cpu")
    ref, tol, h, h_tol = norm_reference(a, w, weight, r0)
    _check(c, ref, tol + _u(c.dtype) * np.abs(ref))
    if res == "write":  # the rounded sum, within the f32 sum's error and one ulp
        _check(r, h, h_tol)
    elif r is not None:
        np.testing.assert_array_equal(r.view(np.uint16), r0.view(np.uint16))  # read, not written


def test_fused_misuse():
    a = np.ones((4, 16), np.float32)
    with pytest.raises(ValueError, match="b has 7 columns, an odd number"):
        ops.matmul(a, np.ones((16, 7), np.float32), epilogue="silu_and_mul", target="cpu")
    with pytest.raises(ValueError, match=r"N = 300 exceeds the widest tile \(BN = 256\)"):
        ops.matmul(a, np.ones((16, 300), np.float32), epilogue=ops.rms_norm_epilogue(np.ones(300, np.float32)),
                   target="cpu")
    with pytest.raises(ValueError, match="N = 100 exceeds the tile's BN = 64"):
        ops.matmul(a, np.ones((16, 100), np.float32), epilogue=ops.rms_norm_epilogue(np.ones(100, np.float32)),
                   tiles=dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2), target="cpu")
    with pytest.raises(ValueError, match=r"reads x, an array of shape \(6,\)"):
        ops.matmul(a, np.ones((16, 6), np.float32), epilogue="rms_norm", target="cpu")
    with pytest.raises(ValueError, match="takes no block epilogue"):
        ops.matmul(a, np.ones((16, 64), np.float32), epilogue=ops.Epilogue("silu_and_mul", block="to_mxfp8_e4m3"),
                   target="cpu")
    r = np.ones((4, 6), np.float32)
    with pytest.raises(ValueError, match="must not be one array"):
        ops.matmul(a, np.ones((16, 6), np.float32), out=r,
                   epilogue=ops.rms_norm_epilogue(np.ones(6, np.float32), residual=r, write_residual=True),
                   target="cpu")


# --- std.matmul's tensor-core path under emulate_mma ------------------------------------------------------

@pytest.fixture(scope="module")
def emulated_mma():
    return kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu", target_options={"emulate_mma": True},
                           check_bounds=True)


def _launch_mma(mod, a, b, c, kmajor, tiles, NL, x, y, s, mfma=False, **params):
    """kernel matmul_epilogue of std.matmul on the tensor-core path (warps of 32), or with ``mfma`` on
    AMD's MFMA path (wavefronts of 64, the LDS of matmul_shared_bytes(mfma=True))."""
    M, K = a.shape
    N = c.shape[1]
    threads = tiles["BM"] // tiles["WM"] * (tiles["BN"] // tiles["WN"]) * (64 if mfma else 32)
    grid = (-(-NL // tiles["BN"]), -(-M // tiles["BM"]))
    aligned = K % 8 == 0 and N % 8 == 0
    mod.matmul_epilogue[grid, threads](a, b, c, M, N, K, K, b.shape[1] if not kmajor else K, N, x, y, np.float32(s),
                                       T=params.pop("T"), B_KMAJOR=kmajor, ALIGNED=aligned,
                                       shared=ops.matmul_shared_bytes(tiles, 2, kmajor, mfma), **params, **tiles)


def _gated_emulated(mod, tiles, kmajor, M, N, K, name, mfma=False):
    """kernel matmul_epilogue's gated form (FUSE 1, ``name``'s gate) on fresh bf16 a (M, K) and weight
    (2 N, K), b K-major or not, f32 out: checked against float64 by check_gated."""
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((2 * N, K)).astype(ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, np.float32)
    un = np.zeros(1, np.float32)
    _launch_mma(mod, a, w if kmajor else np.ascontiguousarray(w.T), c, kmajor, tiles, 16 * -(-N // 8), un, un, 1.0,
                mfma=mfma, T="bf16", OUT="f32", FUSE=1, GLU=f"epilogue.{name}")
    check_gated(c, a, w, name)


def _rms_norm_emulated(mod, tiles, fuse, kmajor, M, N, K, mfma=False):
    """kernel matmul_epilogue's RMSNorm form (FUSE 2 to 4) on fresh bf16 inputs and residual, bf16 out:
    (c, the residual after the launch, before it, and norm_reference's reference, tolerance, h and h's
    tolerance)."""
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    weight = RNG.uniform(0.5, 1.5, N).astype(np.float32)
    r = RNG.standard_normal((M, N)).astype(ml_dtypes.bfloat16)
    r0 = r.copy()
    c = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    _launch_mma(mod, a, w if kmajor else np.ascontiguousarray(w.T), c, kmajor, tiles, N, weight, r, EPS, mfma=mfma,
                T="bf16", OUT="bf16", EPI="epilogue.identity", FUSE=fuse)
    return (c, r, r0) + norm_reference(a, w, weight, r0 if fuse >= 3 else None)


@pytest.mark.parametrize("kmajor, M, N, K", [(True, 37, 21, 40), (False, 33, 48, 72)], ids=["nk-odd", "kn-aligned"])
def test_gated_mma_emulated(emulated_mma, kmajor, M, N, K):
    _gated_emulated(emulated_mma, dict(BM=32, BN=64, BK=16, WM=16, WN=32, STAGES=2), kmajor, M, N, K,
                    "gelu_and_mul")


@pytest.mark.parametrize("fuse, kmajor, M, N, K", [(2, True, 37, 45, 40), (4, False, 70, 64, 24)],
                         ids=["rms-nk-odd", "fused-add-kn"])
def test_rms_norm_mma_emulated(emulated_mma, fuse, kmajor, M, N, K):
    """BN = 64 over 4 warps of 16 columns: a row's squares summed across the warps in shared memory."""
    c, r, r0, ref, tol, h, h_tol = _rms_norm_emulated(emulated_mma, dict(BM=32, BN=64, BK=16, WM=16, WN=16, STAGES=2),
                                                      fuse, kmajor, M, N, K)
    _check(c, ref, tol + _u(c.dtype) * np.abs(ref))
    if fuse == 4:
        _check(r, h, h_tol)


# --- AMD's MFMA path (std.matmul_amd) under emulate_mfma -----------------------------------------------------

_MFMA_MODULES: dict = {}


def _mfma_module(chip):
    if chip not in _MFMA_MODULES:
        _MFMA_MODULES[chip] = kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu",
                                              target_options={"emulate_mfma": chip}, check_bounds=True)
    return _MFMA_MODULES[chip]


#: (chip, tiles): 32x32 MFMA tiles (MI 32: 2 wavefronts across N) and 16x16 ones (MI 16, 4 across N)
MFMA_TILES = [("gfx942", dict(BM=32, BN=64, BK=32, WM=32, WN=32, STAGES=2)),
              ("gfx942", dict(BM=32, BN=64, BK=32, WM=16, WN=16, STAGES=2)),
              ("gfx950", dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2))]


@pytest.mark.parametrize("tiles, kmajor, M, N, K, name", [
    (0, True, 37, 21, 40, "gelu_and_mul"), (1, False, 33, 48, 72, "silu_and_mul"),
    (2, True, 70, 45, 24, "gelu_tanh_and_mul")], ids=["mi32-nk-odd", "mi16-kn", "gfx950-nk"])
def test_gated_mfma_emulated(tiles, kmajor, M, N, K, name):
    """The gate and up products of an output column sit 8 lanes apart in an MFMA tile (B's logical
    columns in groups of 8, as std.matmul's): their xor shuffle, N not a multiple of 8 or of the tile."""
    chip, t = MFMA_TILES[tiles]
    _gated_emulated(_mfma_module(chip), t, kmajor, M, N, K, name, mfma=True)


@pytest.mark.parametrize("tiles, fuse, kmajor, M, N, K", [
    (0, 2, True, 37, 45, 40), (1, 4, False, 70, 64, 24), (2, 3, True, 9, 50, 72)],
    ids=["mi32-rms-nk", "mi16-fused-add-kn", "gfx950-add"])
def test_rms_norm_mfma_emulated(tiles, fuse, kmajor, M, N, K):
    """A row's squares summed over the MI lanes of its MFMA tiles by shuffles, then across the BN / WN
    wavefronts in LDS."""
    chip, t = MFMA_TILES[tiles]
    c, r, r0, ref, tol, h, h_tol = _rms_norm_emulated(_mfma_module(chip), t, fuse, kmajor, M, N, K, mfma=True)
    _check(c, ref, tol + _u(c.dtype) * np.abs(ref))
    if fuse == 4:
        _check(r, h, h_tol)
    else:
        assert np.array_equal(r.view(np.uint16), r0.view(np.uint16))


def test_fused_ops_take_the_mfma_path(monkeypatch):
    """ops.matmul's fused epilogues where std.matmul is built for MFMA (the emulated gfx942 module standing
    in for a HIP device's): the host's wavefronts of 64, MFMA LDS size and RMSNorm tiles, both
    epilogues right (they raised ValueError before the MFMA path had them)."""
    from kcompiler.ops import _common
    real = _common.stdlib_module
    mod = _mfma_module("gfx942")
    monkeypatch.setattr(_common, "stdlib_module", lambda name, target: mod if name == "matmul" else real(name, target))
    M, N, K = 45, 200, 40
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((2 * N, K)).astype(ml_dtypes.bfloat16)
    check_gated(ops.matmul(a, np.ascontiguousarray(w.T), epilogue="silu_and_mul", out_dtype="f32"), a, w, "silu_and_mul")
    weight = RNG.uniform(0.5, 1.5, N).astype(np.float32)
    c = ops.matmul(a, w[:N].T, epilogue=ops.rms_norm_epilogue(weight, EPS), out_dtype="f32")
    ref, tol, _, _ = norm_reference(a, w[:N], weight, None)
    _check(c, ref, tol + U32 * np.abs(ref))


@pytest.mark.parametrize("params", [
    dict(FUSE=1, B_KMAJOR=True, OUT="bf16", BM=64, BN=64, BK=32, WM=32, WN=32),
    dict(FUSE=4, B_KMAJOR=False, OUT="bf16", Y="bf16", BM=32, BN=256, BK=32, WM=32, WN=64)], ids=["gated", "norm"])
def test_fused_mfma_builds_for_gfx942(params):
    """The kernels ops.matmul launches for the fused epilogues on gfx942 (its tiles: matmul_tiles' for
    the gated product, the widest RMSNorm tile) compile with LLVM's AMDGPU backend to MFMA and
    cross-lane moves without scratch (AMDGPUUsage: .private_segment_fixed_size, .vgpr_spill_count).
    Checked against the backend only: no AMD GPU ran them."""
    asm = pipeline.emit_file(stdlib_dir() / "matmul.kc", "asm", target="amdgcn", arch="gfx942", kernel="matmul_epilogue",
                             comptime=dict(T="bf16", ALIGNED=True, STAGES=2, **params))
    assert "v_mfma_f32_32x32x8" in asm
    assert ".private_segment_fixed_size: 0" in asm and ".vgpr_spill_count: 0" in asm
    # the gate's partner 8 lanes over / the row sums across lanes: DPP or ds_swizzle / ds_bpermute
    assert any(op in asm for op in ("ds_bpermute_b32", "ds_swizzle_b32", "_dpp", "v_permlane"))


# --- std.matmul_sm90 under emulate_wgmma --------------------------------------------------------------------

@pytest.fixture(scope="module")
def emulated_sm90():
    opts = {"emulate_wgmma": True}
    return kc.compile_file(stdlib_dir() / "matmul_sm90.kc", target="cpu", target_options=opts)


@pytest.mark.parametrize("config, M, N, K, split", [("64x64", 70, 40, 72, 1), ("128x128", 130, 45, 40, 2)])
def test_gated_sm90_emulated(emulated_sm90, config, M, N, K, split):
    """Two TMA boxes of B a stage (a 3-D map of the weight as (2, N, K), zero-filled past N in each half),
    persistent tiles over 3 blocks, split-K's fix-up applying the gate to the sum."""
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((2 * N, K)).astype(ml_dtypes.bfloat16)
    c = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(emulated_sm90, a, w, c, config=matmul_sm90.CONFIGS[config], sms=3, split_k=split,
                    epilogue=("epilogue.identity", c.reshape(-1), c.reshape(-1), 1.0),
                    fuse=(1, "epilogue.silu_and_mul"))
    check_gated(c, a, w, "silu_and_mul")


def test_rms_norm_sm90_emulated(emulated_sm90):
    M, N, K = 70, 45, 72
    a = RNG.standard_normal((M, K)).astype(np.float16)
    w = RNG.standard_normal((N, K)).astype(np.float16)
    weight = RNG.uniform(0.5, 1.5, N).astype(np.float32)
    r = RNG.standard_normal((M, N)).astype(np.float16)
    r0 = r.copy()
    c = np.full((M, N), np.nan, np.float16)
    matmul_sm90.run(emulated_sm90, a, w, c, config=matmul_sm90.CONFIGS["64x64"], sms=2,
                    epilogue=("epilogue.identity", weight, r.reshape(-1), EPS), fuse=(4, "epilogue.silu_and_mul"))
    ref, tol, h, h_tol = norm_reference(a, w, weight, r0)
    _check(c, ref, tol + _u(c.dtype) * np.abs(ref))
    _check(r, h, h_tol)


@needs_ptxas
@pytest.mark.slow(sample=2)  # two of the four by default (10-20 s each on CI's 2 cores); -m slow: all
@pytest.mark.parametrize("kernel_file, kernel, params", [
    ("matmul.kc", "matmul_epilogue", dict(T="bf16", OUT="bf16", ALIGNED=True, B_KMAJOR=True, FUSE=1)),
    ("matmul.kc", "matmul_epilogue", dict(T="bf16", OUT="bf16", ALIGNED=True, Y="bf16", FUSE=4)),
    ("matmul_sm90.kc", "matmul_sm90_epilogue", dict(T="bf16", OUT="bf16", FUSE=1, GLU="epilogue.gelu_and_mul")),
    ("matmul_sm90.kc", "matmul_sm90_epilogue", dict(T="bf16", OUT="bf16", Y="bf16", BN=128, CONSUMERS=1, FUSE=4)),
], ids=["mma-gated", "mma-norm", "wgmma-gated", "wgmma-norm"])
def test_fused_ptx_assembles(kernel_file, kernel, params):
    """sm_90a: the fused epilogues inlined (no calls), without spills."""
    ptx = pipeline.emit_file(stdlib_dir() / kernel_file, "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=params)
    assert "call" not in ptx and ".func" not in ptx
    if params["FUSE"] == 4:
        assert "shfl.sync.bfly" in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


# --- on the GPU ---------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("M", [1, 7, 130, 1000])
@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_gated_gpu(M, layout):
    """K-major b (w.T) takes the Hopper path on an H100, row-major b the mma.sync path."""
    import torch
    N, K = 1000, 264
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2 * N, K, device="cuda", dtype=torch.bfloat16)
    b = w.T if layout == "nk" else w.T.contiguous()
    for name in ACTS:
        c = ops.matmul(a, b, epilogue=name, out_dtype=torch.float32)
        torch.cuda.synchronize()
        check_gated(c.cpu().numpy(), a.float().cpu().numpy(), w.float().cpu().numpy(), name)


@pytest.mark.gpu
@pytest.mark.parametrize("M, N", [(1, 64), (130, 100), (1000, 256)])
@pytest.mark.parametrize("mma", [False, True], ids=["auto", "mma"])
def test_rms_norm_gpu(M, N, mma):
    import torch
    K = 264
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(N, device="cuda", dtype=torch.float32) + 0.5
    r = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    r0 = r.clone()
    tiles = dict(BM=64, BN=256, BK=32, WM=32, WN=64, STAGES=3) if mma else None
    c = ops.matmul(a, w.T, epilogue=ops.rms_norm_epilogue(weight, EPS, r, write_residual=True), tiles=tiles)
    torch.cuda.synchronize()
    ref, tol, h, h_tol = norm_reference(a.float().cpu().numpy().astype(ml_dtypes.bfloat16),
                                      w.float().cpu().numpy().astype(ml_dtypes.bfloat16), weight.cpu().numpy(),
                                      r0.float().cpu().numpy().astype(ml_dtypes.bfloat16))
    got = c.float().cpu().numpy()
    _check(got, ref, tol + 2.0 ** -8 * np.abs(ref))
    _check(r.double().cpu().numpy(), h, h_tol)  # the written residual h = bf16(a @ w^T + r)
