"""LLVM types kcompiler needs beyond llvmlite's: ``bfloat``, the scalar type map, intrinsic suffixes."""
from __future__ import annotations

from llvmlite import ir as ll

from ...ir.types import ScalarType, StructType, Type, VectorType, alignof, sizeof


class BFloatType(ll.types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no bf16 type)."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        import ml_dtypes
        import numpy as np

        bits = int(np.array(value, dtype=ml_dtypes.bfloat16).view(np.uint16))
        return f"0xR{bits:04X}"


BFloatType._create_instance()

_I1, _I8, _I32, _I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)


def scalar_lltype(t: ScalarType) -> ll.Type:
    """The LLVM type of a scalar in registers (bool is i1)."""
    if t.kind == "bool":
        return _I1
    if t.kind == "minifloat":  # a small float is its code, in a byte
        return _I8
    if t.kind in ("int", "uint"):
        return ll.IntType(t.bits)
    return {"f16": ll.HalfType(), "bf16": BFloatType(), "f32": ll.FloatType(), "f64": ll.DoubleType()}[t.name]


def intrinsic_suffix(t: ll.Type) -> str:
    """The overload suffix LLVM mangles into intrinsic names: f32, i64, v4f32, bf16."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{intrinsic_suffix(t.element)}"
    return t.intrinsic_name


def struct_field_lltype(t: Type, memtype) -> ll.Type:
    """A struct field's LLVM type: its memory type, except a vector whose C size or alignment is not
    LLVM's (``vec<f32, 3>`` is 12 bytes aligned to 4 in C, 16 bytes in LLVM; a 32-byte vector is
    aligned to its element here, to 32 in LLVM), which is an array of its lanes (same bytes)."""
    if isinstance(t, VectorType) and alignof(t) != sizeof(t):
        return ll.ArrayType(memtype(t.elem), t.count)
    return memtype(t)


def struct_lltype(t: StructType, memtype) -> ll.Type:
    """The LLVM type of struct ``t``, in registers and in memory alike: an LLVM literal struct of its
    fields' memory types (bool a byte), whose natural layout under every data layout kcompiler
    targets is C's (:attr:`StructType.offsets`; tests/backends/test_struct_layout.py checks it
    with LLVM's own offsets). ``memtype`` maps an IR type to its LLVM memory type."""
    return ll.LiteralStructType([struct_field_lltype(f, memtype) for _, f in t.fields])
