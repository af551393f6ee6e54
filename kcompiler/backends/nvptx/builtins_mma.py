"""The checks of the warp-level matrix builtins (NVIDIA sm_80+): ``mma_sync``, ``ldmatrix``,
``cp_async``, ``cp_async_commit`` and ``cp_async_wait``, written against
:class:`~kcompiler.ir.builtin_surface.BuiltinCall`: type-checked (located errors for wrong fragment
types, address spaces and sizes, and for a target without the feature) and lowered to the target
intrinsics ``nvptx.mma.sync``, ``nvptx.ldmatrix``, ``nvptx.cp_async``, ``nvptx.cp_async.commit_group``
and ``nvptx.cp_async.wait_group`` (intrinsics.py) through the IR's ``intrinsic`` op.

The fragment layouts the types stand for are NVIDIA's (PTX ISA 8.x, "Warp-level matrix fragments");
mma.py writes them down; builtins.py declares the names.
"""
from __future__ import annotations

from typing import Any

from ...ir.builtin_surface import BuiltinCall
from ...ir.core import Value
from ...ir.types import BF16, F16, F32, F8E4M3, F8E5M2, U32, AddressSpace, ScalarType, VectorType, sizeof

_F16S = (F16, BF16)
_F8S = (F8E4M3, F8E5M2)


def _vec(v: Any) -> tuple[ScalarType | None, int]:
    t = getattr(v, "type", None)
    return (t.elem, t.count) if isinstance(t, VectorType) else (None, 0)


def mma_sync(call: BuiltinCall) -> Value | None:
    """``mma_sync(a, b, c)``: the shape from the fragment types (m16n8k16 or m16n8k32)."""
    a, b, c = call.value(0), call.value(1), call.value(2)
    ae, an = _vec(a)
    be, bn = _vec(b)
    if ae in _F16S and an == 8:
        shape, feature = "m16n8k16", "mma"
        if not (be == ae and bn == 4):
            call.fail(f"mma_sync's B fragment must be vec<{ae}, 4> to go with an A of {a.type}, found {b.type}",
                      1, hint="m16n8k16: a lane holds 8 elements of A and 4 of B, of one type")
    elif ae in _F8S and an == 16:
        shape, feature = "m16n8k32", "mma_fp8"
        if not (be in _F8S and bn == 8):
            call.fail(f"mma_sync's B fragment must be vec<f8e4m3, 8> or vec<f8e5m2, 8> to go with an A of "
                      f"{a.type}, found {b.type}", 1, hint="m16n8k32: a lane holds 16 elements of A and 8 of B")
    else:
        call.fail(f"mma_sync's A fragment must be vec<bf16, 8> or vec<f16, 8> (m16n8k16), or vec<f8e4m3, 16> or "
                  f"vec<f8e5m2, 16> (m16n8k32), found {a.type}", 0)
    if c.type != VectorType(F32, 4):
        call.fail(f"mma_sync's accumulator must be vec<f32, 4>, found {c.type}", 2,
                  hint="a lane holds 4 f32 elements of C and D")
    call.require_feature("nvptx.mma.sync", feature)
    return call.emit("nvptx.mma.sync", [a, b, c], VectorType(F32, 4), shape=shape)


def ldmatrix(call: BuiltinCall) -> Value | None:
    """``ldmatrix[vec<T, N>](p, trans = false)``: N * sizeof(T) / 4 matrices (x1, x2 or x4)."""
    t = call.type_arg()
    trans = call.bool_kw("trans", False)
    p = call.pointer(0, "ldmatrix")
    if p.type.space != AddressSpace.SHARED:
        call.fail(f"ldmatrix reads shared memory: it needs a ptr<{p.type.pointee}, shared>, found {p.type}", 0)
    el = p.type.pointee
    if not (isinstance(t, VectorType) and isinstance(el, ScalarType) and t.elem == el and el.bits in (8, 16)
            and not el.is_bool):
        call.fail(f"ldmatrix[{t}] cannot load from {p.type}: it loads vec<T, N> from ptr<T, shared> with T of "
                  f"16 bits (or 8)", "brackets", hint="ldmatrix[vec<bf16, 8>](p) loads four 8x8 matrices of bf16")
    num, rem = divmod(sizeof(t), 4)
    if rem or num not in (1, 2, 4):
        per = 4 // el.size
        call.fail(f"ldmatrix[{t}] loads {sizeof(t)} bytes a lane; it loads 1, 2 or 4 matrices: vec<{el}, "
                  f"{per}>, vec<{el}, {2 * per}> or vec<{el}, {4 * per}>", "brackets")
    if trans and el.bits != 16:
        call.fail(f"ldmatrix transposes 16-bit elements, not {el}", "trans=")
    call.require_feature("nvptx.ldmatrix")
    return call.emit("nvptx.ldmatrix", [p], t, num=num, trans=trans)


