"""The small floating-point formats kcompiler knows (8, 6 and 4 bits), described once for the
compiler, the runtime and the tests.

Sources: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, 2023 (E4M3 and E5M2: §4, table 1
and the special values of table 2); the FNUZ variants as AMD MI300 implements them (AMD CDNA3 ISA,
"FP8 and BF8 conversions"; the same encodings as ml_dtypes' ``float8_e4m3fnuz`` /
``float8_e5m2fnuz``: bias 8 and 16, one NaN at 0x80, no infinity, no negative zero); E8M0 from OCP
Microscaling Formats (MX) v1.0 §5.4 (an unsigned power of two 2^(e-127), 0xFF NaN, no zero); FP6
(E2M3, E3M2) and FP4 (E2M1) from the same spec §5.3.2-5.3.3 (no infinity, no NaN: out-of-range values
saturate; ml_dtypes turns a NaN into a zero of the opposite sign, +NaN into -0, and so does
kcompiler).
In kernels and host arrays each value of these formats takes a byte (ml_dtypes' layout; the code in
the low bits).

Conversions between these and f32 are defined to equal ml_dtypes' casts bit for bit (the
non-saturating mode); ``saturate=True`` instead clamps finite overflows and infinities to the largest
finite value, as NVIDIA's ``cvt.rn.satfinite`` does. NaN stays NaN in both modes.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Float8Format:
    """One format of ``bits`` bits (8, 6 or 4; a sign bit on top, except E8M0). ``kind``: 'fn' (no
    infinity, NaN = S.1111.111: OCP E4M3), 'ieee' (infinities and NaNs as IEEE 754: OCP E5M2), 'fnuz'
    (no infinity, no -0, the only NaN is 0x80), 'e8m0' (unsigned exponent only, 0xFF NaN) or
    'finite' (no infinity and no NaN: FP6 and FP4)."""

    name: str        #: the language's type name
    ebits: int
    mbits: int
    bias: int
    kind: str
    ml_dtypes: str   #: the ml_dtypes dtype with the same encoding
    bits: int = 8

    @property
    def sign_bit(self) -> int:
        return 1 << (self.bits - 1)

    @property
    def signed(self) -> bool:
        return self.kind != "e8m0"

    @property
    def max_code(self) -> int:
        """The magnitude bits of the largest finite value."""
        if self.kind == "fn":
            return 0x7E
        if self.kind == "ieee":
            return ((1 << self.ebits) - 2) << self.mbits | ((1 << self.mbits) - 1)
        if self.kind == "fnuz":
            return 0x7F
        if self.kind == "finite":
            return self.sign_bit - 1
        return 0xFE

    @property
    def nan_code(self) -> int:
        """The NaN ml_dtypes produces for a positive NaN input (sign bit clear)."""
        return {"fn": 0x7F, "ieee": 0x7E, "fnuz": 0x80, "e8m0": 0xFF, "finite": self.sign_bit}[self.kind]

    @property
    def max_value(self) -> float:
        c = self.max_code
        e, m = c >> self.mbits, c & ((1 << self.mbits) - 1)
        return (1 + m / (1 << self.mbits)) * 2.0 ** (e - self.bias)


FORMATS: dict[str, Float8Format] = {f.name: f for f in (
    Float8Format("f8e4m3", 4, 3, 7, "fn", "float8_e4m3fn"),
    Float8Format("f8e5m2", 5, 2, 15, "ieee", "float8_e5m2"),
    Float8Format("f8e4m3fnuz", 4, 3, 8, "fnuz", "float8_e4m3fnuz"),
    Float8Format("f8e5m2fnuz", 5, 2, 16, "fnuz", "float8_e5m2fnuz"),
    Float8Format("e8m0", 8, 0, 127, "e8m0", "float8_e8m0fnu"),
    Float8Format("f6e2m3", 2, 3, 1, "finite", "float6_e2m3fn", 6),
    Float8Format("f6e3m2", 3, 2, 3, "finite", "float6_e3m2fn", 6),
    Float8Format("f4e2m1", 2, 1, 1, "finite", "float4_e2m1fn", 4),
)}


def ml_dtype(fmt: Float8Format | str):
    """The numpy dtype (from ml_dtypes) of a format."""
    import ml_dtypes
    import numpy as np

    f = FORMATS[fmt] if isinstance(fmt, str) else fmt
    return np.dtype(getattr(ml_dtypes, f.ml_dtypes))


__all__ = ["FORMATS", "Float8Format", "ml_dtype"]
