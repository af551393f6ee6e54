"""std.matmul (stdlib/matmul.kc) and kcompiler.ops.matmul against numpy in float64, on fresh random
inputs of odd and even shapes (1 x 1 x 1, 17 x 33 x 65, 128 x 96 x 200, ...), on every target: on
CUDA (marked gpu) f16/bf16 take the tensor-core path (cp.async, ldmatrix, mma.sync) and f32 the SIMT
one; on the CPU target ops.matmul takes the SIMT path, and the tensor-core path runs on the CPU
target's emulation of NVIDIA's warp-matrix instructions (``emulate_mma``; test_warp_matrix.py checks
each instruction), with its deferred cp.async, so that a missing wait or a stage overwritten too
early shows as wrong results here too.

Tolerance: the reference is the float64 product of the inputs as given (already rounded to their
dtype), so the input format's rounding does not enter; what does is the f32 accumulation of K
products, at most about K * u32 * (|A| @ |B|) for any order of summation (u32 = 2^-24; the products
of f16/bf16 values are exact in f32; the tensor cores add with truncation, hence a factor 4), and
the single rounding of the result into the output dtype, u_out * |A @ B|.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops
from kcompiler.frontend.program import stdlib_dir

from ..draws import fresh_rng

RNG = fresh_rng()
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
SHAPES = [(1, 1, 1), (17, 33, 65), (128, 96, 200)]


def unit_roundoff(dtype) -> float:
    return float(ml_dtypes.finfo(dtype).eps) / 2


def check_product(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """``c`` equals a @ b within the bound of the module docstring."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64
    K = a.shape[1]
    tol = 4 * K * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)) + unit_roundoff(c.dtype) * np.abs(ref) + 1e-30
    err = np.abs(c.astype(np.float64) - ref)
    assert np.isfinite(c).all(), "non-finite results"
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), \
        f"C{list(worst)} = {c[worst]}, want {ref[worst]} (error {err[worst]:.3g} > {tol[worst]:.3g})"


def inputs(M: int, N: int, K: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    return (RNG.standard_normal((M, K)).astype(DTYPES[dtype]), RNG.standard_normal((K, N)).astype(DTYPES[dtype]))


# --- ops.matmul ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_ops_matmul(target, shape, dtype):
    a, b = inputs(*shape, dtype)
    c = ops.matmul(a, b, out_dtype=np.float32, target=target)
    assert c.shape == (shape[0], shape[1]) and c.dtype == np.float32
    check_product(c, a, b)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_ops_matmul_transposed_b_and_narrow_output(target, dtype):
    """b = w.T of a contiguous (N, K) weight is read in place (B_KMAJOR); the result is rounded once
    into a's dtype, the default; ``out`` receives it."""
    M, N, K = 70, 40, 56
    a = RNG.standard_normal((M, K)).astype(DTYPES[dtype])
    w = RNG.standard_normal((N, K)).astype(DTYPES[dtype])
    c = ops.matmul(a, w.T, target=target)
    assert c.dtype == DTYPES[dtype]
    check_product(c, a, w.T)
    out = np.full((M, N), np.nan, np.float32)
    assert ops.matmul(a, w.T, out, target=target) is out
    check_product(out, a, w.T)


def test_ops_matmul_empty_and_k_zero(target):
    a, b = np.ones((3, 0), np.float32), np.ones((0, 5), np.float32)
    np.testing.assert_array_equal(ops.matmul(a, b, target=target), np.zeros((3, 5), np.float32))
    assert ops.matmul(np.ones((0, 4), np.float32), np.ones((4, 5), np.float32), target=target).shape == (0, 5)


def test_ops_matmul_misuse():
    a = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="a and b must have one dtype"):
        ops.matmul(a, np.ones((8, 2), np.float16))
    with pytest.raises(TypeError, match="f32, f16 or bf16"):
        ops.matmul(np.ones((4, 8), np.int32), np.ones((8, 2), np.int32))
    with pytest.raises(ValueError, match="inner sizes differ"):
        ops.matmul(a, np.ones((7, 2), np.float32))
    with pytest.raises(ValueError, match="must be 2-D"):
        ops.matmul(np.ones(8, np.float32), np.ones((8, 2), np.float32))
    with pytest.raises(ValueError, match=r"contiguous \(4, 2\) array"):
        ops.matmul(a, np.ones((8, 2), np.float32), np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match="out_dtype"):
        ops.matmul(a, np.ones((8, 2), np.float32), out_dtype=np.float64)


# --- the tensor-core path (CPU: emulated) ------------------------------------------------------------

#: (T, OUT, tiles BM, BN, BK, WM, WN, STAGES, B_KMAJOR): small tiles, several warps, 2 to 4 stages.
CONFIGS = [
    ("bf16", "f32", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=3), False),
    ("f16", "f16", dict(BM=64, BN=32, BK=16, WM=32, WN=16, STAGES=2), True),
    ("bf16", "bf16", dict(BM=64, BN=64, BK=64, WM=32, WN=32, STAGES=4), False),
]


@pytest.fixture(scope="module")
def matmul_modules():
    cache: dict[str, object] = {}

    def get(target: str):
        if target not in cache:
            # on the CPU, every global access checked as a GPU would fault on it: in bounds, and aligned
            # (16 bytes for a cp.async of 16)
            opts = dict(target_options={"emulate_mma": True}, check_bounds=True) if target == "cpu" else {}
            cache[target] = kc.compile_file(stdlib_dir() / "matmul.kc", target=target, **opts)
        return cache[target]
    return get


@pytest.mark.parametrize("shape", SHAPES + [(64, 80, 48)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("cfg", range(len(CONFIGS)))
def test_tensor_core_path(target, matmul_modules, cfg, shape):
    T, OUT, tiles, b_kmajor = CONFIGS[cfg]
    M, N, K = shape
    a, b = inputs(M, N, K, T)
    bb = np.ascontiguousarray(b.T) if b_kmajor else b
    c = np.full((M, N), np.nan, DTYPES[OUT])
    aligned = K % 8 == 0 and N % 8 == 0
    threads = tiles["BM"] // tiles["WM"] * (tiles["BN"] // tiles["WN"]) * 32
    grid = (-(-N // tiles["BN"]), -(-M // tiles["BM"]))
    mod = matmul_modules(target)
    mod.matmul[grid, threads](a, bb, c, M, N, K, K, K if b_kmajor else N, N, T=T, OUT=OUT, B_KMAJOR=b_kmajor,
                              ALIGNED=aligned, shared=ops.matmul_shared_bytes(tiles, 2, b_kmajor), **tiles)
    check_product(c, a, b)


def test_tiles_that_do_not_fit_are_a_located_error():
    from kcompiler.diagnostics import CompileError

    mod = kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu", target_options={"emulate_mma": True})
    a = np.zeros((8, 8), ml_dtypes.bfloat16)
    with pytest.raises(CompileError, match="WM, WN and BK must be multiples of 16"):
        mod.matmul[1, 32](a, a, np.zeros((8, 8), np.float32), 8, 8, 8, 8, 8, 8, T="bf16", BM=8, BN=8, WM=8, WN=8)
