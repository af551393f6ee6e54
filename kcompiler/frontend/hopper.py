"""The Hopper (NVIDIA sm_90 / sm_90a) builtins in the frontend: warpgroup matrix multiply-accumulate
(``wgmma``, ``wgmma_fence``, ``wgmma_commit``, ``wgmma_wait``, ``wgmma_desc``), TMA tensor copies
(``tma_load``), mbarriers (``mbarrier_init``, ``mbarrier_arrive``, ``mbarrier_arrive_expect_tx``,
``mbarrier_try_wait``, ``mbarrier_wait``), ``fence_proxy_async``, ``setmaxnreg_inc`` /
``setmaxnreg_dec`` and ``launch_bounds``. Each call is type-checked (a located error for a wrong
operand type, address space or size, and for a target without the feature) and lowered to the NVIDIA
target intrinsic that the backend registers (``nvptx.wgmma.mma_async``, ``nvptx.tma.load``...:
backends/nvptx/intrinsics.py), through the IR's generic ``intrinsic`` op. The instructions and layouts are stated, with their
PTX ISA sections, in backends/nvptx/wgmma.py and backends/nvptx/tma.py.

Surface::
    acc = wgmma[bf16](a_desc, b_desc, acc, accumulate = k > 0, trans_b = false)  // acc: vec<f32, N / 2>
    acc = wgmma[bf16](a_frag, b_desc, acc)                  // A from registers: a_frag: vec<bf16, 8>
    let d = wgmma_desc(p, swizzle = 128, sbo = 1024)        // p: ptr<T, shared>  ->  u64
    tma_load(dst, map, bar, x, y)                           // map: tensor_map, bar: ptr<u64, shared>
    mbarrier_arrive_expect_tx(bar, bytes); mbarrier_wait(bar, parity)
    setmaxnreg_dec[40](); setmaxnreg_inc[232]()
    launch_bounds(384, 1)                                   // in a kernel: .maxntid 384, .minnctapersm 1
"""
from __future__ import annotations

from typing import Any

from ..ir.types import BOOL, I32, SCALARS, U32, U64, AddressSpace, ScalarType, TensorMapType, VectorType
from .builtin_registry import builtin, require_feature
from .semantic import CV
from . import ast as A
from .values import VOIDV

#: The builtins this file lowers, and the target intrinsic whose feature each needs (None: every
#: target has it); the intrinsic's record says what the feature is and which chips have it.
INTRINSIC_OF = {"wgmma": "nvptx.wgmma.mma_async", "wgmma_fence": "nvptx.wgmma.fence",
                "wgmma_commit": "nvptx.wgmma.commit_group", "wgmma_wait": "nvptx.wgmma.wait_group",
                "wgmma_desc": "nvptx.wgmma.desc", "tma_load": "nvptx.tma.load",
                "mbarrier_init": "nvptx.mbarrier.init", "mbarrier_arrive": "nvptx.mbarrier.arrive",
                "mbarrier_arrive_expect_tx": "nvptx.mbarrier.arrive_expect_tx",
                "mbarrier_try_wait": "nvptx.mbarrier.try_wait", "mbarrier_wait": "nvptx.mbarrier.wait",
                "fence_proxy_async": "nvptx.fence.proxy_async", "setmaxnreg_inc": "nvptx.setmaxnreg",
                "setmaxnreg_dec": "nvptx.setmaxnreg", "launch_bounds": None}

#: wgmma's input types and the K of one instruction.
_WGMMA_K = {"bf16": 16, "f16": 16, "f8e4m3": 32, "f8e5m2": 32}


