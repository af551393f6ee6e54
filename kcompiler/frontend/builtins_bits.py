"""The bit builtins (``popcount``, ``clz``, ``ctz``, ``ffs``, ``brev``, ``bswap``, ``mulhi``,
``funnel_shl``, ``funnel_shr``, ``byte_perm``: the IR op ``bits``) and float classification
(``isnan``, ``isinf``, ``isfinite``, ``signbit``: the IR op ``fclass``). docs/LANGUAGE.md, "Bit
operations" and "Float classification", gives their meaning; kcompiler.ir.core.BIT_FUNCTIONS too.
"""
from __future__ import annotations

from ..ir import Value
from ..ir.core import BIT_COUNTS, FCLASS_TESTS
from ..ir.types import BOOL, I32, SCALARS, ScalarType, VectorType, elem_of
from . import ast as A
from .builtin_registry import builtin
from .semantic import CV
from .values import type_desc

U32 = SCALARS["u32"]


def _lanes(t) -> ScalarType | None:
    """The scalar type of a scalar or of a vector's lanes; None for anything else (a pointer, an array:
    the callers' located errors name it)."""
    return elem_of(t) if isinstance(t, (ScalarType, VectorType)) else None


def _is_int(v) -> bool:
    """Whether operand ``v`` (an IR value or a compile-time value) is an integer or integer vector."""
    if isinstance(v, CV):
        return v.kind == "int"
    et = _lanes(v.type)
    return et is not None and et.is_int


def _int_operand(fl, name: str, a: A.Expr, v=None) -> Value:
    """Argument ``a`` of ``name`` as an integer (scalar or vector) IR value; a located error for
    anything else (an untyped literal becomes i32, or i64 when too big)."""
    v = fl.rvalue(fl.ev(a), a.span) if v is None else v
    if isinstance(v, CV) and v.kind != "int":
        fl.fail(f"{name} needs integers, found {v.describe()}", a.span)
    v = fl.materialise(v, a.span)
    et = _lanes(v.type)
    if not (et is not None and et.is_int):
        hint = f"reinterpret the bits: bitcast[u{et.bits}](x)" if et is not None and et.is_float else None
        fl.fail(f"{name} needs integers, found {type_desc(v)}", a.span, hint=hint)
    return v


@builtin("popcount", "clz", "ctz", "ffs", "brev", "bswap")
def _unary_bits(fl, f, e, kw):
    name = f.fn.name
    x = _int_operand(fl, name, e.args[0])
    et = elem_of(x.type)
    if name == "bswap" and et.bits == 8:
        fl.fail(f"bswap needs integers of 16, 32 or 64 bits, found {x.type}: one byte has no order to swap",
                e.args[0].span)
    t = x.type
    rt = (VectorType(I32, t.count) if isinstance(t, VectorType) else I32) if name in BIT_COUNTS else t
    return fl.b.value("bits", [x], rt, fn=name)


@builtin("mulhi")
def _mulhi(fl, f, e, kw):
    a = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    b = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    for v, arg in ((a, e.args[0]), (b, e.args[1])):
        if not _is_int(v):
            fl.fail(f"mulhi needs integers, found {type_desc(v)}", arg.span)
    x, y = fl.common(a, b, "mulhi", e.span)
    return fl.b.value("bits", [x, y], x.type, fn="mulhi")


@builtin("funnel_shl", "funnel_shr")
def _funnel(fl, f, e, kw):
    name = f.fn.name
    hi = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    lo = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    for v, arg in ((hi, e.args[0]), (lo, e.args[1])):
        if not _is_int(v):
            fl.fail(f"{name} needs integers, found {type_desc(v)}", arg.span)
    x, y = fl.common(hi, lo, name, e.span)
    n = _int_operand(fl, name, e.args[2])
    if isinstance(n.type, VectorType) and not isinstance(x.type, VectorType):
        fl.fail(f"the shift of {name} is {n.type} but the operands are {x.type}", e.args[2].span)
    if isinstance(n.type, VectorType) and n.type.count != x.type.count:
        fl.fail(f"the shift of {name} is {n.type} but the operands are {x.type}: lengths differ", e.args[2].span)
    et = elem_of(x.type)
    if elem_of(n.type) != et:  # the shift is taken modulo the width: its low bits in x's type
        n = fl.b.cast(n, VectorType(et, n.type.count) if isinstance(n.type, VectorType) else et)
    if isinstance(x.type, VectorType) and not isinstance(n.type, VectorType):
        n = fl.b.splat(n, x.type.count)
    return fl.b.value("bits", [x, y, n], x.type, fn=name)


@builtin("byte_perm")
def _byte_perm(fl, f, e, kw):
    ops = []
    for a in e.args:
        v = fl.rvalue(fl.ev(a), a.span)
        if isinstance(v, CV):
            v = fl.coerce(v, U32, a.span, "pass {src} to byte_perm as a u32")
        if not (isinstance(v.type, ScalarType) and v.type.is_int and v.type.bits == 32):
            fl.fail(f"byte_perm takes 32-bit integers (u32 or i32), found {type_desc(v)}", a.span,
                    hint="convert it: u32(x)" if isinstance(v.type, ScalarType) else None)
        ops.append(v if v.type == U32 else fl.b.bitcast(v, U32))
    return fl.b.value("bits", ops, U32, fn="byte_perm")


@builtin(*FCLASS_TESTS)
def _fclass(fl, f, e, kw):
    name = f.fn.name
    a = e.args[0]
    v = fl.rvalue(fl.ev(a), a.span)
    if isinstance(v, CV):
        if v.kind != "float":
            fl.fail(f"{name} needs a floating-point value, found {v.describe()}", a.span)
        v = fl.materialise(v, a.span, v.type if v.type is not None and v.type.is_float else SCALARS["f32"])
    et = _lanes(v.type)
    if not (et is not None and (et.is_float or et.is_minifloat)):
        fl.fail(f"{name} needs a floating-point value, found {type_desc(v)}", a.span,
                hint="an integer is always finite: convert it first, f32(x)" if et is not None and et.is_int
                else None)
    t = v.type
    rt = VectorType(BOOL, t.count) if isinstance(t, VectorType) else BOOL
    return fl.b.value("fclass", [v], rt, test=name)
