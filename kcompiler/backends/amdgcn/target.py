"""The AMD target: LLVM's AMDGPU backend for ``amdgcn-amd-amdhsa``, AMDGCN assembly out, and a code
object (HSACO) linked with ``ld.lld``.

Sources: LLVM's "User Guide for AMDGPU Backend" (AMDGPUUsage): *Address Spaces* (global 1, LDS 3,
constant 4, private 5), *Memory Scopes* (``workgroup``, ``agent``, system), *Code Object V5 Metadata*
and *Amdhsa Code Object V5 Kernel Implicit Arguments* (``hidden_block_count_*`` at byte 0, 4, 8 and
``hidden_group_size_*`` at 12, 14, 16 of the implicit argument block), and the AMDGPU intrinsics it
lists (``llvm.amdgcn.workitem.id.*``, ``workgroup.id.*``, ``implicitarg.ptr``, ``s.barrier``,
``ds.bpermute``, ``ballot``, ``mbcnt.lo/hi``, ``readfirstlane``).

Kernels get no vendor device library: everything is emitted here, so a code object depends on
nothing but the HIP runtime that loads it.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir as ll

from ...ir.core import NORMAL_RANGE_MATH
from ...ir.types import AddressSpace
from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext
from ..target import Target
from .archs import ARCHS, RESOURCE_LIMITS
from .attributes import mark_unused_inputs, note_hostcall
from ..llvm import minifloat
from ..llvm import initialize
from ..llvm.codegen import machine_code
from . import link  # as a module: link.link_code_object is looked up at each call
from ...limits import ResourceLimits

_I1, _I16, _I32, _I64 = ll.IntType(1), ll.IntType(16), ll.IntType(32), ll.IntType(64)

def _float8_mode(mode: str) -> bool:
    """Whether the ``float8`` target option asks for software conversions."""
    if mode not in ("hardware", "software"):
        raise ValueError(f"float8 must be 'hardware' or 'software', not {mode!r}")
    return mode == "software"


#: The code object version kcompiler pins: v5. LLVM 22 defaults to v6, which ROCm before 6.3 rejects.
CODE_OBJECT_VERSION = 500

# Byte offsets in the implicit kernel arguments (code object v5; AMDGPUUsage, "Code Object V5
# Metadata", hidden arguments): u32 block counts at 0/4/8, u16 workgroup sizes at 12/14/16, the
# hostcall buffer's address at 80. Tests check them against the code objects' own metadata.
_HIDDEN_BLOCK_COUNT = 0
_HIDDEN_GROUP_SIZE = 12
_HIDDEN_HOSTCALL_BUFFER = 80  # u64 hidden_hostcall_buffer
# u64 hidden_printf_buffer (printf="buffered"): SIDefines PRINTF_BUFFER_OFFSET; ockl's
# __printf_alloc reads u64 index 9 of the implicit arguments for code object v5.
_HIDDEN_PRINTF_BUFFER = 72


#: LLVM's options for a module with a huge basic block (codegen.LARGE_BLOCK):
#: - no load/store vectorizer (AMDGPUTargetMachine.cpp), whose time grows as the square of the block's
#:   loads and stores; the SelectionDAG still merges adjacent stores (4,096 f32 stores: about 1,024
#:   global_store_dwordx4 either way);
#: - no post-RA machine scheduler (MachineScheduler.cpp's -enable-post-misched), which GFX11 runs and
#:   GFX9 does not: on gfx1100, 4,096 stores of constants took 56 s in it (of 58 s of code generation;
#:   1.9 s without it), 3,000 loads summed 31 s of 33 (2.3 s); found by the fuzzer, 2026-11-29.
_LARGE_BLOCK_OPTIONS = ("-amdgpu-load-store-vectorizer=0", "-enable-post-misched=0")


class AmdgcnTarget(Target):
    """AMD GPUs: CDNA (gfx90a, gfx942, gfx950; wave64) and RDNA (gfx1100, gfx1201; wave32).

    ``printf``: ``"hostcall"`` (the default: the HIP runtime's hostcall listener, which needs PCIe
    atomics) or ``"buffered"`` (HIP's buffered printf, clang's ``-mprintf-kind=buffered``: records
    in the runtime's printf buffer, printed after the kernel; docs/amd-hostcall.md §12). Raises
    ValueError for an architecture outside :data:`ARCHS` or another printf."""

    name = "amdgcn"
    # v_exp_f32, v_log_f32, v_sin_f32, v_cos_f32 (tanh from v_exp) are f32 only; LLVM would call libm for
    # f64, which a code object cannot link
    no_f64_math = frozenset({"fast_exp2", "fast_log2", "fast_sin", "fast_cos", "fast_tanh"})
    triple = "amdgcn-amd-amdhsa"
    address_spaces = {AddressSpace.GLOBAL: 1, AddressSpace.SHARED: 3, AddressSpace.CONST: 4,
                      AddressSpace.LOCAL: 5, AddressSpace.CONSTANT: 4}
    alloca_space = 5
    binary_kind = "hsaco"
    printf_method = "hostcall"  # served by the HIP runtime's own listener

    def __init__(self, arch: str = "gfx942", float8: str = "hardware", printf: str = "hostcall"):
        self.hostcall_printf_option(printf)
        if arch not in ARCHS:
            raise ValueError(f"unknown AMD architecture '{arch}': expected one of {', '.join(ARCHS)}")
        self.arch = arch
        self.warp_size, features = ARCHS[arch]
        # float8="software": the reference conversions even where the chip converts (to compare them)
        self.features = features - ({"fp8_convert", "fp8_fnuz", "fp8_ocp"} if _float8_mode(float8) else set())
        self.data_layout = str(self.target_machine(0).target_data)

    def describe(self) -> dict:
        return {**super().describe(), "code_object_version": CODE_OBJECT_VERSION // 100}

    # --- functions ----------------------------------------------------------------------------------
    def declare_kernel(self, ctx: LoweringContext) -> None:
        """An ``amdgpu_kernel``. The IR function's ``max_threads`` (``launch_bounds``) becomes
        ``"amdgpu-flat-work-group-size"="1,N"`` (AMDGPUUsage, "LLVM IR Attributes"): without it LLVM
        assumes workgroups of 1024 and caps a wave64 kernel at 128 VGPRs, spilling what a kernel of
        256 threads could keep in the 512 of a SIMD (gfx90a+)."""
        ctx.fn.calling_convention = "amdgpu_kernel"
        n = ctx.ir_fn.attrs.get("max_threads")
        if n is not None:
            set.add(ctx.fn.attributes, f'"amdgpu-flat-work-group-size"="1,{int(n)}"')  # llvmlite lists no such

    # --- the machine ------------------------------------------------------------------------------
    def _intrinsic(self, ctx: LoweringContext, name: str, ret: ll.Type = _I32,
                   args: tuple[ll.Value, ...] = ()) -> ll.Value:
        fn = ctx.declare(f"llvm.amdgcn.{name}", ret, [a.type for a in args])
        return ctx.b.call(fn, list(args))

    def _implicit_arg(self, ctx: LoweringContext, offset: int, t: ll.IntType) -> ll.Value:
        """An integer at byte ``offset`` of the implicit (hidden) kernel arguments: constant over the
        launch, so the load is marked invariant."""
        base = self._intrinsic(ctx, "implicitarg.ptr", ll.PointerType(addrspace=4))
        p = ctx.b.gep(base, [ll.Constant(_I64, offset)], source_etype=ll.IntType(8), inbounds=True)
        v = ctx.b.load(p, typ=t, align=t.width // 8)
        v.set_metadata("invariant.load", ctx.module.add_metadata([]))
        return v

    def _lane_id(self, ctx: LoweringContext) -> ll.Value:
        ones, zero = ll.Constant(_I32, -1), ll.Constant(_I32, 0)
        lo = self._intrinsic(ctx, "mbcnt.lo", _I32, (ones, zero))
        if self.warp_size == 32:
            return lo
        return self._intrinsic(ctx, "mbcnt.hi", _I32, (ones, lo))

    def special(self, ctx: LoweringContext, reg: str, dim: str) -> ll.Value:
        k = "xyz".index(dim) if dim in ("x", "y", "z") else 0
        if reg == "thread_id":
            return self._intrinsic(ctx, f"workitem.id.{dim}")
        if reg == "block_id":
            return self._intrinsic(ctx, f"workgroup.id.{dim}")
        if reg == "block_dim":
            return ctx.b.zext(self._implicit_arg(ctx, _HIDDEN_GROUP_SIZE + 2 * k, _I16), _I32)
        if reg == "grid_dim":
            return self._implicit_arg(ctx, _HIDDEN_BLOCK_COUNT + 4 * k, _I32)
        if reg == "lane_id":
            return self._lane_id(ctx)
        if reg == "warp_id":  # the wavefront's index in its workgroup
            b = ctx.b
            tx, ty, tz = (self.special(ctx, "thread_id", d) for d in "xyz")
            nx, ny = (self.special(ctx, "block_dim", d) for d in "xy")
            linear = b.add(tx, b.mul(nx, b.add(ty, b.mul(ny, tz))))
            return b.lshr(linear, ll.Constant(_I32, self.warp_size.bit_length() - 1))
        raise UnsupportedOnTarget(f"no special register '{reg}' on amdgcn")

    def barrier(self, ctx: LoweringContext) -> None:
        # s_barrier only waits for the wavefronts; the fences make LDS and global writes before it
        # visible to the workgroup after it (what __syncthreads() is on AMD).
        ctx.b.fence("release", "workgroup")
        self._intrinsic(ctx, "s.barrier", ll.VoidType())
        ctx.b.fence("acquire", "workgroup")

    def syncscope(self, scope: str) -> str | None:
        return {"block": "workgroup", "device": "agent", "system": None}[scope]

    def byte_perm(self, ctx: LoweringContext, x: ll.Value, y: ll.Value, s: ll.Value) -> ll.Value:
        """``v_perm_b32`` (GFX8+): its selector has a byte per result byte, 0-3 picking a byte of
        src1 and 4-7 of src0 (8 and up: signs and constants), so CUDA's nibble selector ``s`` becomes
        bytes ``(s >> 4k) & 7`` and the operands swap (AMD CDNA3 / RDNA3 ISA, "V_PERM_B32")."""
        b = ctx.b
        sel = ll.Constant(_I32, 0)
        for k in range(4):
            nib = b.and_(b.lshr(s, ll.Constant(_I32, 4 * k)), ll.Constant(_I32, 7))
            sel = b.or_(sel, b.shl(nib, ll.Constant(_I32, 8 * k)))
        return b.call(ctx.declare("llvm.amdgcn.perm", _I32, [_I32, _I32, _I32]), [y, x, sel])

    def shuffle(self, ctx: LoweringContext, mode: str, value: ll.Value, lane: ll.Value) -> ll.Value:
        b = ctx.b
        me = self._lane_id(ctx)
        w = ll.Constant(_I32, self.warp_size)
        if mode == "idx":
            src = b.and_(lane, ll.Constant(_I32, self.warp_size - 1))  # CUDA reads lane % warp_size
        else:
            src = {"xor": b.xor, "down": b.add, "up": b.sub}[mode](me, lane)
            # A source outside the wavefront reads the lane's own value (CUDA's rule); unsigned
            # compare also catches 'up' below lane 0.
            src = b.select(b.icmp_unsigned("<", src, w), src, me)
        addr = b.shl(src, ll.Constant(_I32, 2))  # ds_bpermute addresses lanes in bytes
        return self._intrinsic(ctx, "ds.bpermute", _I32, (addr, value))

    def ballot(self, ctx: LoweringContext, pred: ll.Value) -> ll.Value:
        if self.warp_size == 64:
            return self._intrinsic(ctx, "ballot.i64", _I64, (pred,))
        return ctx.b.zext(self._intrinsic(ctx, "ballot.i32", _I32, (pred,)), _I64)

    def active_mask(self, ctx: LoweringContext) -> ll.Value:
        return self.ballot(ctx, ll.Constant(_I1, 1))

    def read_first_lane(self, ctx: LoweringContext, value: ll.Value) -> ll.Value:
        return ctx.call_intrinsic("llvm.amdgcn.readfirstlane", [value])

    def warp_sync(self, ctx: LoweringContext, mask: ll.Value | None = None) -> None:
        # A wavefront runs in lockstep: what is needed is that the compiler keeps memory accesses on
        # their side of this point and that they are complete for the other lanes.
        ctx.b.fence("acq_rel", "wavefront")
        self._intrinsic(ctx, "wave.barrier", ll.VoidType())

    # --- 8-bit floats: the packed converts of gfx942 (FNUZ) and gfx950 / gfx12 (OCP) ------------------
    def _fp8_hw(self, fmt) -> str | None:
        if self.has("fp8_fnuz"):
            return {"f8e4m3fnuz": "fp8", "f8e5m2fnuz": "bf8"}.get(fmt.name)
        if self.has("fp8_ocp"):
            return {"f8e4m3": "fp8", "f8e5m2": "bf8"}.get(fmt.name)
        return None

    def minifloat_encode(self, ctx: LoweringContext, xs: list[ll.Value], fmt, saturate: bool) -> list[ll.Value]:
        """``v_cvt_pk_{fp8,bf8}_f32`` (two values into the low word; AMD CDNA3 ISA, "FP8 conversion"),
        with the software path's NaN, overflow, infinity and zero-sign rules applied after it
        (minifloat.fix_encoded), so the results equal the software path's whatever the chip's
        saturation mode."""
        hw = self._fp8_hw(fmt)
        if hw is None:
            return super().minifloat_encode(ctx, xs, fmt, saturate)
        b = ctx.b
        f32, i8, i1 = ll.FloatType(), ll.IntType(8), ll.IntType(1)
        cvt = ctx.declare(f"llvm.amdgcn.cvt.pk.{hw}.f32", _I32, [f32, f32, _I32, i1])

        def pair(first: ll.Value, second: ll.Value) -> list[ll.Value]:  # into bytes 0 and 1
            word = b.call(cvt, [first, second, ll.Constant(_I32, 0), ll.Constant(i1, 0)])
            return [b.trunc(word, i8), b.trunc(b.lshr(word, ll.Constant(_I32, 8)), i8)]
        return minifloat.encode_pairs(b, xs, fmt, saturate, pair)

    def minifloat_decode(self, ctx: LoweringContext, codes: list[ll.Value], fmt,
                         exact_nan: bool = True) -> list[ll.Value]:
        """``v_cvt_f32_{fp8,bf8}`` (exact); NaNs as the software path, or (``exact_nan`` false) as the
        instruction gives them."""
        hw = self._fp8_hw(fmt)
        if hw is None:
            return super().minifloat_decode(ctx, codes, fmt, exact_nan)
        b = ctx.b
        cvt = ctx.declare(f"llvm.amdgcn.cvt.f32.{hw}", ll.FloatType(), [_I32, _I32])
        vals = [b.call(cvt, [b.zext(c, _I32), ll.Constant(_I32, 0)]) for c in codes]
        return [minifloat.fix_decoded(b, c, v, fmt) if exact_nan else v for c, v in zip(codes, vals)]

    def nanosleep(self, ctx: LoweringContext, ns: ll.Value) -> None:
        # s_sleep takes an immediate (units of 64 clocks); 1 is what ockl's hostcall wait loop uses.
        self._intrinsic(ctx, "s.sleep", ll.VoidType(), (ll.Constant(_I32, 1),))

    def sched_barrier(self, ctx: LoweringContext) -> None:
        # llvm.amdgcn.sched.barrier(0): no instruction of any kind is scheduled across it (LLVM's
        # AMDGPUUsage, "AMDGPU intrinsics"; clang's __builtin_amdgcn_sched_barrier(0)); it emits no
        # machine instruction.
        self._intrinsic(ctx, "sched.barrier", ll.VoidType(), (ll.Constant(_I32, 0),))

    # --- hostcall -----------------------------------------------------------------------------------
    def hostcall_buffer(self, ctx: LoweringContext) -> ll.Value:
        # The HIP runtime allocates the buffer for a kernel whose metadata lists the hidden argument
        # hidden_hostcall_buffer, and LLVM lists it exactly when the kernel reads this word (and
        # lacks amdgpu-no-hostcall-ptr: attributes.py states it on the kernels that never do).
        note_hostcall(ctx.module, ctx.fn)
        return self._implicit_arg(ctx, _HIDDEN_HOSTCALL_BUFFER, _I64)

    def printf_buffer(self, ctx: LoweringContext, fmt: str) -> ll.Value:
        # The HIP runtime passes its printf buffer in hidden_printf_buffer, which LLVM lists for the
        # kernels of a module with llvm.printf.fmts (emit_printf_formats) that read the implicit
        # arguments; the format goes into amdhsa.printf.
        self.register_printf_format(ctx, fmt)
        return self._implicit_arg(ctx, _HIDDEN_PRINTF_BUFFER, _I64)

    def emit_printf_formats(self, module: ll.Module, formats: dict[int, str]) -> None:
        """Each format as an ``llvm.printf.fmts`` entry ``"0:0:<hash in hex>,<format>"``, as clang's
        buffered printf lowering writes it (LLVM AMDGPUEmitPrintf.cpp); the AMDGPU backend copies
        them into the code object's ``amdhsa.printf`` metadata, where the HIP runtime looks the
        records' hashes up (clr devhcprintf.cpp ``populateFormatStringHashMap``)."""
        for h, fmt in formats.items():
            module.add_named_metadata("llvm.printf.fmts", [f"0:0:{h:x},{fmt}"])

    def hostcall_interrupt(self, ctx: LoweringContext, event_id: ll.Value) -> None:
        # s_sendmsg MSG_INTERRUPT (1) with the signal's event id in M0 (uniform: read from lane 0).
        id_ = ctx.call_intrinsic("llvm.amdgcn.readfirstlane", [event_id])
        id_ = ctx.b.and_(id_, ll.Constant(_I32, 0xFF))
        self._intrinsic(ctx, "s.sendmsg", ll.VoidType(), (ll.Constant(_I32, 1), id_))

    # --- math -------------------------------------------------------------------------------------
    def math(self, ctx: LoweringContext, fn: str, args: list[ll.Value]) -> ll.Value:
        t = args[0].type
        scalar = t.element if isinstance(t, ll.VectorType) else t
        if fn in self.no_f64_math and isinstance(scalar, ll.DoubleType):
            # the type rules reject it first (math_unsupported)
            raise UnsupportedOnTarget(self.math_unsupported(fn, "f64")[0])
        b = ctx.b
        if fn in ("fast_rsqrt", "fast_rcp", "fast_rsqrt_normal", "fast_rcp_normal", "fast_tanh") and str(scalar) == "bfloat":
            # no bf16 v_rsq/v_rcp (LLVM 22: "Cannot select: bf16 = AMDGPUISD::RSQ"): in f32, rounded once
            return self.widened(ctx, fn, args)
        if fn in ("fast_rsqrt", "fast_rcp", "fast_rsqrt_normal", "fast_rcp_normal") and not isinstance(scalar, ll.DoubleType):
            # v_rsq_f32 / v_rcp_f32 (1 ulp, AMD Instinct MI300 ISA, "VOP1"), scalar intrinsics; the
            # normal-range forms are the same instructions (one each already: no subnormal fix-up)
            name = {"fast_rsqrt": "llvm.amdgcn.rsq", "fast_rcp": "llvm.amdgcn.rcp"}[NORMAL_RANGE_MATH.get(fn, fn)]
            return self.per_lane(ctx, args[0], lambda v: ctx.call_intrinsic(name, [v]))
        if fn == "fast_tanh":
            # no instruction: 1 - 2 / (2^(2x log2 e) + 1) on v_exp_f32 and v_rcp_f32, exact at +-inf
            x = args[0]
            e = ctx.call_intrinsic("llvm.exp2", [b.fmul(x, ll.Constant(x.type, 2.8853900817779268))])
            r = self.math(ctx, "fast_rcp", [b.fadd(e, ll.Constant(x.type, 1.0))])
            return b.fsub(ll.Constant(x.type, 1.0), b.fmul(ll.Constant(x.type, 2.0), r))
        return super().math(ctx, fn, args)

    # --- emission ---------------------------------------------------------------------------------
    def finalize_module(self, module: ll.Module) -> None:
        # Pin the code object version (AMDGPUUsage, "Code Object Metadata"): a module flag.
        module.add_named_metadata("llvm.module.flags", [ll.Constant(_I32, 1), "amdhsa_code_object_version",
                                                        ll.Constant(_I32, CODE_OBJECT_VERSION)])
        # The inputs each kernel does not use, at every optimisation level (LLVM's attributor, which
        # infers them, runs only when optimising): a kernel that never prints asks for no hostcall
        # buffer at -O 0 either.
        mark_unused_inputs(module)

    def target_machine(self, opt_level: int = 3):
        import llvmlite.binding as llvm


        initialize()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.arch, features="", opt=opt_level, reloc="pic", codemodel="default")

    def resource_limits(self) -> Any:
        """The LDS of a workgroup and the private segment of a work-item (archs.py
        ``RESOURCE_LIMITS``, with sources); the kernarg segment is not checked."""
        lim = RESOURCE_LIMITS[self.arch]
        return ResourceLimits(
            static_shared=lim["lds"], shared_what="LDS (shared memory) of a workgroup",
            private=lim["private"], private_reserve=lim["private_reserve"],
            private_what="private segment of a work-item")

    def emit(self, llvm_module, kind: str) -> bytes | str:
        tm = self.target_machine()
        if kind == "asm":
            return machine_code(tm, llvm_module, "asm", _LARGE_BLOCK_OPTIONS)
        if kind == "obj":
            return link.link_code_object(machine_code(tm, llvm_module, "obj", _LARGE_BLOCK_OPTIONS))
        raise ValueError(f"amdgcn emits 'asm' (AMDGCN assembly) or 'obj' (a code object), not '{kind}'")
