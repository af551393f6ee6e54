"""The conversion builtins: ``convert[T](x, saturate = false, exact_nan = true)`` (an explicit
conversion that can saturate into a small float, or leave a small float's NaN bits to the hardware) and
``bitcast[T](x)`` (the same bits as another type).
"""
from __future__ import annotations

from ..ir.types import AddressSpace, PointerType, ScalarType, VectorType, sizeof
from .builtin_registry import builtin
from .values import has_bool


@builtin("convert")
def _convert(fl, f, e, kw):
    """convert[T](x, saturate = false, exact_nan = true): T(x), choosing what a small float does on
    overflow (into one) and whether its NaN codes give ml_dtypes' NaN bits (from one; false: the
    convert instruction's NaN, one fix-up fewer a value where the target converts in hardware)."""
    t = fl._type_arg(f)
    v = fl.rvalue(fl.ev(e.args[0]), e.args[0].span)
    saturate = fl._bool_kw(kw, "saturate", False)
    exact_nan = fl._bool_kw(kw, "exact_nan", True)
    te = t.elem if isinstance(t, VectorType) else t
    if saturate and not (isinstance(te, ScalarType) and te.is_minifloat):
        fl.fail(f"saturate applies to conversions into small floats, not to {t}", kw["saturate"].span)
    vt = getattr(v, "type", None)
    ve = vt.elem if isinstance(vt, VectorType) else vt
    if not exact_nan and not (isinstance(ve, ScalarType) and ve.is_minifloat):
        fl.fail(f"exact_nan applies to conversions from small floats, not from {vt or 'a constant'}",
                kw["exact_nan"].span)
    return fl.convert_value(v, t, e.args[0].span, saturate=saturate, exact_nan=exact_nan)


@builtin("bitcast")
def _bitcast(fl, f, e, kw):
    t = fl._type_arg(f)
    v = fl._value(e.args[0])
    if isinstance(t, PointerType) or isinstance(v.type, PointerType):
        if isinstance(t, PointerType) and isinstance(v.type, PointerType) and t.space == v.type.space:
            return fl.b.ptrcast(v, t.pointee)
        ptr, num = (t, v.type) if isinstance(t, PointerType) else (v.type, t)
        if isinstance(ptr, PointerType) and ptr.space in (AddressSpace.GLOBAL, AddressSpace.CONST) \
                and isinstance(num, ScalarType) and num.is_int and num.bits == 64:
            return fl.b.bitcast(v, t)  # the address as an integer, or an integer as an address
        fl.fail(f"cannot bitcast {v.type} to {t}", e.span,
                hint="pointers bitcast to pointers of the same address space, and global or const "
                "pointers to and from u64/i64 (the address)")
    if not isinstance(t, (ScalarType, VectorType)) or not isinstance(v.type, (ScalarType, VectorType)):
        fl.fail(f"cannot bitcast {v.type} to {t}", e.span)
    sb = sizeof(v.type) if not has_bool(v.type) else -1
    tb = sizeof(t) if not has_bool(t) else -1
    if sb < 0 or tb < 0:
        fl.fail("bool has no bit layout to bitcast", e.span, hint="convert it: u8(b)")
    if sb != tb:
        fl.fail(f"cannot bitcast {v.type} ({sb} bytes) to {t} ({tb} bytes): sizes differ", e.span)
    if v.type == t:
        return v
    return fl.b.bitcast(v, t)
