"""The arithmetic builtins: the math functions (``sqrt``, ``exp``, ``fma``, ... : the IR op ``math``),
``min``, ``max`` (folded when both operands are compile-time numbers) and ``select``.
"""
from __future__ import annotations

from typing import Any

from ..ir import Value
from ..ir.core import MATH_FUNCTIONS
from ..ir.types import BOOL, SCALARS, ScalarType, VectorType, elem_of
from . import ast as A
from .builtin_registry import builtin
from .semantic import CV, SemanticError, convert_cv, default_type, fold_binary
from .values import has_bool, type_desc


@builtin(*MATH_FUNCTIONS)
def _math(fl, f, e, kw):
    name = f.fn.name
    ops = math_operands(fl, name, e)
    return fl.b.math(name, *ops)


def math_operands(fl, name: str, e: A.Call) -> list[Value]:
    """The arguments of math builtin call ``e`` (of ``name``), evaluated and converted to their common
    float type (scalar or vector; a compile-time number alone: its type, f32 if it has none), with a
    located error for integers, bools and a type the target has no ``name`` for."""
    vals = [fl.rvalue(fl.ev(a), a.span) for a in e.args]
    typed = [v for v in vals if isinstance(v, Value)]
    if typed:
        x = typed[0]
        for v in vals[1:] if vals[0] is x else vals:
            if v is x:
                continue
            x, _ = fl.common(x, v, name, e.span)
        t = x.type
    else:
        floats = [v for v in vals if isinstance(v, CV) and v.type is not None]
        t = floats[0].type if floats else None
        if t is None:
            t = default_type(vals[0]) if name == "abs" and vals[0].kind == "int" else \
                (vals[0].type if vals[0].type is not None else SCALARS["f32"])
    et = t.elem if isinstance(t, VectorType) else t
    if not isinstance(et, ScalarType) or et.is_bool:
        fl.fail(f"{name} needs numbers, found {t}", e.span)
    if not et.is_float and not (name == "abs" and et.is_signed):
        fl.fail(f"{name} needs floating-point arguments, found {t}", e.span,
                hint="convert it: f32(x)" if name != "abs" else "abs takes floats and signed integers")
    if name in MATH_FUNCTIONS and (why := fl.target.math_unsupported(name, str(et))) is not None:
        fl.fail(why[0], e.span, hint=why[1])
    return [fl.to_type(v, t, a.span) for v, a in zip(vals, e.args)]


@builtin("min")
def _min(fl, f, e, kw):
    return _minmax(fl, "min", e)


@builtin("max")
def _max(fl, f, e, kw):
    return _minmax(fl, "max", e)


def _minmax(fl, name: str, e: A.Call) -> Any:
    a = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    b = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    if isinstance(a, CV) and isinstance(b, CV) and a.kind in ("int", "float") and b.kind in ("int", "float"):
        try:
            r = fold_binary("<", a, b)
        except SemanticError as err:
            fl.sem(err, e.span)
        if r is not None:
            lt = bool(r.value)
            pick = a if lt == (name == "min") else b
            t = None
            try:
                t = fold_binary("+", a, b)
            except SemanticError:
                pass
            if t is not None and t.type is not None:
                return convert_cv(pick, t.type)
            return pick
    x, y = fl.common(a, b, name, e.span)
    if has_bool(x.type):
        fl.fail(f"{name} needs numbers, found {x.type}", e.span)
    fl.no_minifloat_arithmetic(elem_of(x.type), name, e.span)
    return fl.b.binary(name, x, y)


@builtin("select")
def _select(fl, f, e, kw):
    c = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    if isinstance(c, CV) and c.kind == "bool":
        c = fl.b.const(bool(c.value), BOOL)
    ct = c.type if isinstance(c, Value) else None
    if not (ct == BOOL or (isinstance(ct, VectorType) and ct.elem == BOOL)):
        fl.fail(f"the condition of select must be bool, found {type_desc(c)}", e.args[0].span)
    a = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    b = fl.rvalue(fl.ev(e.args[2]), e.args[2].span)
    x, y = fl.common(a, b, "select", e.span)
    if isinstance(ct, VectorType):
        if not isinstance(x.type, VectorType):
            x, y = fl.b.splat(x, ct.count), fl.b.splat(y, ct.count)
        if x.type.count != ct.count:
            fl.fail(f"select of {ct} between {x.type} values: lengths differ", e.span)
    return fl.b.select(c, x, y)
