"""The atomic builtins: read-modify-write (``atomic_add`` ... ``atomic_cas``: the old value), and
``atomic_load`` / ``atomic_store``, each with a memory order and a scope.
"""
from __future__ import annotations

from ..ir.core import ATOMIC_OPS
from ..ir.types import ScalarType, VectorType, elem_of
from . import builtins as B
from .builtin_registry import builtin
from .values import VOIDV


@builtin("atomic_load")
def _atomic_load(fl, f, e, kw):
    p, order, scope = _atomic_access(fl, f, e, kw, ("relaxed", "acquire", "seq_cst"))
    return fl.b.value("atomic_load", [p], p.type.pointee, order=order, scope=scope)


@builtin("atomic_store")
def _atomic_store(fl, f, e, kw):
    p, order, scope = _atomic_access(fl, f, e, kw, ("relaxed", "release", "seq_cst"))
    v = fl.operand(e.args[1], p.type.pointee, f"store {{src}} into {p.type}")
    fl.b.op("atomic_store", [p, v], order=order, scope=scope)
    return VOIDV


def _atomic_access(fl, f, e, kw, orders: tuple[str, ...]):
    """The pointer, order and scope of atomic_load/atomic_store: scalars of 8 to 64 bits."""
    p = fl._pointer(e.args[0], f.fn.name)
    t = p.type.pointee
    if not (isinstance(t, ScalarType) and t.bits in (8, 16, 32, 64) and not t.is_bool):
        fl.fail(f"{f.fn.name} works on integers and floats of 8 to 64 bits, found {p.type}", e.args[0].span)
    order = fl._str_kw(kw, "order", orders, "relaxed")
    scope = fl._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
    return p, order, scope


@builtin(*(f"atomic_{op}" for op in ATOMIC_OPS), "atomic_cas")
def _atomic_rmw(fl, f, e, kw):
    op = f.fn.name[len("atomic_"):]
    p = fl._pointer(e.args[0], f.fn.name)
    t = p.type.pointee
    half = elem_of(t).name in ("f16", "bf16") and (isinstance(t, ScalarType) or t.count == 2) \
        if isinstance(t, (ScalarType, VectorType)) else False
    if op == "add" and half:
        pass  # 16-bit float adds: f16, bf16, vec<f16, 2>, vec<bf16, 2> (docs/LANGUAGE.md, "Atomics")
    elif not (isinstance(t, ScalarType) and t.bits in (32, 64) and not t.is_bool):
        fl.fail(f"{f.fn.name} works on 32- and 64-bit integers and floats, found {p.type}", e.args[0].span,
                hint="atomic_add also takes f16, bf16, vec<f16, 2> and vec<bf16, 2>" if half else None)
    if op in ("and", "or", "xor") and t.is_float:
        fl.fail(f"{f.fn.name} needs an integer pointee, found {p.type}", e.args[0].span,
                hint=f"reinterpret it: ptr<u{t.bits}>(p)")
    order = fl._str_kw(kw, "order", B.ORDERS, "relaxed")
    scope = fl._str_kw(kw, "scope", B.FENCE_SCOPES, "device")
    if op == "cas":
        c = fl.operand(e.args[1], t, f"compare {{src}} with a {t} in {f.fn.name}")
        n = fl.operand(e.args[2], t, f"store {{src}} into {p.type}")
        return fl.b.atomic_cas(p, c, n, order, scope)
    v = fl.operand(e.args[1], t, f"apply {f.fn.name} with {{src}} to {p.type}")
    return fl.b.atomic(op, p, v, order, scope)
