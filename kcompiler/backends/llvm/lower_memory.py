"""Memory: allocas, shared memory, element pointers, loads, stores and atomics — the part of
:class:`~.lower.Lowering` that touches an address space (mixed into it; ``self`` is the Lowering).
``check_bounds`` hooks in at :meth:`MemoryLowering._checked`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

from ...ir.core import Op
from ...ir.types import AddressSpace, ArrayType, PointerType, ScalarType, Type, VectorType, alignof, elem_of, sizeof
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

    def op_const_data(self, ctx: LoweringContext, op: Op) -> ll.Value:
        """A module constant table: one private constant global per symbol, in the target's CONSTANT
        address space (NVPTX .const, AMDGCN 4, the CPU's 0)."""
        tables = self.__dict__.setdefault("_const_tables", {})
        sym = op.attrs["symbol"]
        gv = tables.get(sym)
        if gv is None:
            at = op.result.type.pointee
            t = self.memtype(at)
            elem = self.memtype(at.elem)
            vals = [ll.Constant(elem, int(bool(v))) if at.elem.kind == "bool" else self.constant(at.elem, v)
                    for v in op.attrs["values"]]
            gv = ll.GlobalVariable(self.module, t, self.unique_symbol(sym),
                                   addrspace=self.target.address_spaces[AddressSpace.CONSTANT])
            gv.linkage = "private"
            gv.unnamed_addr = True
            gv.global_constant = True
            gv.initializer = ll.Constant(t, vals)
            tables[sym] = gv
        return self.opaque(gv)

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
        if not self.options.check_bounds:
            return
        self._check_indices(ctx, op)
        if ptype.space in (AddressSpace.GLOBAL, AddressSpace.CONST):
            self.target.check_access(ctx, p, sizeof(ptype.pointee), op, self.memtype(ptype.pointee),
                                     op.attrs.get("align"))
        elif ptype.space == AddressSpace.SHARED:
            self.target.check_shared(ctx, p, sizeof(ptype.pointee), op)

    def _check_indices(self, ctx: LoweringContext, op: Op) -> None:
        """Under ``check_bounds``: every index into a fixed-size array on the way to the address the
        memory op ``op`` accesses (``a[i]``, ``m[i][j]``: the chain of ``elemptr`` on ``[T; N]``, through
        ``ptrcast``) is below the array's length N (Target.check_index), in any address space: local
        and shared arrays, which host-passed memory's check does not cover."""
        v = op.operands[0]
        while v.owner is not None and v.owner.name in ("elemptr", "ptrcast"):
            o = v.owner
            base = o.operands[0].type
            if o.name == "elemptr" and isinstance(base.pointee, ArrayType):
                i = o.operands[1]
                self.target.check_index(ctx, self.index64(ctx, self.v(ctx, i), i.type),
                                        base.pointee.count, op)
            v = o.operands[0]

    def access_type(self, t: Type, align: int | None) -> tuple[ll.Type, int | None]:
        """What a load or store of a value of IR type ``t`` moves, and the alignment to ask for
        (``align``: the IR's, None for the type's natural one): :meth:`memtype`, except that a vector
        whose memory form is an array of its lanes (a lane count that is not a power of two) moves as
        an LLVM vector of those memory lanes, aligned as a lane unless the IR asks for more. The
        bytes are the same: LLVM's store size of a vector of whole-byte lanes is its lanes' (only its
        allocation size rounds up, which no load or store reads); moving the array instead would
        take 2 x lanes instructions a value to convert it lane by lane (72-lane accumulators made
        three quarters of an attention kernel's IR)."""
        mt = self.memtype(t)
        if isinstance(t, VectorType) and isinstance(mt, ll.ArrayType):
            return ll.VectorType(mt.element, mt.count), align or alignof(t)
        return mt, align

    def op_load(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p = self.v(ctx, op.operands[0])
        pt = op.operands[0].type
        self._checked(ctx, p, pt, op)
        t = op.result.type
        at, align = self.access_type(t, op.attrs.get("align"))
        x = ctx.b.load(p, typ=at, align=self.target.access_align(at, align))
        return self.from_memory(ctx, x, self.lltype(t))

    def op_store(self, ctx: LoweringContext, op: Op) -> None:
        p, x = (self.v(ctx, v) for v in op.operands)
        pt = op.operands[0].type
        self._checked(ctx, p, pt, op)
        at, align = self.access_type(op.operands[1].type, op.attrs.get("align"))
        ctx.b.store(self.to_memory(ctx, x, at), p, align=self.target.access_align(at, align))

    def from_memory(self, ctx: LoweringContext, x: ll.Value, rt: ll.Type) -> ll.Value:
        """A value as loaded (:meth:`access_type`) in its register form ``rt`` (:meth:`lltype`):
        bools, and vectors of them, truncated from bytes to i1."""
        return x if x.type == rt else ctx.b.trunc(x, rt)

    def to_memory(self, ctx: LoweringContext, x: ll.Value, at: ll.Type) -> ll.Value:
        """The inverse of :meth:`from_memory`: a register value as the access type ``at`` stores it."""
        return x if x.type == at else ctx.b.zext(x, at)

    def op_atomic(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p, x = (self.v(ctx, v) for v in op.operands)
        t = elem_of(op.operands[1].type)
        self._checked(ctx, p, op.operands[0].type, op)
        old = self.target.atomic(ctx, op.attrs["op"], p, x, op.attrs["order"], op.attrs["scope"],
                                 t.is_signed, t.is_float)
        if op.attrs["op"] == "exch" and ctx.while_depth and isinstance(old.type, ll.IntType):
            self.target.spin_point(ctx, old)  # a spin lock: while atomic_exch(lock, 1) == 1 {}
        return old

    def op_atomic_cas(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p, c, n = (self.v(ctx, v) for v in op.operands)
        self._checked(ctx, p, op.operands[0].type, op)
        t = elem_of(op.operands[1].type)
        if t.is_float:  # cmpxchg takes integers: compare the bits, as CUDA's atomicCAS on floats does
            it = ll.IntType(t.bits)
            old = self.target.atomic_cas(ctx, p, ctx.b.bitcast(c, it), ctx.b.bitcast(n, it),
                                         op.attrs["order"], op.attrs["scope"])
            if ctx.while_depth:
                self.target.spin_point(ctx, old, ctx.b.icmp_unsigned("!=", old, ctx.b.bitcast(c, it)))
            return ctx.b.bitcast(old, c.type)
        old = self.target.atomic_cas(ctx, p, c, n, op.attrs["order"], op.attrs["scope"])
        if ctx.while_depth:  # a CAS loop, or a lock: yield where it failed (spin_point)
            self.target.spin_point(ctx, old, ctx.b.icmp_unsigned("!=", old, c))
        return old

    def op_atomic_load(self, ctx: LoweringContext, op: Op) -> ll.Value:
        p = self.v(ctx, op.operands[0])
        self._checked(ctx, p, op.operands[0].type, op)
        t = self.memtype(op.result.type)
        inst = ctx.b.load_atomic(p, LLVM_ORDERS[op.attrs["order"]], align=elem_of(op.result.type).bits // 8,
                                 typ=t)
        set_syncscope(inst, self.target.syncscope(op.attrs["scope"]))
        rt = op.result.type
        if ctx.while_depth and isinstance(rt, ScalarType):  # while atomic_load(flag) == 0 {}: spin_point
            self.target.spin_point(ctx, inst if isinstance(t, ll.IntType) else ctx.b.bitcast(inst, ll.IntType(rt.bits)))
        return inst

    def op_atomic_store(self, ctx: LoweringContext, op: Op) -> None:
        p, x = (self.v(ctx, v) for v in op.operands)
        self._checked(ctx, p, op.operands[0].type, op)
        # llvmlite's builder.store_atomic wants a typed pointer: build the instruction itself.
        inst = ll.StoreAtomicInstr(ctx.b.block, x, p, LLVM_ORDERS[op.attrs["order"]],
                                   elem_of(op.operands[1].type).bits // 8)
        ctx.b._insert(inst)
        set_syncscope(inst, self.target.syncscope(op.attrs["scope"]))
