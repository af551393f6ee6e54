"""Lower kcompiler's IR to LLVM IR (an llvmlite ``ir.Module``), once for every target.

Structured regions become basic blocks here: ``if`` a diamond, ``for`` a header with a phi for the
induction variable, ``while`` a header running the condition region. Wherever targets differ (special
registers, barriers, warp operations, shared memory, atomics' scopes, the kernel calling convention,
math) the lowering calls a hook of :class:`~kcompiler.backends.target.Target`; no vendor is named here.
"""
from __future__ import annotations

import struct
from typing import Any

from llvmlite import ir as ll

from ...diagnostics import CompileError, SourceSpan
from ...ir import core
from ...ir.core import Function, Module, Op, Region, Value
from ...ir.types import (AddressSpace, ArrayType, PointerType, ScalarType, TensorMapType, Type, VectorType, VoidType,
                         elem_of)
from ..errors import UnsupportedOnTarget
from ..target import CompileOptions, Target, local_name
from .lltypes import _I8, intrinsic_suffix, scalar_lltype
from .lower_arith import ArithmeticLowering
from .lower_bits import BitLowering
from .lower_machine import MachineLowering
from .lower_memory import MemoryLowering


class _SpacedAlloca(ll.AllocaInstr):
    """``alloca T, addrspace(N)``: llvmlite's AllocaInstr only knows address space 0."""

    def __init__(self, parent: ll.Block, typ: ll.Type, space: int, name: str):
        super().__init__(parent, typ, None, name)
        self.type = ll.PointerType(addrspace=space)
        self.space = space

    def descr(self, buf: list[str]) -> None:
        super().descr(buf)
        if buf and buf[-1].endswith("\n"):  # llvmlite appends the newline itself: insert before it
            buf[-1] = buf[-1][:-1] + f", addrspace({self.space})\n"
        else:
            buf.append(f", addrspace({self.space})")


class LoweringContext:
    """The state of lowering one function, handed to target hooks.

    ``b``: the IRBuilder at the current position. ``module``: the llvmlite module. ``fn``: the LLVM
    function. ``ir_fn``: the IR function. ``state``: per-function scratch space for the target.
    """

    def __init__(self, lowering: "Lowering", ir_fn: Function, fn: ll.Function):
        self.lowering = lowering
        self.target = lowering.target
        self.options = lowering.options
        self.module = lowering.module
        self.ir_fn = ir_fn
        self.fn = fn
        self.state: dict[str, Any] = {}
        self.values: dict[int, ll.Value] = {}
        self.loops: list[tuple[ll.Block, ll.Block]] = []  # (continue target, break target)
        #: ``while`` loops around the op being lowered: only these can spin (a ``for`` is counted);
        #: an atomic read inside one is a spin point (Target.spin_point)
        self.while_depth = 0
        self.entry = fn.append_basic_block("entry")
        self.alloca_builder = ll.IRBuilder(self.entry)
        self.b = ll.IRBuilder(fn.append_basic_block("start"))
        self.current_span: SourceSpan | None = None

    # --- helpers for hooks ------------------------------------------------------------------------
    def lltype(self, t: Type) -> ll.Type:
        return self.lowering.lltype(t)

    def memtype(self, t: Type) -> ll.Type:
        return self.lowering.memtype(t)

    def unique_symbol(self, name: str) -> str:
        return self.lowering.unique_symbol(name)

    def alloca(self, t: ll.Type, name: str = "") -> ll.Value:
        """An alloca in the function's entry block (where mem2reg/SROA and coroutine frames want it),
        in the target's alloca address space (5, private, on AMDGPU)."""
        space = self.target.alloca_space
        if space == 0:
            return self.alloca_builder.alloca(t, name=name)
        inst = _SpacedAlloca(self.alloca_builder.block, t, space, name)
        self.alloca_builder._insert(inst)
        return inst

    def declare(self, name: str, ret: ll.Type, args: list[ll.Type], **attrs: Any) -> ll.Function:
        """Get or declare an external function (intrinsics included)."""
        g = self.module.globals.get(name)
        if g is not None and any(g is f for f in self.lowering.functions.values()):
            raise AssertionError(f"the target declares '{name}', which names a function of the program "
                                 f"(add it to the target's reserved_symbols)")
        if g is None:
            g = ll.Function(self.module, ll.FunctionType(ret, args), name)
            for a in attrs.get("fn_attrs", ()):
                g.attributes.add(a)
        return g

    def call_intrinsic(self, base: str, args: list[ll.Value], ret: ll.Type | None = None,
                       overload: list[ll.Type] | None = None) -> ll.Value:
        """Call an overloaded LLVM intrinsic, e.g. ``call_intrinsic("llvm.sqrt", [x])`` →
        ``llvm.sqrt.f32``. ``overload`` gives the types mangled into the name (default: the first
        argument's type); ``ret`` defaults to the first argument's type."""
        tys = overload if overload is not None else [args[0].type]
        name = ".".join([base] + [intrinsic_suffix(t) for t in tys])
        fn = self.declare(name, ret if ret is not None else args[0].type, [a.type for a in args])
        return self.b.call(fn, args)

    def string_constant(self, text: str, addrspace: int) -> ll.Value:
        """A pointer (in ``addrspace``) to a private constant holding ``text`` as UTF-8 with a NUL,
        one global per distinct text and address space in the module (printf formats, strings)."""
        return self.lowering.string_constant(text, addrspace)

    @property
    def extra_params(self) -> list[ll.Argument]:
        """The hidden parameters the target appended to a kernel (see Target.kernel_extra_params)."""
        n = len(self.ir_fn.params)
        return list(self.fn.args[n:])


