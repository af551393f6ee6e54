"""The memory builtins: ``load[T](p)`` and ``store(p, v)`` (one wide access, vectors aligned to their
size), ``dynamic_shared[T]()`` (the launch's dynamic shared memory) and ``prefetch_l2(p, bytes)``.
"""
from __future__ import annotations

from ..ir import Value
from ..ir.types import I32, AddressSpace, ArrayType, ScalarType, Type, VectorType
from .builtin_registry import builtin
from .values import VOIDV


def _vec_align(t: Type) -> int | None:
    """The alignment of a vector access: its size if a power of two, else its element's; None for a scalar."""
    if isinstance(t, VectorType):
        n = t.size
        return n if n & (n - 1) == 0 else t.elem.size
    return None


@builtin("load")
def _load(fl, f, e, kw):
    p = fl._pointer(e.args[0], "load")
    pointee = p.type.pointee
    if f.targs is None:
        return fl.b.load(p)
    t = fl._type_arg(f)
    if t == pointee:
        return fl.b.load(p, align=_vec_align(t))
    if isinstance(t, VectorType) and t.elem == pointee:
        return fl.b.load(fl.b.ptrcast(p, t), align=_vec_align(t))
    fl.fail(f"load[{t}] needs a ptr<{t.elem if isinstance(t, VectorType) else t}>, found {p.type}",
            e.args[0].span)


@builtin("store")
def _store(fl, f, e, kw):
    p = fl._pointer(e.args[0], "store")
    pointee = p.type.pointee
    v = fl.rvalue(fl.ev(e.args[1]), e.args[1].span)
    if isinstance(v, Value) and isinstance(v.type, VectorType) and v.type != pointee:
        if v.type.elem != pointee:
            fl.fail(f"cannot store {v.type} into {p.type}", e.args[1].span,
                    hint=f"convert it: {VectorType(pointee, v.type.count) if isinstance(pointee, ScalarType) else pointee}(v)"
                    if isinstance(pointee, ScalarType) else None)
        fl.b.store(fl.b.ptrcast(p, v.type), v, align=_vec_align(v.type))
        return VOIDV
    if isinstance(pointee, ArrayType):
        fl.fail(f"cannot store into {p.type}", e.args[0].span)
    x = fl.coerce(v, pointee, e.args[1].span, f"store {{src}} into {p.type}")
    fl.b.store(p, x, align=_vec_align(pointee) if isinstance(pointee, VectorType) else None)
    return VOIDV


@builtin("prefetch_l2")
def _prefetch_l2(fl, f, e, kw):
    p = fl._pointer(e.args[0], "prefetch_l2")
    if p.type.space != AddressSpace.GLOBAL:
        fl.fail(f"prefetch_l2 takes a global pointer, not {p.type}", e.args[0].span)
    n = fl.operand(e.args[1], I32, "pass {src} as prefetch_l2's i32 byte count")
    fl.b.op("prefetch_l2", [p, n])
    return VOIDV


@builtin("dynamic_shared")
def _dynamic_shared(fl, f, e, kw):
    t = fl._type_arg(f)
    if isinstance(t, ArrayType):
        fl.fail("dynamic_shared[T] takes the element type", f.span)
    return fl.b.dyn_shared(t)
