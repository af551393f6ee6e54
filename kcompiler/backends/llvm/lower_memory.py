"""Memory: allocas, shared memory, element pointers, loads, stores and atomics — the part of
:class:`~.lower.Lowering` that touches an address space (mixed into it; ``self`` is the Lowering).
``check_bounds`` hooks in at :meth:`MemoryLowering._checked`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir.core import Op
from ...ir.types import AddressSpace, ArrayType, PointerType, Type, elem_of, sizeof
from ..target import LLVM_ORDERS, local_name, set_syncscope
from .lltypes import _I64, struct_field_lltype

if TYPE_CHECKING:
    from .lower import LoweringContext


class MemoryLowering:
    """``alloca``, ``shared``, ``dyn_shared``, ``elemptr``, ``ptrcast``, ``load``, ``store`` and the atomics."""

    # --- memory ---------------------------------------------------------------------------------
    def op_alloca(self, ctx: LoweringContext, op: Op) -> ll.Value:
        pointee = op.result.type.pointee
        slot = ctx.alloca(self.memtype(pointee), name=local_name(op.result.hint))
        return self.opaque(slot)  # a typed alloca would give GEPs with source_etype a wrong type

    @staticmethod
    def opaque(p: ll.Value) -> ll.Value:
        """llvmlite types a global's address by its pointee; the lowering works with opaque pointers."""
        t = p.type
        if isinstance(t, ll.PointerType) and not t.is_opaque:
            # Under opaque pointers the global's name already has type `ptr addrspace(N)`.
            return ll.FormattedConstant(ll.PointerType(addrspace=t.addrspace), p.get_reference())
        return p

    def op_shared(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.opaque(self.target.shared_array(ctx, op.attrs["symbol"],
                                                    self.memtype(op.result.type.pointee)))

    def op_dyn_shared(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.opaque(self.target.dynamic_shared(ctx))

    def index64(self, ctx: LoweringContext, i: ll.Value, t: Type) -> ll.Value:
        st = elem_of(t)
        if st.bits == 64:
            return i
        return ctx.b.sext(i, _I64) if st.is_signed else ctx.b.zext(i, _I64)

    def op_elemptr(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p, i = (self.v(ctx, x) for x in op.operands)
        pt = op.operands[0].type
        idx = self.index64(ctx, i, op.operands[1].type)
        if isinstance(pt.pointee, ArrayType):
            return ctx.b.gep(p, [ll.Constant(_I64, 0), idx], source_etype=self.memtype(pt.pointee))
        return ctx.b.gep(p, [idx], source_etype=self.memtype(pt.pointee))

    def op_fieldptr(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p = self.v(ctx, op.operands[0])
        st = op.operands[0].type.pointee
        return ctx.b.gep(p, [ll.Constant(ll.IntType(32), 0), ll.Constant(ll.IntType(32), op.attrs["index"])],
                         source_etype=self.memtype(st))

    def op_struct_build(self, ctx: LoweringContext, op: Op) -> ll.Value:
        st = op.result.type
        agg = ll.Constant(self.lltype(st), ll.Undefined)
        for i, (v, (_, ft)) in enumerate(zip(op.operands, st.fields)):
            agg = ctx.b.insert_value(agg, self._to_field(ctx, self.v(ctx, v), ft), i)
        return agg

    def op_struct_get(self, ctx: LoweringContext, op: Op) -> ll.Value:
        st = op.operands[0].type
        i = op.attrs["index"]
        x = ctx.b.extract_value(self.v(ctx, op.operands[0]), i)
        return self._from_field(ctx, x, st.fields[i][1])

    def _to_field(self, ctx: LoweringContext, x: ll.Value, t: Type) -> ll.Value:
        """A register value as its struct field's LLVM type (bool a byte; a vector held as lanes)."""
        ft = struct_field_lltype(t, self.memtype)
        if ft == x.type:
            return x
        if isinstance(ft, ll.ArrayType):
            arr = ll.Constant(ft, ll.Undefined)
            for k in range(ft.count):
                arr = ctx.b.insert_value(arr, ctx.b.extract_element(x, ll.Constant(ll.IntType(32), k)), k)
            return arr
        return ctx.b.zext(x, ft)

    def _from_field(self, ctx: LoweringContext, x: ll.Value, t: Type) -> ll.Value:
        want = self.lltype(t)
        if want == x.type:
            return x
        if isinstance(x.type, ll.ArrayType):
            vec = ll.Constant(want, ll.Undefined)
            for k in range(x.type.count):
                vec = ctx.b.insert_element(vec, ctx.b.extract_value(x, k), ll.Constant(ll.IntType(32), k))
            return vec
        return ctx.b.trunc(x, want)

    def op_ptrcast(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.v(ctx, op.operands[0])  # opaque pointers: the pointee lives in the IR type only

    def _checked(self, ctx: LoweringContext, p: ll.Value, ptype: PointerType, op: Op) -> None:
        if self.options.check_bounds and ptype.space in (AddressSpace.GLOBAL, AddressSpace.CONST):
            self.target.check_access(ctx, p, sizeof(ptype.pointee), op, self.memtype(ptype.pointee),
                                     op.attrs.get("align"))

    def op_load(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p = self.v(ctx, op.operands[0])
        pt = op.operands[0].type
        self._checked(ctx, p, pt, op)
        t = op.result.type
        x = ctx.b.load(p, typ=self.memtype(t), align=self.target.access_align(self.memtype(t), op.attrs.get("align")))
        if self.memtype(t) != self.lltype(t):  # bool in memory
            x = ctx.b.trunc(x, self.lltype(t))
        return x

    def op_store(self, ctx: LoweringContext, op: Op) -> None:
        p, x = (self.v(ctx, v) for v in op.operands)
        pt = op.operands[0].type
        self._checked(ctx, p, pt, op)
        t = op.operands[1].type
        if self.memtype(t) != self.lltype(t):
            x = ctx.b.zext(x, self.memtype(t))
        ctx.b.store(x, p, align=self.target.access_align(self.memtype(t), op.attrs.get("align")))

    def op_atomic(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p, x = (self.v(ctx, v) for v in op.operands)
        t = elem_of(op.operands[1].type)
        self._checked(ctx, p, op.operands[0].type, op)
        return self.target.atomic(ctx, op.attrs["op"], p, x, op.attrs["order"], op.attrs["scope"],
                                  t.is_signed, t.is_float)

    def op_atomic_cas(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p, c, n = (self.v(ctx, v) for v in op.operands)
        self._checked(ctx, p, op.operands[0].type, op)
        t = elem_of(op.operands[1].type)
        if t.is_float:  # cmpxchg takes integers: compare the bits, as CUDA's atomicCAS on floats does
            it = ll.IntType(t.bits)
            old = self.target.atomic_cas(ctx, p, ctx.b.bitcast(c, it), ctx.b.bitcast(n, it),
                                         op.attrs["order"], op.attrs["scope"])
            return ctx.b.bitcast(old, c.type)
        return self.target.atomic_cas(ctx, p, c, n, op.attrs["order"], op.attrs["scope"])

    def op_atomic_load(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p = self.v(ctx, op.operands[0])
        self._checked(ctx, p, op.operands[0].type, op)
        t = self.memtype(op.result.type)
        inst = ctx.b.load_atomic(p, LLVM_ORDERS[op.attrs["order"]], align=elem_of(op.result.type).bits // 8,
                                 typ=t)
        set_syncscope(inst, self.target.syncscope(op.attrs["scope"]))
        return inst

    def op_atomic_store(self, ctx: LoweringContext, op: Op) -> None:
        p, x = (self.v(ctx, v) for v in op.operands)
        self._checked(ctx, p, op.operands[0].type, op)
        # llvmlite's builder.store_atomic wants a typed pointer: build the instruction itself.
        inst = ll.StoreAtomicInstr(ctx.b.block, x, p, LLVM_ORDERS[op.attrs["order"]],
                                   elem_of(op.operands[1].type).bits // 8)
        ctx.b._insert(inst)
        set_syncscope(inst, self.target.syncscope(op.attrs["scope"]))
