"""Block-scaled small floats by std.mx: OCP MX quantisation (MXFP8, MXFP6, MXFP4, MXINT8), NVFP4, and the
packing of FP4 and FP6 codes."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..numerics import mx as MX
from ..runtime import arrays
from . import _common
from ._common import empty_like, flat, scalar_of, target_for


def mx_quantize(x: Any, fmt: str = "f8e4m3", *, target: str = "auto") -> tuple[Any, Any]:
    """OCP MX block quantisation of ``x`` (f32, f16 or bf16; the last axis a multiple of 32) into
    MXFP8, MXFP6, MXFP4 or MXINT8: ``(codes, scales)``, codes of ``fmt`` ('f8e4m3', 'f8e5m2',
    'f6e2m3', 'f6e3m2', 'f4e2m1'; one per byte, ml_dtypes' layout; 'int8': int8) with x's shape, E8M0 scales of
    shape ``x.shape[:-1] + (x.shape[-1] // 32,)``; numpy in, numpy out (torch in, torch out). The
    rules and choices are kcompiler.numerics.mx's, which gives the same bits on the host. Raises
    ValueError for another format or shape, TypeError for another dtype."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"mx_quantize: x must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    if fmt not in MX.ELEMENTS:
        raise ValueError(f"mx_quantize: fmt must be one of {sorted(MX.ELEMENTS)}, not {fmt!r}")
    shape = tuple(x.shape)
    if not shape or shape[-1] % MX.BLOCK:
        raise ValueError(f"mx_quantize: the last axis of {shape} must be a multiple of {MX.BLOCK}")
    scale_shape = shape[:-1] + (shape[-1] // MX.BLOCK,)
    codes, scales = empty_like(x, shape, "i8" if fmt == "int8" else fmt), empty_like(x, scale_shape, "e8m0")
    n = int(np.prod(shape))
    if n:
        mod = _common.stdlib_module("mx", target_for(x, target))
        mod.mx_quantize[(n + 8191) // 8192, 256](flat(x), flat(codes), flat(scales), n, S=src.name,
                                                T="i8" if fmt == "int8" else fmt, EMAX=MX.ELEMENTS[fmt],
                                                INT=fmt == "int8", stream=_common.stream_of(x))
    return codes, scales


def _check_scales(scales: Any, codes: Any, block: int, fn: str) -> None:
    """``scales`` must be an array of one scale per ``block`` codes along the last axis: shape
    ``codes.shape[:-1] + (last // block,)`` (any shape of that many elements is read in that order).
    Raises TypeError for a non-array, ValueError for another count (the kernel would read past it)."""
    if not arrays.is_array(scales):
        raise TypeError(f"{fn}: scales must be an array, not {arrays.describe(scales)}")
    shape = tuple(codes.shape)
    want = shape[:-1] + (shape[-1] // block,)
    if int(np.prod(tuple(scales.shape))) != int(np.prod(want)):
        raise ValueError(f"{fn}: scales must hold one scale per {block} codes, shape {want}, not "
                         f"{tuple(scales.shape)}")


def mx_dequantize(codes: Any, scales: Any, dtype: Any = np.float32, *, target: str = "auto") -> Any:
    """The values X * P_i of MX ``codes`` and their E8M0 ``scales`` (as :func:`mx_quantize` gives
    them), as ``dtype`` (f32, f16 or bf16); NaN where a scale is NaN. Raises TypeError for codes of
    another format or another dtype, ValueError for a last axis that is not a multiple of 32 or scales
    that do not hold one scale per 32 codes."""
    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    fmt = "int8" if t is not None and t.name == "i8" else (t.name if t is not None else "")
    if fmt not in MX.ELEMENTS:
        raise TypeError(f"mx_dequantize: codes must be of an MX element format ({', '.join(MX.ELEMENTS)}), "
                        f"not {arrays.describe(codes)}")
    dst = scalar_of(dtype)
    if dst is None or dst.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"mx_dequantize: dtype must be f32, f16 or bf16, not {dtype!r}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % MX.BLOCK:
        raise ValueError(f"mx_dequantize: the last axis of {shape} must be a multiple of {MX.BLOCK}")
    _check_scales(scales, codes, MX.BLOCK, "mx_dequantize")
    out = empty_like(codes, shape, dst.name)
    n = int(np.prod(shape))
    if n:
        mod = _common.stdlib_module("mx", target_for(codes, target))
        mod.mx_dequantize[(n + 2047) // 2048, 256](flat(codes), flat(scales), flat(out), n, T=t.name,
                                                  D=dst.name, INT=fmt == "int8")
    return out


def pack_fp4(codes: Any, *, target: str = "auto") -> Any:
    """FP4 (E2M1) ``codes``, one per byte, packed two to a byte by a kernel: the element of the lower
    index in the low nibble (NVIDIA's ``__nv_fp4x2_e2m1`` order); shape ``(..., n // 2)``, uint8.
    Raises ValueError for an odd last axis, TypeError for codes of another dtype."""
    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    if t is None or t.name != "f4e2m1":
        raise TypeError(f"pack_fp4: codes must be f4e2m1, not {arrays.describe(codes)}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % 2:
        raise ValueError(f"pack_fp4: the last axis of {shape} must be even")
    out = empty_like(codes, shape[:-1] + (shape[-1] // 2,), "u8")
    pairs = int(np.prod(shape)) // 2
    if pairs:
        mod = _common.stdlib_module("mx", target_for(codes, target))
        mod.pack_fp4[(pairs + 255) // 256, 256](flat(codes), flat(out), pairs)
    return out


def unpack_fp4(packed: Any, *, target: str = "auto") -> Any:
    """The inverse of :func:`pack_fp4`: f4e2m1 codes, one per byte, shape ``(..., 2 * n)``."""
    t = arrays.array_scalar_type(packed) if arrays.is_array(packed) else None
    if t is None or t.name != "u8":
        raise TypeError(f"unpack_fp4: packed must be uint8, not {arrays.describe(packed)}")
    shape = tuple(packed.shape)
    out = empty_like(packed, shape[:-1] + (2 * shape[-1],), "f4e2m1")
    pairs = int(np.prod(shape))
    if pairs:
        mod = _common.stdlib_module("mx", target_for(packed, target))
        mod.unpack_fp4[(pairs + 255) // 256, 256](flat(packed), flat(out), pairs)
    return out


def pack_fp6(codes: Any, *, target: str = "auto") -> Any:
    """FP6 (E2M3 or E3M2) ``codes``, one per byte, packed four to three bytes by a kernel: one
    LSB-first bit stream per row (kcompiler.numerics.mx.pack_fp6 states the layout and its source);
    shape ``(..., 3 * n // 4)``, uint8. Raises ValueError unless the last axis is a multiple of 4,
    TypeError for codes of another dtype."""
    t = arrays.array_scalar_type(codes) if arrays.is_array(codes) else None
    if t is None or t.name not in ("f6e2m3", "f6e3m2"):
        raise TypeError(f"pack_fp6: codes must be f6e2m3 or f6e3m2, not {arrays.describe(codes)}")
    shape = tuple(codes.shape)
    if not shape or shape[-1] % 4:
        raise ValueError(f"pack_fp6: the last axis of {shape} must be a multiple of 4")
    out = empty_like(codes, shape[:-1] + (3 * shape[-1] // 4,), "u8")
    groups = int(np.prod(shape)) // 4
    if groups:
        mod = _common.stdlib_module("mx", target_for(codes, target))
        mod.pack_fp6[(groups + 255) // 256, 256](flat(codes), flat(out), groups, T=t.name)
    return out


def unpack_fp6(packed: Any, fmt: str = "f6e2m3", *, target: str = "auto") -> Any:
    """The inverse of :func:`pack_fp6`: ``fmt`` ('f6e2m3' or 'f6e3m2') codes, one per byte, shape
    ``(..., 4 * n // 3)`` (numpy arrays: torch has no one-code-a-byte FP6 dtype). Raises ValueError
    for another format or a last axis that is not a multiple of 3, TypeError unless uint8."""
    t = arrays.array_scalar_type(packed) if arrays.is_array(packed) else None
    if t is None or t.name != "u8":
        raise TypeError(f"unpack_fp6: packed must be uint8, not {arrays.describe(packed)}")
    if fmt not in ("f6e2m3", "f6e3m2"):
        raise ValueError(f"unpack_fp6: fmt must be 'f6e2m3' or 'f6e3m2', not {fmt!r}")
    shape = tuple(packed.shape)
    if not shape or shape[-1] % 3:
        raise ValueError(f"unpack_fp6: the last axis of {shape} must be a multiple of 3")
    out = empty_like(packed, shape[:-1] + (4 * shape[-1] // 3,), fmt)
    groups = int(np.prod(shape)) // 3
    if groups:
        mod = _common.stdlib_module("mx", target_for(packed, target))
        mod.unpack_fp6[(groups + 255) // 256, 256](flat(packed), flat(out), groups, T=fmt)
    return out


def nvfp4_quantize(x: Any, global_scale: float = 1.0, *, target: str = "auto") -> tuple[Any, Any]:
    """NVFP4 quantisation of ``x`` (f32, f16 or bf16; the last axis a multiple of 16): ``(codes,
    scales)``, FP4 (E2M1) codes one per byte with x's shape and E4M3 scales, one per 16 along the last
    axis; ``global_scale`` is the per-tensor f32 factor (kcompiler.numerics.mx.nvfp4_quantize gives
    the rules and the same bits on the host). Raises ValueError / TypeError for a bad shape or dtype."""
    src = arrays.array_scalar_type(x) if arrays.is_array(x) else None
    if src is None or src.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"nvfp4_quantize: x must be an array of f32, f16 or bf16, not {arrays.describe(x)}")
    shape = tuple(x.shape)
    if not shape or shape[-1] % 16:
        raise ValueError(f"nvfp4_quantize: the last axis of {shape} must be a multiple of 16")
    codes, scales = empty_like(x, shape, "f4e2m1"), empty_like(x, shape[:-1] + (shape[-1] // 16,), "f8e4m3")
    n = int(np.prod(shape))
    if n:
        mod = _common.stdlib_module("mx", target_for(x, target))
        mod.nvfp4_quantize[(n + 2047) // 2048, 256](flat(x), flat(codes), flat(scales),
                                                   np.float32(global_scale), n, S=src.name)
    return codes, scales


def nvfp4_dequantize(codes: Any, scales: Any, global_scale: float = 1.0, dtype: Any = np.float32, *,
                     target: str = "auto") -> Any:
    """The values FP4 * scale / global_scale of :func:`nvfp4_quantize`'s output, as ``dtype``. Raises
    TypeError for another dtype, ValueError for a last axis that is not a multiple of 16 or scales that
    do not hold one scale per 16 codes."""
    dst = scalar_of(dtype)
    if dst is None or dst.name not in ("f32", "f16", "bf16"):
        raise TypeError(f"nvfp4_dequantize: dtype must be f32, f16 or bf16, not {dtype!r}")
    if not arrays.is_array(codes):
        raise TypeError(f"nvfp4_dequantize: codes must be an array, not {arrays.describe(codes)}")
    if not codes.shape or codes.shape[-1] % 16:
        raise ValueError(f"nvfp4_dequantize: the last axis of {tuple(codes.shape)} must be a multiple of 16")
    _check_scales(scales, codes, 16, "nvfp4_dequantize")
    out = empty_like(codes, tuple(codes.shape), dst.name)
    n = int(np.prod(tuple(codes.shape)))
    if n:
        mod = _common.stdlib_module("mx", target_for(codes, target))
        mod.nvfp4_dequantize[(n + 2047) // 2048, 256](flat(codes), flat(scales), np.float32(global_scale),
                                                     flat(out), n, D=dst.name)
    return out


__all__ = ["mx_dequantize", "mx_quantize", "nvfp4_dequantize", "nvfp4_quantize", "pack_fp4", "pack_fp6",
           "unpack_fp4", "unpack_fp6"]
