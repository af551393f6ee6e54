"""Vectors and the machine: lanes of a vector, special registers, barriers, warp operations, printf
and target intrinsics — the part of :class:`~.lower.Lowering` that is mostly a call of a
:class:`~kcompiler.backends.target.Target` hook (mixed into it; ``self`` is the Lowering)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir import intrinsics
from ...ir.core import Op
from ...ir.types import I32, AddressSpace, Type, VectorType, elem_of
from ..errors import UnsupportedOnTarget
from .lltypes import _I1, _I32, _I64

if TYPE_CHECKING:
    from .lower import LoweringContext


class MachineLowering:
    """``vec_build``, ``splat``, ``extract``, ``insert``, ``special``, ``barrier``, ``fence``, the warp
    operations (``shuffle``, ``ballot``, …; values of up to 64 bits move as 32-bit words), printf's
    ops and ``intrinsic``."""

    # --- vectors --------------------------------------------------------------------------------
    def op_vec_build(self, ctx: LoweringContext, op: Op) -> ll.Value:
        vec = ll.Constant(self.lltype(op.result.type), ll.Undefined)
        for k, e in enumerate(op.operands):
            vec = ctx.b.insert_element(vec, self.v(ctx, e), ll.Constant(_I32, k))
        return vec

    def op_splat(self, ctx: LoweringContext, op: Op) -> ll.Value:
        t = op.result.type
        x = self.v(ctx, op.operands[0])
        one = ctx.b.insert_element(ll.Constant(ll.VectorType(x.type, 1), ll.Undefined), x,
                                   ll.Constant(_I32, 0))
        return ctx.b.shuffle_vector(one, ll.Constant(ll.VectorType(x.type, 1), ll.Undefined),
                                    ll.Constant(ll.VectorType(_I32, t.count), [0] * t.count))

    def op_extract(self, ctx: LoweringContext, op: Op) -> ll.Value:
        v, i = (self.v(ctx, x) for x in op.operands)
        return ctx.b.extract_element(v, i)

    def op_insert(self, ctx: LoweringContext, op: Op) -> ll.Value:
        v, x, i = (self.v(ctx, y) for y in op.operands)
        return ctx.b.insert_element(v, x, i)

    # --- the machine ----------------------------------------------------------------------------
    def op_special(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.target.special(ctx, op.attrs["reg"], op.attrs.get("dim", "x"))

    def op_barrier(self, ctx: LoweringContext, op: Op) -> None:
        self.target.barrier(ctx)

    def op_fence(self, ctx: LoweringContext, op: Op) -> None:
        self.target.fence(ctx, op.attrs["scope"])

    def _as_words(self, ctx: LoweringContext, x: ll.Value, t: Type) -> list[ll.Value]:
        """Split a value of up to 64 bits into i32 words for the 32-bit warp primitives."""
        st = elem_of(t)
        if st.kind == "bool" and not isinstance(t, VectorType):
            return [ctx.b.zext(x, _I32)]
        bits = st.bits * (t.count if isinstance(t, VectorType) else 1)
        if bits > 64:
            raise UnsupportedOnTarget(f"warp operations take values of at most 64 bits, not {t}")
        it = ll.IntType(bits)
        ib = x if x.type == it else ctx.b.bitcast(x, it)
        if bits == 64:
            return [ctx.b.trunc(ib, _I32), ctx.b.trunc(ctx.b.lshr(ib, ll.Constant(_I64, 32)), _I32)]
        return [ctx.b.zext(ib, _I32) if bits < 32 else ib]

    def _from_words(self, ctx: LoweringContext, words: list[ll.Value], t: Type) -> ll.Value:
        st = elem_of(t)
        lt = self.lltype(t)
        if st.kind == "bool" and not isinstance(t, VectorType):
            return ctx.b.trunc(words[0], _I1)
        bits = st.bits * (t.count if isinstance(t, VectorType) else 1)
        if len(words) == 2:
            lo, hi = (ctx.b.zext(w, _I64) for w in words)
            ib = ctx.b.or_(lo, ctx.b.shl(hi, ll.Constant(_I64, 32)))
        else:
            ib = words[0] if bits == 32 else ctx.b.trunc(words[0], ll.IntType(bits))
        return ib if ib.type == lt else ctx.b.bitcast(ib, lt)

    def op_shuffle(self, ctx: LoweringContext, op: Op) -> ll.Value:
        x, lane = (self.v(ctx, v) for v in op.operands)
        lane = self.convert(ctx, lane, op.operands[1].type, I32)
        words = [self.target.shuffle(ctx, op.attrs["mode"], w, lane)
                 for w in self._as_words(ctx, x, op.operands[0].type)]
        return self._from_words(ctx, words, op.result.type)

    def op_ballot(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.target.ballot(ctx, self.v(ctx, op.operands[0]))

    def op_active_mask(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.target.active_mask(ctx)

    def op_warp_sync(self, ctx: LoweringContext, op: Op) -> None:
        self.target.warp_sync(ctx, self.v(ctx, op.operands[0]) if op.operands else None)

    def op_nanosleep(self, ctx: LoweringContext, op: Op) -> None:
        self.target.nanosleep(ctx, self.v(ctx, op.operands[0]))

    def op_trap(self, ctx: LoweringContext, op: Op) -> None:
        self.target.trap(ctx, op.attrs["reason"], op.attrs.get("message", ""), op.attrs.get("function", ""))

    def op_hostcall_buffer(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.target.hostcall_buffer(ctx)

    def op_printf_buffer(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.target.printf_buffer(ctx, op.attrs["format"])

    def op_hostcall_interrupt(self, ctx: LoweringContext, op: Op) -> None:
        self.target.hostcall_interrupt(ctx, self.v(ctx, op.operands[0]))

    def op_printf(self, ctx: LoweringContext, op: Op) -> None:
        self.target.printf(ctx, op.attrs["format"], [self.v(ctx, x) for x in op.operands],
                           [x.type for x in op.operands])

    def op_string(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return ctx.string_constant(op.attrs["value"], self.target.address_spaces[AddressSpace.CONST])

    def op_read_first_lane(self, ctx: LoweringContext, op: Op) -> ll.Value:
        x = self.v(ctx, op.operands[0])
        words = [self.target.read_first_lane(ctx, w) for w in self._as_words(ctx, x, op.operands[0].type)]
        return self._from_words(ctx, words, op.result.type)

    # --- target intrinsics (kcompiler.ir.intrinsics; Target.lower_intrinsic) ------------------------
    def op_intrinsic(self, ctx: LoweringContext, op: Op) -> ll.Value | None:
        intrinsic = intrinsics.get(op.attrs["intrinsic"])  # the verifier has found it
        return self.target.lower_intrinsic(ctx, op, intrinsic, [self.v(ctx, x) for x in op.operands])
