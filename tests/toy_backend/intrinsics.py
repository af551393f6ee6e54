"""The toy target's one target intrinsic, ``toy.dot4``: the dot product of two vec<f32, 4> (feature
``toy2``, which arch ``toy2`` has), registered as data like the package's own (kcompiler.ir.intrinsics),
with its LLVM lowering (lower.py) named by path. The record's ``intrinsics`` field names this module."""
from __future__ import annotations

from kcompiler.ir.core import Op
from kcompiler.ir.intrinsics import Intrinsic, register_intrinsics, require, result_type
from kcompiler.ir.types import F32, VectorType

VEC4 = VectorType(F32, 4)


def _t_dot4(op: Op) -> None:
    a, b = (v.type for v in op.operands)
    require(a == VEC4 and b == VEC4 and result_type(op) == F32, f"toy dot4 of {a} x {b} -> {result_type(op)}")


INTRINSICS = (
    Intrinsic(name="toy.dot4", builtin="toy_dot", feature="toy2", operands=2, result=True, type_rule=_t_dot4,
              lower=f"{__package__}.lower:lower_dot4", needs={"toy2": "the toy dot product (Toy toy2)"},
              doc="a . b of two vec<f32, 4>"),
)

register_intrinsics(*INTRINSICS)