class Lowering(ArithmeticLowering, BitLowering, MemoryLowering, MachineLowering):
    """Lowers one IR module for one target. Use :func:`lower_module`.

    This class holds the module, the functions, regions, constants and control flow; the ops that
    compute (:mod:`.lower_arith`), touch memory (:mod:`.lower_memory`) and drive the machine
    (:mod:`.lower_machine`) are in the mixins. ``lower_op`` dispatches ``op.name`` to ``op_<name>``."""

    def __init__(self, ir_module: Module, target: Target, options: CompileOptions):
        self.ir_module = ir_module
        self.target = target
        self.options = options
        self.module = ll.Module(name=ir_module.name)
        self.module.triple = target.triple
        self.module.data_layout = target.data_layout
        self.functions: dict[str, ll.Function] = {}
        self._symbols: set[str] = set()
        self._strings: dict[tuple[str, int], ll.GlobalVariable] = {}
        #: printf="buffered": every record's format by its hash (Target.printf_buffer fills it).
        self.printf_formats: dict[int, str] = {}

    # --- types ----------------------------------------------------------------------------------
    def lltype(self, t: Type) -> ll.Type:
        """The LLVM type of an IR value of type ``t`` (registers)."""
        if isinstance(t, ScalarType):
            return scalar_lltype(t)
        if isinstance(t, VectorType):
            return ll.VectorType(scalar_lltype(t.elem), t.count)
        if isinstance(t, PointerType):
            if t.space == AddressSpace.LOCAL:
                return ll.PointerType(addrspace=self.target.alloca_space)
            return ll.PointerType(addrspace=self.target.address_spaces[t.space])
        if isinstance(t, ArrayType):
            return ll.ArrayType(self.memtype(t.elem), t.count)
        if isinstance(t, VoidType):
            return ll.VoidType()
        if isinstance(t, TensorMapType):
            # the address of the map (generic); a kernel receives the map itself by value, which
            # Target.declare_kernel spells (NVPTX: a byval grid-constant parameter)
            return ll.PointerType()
        raise TypeError(f"no LLVM type for {t}")

    def memtype(self, t: Type) -> ll.Type:
        """The LLVM type of ``t`` in memory: bool is a byte there, and a vector whose lane count is
        not a power of two is an array of its lanes (``vec<u8, 3>`` 3 bytes aligned as a lane,
        CUDA's ``uchar3`` and a numpy ``(n, 3)`` array; LLVM would pad ``<3 x i8>`` to 4 bytes)."""
        if isinstance(t, ScalarType) and t.kind == "bool":
            return _I8
        if isinstance(t, VectorType) and t.count & (t.count - 1):
            return ll.ArrayType(self.memtype(t.elem), t.count)
        if isinstance(t, VectorType) and t.elem.kind == "bool":
            return ll.VectorType(_I8, t.count)
        return self.lltype(t)

    def string_constant(self, text: str, addrspace: int) -> ll.Value:
        key = (text, addrspace)
        gv = self._strings.get(key)
        if gv is None:
            data = bytearray(text.encode("utf-8", "surrogateescape")) + b"\0"
            t = ll.ArrayType(_I8, len(data))
            gv = ll.GlobalVariable(self.module, t, self.unique_symbol(f"kc_str_{len(self._strings)}"),
                                   addrspace=addrspace)
            gv.linkage = "private"
            gv.unnamed_addr = True
            gv.global_constant = True
            gv.initializer = ll.Constant(t, data)
            gv.align = 1
            self._strings[key] = gv
        return self.opaque(gv)

    def unique_symbol(self, name: str) -> str:
        base, n = name, 0
        while name in self._symbols or name in self.module.globals:
            n += 1
            name = f"{base}.{n}"
        self._symbols.add(name)
        return name

    # --- module ---------------------------------------------------------------------------------
    def run(self) -> ll.Module:
        # The program's own symbols first, so that a renamed one (below) cannot take another's name.
        self._symbols.update(self.target.function_symbol(f.name, f.is_kernel) for f in self.ir_module.functions)
        for f in self.ir_module.functions:
            self.declare_function(f)
        for f in self.ir_module.functions:
            self.lower_function(f)
        if self.printf_formats:  # printf="buffered": where the runtime finds the formats
            self.target.emit_printf_formats(self.module, self.printf_formats)
        self.target.finalize_module(self.module)
        return self.module

    def declare_function(self, f: Function) -> None:
        params = [self.lltype(p.type) for p in f.params]
        if f.is_kernel:
            params += self.target.kernel_extra_params()
        fnty = ll.FunctionType(self.lltype(f.ret), params)
        symbol = self.target.function_symbol(f.name, f.is_kernel)
        if symbol in self.target.reserved_symbols:
            if f.is_kernel:
                raise CompileError(self.target.reserved_kernel_message(f.attrs.get("source_name", f.name),
                                                                       symbol), f.span, hint="rename the kernel")
            symbol = self.unique_symbol(symbol + "_kc")  # internal: renamed out of the runtime's way
        fn = ll.Function(self.module, fnty, symbol)
        for arg, p in zip(fn.args, f.params):
            arg.name = local_name(p.hint)
        if not f.is_kernel:
            fn.linkage = "internal"
        self.functions[f.name] = fn
        self._symbols.add(symbol)

    def lower_function(self, f: Function) -> None:
        fn = self.functions[f.name]
        ctx = LoweringContext(self, f, fn)
        for arg, p in zip(fn.args, f.params):
            ctx.values[p.id] = arg
        if f.is_kernel:
            self.target.declare_kernel(ctx)
        self.target.begin_function(ctx)
        self.lower_region(ctx, f.body)
        if not ctx.b.block.is_terminated:
            if isinstance(f.ret, VoidType):
                self._return(ctx, None)
            else:
                ctx.b.unreachable()
        ctx.alloca_builder.branch(fn.blocks[1])

    def _return(self, ctx: LoweringContext, value: ll.Value | None) -> None:
        if ctx.ir_fn.is_kernel:
            self.target.lower_return(ctx, value)
        elif value is None:
            ctx.b.ret_void()
        else:
            ctx.b.ret(value)

    # --- regions --------------------------------------------------------------------------------
    def lower_region(self, ctx: LoweringContext, region: Region) -> None:
        for op in region.ops:
            if ctx.b.block.is_terminated:
                return  # code after a terminator is dead
            ctx.current_span = op.span
            try:
                result = self.lower_op(ctx, op)
            except UnsupportedOnTarget as e:
                raise CompileError(str(e), op.span) from None
            if op.result is not None:
                assert result is not None, op.name
                ctx.values[op.result.id] = result

    def v(self, ctx: LoweringContext, value: Value) -> ll.Value:
        return ctx.values[value.id]

    def lower_op(self, ctx: LoweringContext, op: Op) -> ll.Value | None:
        handler = getattr(self, "op_" + op.name, None)
        if handler is None:
            if op.name in core.BINARY:
                return self.binary(ctx, op)
            raise NotImplementedError(f"lowering of op '{op.name}'")
        return handler(ctx, op)

    # --- values ---------------------------------------------------------------------------------
    def op_const(self, ctx: LoweringContext, op: Op) -> ll.Value:
        return self.constant(op.result.type, op.attrs["value"])

    def constant(self, t: Type, value: Any) -> ll.Value:
        if isinstance(t, VectorType):
            c = self.constant(t.elem, value)
            return ll.Constant(self.lltype(t), [c] * t.count)
        assert isinstance(t, ScalarType)
        lt = self.lltype(t)
        if t.kind == "bool":
            return ll.Constant(lt, int(bool(value)))
        if t.kind in ("int", "uint"):
            v = int(value) & ((1 << t.bits) - 1)
            return ll.Constant(lt, v)
        v = float(value)
        if t.name == "f32":
            v = struct.unpack("f", struct.pack("f", v))[0] if abs(v) < 3.5e38 or v != v else v
        return ll.Constant(lt, v)

    # --- control flow ---------------------------------------------------------------------------
    def op_call(self, ctx: LoweringContext, op: Op) -> ll.Value | None:
        fn = self.functions[op.attrs["callee"]]
        r = ctx.b.call(fn, [self.v(ctx, a) for a in op.operands])
        return r if op.result is not None else None

    def op_return(self, ctx: LoweringContext, op: Op) -> None:
        self._return(ctx, self.v(ctx, op.operands[0]) if op.operands else None)

    def op_break(self, ctx: LoweringContext, op: Op) -> None:
        ctx.b.branch(ctx.loops[-1][1])

    def op_continue(self, ctx: LoweringContext, op: Op) -> None:
        ctx.b.branch(ctx.loops[-1][0])

    def op_if(self, ctx: LoweringContext, op: Op) -> None:
        cond = self.v(ctx, op.operands[0])
        then_r, else_r = op.regions
        B = ctx.b
        then_bb = B.append_basic_block("then")
        else_bb = B.append_basic_block("else") if else_r.ops else None
        merge = B.append_basic_block("endif")
        B.cbranch(cond, then_bb, else_bb or merge)
        B.position_at_end(then_bb)
        self.lower_region(ctx, then_r)
        if not B.block.is_terminated:
            B.branch(merge)
        if else_bb is not None:
            B.position_at_end(else_bb)
            self.lower_region(ctx, else_r)
            if not B.block.is_terminated:
                B.branch(merge)
        B.position_at_end(merge)

    def op_for(self, ctx: LoweringContext, op: Op) -> None:
        lo, hi, step = (self.v(ctx, v) for v in op.operands)
        it = elem_of(op.operands[0].type)
        B = ctx.b
        pre = B.block
        header = B.append_basic_block("for.header")
        body = B.append_basic_block("for.body")
        latch = B.append_basic_block("for.latch")
        exit_ = B.append_basic_block("for.exit")
        B.branch(header)
        B.position_at_end(header)
        iv = B.phi(lo.type, name=local_name(op.regions[0].args[0].hint) or "i")
        iv.add_incoming(lo, pre)
        # The step's sign says the direction; the bounds compare with the bounds' signedness. An
        # unsigned range may count down with a signed step (frontend/ranges.py).
        st = elem_of(op.operands[2].type)
        icmp = B.icmp_signed if it.is_signed else B.icmp_unsigned
        cmp_up = icmp("<", iv, hi)
        step_owner = op.operands[2].owner
        up: ll.Value | None = None  # a run-time step of either sign: whether it counts up
        if step_owner is not None and step_owner.name == "const":
            going_up = step_owner.attrs["value"] > 0 or not st.is_signed
            cond = cmp_up if going_up else icmp(">", iv, hi)
        elif st.is_signed:
            up = B.icmp_signed(">", step, ll.Constant(step.type, 0))
            cond = B.select(up, cmp_up, icmp(">", iv, hi))
            going_up = False
        else:
            going_up = True
            cond = cmp_up
        B.cbranch(cond, body, exit_)
        B.position_at_end(body)
        ctx.values[op.regions[0].args[0].id] = iv
        ctx.loops.append((latch, exit_))
        self.lower_region(ctx, op.regions[0])
        ctx.loops.pop()
        if not B.block.is_terminated:
            B.branch(latch)
        B.position_at_end(latch)
        nxt = B.add(iv, step)
        if not it.is_signed and not going_up:
            # Counting an unsigned value down: iv - step would wrap below zero and past `hi` when
            # iv - hi <= -step (range(10u32, 0u32, -3) stops after 1). iv > hi here, so iv - hi is exact.
            more = B.icmp_unsigned(">", B.sub(iv, hi), B.sub(ll.Constant(step.type, 0), step))
            if up is not None:
                more = B.or_(up, more)
            cont = B.append_basic_block("for.next")
            B.cbranch(more, cont, exit_)
            B.position_at_end(cont)
            iv.add_incoming(nxt, cont)
        else:
            iv.add_incoming(nxt, latch)
        B.branch(header)
        B.position_at_end(exit_)

    def op_while(self, ctx: LoweringContext, op: Op) -> None:
        B = ctx.b
        header = B.append_basic_block("while.cond")
        body = B.append_basic_block("while.body")
        exit_ = B.append_basic_block("while.exit")
        B.branch(header)
        B.position_at_end(header)
        ctx.state.setdefault("_while_targets", []).append((body, exit_))
        ctx.loops.append((header, exit_))
        ctx.while_depth += 1
        self.lower_region(ctx, op.regions[0])  # ends with `condition`
        ctx.state["_while_targets"].pop()
        B.position_at_end(body)
        self.lower_region(ctx, op.regions[1])
        ctx.loops.pop()
        ctx.while_depth -= 1
        if not B.block.is_terminated:
            B.branch(header)
        B.position_at_end(exit_)

    def op_condition(self, ctx: LoweringContext, op: Op) -> None:
        body, exit_ = ctx.state["_while_targets"][-1]
        ctx.b.cbranch(self.v(ctx, op.operands[0]), body, exit_)

def lower_module(ir_module: Module, target: Target, options: CompileOptions | None = None) -> ll.Module:
    """Lower an IR module to an llvmlite ``ir.Module`` for ``target`` (not yet optimised).

    Raises CompileError (with the op's span) where the target cannot do an operation.
    """
    return Lowering(ir_module, target, options or CompileOptions()).run()
