"""Integer bit operations (``bits``) and float classification (``fclass``): the part of
:class:`~.lower.Lowering` that works on the bits of a value (mixed into it; ``self`` is the Lowering).

Both are LLVM's target-independent operations (``llvm.ctpop``, ``llvm.ctlz``, ``llvm.cttz``,
``llvm.bitreverse``, ``llvm.bswap``, ``llvm.fshl``/``llvm.fshr``, a double-width multiply whose high
half the NVPTX and AMDGPU backends select as ``mul.hi`` / ``v_mul_hi``), so every target computes the
same values; ``byte_perm`` asks the target for its byte-permute instruction first
(:meth:`~kcompiler.backends.target.Target.byte_perm`: NVIDIA ``prmt``, AMD ``v_perm_b32``).
Classification tests the bit pattern with integer operations (no float compare: LLVM 22's x86
backend asserts on bf16 compares, and the small formats have no LLVM type).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir.core import BIT_COUNTS, Op
from ...ir.types import ScalarType, Type, elem_of
from ...numerics.formats import FORMATS
from .lltypes import _I1, _I32, _I64

if TYPE_CHECKING:
    from .lower import LoweringContext

#: The IEEE formats' (width, exponent field mask) for classification by bits.
_IEEE = {"f16": (16, 0x7C00), "bf16": (16, 0x7F80), "f32": (32, 0x7F80_0000), "f64": (64, 0x7FF << 52)}


def _like(t: ll.Type, elem: ll.Type) -> ll.Type:
    """``elem``, or a vector of it as long as ``t`` is one."""
    return ll.VectorType(elem, t.count) if isinstance(t, ll.VectorType) else elem


def byte_perm_bits(B: ll.IRBuilder, x: ll.Value, y: ll.Value, s: ll.Value) -> ll.Value:
    """CUDA's ``__byte_perm(x, y, s)`` (i32 operands) by shifts and masks: byte k of the result is
    byte ``(s >> 4k) & 7`` of the eight bytes ``y:x`` (x bytes 0-3, y bytes 4-7). The portable form
    (the CPU target's; a target's :meth:`Target.byte_perm` may use an instruction instead)."""
    v = B.or_(B.shl(B.zext(y, _I64), ll.Constant(_I64, 32)), B.zext(x, _I64))
    r: ll.Value = ll.Constant(_I32, 0)
    for k in range(4):
        sel = B.and_(B.lshr(s, ll.Constant(_I32, 4 * k)), ll.Constant(_I32, 7))
        byte = B.and_(B.trunc(B.lshr(v, B.zext(B.shl(sel, ll.Constant(_I32, 3)), _I64)), _I32),
                      ll.Constant(_I32, 0xFF))
        r = B.or_(r, B.shl(byte, ll.Constant(_I32, 8 * k)))
    return r


class BitLowering:
    """``bits`` (popcount, clz, ctz, ffs, brev, bswap, mulhi, funnel_shl, funnel_shr, byte_perm) and
    ``fclass`` (isnan, isinf, isfinite, signbit)."""

    def op_bits(self, ctx: LoweringContext, op: Op) -> ll.Value:
        fn = op.attrs["fn"]
        args = [self.v(ctx, x) for x in op.operands]
        t = op.operands[0].type
        B = ctx.b
        a = args[0]
        if fn in BIT_COUNTS:
            false = ll.Constant(_I1, 0)
            if fn == "popcount":
                r = ctx.call_intrinsic("llvm.ctpop", [a])
            elif fn == "clz":
                r = ctx.call_intrinsic("llvm.ctlz", [a, false], overload=[a.type])
            else:
                r = ctx.call_intrinsic("llvm.cttz", [a, false], overload=[a.type])
                if fn == "ffs":  # 1 + index of the lowest set bit; 0 for 0 (cttz(0) + 1 = width + 1)
                    zero = B.icmp_unsigned("==", a, ll.Constant(a.type, 0))
                    r = B.select(zero, ll.Constant(a.type, 0), B.add(r, ll.Constant(a.type, 1)))
            wt = _like(a.type, _I32)
            bits = elem_of(t).bits
            return r if bits == 32 else (B.trunc(r, wt) if bits > 32 else B.zext(r, wt))
        if fn == "brev":
            return ctx.call_intrinsic("llvm.bitreverse", [a])
        if fn == "bswap":
            return ctx.call_intrinsic("llvm.bswap", [a])
        if fn in ("funnel_shl", "funnel_shr"):
            return ctx.call_intrinsic("llvm.fshl" if fn == "funnel_shl" else "llvm.fshr", args)
        if fn == "mulhi":
            bits = elem_of(t).bits
            wide = _like(a.type, ll.IntType(2 * bits))
            ext = B.sext if elem_of(t).is_signed else B.zext
            p = B.mul(ext(a, wide), ext(args[1], wide))
            return B.trunc(B.lshr(p, ll.Constant(wide, bits)), a.type)
        if fn == "byte_perm":
            r = self.target.byte_perm(ctx, *args)
            return r if r is not None else byte_perm_bits(B, *args)
        raise AssertionError(fn)

    def op_fclass(self, ctx: LoweringContext, op: Op) -> ll.Value:
        test = op.attrs["test"]
        t: Type = op.operands[0].type
        x = self.v(ctx, op.operands[0])
        return fclass_bits(ctx.b, test, elem_of(t), x)


def fclass_bits(B: ll.IRBuilder, test: str, et: ScalarType, x: ll.Value) -> ll.Value:
    """``test`` (isnan, isinf, isfinite, signbit) of ``x`` (a scalar or vector of float type ``et``)
    as an i1 (vector), from its bits: IEEE types by their exponent field; the small formats by
    kcompiler.numerics.formats' encodings (E4M3: NaN S.1111.111, no infinity; E5M2: IEEE; FNUZ: the
    one NaN 0x80, no infinity, its sign bit set; E8M0: NaN 0xFF, no sign; FP6/FP4: neither NaN nor
    infinity)."""
    if et.is_minifloat:
        f = FORMATS[et.name]
        it = _like(x.type, ll.IntType(8))
        bits = x  # the code, in the low bits of a byte
        code_mask = (1 << f.bits) - 1
        bits = B.and_(bits, ll.Constant(it, code_mask)) if f.bits < 8 else bits
        sign = f.sign_bit if f.signed else 0
        mag_mask = code_mask & ~sign
        inf = {"ieee": ((1 << f.ebits) - 1) << f.mbits}.get(f.kind)
        nan_eq = {"fn": ("mag", 0x7F), "fnuz": ("code", 0x80), "e8m0": ("code", 0xFF)}.get(f.kind)
        nan_gt = inf
    else:
        width, inf = _IEEE[et.name]
        it = _like(x.type, ll.IntType(width))
        bits = B.bitcast(x, it)
        sign = 1 << (width - 1)
        mag_mask = sign - 1
        nan_eq, nan_gt = None, inf
    bt = _like(x.type, _I1)

    def const(v: int) -> ll.Constant:
        return ll.Constant(it, v)

    mag = B.and_(bits, const(mag_mask))
    if test == "signbit":
        if not sign:
            return ll.Constant(bt, 0)
        return B.icmp_unsigned("!=", B.and_(bits, const(sign)), const(0))
    if nan_eq is not None:
        isnan = B.icmp_unsigned("==", mag if nan_eq[0] == "mag" else bits, const(nan_eq[1]))
    elif nan_gt is not None:
        isnan = B.icmp_unsigned(">", mag, const(nan_gt))
    else:
        isnan = ll.Constant(bt, 0)
    if test == "isnan":
        return isnan
    if test == "isinf":
        return B.icmp_unsigned("==", mag, const(inf)) if inf is not None else ll.Constant(bt, 0)
    # isfinite: neither NaN nor infinity
    if inf is not None and nan_eq is None:
        return B.icmp_unsigned("<", mag, const(inf))
    if isinstance(isnan, ll.Constant):
        return ll.Constant(bt, 1)
    notinf = B.icmp_unsigned("!=", mag, const(inf)) if inf is not None else ll.Constant(bt, 1)
    return B.and_(B.not_(isnan), notinf)

