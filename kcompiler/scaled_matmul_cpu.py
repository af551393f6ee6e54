"""kcompiler.ops.scaled_matmul for numpy arrays: std.matmul_sm90 (the Hopper kernel: TMA, wgmma,
mbarriers) run on the CPU target's emulation of those instructions (``target_options={"emulate_wgmma":
True}``, backends/cpu/hopper.py), with torch._scaled_mm's contract: FP8 ``a`` (M, K) and ``b`` (K, N),
f32 accumulation, per-tensor or per-row scales applied to the f32 product before its one rounding into
the result's dtype. No torch needed. Torch CUDA tensors take kcompiler.matmul_sm90.scaled_matmul.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from .ir.types import SCALARS
from .runtime import arrays

_FP8 = ("f8e4m3", "f8e5m2")
_OUTS = ("bf16", "f16", "f32")


@functools.lru_cache(maxsize=None)
def _module() -> Any:
    """std.matmul_sm90 for the CPU target with wgmma, TMA and mbarriers emulated (compiled once a
    process; the disk cache keeps it across processes)."""
    from . import compile_file
    from .frontend.program import stdlib_dir
    d = stdlib_dir()
    if d is None:
        raise RuntimeError("kcompiler's standard library (stdlib/) is not installed")
    return compile_file(d / "matmul_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


def _scale(s: Any, name: str) -> np.ndarray:
    try:
        v = np.asarray(s, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"scaled_matmul: {name} must be f32 numbers (a numpy array or a float), not "
                        f"{arrays.describe(s)}") from None
    return np.ascontiguousarray(v.reshape(-1))


def _padded(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """``x`` as a C-contiguous, 16-byte aligned (rows, cols) array, zero past its own columns (TMA
    reads rows of a multiple of 16 bytes from a 16-byte aligned address)."""
    if x.shape == (rows, cols) and x.flags.c_contiguous and x.ctypes.data % 16 == 0:
        return x
    buf = np.zeros(rows * cols + 16, np.uint8)  # FP8: one byte an element
    off = -buf.ctypes.data % 16
    y = buf[off:off + rows * cols].view(x.dtype).reshape(rows, cols)
    y[:, :x.shape[1]] = x
    return y


def scaled_matmul(a: Any, b: Any, scale_a: Any, scale_b: Any, *, out_dtype: Any = None,
                  out: Any = None) -> np.ndarray:
    """``(a @ b) * scale_a * scale_b`` for numpy FP8 ``a`` (M, K) and ``b`` (K, N) of one type
    (ml_dtypes float8_e4m3fn or float8_e5m2), on the CPU target.

    f32 accumulation; the scales multiply the f32 product, which is then rounded once into
    ``out_dtype`` (bf16, the default, as ml_dtypes.bfloat16; f16; f32; a numpy / ml_dtypes dtype or
    the type's name) or written into ``out``, a C-contiguous (M, N) numpy array of one of those
    (returned). Scales (f32; floats are converted): one element each (per tensor), or ``scale_a`` of
    M elements ((M, 1) or (M,)) and ``scale_b`` of N ((1, N) or (N,)) (per row of A, per column of B),
    as torch._scaled_mm takes them. ``b`` may have any layout (torch wants it K-major, ``w.T``; here
    it is copied to the layout the kernel reads, and K is padded with zeros to a multiple of 16).

    Raises TypeError for arrays that are not numpy FP8 of one type, or another out dtype, ValueError
    for shapes or scales that do not fit."""
    if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
        raise TypeError(f"scaled_matmul: a and b must both be numpy arrays (or both torch CUDA tensors), "
                        f"not {arrays.describe(a)} and {arrays.describe(b)}")
    ta, tb = arrays.array_scalar_type(a), arrays.array_scalar_type(b)
    if ta is None or tb is None or ta.name not in _FP8 or tb.name not in _FP8:
        raise TypeError(f"scaled_matmul: a and b must be FP8 (ml_dtypes float8_e4m3fn, float8_e5m2), not "
                        f"{arrays.describe(a)} and {arrays.describe(b)}")
    if ta != tb:
        raise TypeError(f"scaled_matmul: a and b of one FP8 type, not {ta} and {tb} (mixed e4m3 x e5m2 is "
                        "not wired up yet)")
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_matmul: a (M, K) and b (K, N), not {a.shape} and {b.shape}")
    (M, K), N = a.shape, b.shape[1]
    if out is None:
        dst = arrays.scalar_of_dtype(out_dtype) if out_dtype is not None and not isinstance(out_dtype, str) \
            else None
        name = "bf16" if out_dtype is None else (out_dtype if isinstance(out_dtype, str) else
                                                 (dst.name if dst is not None else None))
        if name not in _OUTS:
            raise TypeError(f"scaled_matmul: out_dtype must be bf16, f16 or f32, not {out_dtype!r}")
        out = np.empty((M, N), arrays.numpy_dtype(SCALARS[name]))
    else:
        t = arrays.array_scalar_type(out) if isinstance(out, np.ndarray) else None
        if t is None or t.name not in _OUTS:
            raise TypeError(f"scaled_matmul: out must be a numpy array of bf16, f16 or f32, not "
                            f"{arrays.describe(out)}")
        if out.shape != (M, N) or not out.flags.c_contiguous:
            raise ValueError(f"scaled_matmul: out must be a C-contiguous ({M}, {N}) array, not {out.shape}")
    sa, sb = _scale(scale_a, "scale_a"), _scale(scale_b, "scale_b")
    if sa.size == 1 and sb.size == 1:
        mode = 1
    elif sa.size == M and sb.size == N:
        mode = 2
    else:
        raise ValueError(f"scaled_matmul: scales of one element each, or of M = {M} and N = {N} elements, "
                         f"not {sa.size} and {sb.size}")
    if M == 0 or N == 0:
        return out
    if K == 0:
        out[...] = 0
        return out
    from . import matmul_sm90
    kp = -(-K // 16) * 16
    a2 = _padded(a, M, kp)
    b_nk = _padded(b.T, N, kp)
    return matmul_sm90.run(_module(), a2, b_nk, out, scale_a=sa, scale_b=sb, scale=mode)


__all__ = ["scaled_matmul"]
