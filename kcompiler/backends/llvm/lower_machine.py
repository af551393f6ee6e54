"""Vectors and the machine: lanes of a vector, special registers, barriers, warp operations, printf
and target intrinsics — the part of :class:`~.lower.Lowering` that is mostly a call of a
:class:`~kcompiler.backends.target.Target` hook (mixed into it; ``self`` is the Lowering)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir import intrinsics
from ...ir.core import Op
from ...ir.types import BOOL, I32, AddressSpace, Type, sizeof
from ..errors import UnsupportedOnTarget
from .lltypes import _I1, _I32, BFloatType

if TYPE_CHECKING:
    from .lower import LoweringContext


def _bitcastable(t: ll.Type) -> bool:
    """Whether LLVM bitcasts ``t`` to an integer of its size: scalars and vectors (not aggregates)."""
    return isinstance(t, (ll.IntType, ll.VectorType, ll.HalfType, ll.FloatType, ll.DoubleType, BFloatType))


class MachineLowering:
    """``vec_build``, ``splat``, ``extract``, ``insert``, ``special``, ``barrier``, ``fence``, the warp
    operations (``shuffle``, ``ballot``, …; values of up to 16 bytes move as 32-bit words), printf's
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
        """Split a value of up to 16 bytes (``sizeof(t)``) into the i32 words the 32-bit warp
        primitives move (a 64-bit scalar is two words, so a target may shuffle 64 bits at once: see
        :meth:`op_shuffle`). A value whose LLVM type is a scalar or a vector goes through bitcasts
        (``iN``, zero-extended to whole words, then ``<k x i32>``); any other LLVM type (an
        aggregate) through a private slot, which SROA turns back into registers."""
        if t == BOOL:
            return [ctx.b.zext(x, _I32)]
        size = sizeof(t)
        if size > 16:
            raise UnsupportedOnTarget(f"warp operations take values of at most 16 bytes, not {t} ({size})")
        k = (size + 3) // 4
        words_t = ll.VectorType(_I32, k)
        B = ctx.b
        if _bitcastable(x.type):
            bits = size * 8
            ib = x if x.type == ll.IntType(bits) else B.bitcast(x, ll.IntType(bits))
            if bits < 32 * k:
                ib = B.zext(ib, ll.IntType(32 * k))
            if k == 1:
                return [ib]
            wv = B.bitcast(ib, words_t)
        else:
            slot = self.opaque(ctx.alloca(words_t))  # opaque: the value stored is not a <k x i32>
            B.store(ll.Constant(words_t, None), slot)
            B.store(x, slot)
            wv = B.load(slot, typ=words_t)
        return [B.extract_element(wv, ll.Constant(_I32, i)) for i in range(k)]

    def _from_words(self, ctx: LoweringContext, words: list[ll.Value], t: Type) -> ll.Value:
        """The inverse of :meth:`_as_words`: ``t`` from its i32 words."""
        lt = self.lltype(t)
        B = ctx.b
        if t == BOOL:
            return B.trunc(words[0], _I1)
        size, k = sizeof(t), len(words)
        if not _bitcastable(lt):  # an aggregate (a struct): through a private slot, as _as_words
            wv: ll.Value = ll.Constant(ll.VectorType(_I32, k), ll.Undefined)
            for i, w in enumerate(words):
                wv = B.insert_element(wv, w, ll.Constant(_I32, i))
            slot = self.opaque(ctx.alloca(wv.type))
            B.store(wv, slot)
            return B.load(slot, typ=lt)
        if k == 1:
            ib = words[0]
        else:
            wv = ll.Constant(ll.VectorType(_I32, k), ll.Undefined)
            for i, w in enumerate(words):
                wv = B.insert_element(wv, w, ll.Constant(_I32, i))
            ib = B.bitcast(wv, ll.IntType(32 * k))
        if ib.type.width > size * 8:
            ib = B.trunc(ib, ll.IntType(size * 8))
        return ib if ib.type == lt else B.bitcast(ib, lt)

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

    def op_sched_barrier(self, ctx: LoweringContext, op: Op) -> None:
        self.target.sched_barrier(ctx)

    def op_prefetch_l2(self, ctx: LoweringContext, op: Op) -> None:
        self.target.prefetch_l2(ctx, self.v(ctx, op.operands[0]), self.v(ctx, op.operands[1]))

    def op_grid_dependency_wait(self, ctx: LoweringContext, op: Op) -> None:
        self.target.grid_dependency_wait(ctx)

    def op_launch_dependents(self, ctx: LoweringContext, op: Op) -> None:
        self.target.launch_dependents(ctx)

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
