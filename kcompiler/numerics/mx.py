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
element in the low nibble (NVIDIA's ``__nv_fp4x2_e2m1`` order). MXINT8 ("int8"): elements are i8
with an implicit scale of 2^-6 (MX v1.0 §5.4.2), rounded to nearest even and clamped to [-127, 127]
(the symmetric range; -128 is never produced). NVFP4, the second scheme: :func:`nvfp4_quantize`.
Not yet: FP6 packing in memory.
"""
from __future__ import annotations

import numpy as np

from . import reference
from .formats import FORMATS, ml_dtype

BLOCK = 32

#: The MX element formats and their emax_elem (the exponent of the largest normal value; MX v1.0
#: table 1). "int8" is MXINT8: two's complement with an implicit 2^-6, so emax_elem 0.
ELEMENTS = {"f8e4m3": 8, "f8e5m2": 15, "f6e2m3": 2, "f6e3m2": 4, "f4e2m1": 2, "int8": 0}


def _check(x: np.ndarray, fmt: str) -> None:
    if fmt not in ELEMENTS:
        raise ValueError(f"MX element format must be one of {sorted(ELEMENTS)}, not {fmt!r}")
    if x.ndim == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"the last axis ({x.shape[-1] if x.ndim else 'none'}) must be a multiple of {BLOCK}")


def quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """(codes, scales) of ``x`` (any float dtype, computed in f32): codes in ml_dtypes' dtype of
    ``fmt`` (int8 for MXINT8: round(V/X * 64) to nearest even, clamped to [-127, 127], the
    symmetric range; blocks with NaN/Inf give 0) with x's shape, scales as ``float8_e8m0fnu`` with one per block of 32 along the last axis.
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
    half = np.trunc(shared / 2).astype(np.int64)   # two exact steps, as stdlib/mx.kc's unscale
    p1 = np.ldexp(np.float32(1), -half).astype(np.float32)[..., None]
    p2 = np.ldexp(np.float32(1), half - shared).astype(np.float32)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        scaled = (blocks * p1) * p2
    if fmt == "int8":
        q = np.clip(np.rint(np.where(bad[..., None], 0, scaled) * np.float32(64)), -127, 127)
        return q.astype(np.int8).reshape(x.shape), scales.view(ml_dtype("e8m0"))
    codes = reference.encode(scaled, fmt, saturate=True).reshape(blocks.shape)
    codes = np.where(bad[..., None], np.uint8(FORMATS[fmt].nan_code), codes)
    return codes.reshape(x.shape).view(ml_dtype(fmt)), scales.view(ml_dtype("e8m0"))


def dequantize(codes: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """float32 values X * P_i (NaN where the scale is NaN), computed in f32."""
    codes = np.asarray(codes)
    _check(codes, fmt)
    if fmt == "int8":
        p = (codes.astype(np.float32) * np.float32(1 / 64)).reshape(*codes.shape[:-1], -1, BLOCK)
    else:
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


def pack_fp6(codes: np.ndarray) -> np.ndarray:
    """FP6 codes (E2M3 or E3M2, one per byte, a multiple of 4 along the last axis) packed four to
    three bytes: one contiguous LSB-first bit stream, element i in bits 6i .. 6i+5 of the row's bytes
    read little-endian (ONNX's FLOAT6 packing, onnx/docs/technical/float6.md; an MX block of 32 is
    24 bytes). Shape ``(..., 3 * n // 4)``, uint8. Raises ValueError for another length."""
    c = np.asarray(codes).view(np.uint8).astype(np.uint32) & 0x3F
    if c.ndim == 0 or c.shape[-1] % 4:
        raise ValueError(f"the last axis ({c.shape[-1] if c.ndim else 0}) must be a multiple of 4 to pack FP6 codes")
    w = c[..., 0::4] | (c[..., 1::4] << 6) | (c[..., 2::4] << 12) | (c[..., 3::4] << 18)
    out = np.stack([w & 0xFF, (w >> 8) & 0xFF, w >> 16], axis=-1).astype(np.uint8)
    return out.reshape(*c.shape[:-1], 3 * c.shape[-1] // 4)


def unpack_fp6(packed: np.ndarray, fmt: str = "f6e2m3") -> np.ndarray:
    """The inverse of :func:`pack_fp6`: ``fmt`` ('f6e2m3' or 'f6e3m2') codes, one per byte, as
    ml_dtypes' float6 arrays. Raises ValueError for a last axis that is not a multiple of 3."""
    p = np.asarray(packed, dtype=np.uint8).astype(np.uint32)
    if p.ndim == 0 or p.shape[-1] % 3:
        raise ValueError("the last axis of packed FP6 must be a multiple of 3")
    w = p[..., 0::3] | (p[..., 1::3] << 8) | (p[..., 2::3] << 16)
    out = np.stack([(w >> (6 * k)) & 0x3F for k in range(4)], axis=-1).astype(np.uint8)
    return out.reshape(*p.shape[:-1], 4 * p.shape[-1] // 3).view(ml_dtype(fmt))


#: NVFP4's block: 16 elements share an E4M3 scale.
NV_BLOCK = 16


def nvfp4_quantize(x: np.ndarray, global_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """NVFP4 (NVIDIA's FP4 scheme, as in Transformer Engine's recipe): per block of 16 along the
    last axis, scale s = E4M3(amax / 6 * g) (nearest even, saturated; 6 is FP4's largest value), and
    elements FP4(v * g / s) (0 where s is 0); ``g`` is the per-tensor f32 scale (1: none). All in f32
    as stdlib/mx.kc computes it; a block with NaN or Inf gets a NaN scale. Returns (codes as
    ``float4_e2m1fn``, scales as ``float8_e4m3fn``)."""
    x = np.asarray(x).astype(np.float32)
    if x.ndim == 0 or x.shape[-1] % NV_BLOCK:
        raise ValueError(f"the last axis must be a multiple of {NV_BLOCK}")
    g = np.float32(global_scale)
    blocks = x.reshape(*x.shape[:-1], -1, NV_BLOCK)
    bits = np.abs(blocks).view(np.uint32).max(axis=-1)        # NaN and Inf above every finite value
    amax = bits.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        s = reference.encode(amax / np.float32(6) * g, "f8e4m3", saturate=True)
        ds = reference.decode(s, "f8e4m3")[..., None]
        q = np.where(ds != 0, blocks * g / ds, np.float32(0)).astype(np.float32)
    codes = reference.encode(q, "f4e2m1").reshape(x.shape)
    return codes.view(ml_dtype("f4e2m1")), s.view(ml_dtype("f8e4m3"))


def nvfp4_dequantize(codes: np.ndarray, scales: np.ndarray, global_scale: float = 1.0) -> np.ndarray:
    """float32 values FP4 * s / g of :func:`nvfp4_quantize`'s output."""
    codes = np.asarray(codes)
    p = reference.decode(codes.view(np.uint8), "f4e2m1").reshape(*codes.shape[:-1], -1, NV_BLOCK)
    s = reference.decode(np.asarray(scales).view(np.uint8), "f8e4m3")[..., None]
    with np.errstate(invalid="ignore"):
        return (p * s / np.float32(global_scale)).astype(np.float32).reshape(codes.shape)


__all__ = ["BLOCK", "ELEMENTS", "NV_BLOCK", "dequantize", "nvfp4_dequantize", "nvfp4_quantize", "pack_fp4",
           "quantize", "unpack_fp4"]
