"""Helpers shared by the IR passes: constant values of the IR's types, splicing ops into a region."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..core import OPS, Op, Region, Value
from ..types import ScalarType, Type, VectorType, elem_of

try:  # ml_dtypes is a dependency of kcompiler; guarded so the IR still imports without it
    import ml_dtypes
    _BF16: Any = ml_dtypes.bfloat16
except ImportError:  # pragma: no cover
    _BF16 = None

#: numpy dtype of each float type of the IR.
FLOAT_DTYPES: dict[str, Any] = {"f16": np.float16, "bf16": _BF16, "f32": np.float32, "f64": np.float64}


def wrap_int(v: int, t: ScalarType) -> int:
    """``v`` reduced modulo 2**bits into the range of ``t`` (two's complement for signed types)."""
    m = (1 << t.bits) - 1
    v &= m
    if t.is_signed and v >> (t.bits - 1):
        v -= 1 << t.bits
    return v


def const_value(v: Value) -> Any | None:
    """The attribute value of ``v`` when a ``const`` op defines it, else None."""
    o = v.owner
    if o is not None and o.name == "const":
        return o.attrs["value"]
    return None


def is_const(v: Value) -> bool:
    o = v.owner
    return o is not None and o.name == "const"


def to_python(value: Any, t: Type) -> Any:
    """A const attribute ``value`` as the value of type ``t`` (a scalar, or the splat lane of a
    vector): bool for bool, int in the type's range for integers, a numpy scalar for floats."""
    e = elem_of(t)
    if e.is_bool:
        return bool(value)
    if e.is_int:
        return wrap_int(int(value), e)
    dt = FLOAT_DTYPES[e.name]
    return dt(value)


def to_attr(value: Any, t: Type) -> Any:
    """The inverse of :func:`to_python`: what a ``const`` op stores in its ``value`` attribute."""
    e = elem_of(t)
    if e.is_bool:
        return bool(value)
    if e.is_int:
        return wrap_int(int(value), e)
    return float(value)


def make_const(value: Any, t: Type, span: Any = None, hint: str = "") -> Op:
    """A new ``const`` op of type ``t`` (not inserted anywhere)."""
    return Op("const", [], t, {"value": to_attr(value, t)}, span=span, hint=hint)


def ends_in_terminator(ops: list[Op]) -> bool:
    return bool(ops) and OPS[ops[-1].name].terminator


def splice(region: Region, index: int, new_ops: list[Op]) -> bool:
    """Replace ``region.ops[index]`` by ``new_ops``. Where ``new_ops`` ends with a terminator the ops
    after ``index`` are unreachable and dropped — unless one of them is a ``condition`` (a while's cond
    region must end with one): then nothing changes and False is returned."""
    rest = region.ops[index + 1:]
    if ends_in_terminator(new_ops):
        if any(o.name == "condition" for o in rest):
            return False
        rest = []
    region.ops[index:] = list(new_ops) + rest
    return True


def count_ops(region: Region) -> int:
    return sum(1 for _ in region.walk())


def is_vector(t: Type) -> bool:
    return isinstance(t, VectorType)


def scalar(t: Type) -> ScalarType:
    return elem_of(t)
