"""The warp (wavefront) builtins: ``shuffle``, ``shuffle_xor``, ``shuffle_down``, ``shuffle_up``,
``ballot``, ``active_mask``, ``read_first_lane`` and ``warp_sync``; values of up to 16 bytes (scalars
and vectors) travel as 32-bit words.
"""
from __future__ import annotations

from ..ir import Value
from ..ir.types import BOOL, I32, SCALARS, U64, PointerType, ScalarType, StructType, VectorType, sizeof
from . import ast as A
from .builtin_registry import builtin
from .semantic import CV, fits
from .values import VOIDV, type_desc


def _warp_value(fl, a: A.Expr, what: str) -> Value:
    """Argument ``a`` of a warp builtin: a value of at most 16 bytes (``sizeof``), scalar, vector or
    struct (moved as its bytes, padding included)."""
    v = fl._value(a)
    t = v.type
    if isinstance(t, PointerType) or not isinstance(t, (ScalarType, VectorType, StructType)):
        fl.fail(f"{what} takes a scalar, vector or struct of at most 16 bytes, found {t}", a.span)
    if isinstance(t, VectorType) and t.elem.is_bool:
        fl.fail(f"{what} cannot take {t}: bool has no bit layout", a.span, hint="convert it: vec<u8, N>(v)")
    if sizeof(t) > 16:
        fl.fail(f"{what} takes values of at most 16 bytes, found {t} ({sizeof(t)} bytes)", a.span,
                hint="split it: shuffle each half")
    return v


def _warp_word(fl, v: Value):
    """The value the IR's warp op moves, and the function that turns its result back into ``v``'s
    type: integers and bool of fewer than 32 bits widened to a 32-bit integer (sign-extended when
    signed, as CUDA's __shfl_sync of a char does), anything else as it is (the backend moves it as
    32-bit words: backends/llvm/lower_machine.py ``_as_words``)."""
    t = v.type
    if isinstance(t, ScalarType) and (t.is_bool or t.is_int) and t.bits < 32:
        wide = I32 if t.is_signed else SCALARS["u32"]
        return fl.b.cast(v, wide), lambda r: fl.b.cast(r, t)
    return v, lambda r: r


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
