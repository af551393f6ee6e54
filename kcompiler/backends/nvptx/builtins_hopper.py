"""The checks of the Hopper (NVIDIA sm_90 / sm_90a) builtins: warpgroup matrix multiply-accumulate
(``wgmma``, ``wgmma_fence``, ``wgmma_commit``, ``wgmma_wait``, ``wgmma_desc``), TMA tensor copies
(``tma_load``, ``tma_store``, ``tma_store_commit``, ``tma_store_wait``), bulk copies (``bulk_load``),
mbarriers (``mbarrier_init``, ``mbarrier_arrive``, ``mbarrier_arrive_expect_tx``,
``mbarrier_try_wait``, ``mbarrier_wait``), ``fence_proxy_async`` and ``setmaxnreg_inc`` /
``setmaxnreg_dec``, written against :class:`~kcompiler.ir.builtin_surface.BuiltinCall`. Each call is
type-checked (a located error for a wrong operand type, address space or size, and for a target
without the feature) and lowered to the target intrinsic of intrinsics.py (``nvptx.wgmma.mma_async``,
``nvptx.tma.load``...) through the IR's generic ``intrinsic`` op. The instructions and layouts are
stated, with their PTX ISA sections, in wgmma.py and tma.py; builtins.py declares the names.

Surface::
    acc = wgmma[bf16](a_desc, b_desc, acc, accumulate = k > 0, trans_b = false)  // acc: vec<f32, N / 2>
    acc = wgmma[bf16](a_frag, b_desc, acc)                  // A from registers: a_frag: vec<bf16, 8>
    let d = wgmma_desc(p, swizzle = 128, sbo = 1024)        // p: ptr<T, shared>  ->  u64
    tma_load(dst, map, bar, x, y)                           // map: tensor_map, bar: ptr<u64, shared>
    tma_store(map, src, x, y); tma_store_commit(); tma_store_wait[0]()   // src: ptr<T, shared>
    bulk_load(dst, src, bytes, bar)                         // src: ptr<T>, bytes: u32 (a multiple of 16)
    mbarrier_arrive_expect_tx(bar, bytes); mbarrier_wait(bar, parity)
    setmaxnreg_dec[40](); setmaxnreg_inc[232]()
"""
from __future__ import annotations

from typing import Any, Callable

from ...ir.builtin_surface import At, BuiltinCall
from ...ir.core import Value
from ...ir.types import BOOL, I32, SCALARS, U32, U64, AddressSpace, ScalarType, TensorMapType, VectorType

#: The builtins checked here and the target intrinsic each emits, whose feature it needs (the
#: intrinsic's record says what the feature is and which chips have it).
INTRINSIC_OF = {"wgmma": "nvptx.wgmma.mma_async", "wgmma_fence": "nvptx.wgmma.fence",
                "wgmma_commit": "nvptx.wgmma.commit_group", "wgmma_wait": "nvptx.wgmma.wait_group",
                "wgmma_desc": "nvptx.wgmma.desc", "tma_load": "nvptx.tma.load", "bulk_load": "nvptx.tma.bulk_load",
                "tma_store": "nvptx.tma.store", "tma_store_commit": "nvptx.tma.store_commit",
                "tma_store_wait": "nvptx.tma.store_wait",
                "mbarrier_init": "nvptx.mbarrier.init", "mbarrier_arrive": "nvptx.mbarrier.arrive",
                "mbarrier_arrive_expect_tx": "nvptx.mbarrier.arrive_expect_tx",
                "mbarrier_try_wait": "nvptx.mbarrier.try_wait", "mbarrier_wait": "nvptx.mbarrier.wait",
                "fence_proxy_async": "nvptx.fence.proxy_async", "setmaxnreg_inc": "nvptx.setmaxnreg",
                "setmaxnreg_dec": "nvptx.setmaxnreg"}

#: wgmma's input types and the K of one instruction.
_WGMMA_K = {"bf16": 16, "f16": 16, "f8e4m3": 32, "f8e5m2": 32}