@builtin(*INTRINSIC_OF)
def lower_builtin(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """Lower call ``e`` of Hopper builtin ``f`` (a BuiltinRef) in FnLowering ``fl``."""
    name = f.fn.name
    if INTRINSIC_OF[name] is not None:
        require_feature(fl, INTRINSIC_OF[name], e.span, subject=name)
    return _LOWER[name](fl, f, e, kw)


def _void():
    return VOIDV


def _shared_ptr(fl: Any, arg: Any, builtin: str, what: str, pointee: Any = None) -> Any:
    p = fl._pointer(arg, f"{builtin}'s {what}")
    if p.type.space != AddressSpace.SHARED or (pointee is not None and p.type.pointee != pointee):
        want = f"ptr<{pointee}, shared>" if pointee is not None else f"ptr<{p.type.pointee}, shared>"
        fl.fail(f"{builtin}'s {what} must be a {want}, found {p.type}", arg.span)
    return p


def _int_operand(fl: Any, arg: Any, t: ScalarType, what: str) -> Any:
    v = fl.rvalue(fl.ev(arg), arg.span)
    if isinstance(v, CV):
        if v.kind != "int" or not 0 <= v.value < (1 << t.bits if not t.is_signed else 1 << (t.bits - 1)):
            fl.fail(f"{what} must be an integer that fits in {t}, found {v.describe()}", arg.span)
        return fl.b.const(int(v.value), t)
    if not (isinstance(v.type, ScalarType) and v.type.is_int and v.type.bits <= 32):
        fl.fail(f"{what} must be an integer of at most 32 bits, found {v.type}", arg.span)
    return v if v.type == t else fl.b.cast(v, t)


def _mbar(fl: Any, e: Any, name: str) -> Any:
    return _shared_ptr(fl, e.args[0], name, "barrier", U64)


def _bracket_ints(fl: Any, f: Any, n: int, what: str) -> list[int]:
    args = f.targs or []
    if len(args) != n or any(isinstance(a, (A.KwArg, A.PtrTypeExpr, A.VecTypeExpr, A.ArrayTypeExpr)) for a in args):
        fl.fail(f"{f.fn.name} takes {what} in brackets", f.span, hint=f.fn.doc or None)
    return [fl.comptime_int(a, what) for a in args]


# --- wgmma ---------------------------------------------------------------------------------------------

def _wgmma(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``wgmma[TA(, TB)](a_desc, b_desc, acc, accumulate = true, trans_b = false)``."""
    targs = f.targs or []
    if not 1 <= len(targs) <= 2 or any(isinstance(a, A.KwArg) for a in targs):
        fl.fail("wgmma takes the input type(s) in brackets: wgmma[bf16](...) or wgmma[f8e4m3, f8e5m2](...)",
                f.span)
    types = []
    for a in targs:
        v = fl.comptime_value(a, "wgmma's input type")
        t = getattr(v, "type", None) if not isinstance(v, CV) else None
        if not (isinstance(t, ScalarType) and t.name in _WGMMA_K):
            fl.fail(f"wgmma multiplies bf16, f16, f8e4m3 or f8e5m2, found {t if t is not None else 'a value'}",
                    a.span)
        types.append(t.name)
    ta, tb = types[0], types[-1]
    if _WGMMA_K[ta] != _WGMMA_K[tb] or (_WGMMA_K[ta] == 16 and ta != tb):
        fl.fail(f"wgmma of {ta} x {tb}: A and B are both f16, both bf16, or both FP8 (e4m3/e5m2 mixed)", f.span)
    descs = []
    for k in (0, 1):
        d = fl._value(e.args[k])
        # A may also come from registers: a thread's vec<T, 8> fragment (16-bit T; mma.sync's m16n8k16
        # A fragment, the warp taking rows 16 w .. 16 w + 15)
        a_regs = (k == 0 and isinstance(d.type, VectorType) and d.type.count == 8 and _WGMMA_K[ta] == 16
                  and d.type.elem == SCALARS[ta])
        if d.type != U64 and not a_regs:
            what = (f"a shared-memory matrix descriptor (u64, from wgmma_desc)"
                    + (f" or a register fragment (vec<{ta}, 8>)" if k == 0 and _WGMMA_K[ta] == 16 else ""))
            fl.fail(f"wgmma's {'AB'[k]} operand is {what}, found {d.type}", e.args[k].span)
        descs.append(d)
    acc = fl._value(e.args[2])
    at = acc.type
    if not (isinstance(at, VectorType) and at.elem == SCALARS["f32"] and 4 <= at.count <= 128 and at.count % 4 == 0):
        fl.fail(f"wgmma's accumulator must be vec<f32, N / 2> for N a multiple of 8 from 8 to 256, found {at}",
                e.args[2].span, hint="m64nNk16: a thread of the warpgroup holds N / 2 f32 of the 64 x N tile")
    trans_b = fl._bool_kw(kw, "trans_b", False)
    if trans_b and _WGMMA_K[ta] != 16:
        fl.fail("wgmma reads FP8 B K-major only: trans_b applies to f16 and bf16", kw["trans_b"].span)
    k = kw.get("accumulate")
    if k is None:
        scale = fl.b.const(True, BOOL)
    else:
        v = fl.rvalue(fl.ev(k.value), k.value.span)
        if isinstance(v, CV):
            if v.kind != "bool":
                fl.fail(f"accumulate must be a bool, found {v.describe()}", k.value.span)
            scale = fl.b.const(bool(v.value), BOOL)
        elif v.type != BOOL:
            fl.fail(f"accumulate must be a bool, found {v.type}", k.value.span)
        else:
            scale = v
    return fl.b.intrinsic("nvptx.wgmma.mma_async", [descs[0], descs[1], acc, scale], at, n=2 * at.count,
                          a_type=ta, b_type=tb, trans_b=trans_b)


def _no_operands(intrinsic: str) -> Any:
    """The handler of a builtin that takes nothing and emits ``intrinsic`` (a fence or a commit)."""
    def lower(fl: Any, f: Any, e: Any, kw: dict) -> Any:
        fl.b.intrinsic(intrinsic)
        return _void()
    return lower


def _wgmma_wait(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    (n,) = _bracket_ints(fl, f, 1, "a group count")
    if not 0 <= n <= 7:
        fl.fail(f"wgmma_wait's group count must be 0 to 7, not {n}", f.targs[0].span)
    fl.b.intrinsic("nvptx.wgmma.wait_group", n=n)
    return _void()


def _wgmma_desc(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``wgmma_desc(p, swizzle = 128, lbo = 16, sbo = 1024)``."""
    p = _shared_ptr(fl, e.args[0], "wgmma_desc", "tile")
    vals = {}
    for name, default in (("swizzle", 128), ("lbo", 16), ("sbo", 1024)):
        k = kw.get(name)
        vals[name] = default if k is None else fl.comptime_int(k.value, f"wgmma_desc's {name}")
        if name == "swizzle" and vals[name] not in (0, 32, 64, 128):
            fl.fail(f"wgmma_desc's swizzle is 0, 32, 64 or 128 (bytes), not {vals[name]}", k.value.span)
        if name != "swizzle" and not (0 <= vals[name] < 1 << 18 and vals[name] % 16 == 0):
            fl.fail(f"wgmma_desc's {name} is a byte offset, a multiple of 16 below 2^18, not {vals[name]}",
                    k.value.span)
    return fl.b.intrinsic("nvptx.wgmma.desc", [p], U64, **vals)


# --- TMA and mbarriers -----------------------------------------------------------------------------------

def _tma_load(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``tma_load(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0, ...)``."""
    dst = _shared_ptr(fl, e.args[0], "tma_load", "destination")
    m = fl._value(e.args[1])
    if not isinstance(m.type, TensorMapType):
        fl.fail(f"tma_load's second argument is a tensor_map (a kernel parameter made on the host), found "
                f"{m.type}", e.args[1].span)
    bar = _shared_ptr(fl, e.args[2], "tma_load", "barrier", U64)
    coords = [_int_operand(fl, a, I32, "a TMA coordinate") for a in e.args[3:]]
    fl.b.intrinsic("nvptx.tma.load", [dst, m, bar, *coords])
    return _void()


def _mbarrier_init(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    fl.b.intrinsic("nvptx.mbarrier.init", [_mbar(fl, e, "mbarrier_init"), _int_operand(fl, e.args[1], U32, "the arrival count")])
    return _void()


def _mbarrier_arrive(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    fl.b.intrinsic("nvptx.mbarrier.arrive", [_mbar(fl, e, "mbarrier_arrive")])
    return _void()


def _mbarrier_arrive_expect_tx(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    fl.b.intrinsic("nvptx.mbarrier.arrive_expect_tx", [_mbar(fl, e, "mbarrier_arrive_expect_tx"),
                                                       _int_operand(fl, e.args[1], U32, "the transaction byte count")])
    return _void()


def _mbarrier_try_wait(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    return fl.b.intrinsic("nvptx.mbarrier.try_wait", [_mbar(fl, e, "mbarrier_try_wait"),
                                                      _int_operand(fl, e.args[1], U32, "the phase parity")], BOOL)


def _mbarrier_wait(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    fl.b.intrinsic("nvptx.mbarrier.wait", [_mbar(fl, e, "mbarrier_wait"), _int_operand(fl, e.args[1], U32, "the phase parity")])
    return _void()


def _setmaxnreg(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    (n,) = _bracket_ints(fl, f, 1, "a register count")
    if not (24 <= n <= 256 and n % 8 == 0):
        fl.fail(f"{f.fn.name}'s register count must be a multiple of 8 from 24 to 256, not {n}", f.targs[0].span)
    fl.b.intrinsic("nvptx.setmaxnreg", n=n, increase=f.fn.name.endswith("inc"))
    return _void()


def _launch_bounds(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """``launch_bounds(max_threads, min_blocks = 1)``: in a kernel's body, the most threads a block
    will have and the fewest blocks a multiprocessor should hold (CUDA's __launch_bounds__)."""
    if not fl.decl.is_kernel:
        fl.fail("launch_bounds belongs in a kernel's body", e.span)
    n = fl.comptime_int(e.args[0], "launch_bounds' thread count")
    if not 1 <= n <= 1024:
        fl.fail(f"launch_bounds' thread count must be 1 to 1024, not {n}", e.args[0].span)
    blocks = fl.comptime_int(e.args[1], "launch_bounds' block count") if len(e.args) > 1 else 1
    if not 1 <= blocks <= 32:
        fl.fail(f"launch_bounds' block count must be 1 to 32, not {blocks}", e.args[1].span)
    fl.fn.attrs["max_threads"] = n
    fl.fn.attrs["min_blocks"] = blocks
    return _void()


_LOWER = {"wgmma": _wgmma, "wgmma_fence": _no_operands("nvptx.wgmma.fence"),
          "wgmma_commit": _no_operands("nvptx.wgmma.commit_group"), "wgmma_wait": _wgmma_wait, "wgmma_desc": _wgmma_desc,
          "tma_load": _tma_load, "mbarrier_init": _mbarrier_init, "mbarrier_arrive": _mbarrier_arrive,
          "mbarrier_arrive_expect_tx": _mbarrier_arrive_expect_tx, "mbarrier_try_wait": _mbarrier_try_wait,
          "mbarrier_wait": _mbarrier_wait, "fence_proxy_async": _no_operands("nvptx.fence.proxy_async"),
          "setmaxnreg_inc": _setmaxnreg, "setmaxnreg_dec": _setmaxnreg, "launch_bounds": _launch_bounds}

__all__ = ["INTRINSIC_OF", "lower_builtin"]
