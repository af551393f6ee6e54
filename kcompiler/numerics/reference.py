"""Host references for the 8-bit float conversions, on numpy and ml_dtypes: what kernels must equal.

``encode(x, fmt, saturate)`` gives the codes (uint8) of float32 ``x``; without ``saturate`` these are
ml_dtypes' casts, the library's definition of the formats (OCP OFP8 1.0; MX 1.0 for E8M0). With
``saturate`` finite overflows and infinities become the largest finite value of their sign (NVIDIA's
``cvt.rn.satfinite``; E8M0 has no sign, and its NaN inputs — zero and negatives included — stay
NaN)."""
from __future__ import annotations

import numpy as np

from .formats import FORMATS, Float8Format, ml_dtype


def _fmt(fmt: Float8Format | str) -> Float8Format:
    return FORMATS[fmt] if isinstance(fmt, str) else fmt


def encode(x: np.ndarray, fmt: Float8Format | str, saturate: bool = False) -> np.ndarray:
    """uint8 codes of ``x`` (cast to float32 first) in ``fmt``."""
    f = _fmt(fmt)
    x = np.asarray(x, dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        if saturate:
            top = np.float32(f.max_value)
            x = np.where(np.isnan(x), x, np.clip(x, -top, top)).astype(np.float32)
        return x.astype(ml_dtype(f)).view(np.uint8)


def decode(codes: np.ndarray, fmt: Float8Format | str) -> np.ndarray:
    """float32 values of uint8 ``codes`` in ``fmt`` (exact)."""
    return np.asarray(codes, dtype=np.uint8).view(ml_dtype(_fmt(fmt))).astype(np.float32)


__all__ = ["decode", "encode"]
