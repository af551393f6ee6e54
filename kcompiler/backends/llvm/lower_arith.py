"""Arithmetic, comparisons and conversions: the part of :class:`~.lower.Lowering` that turns values
into values (mixed into it; ``self`` is the Lowering)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir.core import Op
from ...ir.types import F32, PointerType, Type, VectorType, elem_of
from ...numerics.formats import FORMATS
from .lltypes import _I1, _I32

if TYPE_CHECKING:
    from .lower import LoweringContext


class ArithmeticLowering:
    """``add``…``shr``, ``neg``, ``not``, ``cmp``, ``select``, ``cast``, ``bitcast`` and ``math`` ops."""

    def _float_flags(self, inst: ll.Instruction) -> ll.Instruction:
        # Contraction into FMA is what nvcc and hipcc do by default; fast_math allows the rest.
        inst.flags = ["fast"] if self.options.fast_math else ["contract"]
        return inst

    def binary(self, ctx: LoweringContext, op: Op) -> ll.Value:
        a, b_ = (self.v(ctx, x) for x in op.operands)
        t = elem_of(op.operands[0].type)
        B = ctx.b
        name = op.name
        if t.is_float:
            if name in ("min", "max"):
                return ctx.call_intrinsic("llvm.minnum" if name == "min" else "llvm.maxnum", [a, b_])
            if name == "rem" and t.name == "bf16":  # LLVM 22 has no bf16 frem ("no libcall"): in f32, exact
                return B.fptrunc(self._float_flags(B.frem(_bf16_to_f32(B, a), _bf16_to_f32(B, b_))), a.type)
            f = {"add": B.fadd, "sub": B.fsub, "mul": B.fmul, "div": B.fdiv, "rem": B.frem}[name]
            return self._float_flags(f(a, b_))
        signed = t.is_signed
        if name in ("min", "max"):
            intr = ("llvm.s" if signed else "llvm.u") + name
            return ctx.call_intrinsic(intr, [a, b_])
        if name in ("div", "rem"):
            return self.int_divide(B, name, signed, a, b_)
        if name == "shr":
            return B.ashr(a, b_) if signed else B.lshr(a, b_)
        f = {"add": B.add, "sub": B.sub, "mul": B.mul, "and": B.and_, "or": B.or_, "xor": B.xor,
             "shl": B.shl}[name]
        return f(a, b_)

    @staticmethod
    def int_divide(B: ll.IRBuilder, name: str, signed: bool, a: ll.Value, b: ll.Value) -> ll.Value:
        """Integer ``a / b`` or ``a % b`` (truncating, as C) with every case defined, the same on every
        target: ``x / 0`` is -1 (all ones) and ``x % 0`` is ``x``, what NVIDIA's integer division
        gives; ``MIN / -1`` wraps to MIN and ``MIN % -1`` is 0. (LLVM leaves these undefined, and
        the host's divide instruction traps on them, which would kill the process on the CPU target.)
        A divisor LLVM knows to be safe loses the guards in O3. On vectors every lane is guarded
        on its own (the constants splat, the compares and selects are lane-wise)."""
        t = a.type
        zero, ones = ll.Constant(t, 0), ll.Constant(t, -1)
        by_zero = B.icmp_unsigned("==", b, zero)
        unsafe = by_zero
        if signed:
            bits = (t.element if isinstance(t, ll.VectorType) else t).width  # per lane on vectors
            int_min = ll.Constant(t, -(1 << (bits - 1)))
            unsafe = B.or_(by_zero, B.and_(B.icmp_unsigned("==", a, int_min), B.icmp_unsigned("==", b, ones)))
        safe_b = B.select(unsafe, ll.Constant(t, 1), b)
        f = {("div", True): B.sdiv, ("div", False): B.udiv, ("rem", True): B.srem,
             ("rem", False): B.urem}[(name, signed)]
        q = f(a, safe_b)  # MIN / 1 = MIN and MIN % 1 = 0: the overflow case needs nothing more
        return B.select(by_zero, ones if name == "div" else a, q)

    def op_neg(self, ctx: LoweringContext, op: Op) -> ll.Value:
        a = self.v(ctx, op.operands[0])
        if elem_of(op.operands[0].type).is_float:
            return ctx.b.fneg(a)
        return ctx.b.neg(a)

    def op_not(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return ctx.b.not_(self.v(ctx, op.operands[0]))

    _ICMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

    def op_cmp(self, ctx: LoweringContext, op: Op) -> ll.Value:
        a, b_ = (self.v(ctx, x) for x in op.operands)
        t = elem_of(op.operands[0].type)
        pred = self._ICMP[op.attrs["pred"]]
        if t.is_float:
            # C semantics: every comparison with NaN is false except !=.
            if op.attrs["pred"] == "ne":
                return ctx.b.fcmp_unordered(pred, a, b_)
            return ctx.b.fcmp_ordered(pred, a, b_)
        if t.is_signed:
            return ctx.b.icmp_signed(pred, a, b_)
        return ctx.b.icmp_unsigned(pred, a, b_)

    def op_select(self, ctx: LoweringContext, op: Op) -> ll.Value:
        c, a, b_ = (self.v(ctx, x) for x in op.operands)
        return ctx.b.select(c, a, b_)

    def op_cast(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.convert(ctx, self.v(ctx, op.operands[0]), op.operands[0].type, op.result.type,
                            bool(op.attrs.get("saturate", False)), bool(op.attrs.get("exact_nan", True)))

    def convert(self, ctx: LoweringContext, x: ll.Value, src: Type, dst: Type,
                saturate: bool = False, exact_nan: bool = True) -> ll.Value:
        """C-style value conversion of scalars or same-length vectors. Float to int saturates and
        maps NaN to 0 (what PTX's cvt.rzi does and what LLVM's fptosi.sat gives on every target).
        8-bit floats convert through f32 (exact in both directions for f16 and bf16 sources, so one
        rounding), by the target's minifloat hooks; ``saturate`` applies to conversions into them,
        ``exact_nan`` (false: the instruction's NaN bits) to conversions from them."""
        if src == dst:
            return x
        s, d = elem_of(src), elem_of(dst)
        if s.is_minifloat or d.is_minifloat:
            return self._convert_minifloat(ctx, x, src, dst, saturate, exact_nan)
        B = ctx.b
        lt = self.lltype(dst)
        if d.kind == "bool":
            if s.is_float:
                return B.fcmp_unordered("!=", x, ll.Constant(x.type, None))
            return B.icmp_unsigned("!=", x, ll.Constant(x.type, None))
        if s.kind == "bool":
            return B.uitofp(x, lt) if d.is_float else B.zext(x, lt)
        if s.is_int and d.is_int:
            if d.bits < s.bits:
                return B.trunc(x, lt)
            if d.bits > s.bits:
                return B.sext(x, lt) if s.is_signed else B.zext(x, lt)
            return x  # same width, other signedness: same bits
        if s.is_int and d.is_float:
            return B.sitofp(x, lt) if s.is_signed else B.uitofp(x, lt)
        if s.is_float and d.is_int:
            intr = "llvm.fptosi.sat" if d.is_signed else "llvm.fptoui.sat"
            return ctx.call_intrinsic(intr, [x], ret=lt, overload=[lt, x.type])
        # float to float; f16 <-> bf16 goes through f32
        if {s.name, d.name} == {"f16", "bf16"}:
            f32 = ll.VectorType(ll.FloatType(), src.count) if isinstance(src, VectorType) else ll.FloatType()
            return B.fptrunc(B.fpext(x, f32), lt)
        if d.bits > s.bits:
            return B.fpext(x, lt)
        return B.fptrunc(x, lt)

    def _convert_keep_nan_sign(self, ctx: LoweringContext, x: ll.Value, s: Type, d: Type) -> ll.Value:
        """Float-to-float ``convert`` whose NaN results are the quiet NaN with the source's sign.
        LLVM leaves a NaN's sign to the target (NVPTX's ``cvt.f32.f16`` gives the canonical
        positive NaN), but ml_dtypes keeps it through every small-float conversion, so the small-float
        paths widen and narrow through this one."""
        if s.name == d.name or not (s.is_float and d.is_float):
            return self.convert(ctx, x, s, d)
        B = ctx.b
        if s.name == "bf16" and d.name == "f32":   # exact as bits: the upper half of an f32
            return B.bitcast(B.shl(B.zext(B.bitcast(x, ll.IntType(16)), _I32), ll.Constant(_I32, 16)),
                             ll.FloatType())
        y = self.convert(ctx, x, s, d)
        quiet = {"f16": 0x7E00, "bf16": 0x7FC0, "f32": 0x7FC0_0000, "f64": 0x7FF8 << 48}[d.name]
        si, di = ll.IntType(s.bits), ll.IntType(d.bits)
        negative = B.icmp_signed("<", B.bitcast(x, si), ll.Constant(si, 0))
        # NaN-ness survives any conversion; test the wider value (LLVM 22's x86 backend asserts on
        # bf16 compares and on the fabs.bf16 a masked bf16 bit test becomes)
        wide = x if s.bits >= d.bits else y
        isnan = B.fcmp_unordered("uno", wide, wide)
        nan = B.select(negative, ll.Constant(di, quiet | 1 << (d.bits - 1)), ll.Constant(di, quiet))
        return B.select(isnan, B.bitcast(nan, y.type), y)

    def _convert_minifloat(self, ctx: LoweringContext, x: ll.Value, src: Type, dst: Type,
                        saturate: bool, exact_nan: bool = True) -> ll.Value:
        s, d = elem_of(src), elem_of(dst)
        n = src.count if isinstance(src, VectorType) else 0
        B = ctx.b
        lanes = [B.extract_element(x, ll.Constant(_I32, i)) for i in range(n)] if n else [x]
        pairs, packable = None, d.is_minifloat and d.bits == 8 and n and n % 2 == 0
        if packable and s.name == "f16":
            # f16 pairs straight to 8-bit codes where the target has that convert (f16 to f32 is exact,
            # so the codes are those of the f32 route)
            pairs = self.target.minifloat_encode_pairs(ctx, lanes, FORMATS[d.name], saturate)
        if pairs is None:
            if s.is_minifloat:
                lanes = self.target.minifloat_decode(ctx, lanes, FORMATS[s.name], exact_nan)
            else:
                lanes = [self._convert_keep_nan_sign(ctx, v, s, F32) for v in lanes]
            if packable:
                pairs = self.target.minifloat_encode_pairs(ctx, lanes, FORMATS[d.name], saturate)
        if pairs is not None:  # 16-bit lanes: whole words for a wgmma/mma fragment or a store
            i16 = ll.IntType(16)
            out: ll.Value = ll.Constant(ll.VectorType(i16, n // 2), ll.Undefined)
            for i, v in enumerate(pairs):
                out = B.insert_element(out, v, ll.Constant(_I32, i))
            return B.bitcast(out, self.lltype(dst))
        if d.is_minifloat:
            lanes = self.target.minifloat_encode(ctx, lanes, FORMATS[d.name], saturate)
        else:
            lanes = [self._convert_keep_nan_sign(ctx, v, F32, d) for v in lanes]
        if not n:
            return lanes[0]
        out: ll.Value = ll.Constant(self.lltype(dst), ll.Undefined)
        for i, v in enumerate(lanes):
            out = B.insert_element(out, v, ll.Constant(_I32, i))
        return out

    def op_bitcast(self, ctx: LoweringContext, op: Op) -> ll.Value:
        x, t = self.v(ctx, op.operands[0]), self.lltype(op.result.type)
        if isinstance(op.result.type, PointerType):
            return ctx.b.inttoptr(x, t)
        if isinstance(op.operands[0].type, PointerType):
            return ctx.b.ptrtoint(x, t)
        return ctx.b.bitcast(x, t)

    def op_math(self, ctx: LoweringContext, op: Op) -> ll.Value:
        args = [self.v(ctx, x) for x in op.operands]
        fn = op.attrs["fn"]
        t = elem_of(op.result.type)
        if fn == "abs" and t.is_int:
            return ctx.call_intrinsic("llvm.abs", [args[0], ll.Constant(_I1, 0)], overload=[args[0].type])
        return self.target.math(ctx, fn, args)


def _bf16_to_f32(B: ll.IRBuilder, x: ll.Value) -> ll.Value:
    """bf16 (scalar or vector) to f32 through its bits (x << 16), which InstCombine does not fold
    back into a bf16 operation as it folds fpext."""
    n = x.type.count if isinstance(x.type, ll.VectorType) else None
    i16, i32, f32 = ((ll.VectorType(t, n) if n else t) for t in (ll.IntType(16), ll.IntType(32), ll.FloatType()))
    bits = B.shl(B.zext(B.bitcast(x, i16), i32), ll.Constant(i32, 16))
    return B.bitcast(bits, f32)
