"""The warp (wavefront) builtins: ``shuffle``, ``shuffle_xor``, ``shuffle_down``, ``shuffle_up``,
``ballot``, ``active_mask``, ``read_first_lane`` and ``warp_sync``; values of 8 to 64 bits travel as
32- or 64-bit words.
"""
from __future__ import annotations

from ..ir import Value
from ..ir.types import BOOL, I32, SCALARS, U64, PointerType, ScalarType, VectorType, sizeof
from . import ast as A
from .builtin_registry import builtin
from .semantic import CV, fits
from .values import VOIDV, type_desc


def _warp_value(fl, a: A.Expr, what: str) -> Value:
    v = fl._value(a)
    t = v.type
    bits = t.elem.bits * t.count if isinstance(t, VectorType) else (t.bits if isinstance(t, ScalarType) else 0)
    if isinstance(t, PointerType) or bits == 0 or bits > 64:
        fl.fail(f"{what} takes a scalar or vector of at most 64 bits, found {t}", a.span)
    if isinstance(t, VectorType) and t.elem.is_bool:
        fl.fail(f"{what} cannot take {t}: bool has no bit layout", a.span, hint="convert it: vec<u8, N>(v)")
    if bits not in (8, 16, 32, 64) and t != BOOL:
        fl.fail(f"{what} takes values of 8, 16, 32 or 64 bits, found {t} ({bits} bits)", a.span)
    return v


def _warp_word(fl, v: Value):
    """The warp primitives move 32- or 64-bit scalars: ``v`` widened or reinterpreted to one,
    and the function that turns the result back into ``v``'s type."""
    t = v.type
    if isinstance(t, ScalarType) and t.bits in (32, 64) and not t.is_bool:
        return v, lambda r: r
    if isinstance(t, ScalarType) and (t.is_bool or t.is_int):
        wide = I32 if t.is_signed else SCALARS["u32"]
        return fl.b.cast(v, wide), lambda r: fl.b.cast(r, t)
    bits = sizeof(t) * 8
    it = SCALARS[f"u{bits}"]
    x = fl.b.bitcast(v, it)
    if bits >= 32:
        return x, lambda r: fl.b.bitcast(r, t)
    return fl.b.cast(x, SCALARS["u32"]), lambda r: fl.b.bitcast(fl.b.cast(r, it), t)


@builtin("shuffle", "shuffle_xor", "shuffle_down", "shuffle_up")
def _shuffle(fl, f, e, kw):
    mode = {"shuffle": "idx", "shuffle_xor": "xor", "shuffle_down": "down", "shuffle_up": "up"}[f.fn.name]
    v = _warp_value(fl, e.args[0], f.fn.name)
    lane = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    if isinstance(lane, CV):
        if lane.kind != "int" or not fits(lane.value, I32):
            fl.fail(f"the lane of {f.fn.name} must be an i32, found {lane.describe()}", e.args[1].span)
        lv = fl.b.const(lane.value, I32)
    else:
        if not (isinstance(lane.type, ScalarType) and lane.type.is_int):
            fl.fail(f"the lane of {f.fn.name} must be an integer, found {lane.type}", e.args[1].span)
        lv = fl.b.cast(lane, I32)
    w, back = _warp_word(fl, v)
    return back(fl.b.shuffle(mode, w, lv))


@builtin("ballot")
def _ballot(fl, f, e, kw):
    v = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    if isinstance(v, CV) and v.kind == "bool":
        v = fl.b.const(bool(v.value), BOOL)
    if not (isinstance(v, Value) and v.type == BOOL):
        fl.fail(f"ballot takes a bool, found {type_desc(v)}", e.args[0].span, hint="compare it: x != 0")
    return fl.b.ballot(v)


@builtin("active_mask")
def _active_mask(fl, f, e, kw):
    return fl.b.value("active_mask", [], U64)


@builtin("read_first_lane")
def _read_first_lane(fl, f, e, kw):
    v = _warp_value(fl, e.args[0], "read_first_lane")
    w, back = _warp_word(fl, v)
    return back(fl.b.value("read_first_lane", [w], w.type))


@builtin("warp_sync")
def _warp_sync(fl, f, e, kw):
    mask = [fl.operand(a, U64, "pass {src} as warp_sync's u64 lane mask") for a in e.args]
    fl.b.op("warp_sync", mask)
    return VOIDV