def shared_ptr(call: BuiltinCall, at: At, builtin: str, what: str, pointee: Any = None) -> Value:
    """Argument ``at`` as a ``ptr<pointee, shared>`` (any pointee for None); a located error naming
    ``builtin``'s ``what`` otherwise."""
    p = call.pointer(at, f"{builtin}'s {what}")
    if p.type.space != AddressSpace.SHARED or (pointee is not None and p.type.pointee != pointee):
        want = f"ptr<{pointee}, shared>" if pointee is not None else f"ptr<{p.type.pointee}, shared>"
        call.fail(f"{builtin}'s {what} must be a {want}, found {p.type}", at)
    return p


def int_operand(call: BuiltinCall, at: At, t: ScalarType, what: str) -> Value:
    """Argument ``at`` as a ``t`` value: a compile-time integer that fits in ``t``, or an integer of
    at most 32 bits converted to ``t``."""
    c = call.constant(at)
    if c is not None:
        if c.kind != "int" or not 0 <= c.value < (1 << t.bits if not t.is_signed else 1 << (t.bits - 1)):
            call.fail(f"{what} must be an integer that fits in {t}, found {c.text}", at)
        return call.const(int(c.value), t)
    v = call.value(at)
    if not (isinstance(v.type, ScalarType) and v.type.is_int and v.type.bits <= 32):
        call.fail(f"{what} must be an integer of at most 32 bits, found {v.type}", at)
    return v if v.type == t else call.cast(v, t)


def bracket_ints(call: BuiltinCall, n: int, what: str) -> list[int]:
    """The ``n`` compile-time integers in the call's brackets; a located error otherwise."""
    if call.bracket_count != n or any(call.bracket_kind(j) != "value" for j in range(n)):
        call.fail(f"{call.builtin.name} takes {what} in brackets", "brackets", hint=call.builtin.doc or None)
    return [call.comptime_int(f"[{j}]", what) for j in range(n)]


def _mbar(call: BuiltinCall) -> Value:
    return shared_ptr(call, 0, call.builtin.name, "barrier", U64)


# --- wgmma ---------------------------------------------------------------------------------------------

def _wgmma_types(call: BuiltinCall) -> tuple[str, str]:
    """The input types in ``wgmma[TA(, TB)]``."""
    if not 1 <= call.bracket_count <= 2 or any(call.bracket_kind(j) == "keyword" for j in range(call.bracket_count)):
        call.fail("wgmma takes the input type(s) in brackets: wgmma[bf16](...) or wgmma[f8e4m3, f8e5m2](...)",
                  "brackets")
    types = []
    for j in range(call.bracket_count):
        t = call.comptime_type(f"[{j}]", "wgmma's input type")
        if not (isinstance(t, ScalarType) and t.name in _WGMMA_K):
            call.fail(f"wgmma multiplies bf16, f16, f8e4m3 or f8e5m2, found {t if t is not None else 'a value'}",
                      f"[{j}]")
        types.append(t.name)
    ta, tb = types[0], types[-1]
    if _WGMMA_K[ta] != _WGMMA_K[tb] or (_WGMMA_K[ta] == 16 and ta != tb):
        call.fail(f"wgmma of {ta} x {tb}: A and B are both f16, both bf16, or both FP8 (e4m3/e5m2 mixed)",
                  "brackets")
    return ta, tb


def _wgmma_operands(call: BuiltinCall, ta: str) -> tuple[Value, Value, Value]:
    """A and B (descriptors, or A a register fragment) and the accumulator."""
    descs = []
    for k in (0, 1):
        d = call.value(k)
        # A may also come from registers: a thread's vec<T, 8> fragment (16-bit T; mma.sync's m16n8k16
        # A fragment, the warp taking rows 16 w .. 16 w + 15), or vec<T, 16> for FP8 (m16n8k32's)
        per = 8 if _WGMMA_K[ta] == 16 else 16
        a_regs = (k == 0 and isinstance(d.type, VectorType) and d.type.count == per and d.type.elem == SCALARS[ta])
        if d.type != U64 and not a_regs:
            what = ("a shared-memory matrix descriptor (u64, from wgmma_desc)"
                    + (f" or a register fragment (vec<{ta}, {per}>)" if k == 0 else ""))
            call.fail(f"wgmma's {'AB'[k]} operand is {what}, found {d.type}", k)
        descs.append(d)
    acc = call.value(2)
    at = acc.type
    if not (isinstance(at, VectorType) and at.elem == SCALARS["f32"] and 4 <= at.count <= 128 and at.count % 4 == 0):
        call.fail(f"wgmma's accumulator must be vec<f32, N / 2> for N a multiple of 8 from 8 to 256, found {at}",
                  2, hint="m64nNk16: a thread of the warpgroup holds N / 2 f32 of the 64 x N tile")
    return descs[0], descs[1], acc


