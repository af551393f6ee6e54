"""The ``printf`` builtin: the format checked against every argument's type at compile time, the
arguments promoted, string literals folded into the format; then the IR op ``printf`` (vprintf on
NVIDIA), or the hostcall / buffered printf of frontend/hostcall_printf.py and buffered_printf.py on a
target whose ``printf_method`` says so.
"""
from __future__ import annotations

from typing import Any

from ..ir import Value
from ..ir.types import I32, SCALARS, U8, U32, U64, AddressSpace, PointerType
from ..ir.printf import (STRING_LITERAL, Conversion, argument_name, argument_type, check_argument, conversions,
                      escape_text, expected_args, fold_string)
from . import ast as A
from .buffered_printf import lower_buffered_printf
from .builtin_registry import builtin
from .hostcall_printf import lower_hostcall_printf
from .printf_format import FormatProblem, check_call, conversion_span
from .semantic import CV, fits
from .values import VOIDV


@builtin("printf")
def _printf(fl, f, e, kw):
    """``printf("format", args...)``: the format checked against every argument's type, the
    arguments given C's default promotions (casts inserted), and each ``%s`` whose argument is a
    string literal folded into the format, so that only device strings travel. Emits the IR op
    ``printf`` (vprintf on NVIDIA), or, on a target whose ``printf_method`` is "hostcall",
    hands the call to :func:`hostcall_printf`."""
    return lower_printf(fl, e)


def lower_printf(fl, e: A.Call, lead: tuple[str, list[Value]] = ("", []), what: str = "printf") -> Any:
    """The printf of call ``e`` (format literal first, then its arguments), after ``lead``: format
    text already escaped and its values already promoted (device assert's location, block and
    thread), which go first in the same message. ``what`` names the call in errors."""
    try:
        lit, pieces = check_call(e, what)
    except FormatProblem as p:
        fl.fail(p.message, p.span, p.hint)
    rest = iter(e.args[1:])
    text: list[str] = [lead[0]]
    values: list[Value] = list(lead[1])
    for piece in pieces:
        if not isinstance(piece, Conversion):
            text.append(escape_text(piece))
            continue
        vals = [_printf_arg(fl, piece, pos, next(rest), lit) for pos in range(len(expected_args(piece)))]
        if isinstance(vals[-1], str):  # a string literal for %s
            if piece.width != "*" and piece.precision != "*":
                text.append(escape_text(fold_string(piece, vals[-1])))
                values.extend(vals[:-1])
                continue
            vals[-1] = fl.b.value("string", [], PointerType(U8, AddressSpace.CONST),
                                  value=vals[-1].split("\0", 1)[0])
        text.append(lit.value[piece.start:piece.end])
        values.extend(vals)
    fmt = "".join(text)
    if getattr(fl.target, "printf_method", "vprintf") in ("hostcall", "buffered"):
        return hostcall_printf(fl, e, fmt, values)
    fl.b.op("printf", values, format=fmt)
    return VOIDV


def _printf_arg(fl, conv: Any, pos: int, a: A.Expr, lit: A.StrLit) -> Any:
    """Argument ``pos`` of conversion ``conv`` (see printf.expected_args): a Value of the type it
    travels as (promoted, and widened to what the conversion reads), or the text of a string
    literal given to %s."""
    kinds = expected_args(conv)
    kind = kinds[pos]
    is_value = pos == len(kinds) - 1
    ints = ("i32", "u32", "i64", "u64")
    if kind == "f128":  # %Lf: a long double, which no argument is
        fl.fail(check_argument(conv, SCALARS["f64"], pos), conversion_span(lit, conv))
    v = fl.rvalue(fl.ev(a), a.span)
    if isinstance(v, CV):
        what = argument_name(conv, pos)
        want = {"f64": "a floating-point value", "str": "a string", "ptr": "a pointer"}.get(kind, "an integer")
        if v.kind == "str":
            if kind == "str":
                return v.value
            fl.fail(check_argument(conv, STRING_LITERAL, pos), a.span)
        if v.kind == "int" and kind in ints and (v.type is None or check_argument(conv, v.type, pos)):
            # a literal, or a compile-time integer, takes the type the conversion reads if it fits
            cands = (I32, U32) if kind in ("i32", "u32") else (SCALARS["i64"], U64)
            t = next((c for c in cands if fits(v.value, c)), None)
            if t is None:
                wider = f": write %l{conv.conv} for 64 bits" if kind in ("i32", "u32") and is_value \
                    and conv.conv in "diuxXo" else ""
                fl.fail(f"{'integer literal' if v.type is None else v.type} {v.value} does not fit the "
                        f"32 bits {what} reads{wider}", a.span)
            return fl.b.const(v.value, t)
        if v.type is None and v.kind == "int":
            fl.fail(f"{what} expects {want}, found integer literal {v.value}", a.span,
                    hint=f"write {v.value}.0" if kind == "f64" else None)
        if v.type is None and v.kind == "float":
            if kind == "f64":  # C's double: the literal as written, not rounded to f32 first
                return fl.b.const(float(v.value), SCALARS["f64"])
            fl.fail(f"{what} expects {want}, found float literal {v.value!r}", a.span,
                    hint="write %f (or %g, %e) to print a float" if is_value and kind in ints else None)
        v = fl.materialise(v, a.span, v.type)
    msg = check_argument(conv, v.type, pos)
    if msg is not None:
        fl.fail(msg, a.span)
    t = argument_type(conv, v.type, pos)
    if isinstance(t, PointerType):
        return v
    return fl.b.cast(v, t)


def hostcall_printf(fl: Any, call: A.Call, fmt: str, values: list[Value]) -> Any:
    """printf on a target whose ``printf_method`` is "hostcall" or "buffered": ``fmt`` is the
    checked format with the string literals folded in, ``values`` the promoted arguments (scalars
    of i32, u32, i64, u64 or f64, and pointers): they become calls of std.hostcall's printf
    service, or of std.printf_buffer (frontend/buffered_printf.py)."""
    strings = [k == "str" for c in conversions(fmt) for k in expected_args(c)]
    lower = lower_buffered_printf if fl.target.printf_method == "buffered" else lower_hostcall_printf
    lower(fl, call.span, fmt, values, strings)
    return VOIDV
