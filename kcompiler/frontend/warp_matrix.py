"""The warp-level matrix builtins in the frontend: ``mma_sync``, ``ldmatrix``, ``cp_async``,
``cp_async_commit`` and ``cp_async_wait`` type-checked (located errors for wrong fragment types,
address spaces and sizes, and for a target without the feature) and lowered to the NVIDIA target
intrinsics ``nvptx.mma.sync``, ``nvptx.ldmatrix``, ``nvptx.cp_async``, ``nvptx.cp_async.commit_group``
and ``nvptx.cp_async.wait_group`` (backends/nvptx/intrinsics.py) through the IR's ``intrinsic`` op.

The fragment layouts the types stand for are NVIDIA's (PTX ISA 8.x, "Warp-level matrix fragments");
backends/nvptx/mma.py writes them down.
"""
from __future__ import annotations

from typing import Any

from ..ir.types import BF16, F16, F32, F8E4M3, F8E5M2, U32, AddressSpace, ScalarType, VectorType, sizeof
from .builtin_registry import builtin, require_feature
from .semantic import CV
from . import ast as A
from .values import VOIDV

#: The builtins this file lowers, and the ``target.has`` feature each needs.
FEATURES = {"mma_sync": "mma", "ldmatrix": "ldmatrix", "cp_async": "cp_async", "cp_async_commit": "cp_async",
            "cp_async_wait": "cp_async"}

_F16S = (F16, BF16)
_F8S = (F8E4M3, F8E5M2)