def _accumulate(call: BuiltinCall) -> Value:
    """``accumulate = ...`` (default true) as a bool value."""
    if not call.has_kw("accumulate"):
        return call.const(True, BOOL)
    c = call.constant("accumulate")
    if c is not None:
        if c.kind != "bool":
            call.fail(f"accumulate must be a bool, found {c.text}", "accumulate")
        return call.const(bool(c.value), BOOL)
    v = call.value("accumulate")
    if v.type != BOOL:
        call.fail(f"accumulate must be a bool, found {v.type}", "accumulate")
    return v


def _wgmma(call: BuiltinCall) -> Value | None:
    """``wgmma[TA(, TB)](a_desc, b_desc, acc, accumulate = true, trans_b = false)``."""
    ta, tb = _wgmma_types(call)
    a, b, acc = _wgmma_operands(call, ta)
    trans_b = call.bool_kw("trans_b", False)
    if trans_b and _WGMMA_K[ta] != 16:
        call.fail("wgmma reads FP8 B K-major only: trans_b applies to f16 and bf16", "trans_b=")
    scale = _accumulate(call)
    at = acc.type
    return call.emit("nvptx.wgmma.mma_async", [a, b, acc, scale], at, n=2 * at.count, a_type=ta, b_type=tb,
                     trans_b=trans_b)


def _no_operands(intrinsic: str) -> Callable[[BuiltinCall], None]:
    """The check of a builtin that takes nothing and emits ``intrinsic`` (a fence or a commit)."""
    def check(call: BuiltinCall) -> None:
        call.emit(intrinsic)
    return check


def _wgmma_wait(call: BuiltinCall) -> None:
    (n,) = bracket_ints(call, 1, "a group count")
    if not 0 <= n <= 7:
        call.fail(f"wgmma_wait's group count must be 0 to 7, not {n}", "[0]")
    call.emit("nvptx.wgmma.wait_group", n=n)


def _wgmma_desc(call: BuiltinCall) -> Value | None:
    """``wgmma_desc(p, swizzle = 128, lbo = 16, sbo = 1024)``."""
    p = shared_ptr(call, 0, "wgmma_desc", "tile")
    vals = {}
    for name, default in (("swizzle", 128), ("lbo", 16), ("sbo", 1024)):
        vals[name] = call.comptime_int(name, f"wgmma_desc's {name}") if call.has_kw(name) else default
        if name == "swizzle" and vals[name] not in (0, 32, 64, 128):
            call.fail(f"wgmma_desc's swizzle is 0, 32, 64 or 128 (bytes), not {vals[name]}", name)
        if name != "swizzle" and not (0 <= vals[name] < 1 << 18 and vals[name] % 16 == 0):
            call.fail(f"wgmma_desc's {name} is a byte offset, a multiple of 16 below 2^18, not {vals[name]}", name)
    return call.emit("nvptx.wgmma.desc", [p], U64, **vals)


# --- TMA and mbarriers -----------------------------------------------------------------------------------

def _tma_load(call: BuiltinCall) -> None:
    """``tma_load(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0, ...)``."""
    dst = shared_ptr(call, 0, "tma_load", "destination")
    m = call.value(1)
    if not isinstance(m.type, TensorMapType):
        call.fail(f"tma_load's second argument is a tensor_map (a kernel parameter made on the host), found "
                  f"{m.type}", 1)
    bar = shared_ptr(call, 2, "tma_load", "barrier", U64)
    coords = [int_operand(call, i, I32, "a TMA coordinate") for i in range(3, call.nargs)]
    call.emit("nvptx.tma.load", [dst, m, bar, *coords])


def _bulk_load(call: BuiltinCall) -> None:
    """``bulk_load(dst: ptr<T, shared>, src: ptr<T>, bytes: u32, bar: ptr<u64, shared>)``."""
    dst = shared_ptr(call, 0, "bulk_load", "destination")
    src = call.pointer(1, "bulk_load's source")
    if src.type.space != AddressSpace.GLOBAL:
        call.fail(f"bulk_load copies from global memory: the source must be a ptr<{src.type.pointee}>, found "
                  f"{src.type}", 1)
    c = call.constant(2)
    if c is not None and c.kind == "int" and (c.value <= 0 or c.value % 16):
        call.fail(f"bulk_load's byte count must be a positive multiple of 16, not {c.value}", 2)
    nbytes = int_operand(call, 2, U32, "the byte count")
    bar = shared_ptr(call, 3, "bulk_load", "barrier", U64)
    call.emit("nvptx.tma.bulk_load", [dst, src, nbytes, bar])


