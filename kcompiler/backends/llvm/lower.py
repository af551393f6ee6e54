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
from ...ir import core, intrinsics
from ...ir.core import Function, Module, Op, Region, Value
from ...ir.types import (AddressSpace, ArrayType, PointerType, ScalarType, TensorMapType, Type, VectorType, VoidType,
                         elem_of)
from ..errors import UnsupportedOnTarget
from ..target import LLVM_ORDERS, CompileOptions, Target, local_name, set_syncscope
from ...numerics.formats import FORMATS
from ...ir.types import F32
from ...ir.types import sizeof
from ...ir.types import I32


class BFloatType(ll.types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has no bf16 type)."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value: float) -> str:
        import ml_dtypes
        import numpy as np

        bits = int(np.array(value, dtype=ml_dtypes.bfloat16).view(np.uint16))
        return f"0xR{bits:04X}"


BFloatType._create_instance()

_I1, _I8, _I32, _I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)


def scalar_lltype(t: ScalarType) -> ll.Type:
    """The LLVM type of a scalar in registers (bool is i1)."""
    if t.kind == "bool":
        return _I1
    if t.kind == "minifloat":  # a small float is its code, in a byte
        return _I8
    if t.kind in ("int", "uint"):
        return ll.IntType(t.bits)
    return {"f16": ll.HalfType(), "bf16": BFloatType(), "f32": ll.FloatType(), "f64": ll.DoubleType()}[t.name]


def intrinsic_suffix(t: ll.Type) -> str:
    """The overload suffix LLVM mangles into intrinsic names: f32, i64, v4f32, bf16."""
    if isinstance(t, ll.VectorType):
        return f"v{t.count}{intrinsic_suffix(t.element)}"
    return t.intrinsic_name


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


class Lowering:
    """Lowers one IR module for one target. Use :func:`lower_module`."""

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
        """The LLVM type of ``t`` in memory (bool is a byte there)."""
        if isinstance(t, ScalarType) and t.kind == "bool":
            return _I8
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
                            bool(op.attrs.get("saturate", False)))

    def convert(self, ctx: LoweringContext, x: ll.Value, src: Type, dst: Type,
                saturate: bool = False) -> ll.Value:
        """C-style value conversion of scalars or same-length vectors. Float to int saturates and
        maps NaN to 0 (what PTX's cvt.rzi does and what LLVM's fptosi.sat gives on every target).
        8-bit floats convert through f32 (exact in both directions for f16 and bf16 sources, so one
        rounding), by the target's minifloat hooks; ``saturate`` applies to conversions into them."""
        if src == dst:
            return x
        s, d = elem_of(src), elem_of(dst)
        if s.is_minifloat or d.is_minifloat:
            return self._convert_minifloat(ctx, x, src, dst, saturate)
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
                        saturate: bool) -> ll.Value:
        s, d = elem_of(src), elem_of(dst)
        n = src.count if isinstance(src, VectorType) else 0
        B = ctx.b
        lanes = [B.extract_element(x, ll.Constant(_I32, i)) for i in range(n)] if n else [x]
        if s.is_minifloat:
            lanes = self.target.minifloat_decode(ctx, lanes, FORMATS[s.name])
        else:
            lanes = [self._convert_keep_nan_sign(ctx, v, s, F32) for v in lanes]
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
        lane = self.convert(ctx, lane, op.operands[1].type, _i32_type())
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
        cmp_up = B.icmp_signed("<", iv, hi) if it.is_signed else B.icmp_unsigned("<", iv, hi)
        step_owner = op.operands[2].owner
        if step_owner is not None and step_owner.name == "const":
            going_up = step_owner.attrs["value"] > 0 or not it.is_signed
            cond = cmp_up if going_up else B.icmp_signed(">", iv, hi)
        elif it.is_signed:
            up = B.icmp_signed(">", step, ll.Constant(step.type, 0))
            cond = B.select(up, cmp_up, B.icmp_signed(">", iv, hi))
        else:
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
        self.lower_region(ctx, op.regions[0])  # ends with `condition`
        ctx.state["_while_targets"].pop()
        B.position_at_end(body)
        self.lower_region(ctx, op.regions[1])
        ctx.loops.pop()
        if not B.block.is_terminated:
            B.branch(header)
        B.position_at_end(exit_)

    def op_condition(self, ctx: LoweringContext, op: Op) -> None:
        body, exit_ = ctx.state["_while_targets"][-1]
        ctx.b.cbranch(self.v(ctx, op.operands[0]), body, exit_)


def _i32_type() -> Type:
    return I32


def lower_module(ir_module: Module, target: Target, options: CompileOptions | None = None) -> ll.Module:
    """Lower an IR module to an llvmlite ``ir.Module`` for ``target`` (not yet optimised).

    Raises CompileError (with the op's span) where the target cannot do an operation.
    """
    return Lowering(ir_module, target, options or CompileOptions()).run()


def _bf16_to_f32(B: ll.IRBuilder, x: ll.Value) -> ll.Value:
    """bf16 (scalar or vector) to f32 through its bits (x << 16), which InstCombine does not fold
    back into a bf16 operation as it folds fpext."""
    n = x.type.count if isinstance(x.type, ll.VectorType) else None
    i16, i32, f32 = ((ll.VectorType(t, n) if n else t) for t in (ll.IntType(16), ll.IntType(32), ll.FloatType()))
    bits = B.shl(B.zext(B.bitcast(x, i16), i32), ll.Constant(i32, 16))
    return B.bitcast(bits, f32)