@builtin(*FEATURES)
def lower_builtin(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """Lower call ``e`` of warp-matrix builtin ``f`` (a BuiltinRef) in FnLowering ``fl``."""
    name = f.fn.name
    return {"mma_sync": _mma_sync, "ldmatrix": _ldmatrix, "cp_async": _cp_async,
            "cp_async_commit": _cp_async_commit, "cp_async_wait": _cp_async_wait}[name](fl, f, e, kw)


def _vec(v: Any) -> tuple[ScalarType | None, int]:
    t = getattr(v, "type", None)
    return (t.elem, t.count) if isinstance(t, VectorType) else (None, 0)


def _mma_sync(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``mma_sync(a, b, c)``: the shape from the fragment types (see builtins.py)."""
    a, b, c = (fl._value(x) for x in e.args)
    ae, an = _vec(a)
    be, bn = _vec(b)
    if ae in _F16S and an == 8:
        shape, feature = "m16n8k16", "mma"
        if not (be == ae and bn == 4):
            fl.fail(f"mma_sync's B fragment must be vec<{ae}, 4> to go with an A of {a.type}, found {b.type}",
                    e.args[1].span, hint="m16n8k16: a lane holds 8 elements of A and 4 of B, of one type")
    elif ae in _F8S and an == 16:
        shape, feature = "m16n8k32", "mma_fp8"
        if not (be in _F8S and bn == 8):
            fl.fail(f"mma_sync's B fragment must be vec<f8e4m3, 8> or vec<f8e5m2, 8> to go with an A of "
                    f"{a.type}, found {b.type}", e.args[1].span,
                    hint="m16n8k32: a lane holds 16 elements of A and 8 of B")
    else:
        fl.fail(f"mma_sync's A fragment must be vec<bf16, 8> or vec<f16, 8> (m16n8k16), or vec<f8e4m3, 16> or "
                f"vec<f8e5m2, 16> (m16n8k32), found {a.type}", e.args[0].span)
    if c.type != VectorType(F32, 4):
        fl.fail(f"mma_sync's accumulator must be vec<f32, 4>, found {c.type}", e.args[2].span,
                hint="a lane holds 4 f32 elements of C and D")
    require_feature(fl, "nvptx.mma.sync", e.span, feature)
    return fl.b.intrinsic("nvptx.mma.sync", [a, b, c], VectorType(F32, 4), shape=shape)


def _shared_pointer(fl: Any, arg: Any, what: str) -> Any:
    p = fl._pointer(arg, what)
    if p.type.space != AddressSpace.SHARED:
        fl.fail(f"{what} reads shared memory: it needs a ptr<{p.type.pointee}, shared>, found {p.type}", arg.span)
    return p


def _ldmatrix(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``ldmatrix[vec<T, N>](p, trans = false)``: N * sizeof(T) / 4 matrices (x1, x2 or x4)."""
    t = fl._type_arg(f)
    trans = fl._bool_kw(kw, "trans", False)
    p = _shared_pointer(fl, e.args[0], "ldmatrix")
    el = p.type.pointee
    if not (isinstance(t, VectorType) and isinstance(el, ScalarType) and t.elem == el and el.bits in (8, 16)
            and not el.is_bool):
        fl.fail(f"ldmatrix[{t}] cannot load from {p.type}: it loads vec<T, N> from ptr<T, shared> with T of "
                f"16 bits (or 8)", f.span, hint="ldmatrix[vec<bf16, 8>](p) loads four 8x8 matrices of bf16")
    num, rem = divmod(sizeof(t), 4)
    if rem or num not in (1, 2, 4):
        per = 4 // el.size
        fl.fail(f"ldmatrix[{t}] loads {sizeof(t)} bytes a lane; it loads 1, 2 or 4 matrices: vec<{el}, "
                f"{per}>, vec<{el}, {2 * per}> or vec<{el}, {4 * per}>", f.span)
    if trans and el.bits != 16:
        fl.fail(f"ldmatrix transposes 16-bit elements, not {el}", kw["trans"].span)
    require_feature(fl, "nvptx.ldmatrix", e.span)
    return fl.b.intrinsic("nvptx.ldmatrix", [p], t, num=num, trans=trans)


def _cp_async(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``cp_async(dst, src, bytes[, src_bytes])``."""

    dst = fl._pointer(e.args[0], "cp_async")
    if dst.type.space != AddressSpace.SHARED:
        fl.fail(f"cp_async copies into shared memory: the destination must be a ptr<{dst.type.pointee}, shared>, "
                f"found {dst.type}", e.args[0].span)
    src = fl._pointer(e.args[1], "cp_async")
    if src.type.space != AddressSpace.GLOBAL:
        fl.fail(f"cp_async copies from global memory: the source must be a ptr<{src.type.pointee}>, found "
                f"{src.type}", e.args[1].span)
    if src.type.pointee != dst.type.pointee:
        fl.fail(f"cp_async from {src.type} into {dst.type}: the element types differ", e.span,
                hint="reinterpret one: bitcast[ptr<T, shared>](p)")
    nbytes = fl.comptime_int(e.args[2], "cp_async's byte count")
    if nbytes not in (4, 8, 16):
        fl.fail(f"cp_async copies 4, 8 or 16 bytes, not {nbytes}", e.args[2].span)
    try:
        esize = sizeof(dst.type.pointee)
    except TypeError:
        esize = 0
    if esize == 0 or nbytes % esize:
        fl.fail(f"cp_async of {nbytes} bytes does not copy whole elements of {dst.type.pointee}", e.args[2].span)
    if len(e.args) == 4:
        a = e.args[3]
        v = fl.rvalue(fl.ev(a), a.span)
        if isinstance(v, CV):
            if v.kind != "int" or not 0 <= v.value <= nbytes:
                fl.fail(f"cp_async's source size must be an integer from 0 to {nbytes}, found {v.describe()}",
                        a.span)
            size = fl.b.const(int(v.value), U32)
        else:
            if not (isinstance(v.type, ScalarType) and v.type.is_int):
                fl.fail(f"cp_async's source size must be an integer, found {v.type}", a.span)
            size = v if v.type == U32 else fl.b.cast(v, U32)
    else:
        size = fl.b.const(nbytes, U32)
    require_feature(fl, "nvptx.cp_async", e.span)
    fl.b.intrinsic("nvptx.cp_async", [dst, src, size], bytes=nbytes)
    return VOIDV


def _cp_async_commit(fl: Any, f: Any, e: Any, kw: dict) -> Any:

    require_feature(fl, "nvptx.cp_async.commit_group", e.span)
    fl.b.intrinsic("nvptx.cp_async.commit_group")
    return VOIDV


def _cp_async_wait(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    args = f.targs or []
    if len(args) != 1 or isinstance(args[0], (A.KwArg, A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)):
        fl.fail("cp_async_wait takes one count in brackets: cp_async_wait[0]()", f.span)
    n = fl.comptime_int(args[0], "cp_async_wait's group count")
    if n < 0:
        fl.fail(f"cp_async_wait's group count must be 0 or more, not {n}", args[0].span)
    require_feature(fl, "nvptx.cp_async.wait_group", e.span)
    fl.b.intrinsic("nvptx.cp_async.wait_group", n=n)
    return VOIDV


__all__ = ["FEATURES", "lower_builtin"]
