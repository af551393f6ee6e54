"""ops.scaled_matmul with numpy FP8 arrays (ml_dtypes), on the CPU target's emulation of the Hopper
kernel (no torch), against numpy in float64: the scaled product of the FP8 values, torch._scaled_mm's
contract (f32 accumulation, per-tensor or per-row scales, one rounding into the result's dtype)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops

from ..draws import fresh_rng

_BITS = {np.dtype(np.float32): 24, np.dtype(np.float16): 11, np.dtype(ml_dtypes.bfloat16): 8}


def _operands(rng, fmt, M, N, K, per_row):
    dt = getattr(ml_dtypes, fmt)
    a = (2 * rng.standard_normal((M, K))).astype(dt)
    w = (2 * rng.standard_normal((N, K))).astype(dt)  # a Linear weight: b = w.T is K-major
    sa = (rng.random((M, 1) if per_row else ()) + 0.5).astype(np.float32)
    sb = (rng.random((1, N) if per_row else ()) + 0.5).astype(np.float32)
    return a, w, sa, sb


def _check(c, a, b, sa, sb):
    """|c - ref| within f32 accumulation over K (each FP8 product is exact in f32) plus the one
    rounding into c's dtype, ref = (a @ b) * sa * sb in float64."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    scale = np.asarray(sa, np.float64).reshape(-1, 1) * np.asarray(sb, np.float64).reshape(1, -1)
    ref = (a64 @ b64) * scale
    K = a.shape[1]
    tol = 2 * K * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)) * scale + 2.0 ** -_BITS[c.dtype] * np.abs(ref) + 1e-30
    err = np.abs(c.astype(np.float64) - ref)
    assert np.isfinite(c.astype(np.float64)).all()
    assert (err <= tol).all(), f"max error {err.max():.3g} (tolerance there {tol.flat[np.argmax(err - tol)]:.3g})"


@pytest.mark.parametrize("fmt, per_row, out_dtype, shape", [
    ("float8_e4m3fn", False, None, (37, 72, 100)),           # bf16 result (the default); K not of 16
    ("float8_e4m3fn", True, np.float32, (64, 136, 144)),
    ("float8_e5m2", True, "f16", (5, 33, 17)),
    ("float8_e5m2", False, "f32", (70, 24, 32)),
])
def test_numpy_fp8_on_the_cpu_target(fmt, per_row, out_dtype, shape):
    M, N, K = shape
    rng = fresh_rng()
    a, w, sa, sb = _operands(rng, fmt, M, N, K, per_row)
    c = ops.scaled_matmul(a, w.T, sa, sb, out_dtype=out_dtype)
    want = {None: ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}.get(out_dtype, out_dtype)
    assert isinstance(c, np.ndarray) and c.shape == (M, N) and c.dtype == np.dtype(want)
    _check(c, a, w.T, sa, sb)


def test_out_per_row_vectors_and_a_row_major_b():
    """``out`` is written and returned; scales as (M,) and (N,) vectors; a C-contiguous b works too."""
    M, N, K = 20, 48, 64
    rng = fresh_rng()
    a, w, sa, sb = _operands(rng, "float8_e4m3fn", M, N, K, True)
    b = np.ascontiguousarray(w.T)
    out = np.full((M, N), np.nan, np.float32)
    c = ops.scaled_matmul(a, b, sa.reshape(-1), sb.reshape(-1), out=out)
    assert c is out
    _check(out, a, b, sa, sb)


def test_empty_and_errors():
    f8 = ml_dtypes.float8_e4m3fn
    a, b = np.zeros((3, 0), f8), np.zeros((0, 5), f8)
    c = ops.scaled_matmul(a, b, 1.0, 1.0, out_dtype=np.float32)
    assert c.shape == (3, 5) and not c.any()
    a, b = np.ones((4, 16), f8), np.ones((16, 8), f8)
    with pytest.raises(TypeError, match="one FP8 type"):
        ops.scaled_matmul(a, b.astype(ml_dtypes.float8_e5m2), 1.0, 1.0)
    with pytest.raises(TypeError, match="must be FP8"):
        ops.scaled_matmul(a.astype(np.float32), b, 1.0, 1.0)
    with pytest.raises(ValueError, match="scales of one element each, or of M = 4 and N = 8"):
        ops.scaled_matmul(a, b, np.ones(4, np.float32), np.ones(3, np.float32))
    with pytest.raises(ValueError, match=r"a \(M, K\) and b \(K, N\)"):
        ops.scaled_matmul(a, b[:8], 1.0, 1.0)
    with pytest.raises(TypeError, match="out_dtype must be bf16, f16 or f32"):
        ops.scaled_matmul(a, b, 1.0, 1.0, out_dtype=np.int32)
