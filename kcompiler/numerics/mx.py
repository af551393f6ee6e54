"""OCP Microscaling (MX) block formats: the host reference kernels are tested against.

Source: OCP Microscaling Formats (MX) Specification v1.0 (2023), §5 (a block of k = 32 elements
sharing one E8M0 scale X; value_i = X * P_i) and §6.3 (conversion from floats: "shared_exp =
floor(log2(max_i |V_i|)) - emax_elem", X = 2^shared_exp, P_i = V_i / X quantised to the element
format, normal values beyond the element format's largest clamped to it).

Choices the spec leaves to implementations, made here and in stdlib/mx.kc alike:
- a block whose elements are all zero gets the smallest scale, 2^-127 (code 0);
- a block holding a NaN or an infinity gets the NaN scale (0xFF) and NaN elements, so that it
  dequantises to NaN (a single bad value poisons its block, visibly);
- V_i / X is computed in f32 as V_i * 2^-shared_exp, exactly (a power of two), then rounded to the
  element format to nearest even with saturation (``convert[T](x, saturate = true)``).

Element formats: MXFP8 (f8e4m3, emax 8; f8e5m2, emax 15), MXFP6 (f6e2m3, emax 2; f6e3m2, emax 4) and
MXFP4 (f4e2m1, emax 2). Layouts: the codes have x's shape, one byte each (ml_dtypes' layout; FP6/FP4
codes in the low bits); the scales have shape ``x.shape[:-1] + (x.shape[-1] // 32,)``, one E8M0 byte
each. :func:`pack_fp4` / :func:`unpack_fp4` convert FP4 codes to and from two per byte, the first
element in the low nibble (NVIDIA's ``__nv_fp4x2_e2m1`` order). Not yet: FP6 packing, MXINT8, and
NVFP4 (E4M3 scales per 16).
"""
from __future__ import annotations

import numpy as np

from . import reference
from .formats import FORMATS, ml_dtype

BLOCK = 32

#: The MX element formats and their emax_elem (the exponent of the largest normal value; MX v1.0
#: table 1).
ELEMENTS = {"f8e4m3": 8, "f8e5m2": 15, "f6e2m3": 2, "f6e3m2": 4, "f4e2m1": 2}


def _check(x: np.ndarray, fmt: str) -> None:
    if fmt not in ELEMENTS:
        raise ValueError(f"MX element format must be one of {sorted(ELEMENTS)}, not {fmt!r}")
    if x.ndim == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"the last axis ({x.shape[-1] if x.ndim else 'none'}) must be a multiple of {BLOCK}")


def quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) of ``x`` (any float dtype, computed in f32): codes in ml_dtypes' dtype of
    ``fmt`` with x's shape, scales as ``float8_e8m0fnu`` with one per block of 32 along the last axis.
    Raises ValueError for another element format or a last axis not a multiple of 32."""
    x = np.asarray(x).astype(np.float32)
    _check(x, fmt)
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    a = np.abs(blocks)
    bad = ~np.isfinite(a).all(axis=-1)
    m = np.where(bad[..., None], 0, a).max(axis=-1)
    _, e = np.frexp(m)                       # m = f * 2^e, f in [0.5, 1): floor(log2 m) = e - 1
    shared = np.clip(e.astype(np.int64) - 1 - ELEMENTS[fmt], -127, 127)
    shared = np.where(m == 0, -127, shared)
    scales = (shared + 127).astype(np.uint8)
    scales[bad] = 0xFF
    pow2 = np.ldexp(np.float32(1), -shared).astype(np.float32)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = blocks * pow2
    codes = reference.encode(scaled, fmt, saturate=True).reshape(blocks.shape)
    codes = np.where(bad[..., None], np.uint8(FORMATS[fmt].nan_code), codes)
    return codes.reshape(x.shape).view(ml_dtype(fmt)), scales.view(ml_dtype("e8m0"))


def dequantize(codes: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """float32 values X * P_i (NaN where the scale is NaN), computed in f32."""
    codes = np.asarray(codes)
    _check(codes, fmt)
    p = reference.decode(codes.view(np.uint8), fmt).reshape(*codes.shape[:-1], -1, BLOCK)
    s = np.asarray(scales).view(np.uint8).astype(np.int64)
    with np.errstate(over="ignore"):
        x = np.ldexp(np.float32(1), s - 127).astype(np.float32)
    x = np.where(s == 0xFF, np.float32(np.nan), x)[..., None]
    return (p * x).astype(np.float32).reshape(codes.shape)


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """FP4 codes (one per byte, an even count along the last axis) packed two per byte, the element
    of the lower index in the low nibble: shape ``(..., n // 2)``, uint8."""
    c = np.asarray(codes).view(np.uint8)
    if c.shape[-1] % 2:
        raise ValueError(f"the last axis ({c.shape[-1]}) must be even to pack FP4 codes")
    return ((c[..., 0::2] & 0xF) | ((c[..., 1::2] & 0xF) << 4)).astype(np.uint8)


def unpack_fp4(packed: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_fp4`: ml_dtypes ``float4_e2m1fn`` codes, one per byte."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.shape[:-1] + (2 * p.shape[-1],), np.uint8)
    out[..., 0::2], out[..., 1::2] = p & 0xF, p >> 4
    return out.view(ml_dtype("f4e2m1"))


__all__ = ["BLOCK", "ELEMENTS", "dequantize", "pack_fp4", "quantize", "unpack_fp4"]