def _tma_store(call: BuiltinCall) -> None:
    """``tma_store(map: tensor_map, src: ptr<T, shared>, c0, ...)``."""
    m = call.value(0)
    if not isinstance(m.type, TensorMapType):
        call.fail(f"tma_store's first argument is a tensor_map (a kernel parameter made on the host), found "
                  f"{m.type}", 0)
    src = shared_ptr(call, 1, "tma_store", "source")
    coords = [int_operand(call, i, I32, "a TMA coordinate") for i in range(2, call.nargs)]
    call.emit("nvptx.tma.store", [m, src, *coords])


def _tma_store_wait(call: BuiltinCall) -> None:
    """``tma_store_wait[N](read = true)``."""
    (n,) = bracket_ints(call, 1, "a group count")
    if not 0 <= n <= 63:
        call.fail(f"tma_store_wait's group count must be 0 to 63, not {n}", "[0]")
    call.emit("nvptx.tma.store_wait", n=n, read=call.bool_kw("read", True))


def _mbarrier_init(call: BuiltinCall) -> None:
    call.emit("nvptx.mbarrier.init", [_mbar(call), int_operand(call, 1, U32, "the arrival count")])


def _mbarrier_arrive(call: BuiltinCall) -> None:
    call.emit("nvptx.mbarrier.arrive", [_mbar(call)])


def _mbarrier_arrive_expect_tx(call: BuiltinCall) -> None:
    call.emit("nvptx.mbarrier.arrive_expect_tx", [_mbar(call), int_operand(call, 1, U32, "the transaction byte count")])


def _mbarrier_try_wait(call: BuiltinCall) -> Value | None:
    return call.emit("nvptx.mbarrier.try_wait", [_mbar(call), int_operand(call, 1, U32, "the phase parity")], BOOL)


def _mbarrier_wait(call: BuiltinCall) -> None:
    call.emit("nvptx.mbarrier.wait", [_mbar(call), int_operand(call, 1, U32, "the phase parity")])


def _setmaxnreg(call: BuiltinCall) -> None:
    (n,) = bracket_ints(call, 1, "a register count")
    if not (24 <= n <= 256 and n % 8 == 0):
        call.fail(f"{call.builtin.name}'s register count must be a multiple of 8 from 24 to 256, not {n}", "[0]")
    call.emit("nvptx.setmaxnreg", n=n, increase=call.builtin.name.endswith("inc"))


_CHECKS = {"wgmma": _wgmma, "wgmma_fence": _no_operands("nvptx.wgmma.fence"),
           "wgmma_commit": _no_operands("nvptx.wgmma.commit_group"), "wgmma_wait": _wgmma_wait,
           "wgmma_desc": _wgmma_desc, "tma_load": _tma_load, "bulk_load": _bulk_load, "tma_store": _tma_store,
           "tma_store_commit": _no_operands("nvptx.tma.store_commit"), "tma_store_wait": _tma_store_wait,
           "mbarrier_init": _mbarrier_init,
           "mbarrier_arrive": _mbarrier_arrive, "mbarrier_arrive_expect_tx": _mbarrier_arrive_expect_tx,
           "mbarrier_try_wait": _mbarrier_try_wait, "mbarrier_wait": _mbarrier_wait,
           "fence_proxy_async": _no_operands("nvptx.fence.proxy_async"), "setmaxnreg_inc": _setmaxnreg,
           "setmaxnreg_dec": _setmaxnreg}


def check(call: BuiltinCall) -> Value | None:
    """Check and lower a call of any Hopper builtin: first the target's feature (the intrinsic's),
    then the builtin's own check."""
    name = call.builtin.name
    call.require_feature(INTRINSIC_OF[name], subject=name)
    return _CHECKS[name](call)


__all__ = ["INTRINSIC_OF", "bracket_ints", "check", "int_operand", "shared_ptr"]