def _cp_async_pointers(call: BuiltinCall) -> tuple[Value, Value]:
    dst = call.pointer(0, "cp_async")
    if dst.type.space != AddressSpace.SHARED:
        call.fail(f"cp_async copies into shared memory: the destination must be a ptr<{dst.type.pointee}, shared>, "
                  f"found {dst.type}", 0)
    src = call.pointer(1, "cp_async")
    if src.type.space != AddressSpace.GLOBAL:
        call.fail(f"cp_async copies from global memory: the source must be a ptr<{src.type.pointee}>, found "
                  f"{src.type}", 1)
    if src.type.pointee != dst.type.pointee:
        call.fail(f"cp_async from {src.type} into {dst.type}: the element types differ", "call",
                  hint="reinterpret one: bitcast[ptr<T, shared>](p)")
    return dst, src


def _cp_async_source_size(call: BuiltinCall, nbytes: int) -> Value:
    """The optional fourth argument (default ``nbytes``) as a u32."""
    if call.nargs != 4:
        return call.const(nbytes, U32)
    c = call.constant(3)
    if c is not None:
        if c.kind != "int" or not 0 <= c.value <= nbytes:
            call.fail(f"cp_async's source size must be an integer from 0 to {nbytes}, found {c.text}", 3)
        return call.const(int(c.value), U32)
    v = call.value(3)
    if not (isinstance(v.type, ScalarType) and v.type.is_int):
        call.fail(f"cp_async's source size must be an integer, found {v.type}", 3)
    return v if v.type == U32 else call.cast(v, U32)


def cp_async(call: BuiltinCall) -> None:
    """``cp_async(dst, src, bytes[, src_bytes])``."""
    dst, src = _cp_async_pointers(call)
    nbytes = call.comptime_int(2, "cp_async's byte count")
    if nbytes not in (4, 8, 16):
        call.fail(f"cp_async copies 4, 8 or 16 bytes, not {nbytes}", 2)
    try:
        esize = sizeof(dst.type.pointee)
    except TypeError:
        esize = 0
    if esize == 0 or nbytes % esize:
        call.fail(f"cp_async of {nbytes} bytes does not copy whole elements of {dst.type.pointee}", 2)
    size = _cp_async_source_size(call, nbytes)
    call.require_feature("nvptx.cp_async")
    call.emit("nvptx.cp_async", [dst, src, size], bytes=nbytes)


def cp_async_commit(call: BuiltinCall) -> None:
    """``cp_async_commit()``."""
    call.require_feature("nvptx.cp_async.commit_group")
    call.emit("nvptx.cp_async.commit_group")


def cp_async_wait(call: BuiltinCall) -> None:
    """``cp_async_wait[N]()``."""
    if call.bracket_count != 1 or call.bracket_kind(0) != "value":
        call.fail("cp_async_wait takes one count in brackets: cp_async_wait[0]()", "brackets")
    n = call.comptime_int("[0]", "cp_async_wait's group count")
    if n < 0:
        call.fail(f"cp_async_wait's group count must be 0 or more, not {n}", "[0]")
    call.require_feature("nvptx.cp_async.wait_group")
    call.emit("nvptx.cp_async.wait_group", n=n)


__all__ = ["cp_async", "cp_async_commit", "cp_async_wait", "ldmatrix", "mma_sync"]
