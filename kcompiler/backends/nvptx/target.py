"""The NVIDIA target: LLVM's NVPTX backend, PTX out, a cubin through ptxas (cubin.py).

Special registers, barriers and warp operations use the NVVM intrinsics that LLVM documents
(https://llvm.org/docs/NVPTXUsage.html); their PTX meaning is in the PTX ISA (sections on special
registers, ``bar.sync``, ``shfl.sync``, ``vote.sync``, and the memory consistency model's scopes).
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir as ll

from ...ir.core import NORMAL_RANGE_MATH
from ...ir.assertion import index_format
from ...ir.types import I32, I64, AddressSpace, TensorMapType, Type
from ..errors import UnsupportedOnTarget
from ..llvm.lower import LoweringContext
from ..target import Target
from . import mma
from .archs import ARCHS, RESOURCE_LIMITS
from ...ir.printf import Conversion, escape_text, expected_args, parse_format
from ..llvm import minifloat
from ..llvm.lltypes import BFloatType
from ..llvm import initialize
from ..llvm.codegen import GVN_HEAVY, late_gvn_cost, machine_code
from . import cubin  # as a module: cubin.assemble is looked up at each call (tests replace it)
from ...limits import ResourceLimits

_I1, _I32, _I64 = ll.IntType(1), ll.IntType(32), ll.IntType(64)

#: The PTX ISA version asked of LLVM: 8.1, the first with which LLVM selects the FP8 converts (CUDA
#: 12.1 drivers and later load it).
PTX_FEATURES = "+ptx81"


_SREG = {"thread_id": "tid", "block_id": "ctaid", "block_dim": "ntid", "grid_dim": "nctaid"}
_SHFL = {"idx": "idx", "xor": "bfly", "down": "down", "up": "up"}


def _vprintf_format(fmt: str, args: list[ll.Value], b: ll.IRBuilder) -> tuple[str, list[ll.Value]]:
    """``fmt`` and ``args`` rewritten into what vprintf reads (see NvptxTarget.printf)."""

    out: list[str] = []
    args = list(args)
    k = 0
    for piece in parse_format(fmt):
        if not isinstance(piece, Conversion):
            out.append(escape_text(piece))
            continue
        k += len(expected_args(piece))
        if piece.precision == "*":
            raise UnsupportedOnTarget(f"CUDA's vprintf does not support a '*' precision ('{piece.spec()}'): "
                                      "write the precision in the format")
        length = piece.length
        if length in ("z", "j", "t"):
            length = "l"
        elif length == "hh":
            v = b.trunc(args[k - 1], ll.IntType(8))
            args[k - 1] = b.sext(v, _I32) if piece.conv in "di" else b.zext(v, _I32)
            length = ""
        if length != piece.length:
            piece = Conversion(piece.flags, piece.width, piece.precision, length, piece.conv)
        out.append(piece.spec())
    return "".join(out), args


def _field_size(t: ll.Type) -> int:
    """The size (and alignment) of a promoted printf argument in vprintf's buffer."""
    if isinstance(t, ll.IntType):
        return t.width // 8
    return 8  # double, pointers


#: The builtins NVIDIA computes with an approximate instruction, by PTX opcode.
_APPROX = {"fast_exp2": "ex2", "fast_log2": "lg2", "fast_sin": "sin", "fast_cos": "cos", "fast_rsqrt": "rsqrt",
           "fast_rcp": "rcp", "fast_tanh": "tanh", "fast_rcp_normal": "rcp", "fast_rsqrt_normal": "rsqrt"}


class _GridConstant(ll.values.ArgumentAttributes):
    """The attributes of a tensor-map kernel parameter (NvptxTarget.declare_kernel)."""

    def _to_list(self, typ: ll.Type) -> list[str]:
        return super()._to_list(typ) + ["byval([128 x i8])", '"nvvm.grid_constant"']


#: LLVM's options for a module with a huge basic block (codegen.LARGE_BLOCK): no load/store vectorizer
#: (NVPTXTargetMachine.cpp), whose time grows as the square of the block's loads and stores.
_LARGE_BLOCK_OPTIONS = ("-disable-nvptx-load-store-vectorizer",)


class NvptxTarget(Target):
    """NVIDIA GPUs of compute capability 8.0 to 9.0 (``arch`` in :data:`ARCHS`)."""

    name = "nvptx"
    # PTX's approximations are .f32 only (ex2, lg2, sin, cos, rsqrt, rcp, tanh .approx.f32)
    no_f64_math = frozenset(_APPROX)
    triple = "nvptx64-nvidia-cuda"
    data_layout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
    warp_size = 32
    # Pointers to constant memory are pointers to global memory that the kernel only reads; the
    # module's const tables are in the .const bank (CONSTANT).
    address_spaces = {AddressSpace.GLOBAL: 1, AddressSpace.SHARED: 3, AddressSpace.LOCAL: 0,
                      AddressSpace.CONST: 1, AddressSpace.CONSTANT: 4}
    alloca_space = 0
    binary_kind = "cubin"
    #: the CUDA device runtime's functions, which PTX code declares by these names
    reserved_symbols = frozenset({"vprintf", "malloc", "free", "__assertfail"})

    def __init__(self, arch: str = "sm_90", printf: str = "vprintf", float8: str = "hardware",
                 approx_ftz: bool = False):
        if arch not in ARCHS:
            raise ValueError(f"unknown NVIDIA architecture '{arch}': expected one of {', '.join(ARCHS)}")
        if printf not in ("vprintf", "hostcall", "buffered"):
            raise ValueError(f"printf must be 'vprintf', 'hostcall' or 'buffered', not {printf!r}")
        self.arch = arch
        # "hostcall" runs the device code AMD kernels use (std.hostcall), served by kcompiler's own
        # listener over host memory: the protocol is checked on NVIDIA hardware that way.
        # "buffered" runs std.printf_buffer (HIP's buffered printf): records in device memory,
        # printed after the kernel, as many as the buffer holds (vprintf's FIFO is 1 MB by default).
        self.printf_method = printf
        if float8 not in ("hardware", "software"):
            raise ValueError(f"float8 must be 'hardware' or 'software', not {float8!r}")
        # float8="software": the reference conversions even on sm_89+ (to compare the two on a GPU)
        self.features = ARCHS[arch] - ({"fp8_convert", "fp8_ocp"} if float8 == "software" else set())
        # approx_ftz: the approximate builtins flush subnormal inputs and results to zero (PTX .ftz),
        # one MUFU instruction without ptxas's subnormal fix-up around it: nvcc's --use_fast_math
        # (FlashAttention's softmax exponentials are these)
        self.approx_ftz = bool(approx_ftz)

    # --- functions ----------------------------------------------------------------------------------
    def declare_kernel(self, ctx: LoweringContext) -> None:
        """A ``ptx_kernel``; a ``tensor_map`` parameter becomes a ``byval([128 x i8]) align 64
        "nvvm.grid_constant"`` pointer, which LLVM emits as ``.param .align 64 .b8 NAME[128]`` read
        in place (its uses take the generic address through ``cvta.param``; PTX ISA 8.x, "Kernel
        Function Parameter Attributes"), what TMA reads a CUtensorMap from. The IR function's
        ``max_threads`` / ``min_blocks`` attributes (``launch_bounds``) become ``.maxntid`` and
        ``.minnctapersm``, which cap the registers a thread gets at entry (setmaxnreg needs that);
        ``cluster_dims`` (``cluster_dims(x, y, z)``) becomes ``.explicitcluster`` and
        ``.reqnctapercluster x, y, z`` (launches in clusters of that shape: cluster.py)."""
        ctx.fn.calling_convention = "ptx_kernel"
        for arg, p in zip(ctx.fn.args, ctx.ir_fn.params):
            if isinstance(p.type, TensorMapType):
                attrs = _GridConstant()
                attrs.align = 64
                arg.attributes = attrs
        attrs_of = ctx.ir_fn.attrs
        for key, v in (("nvvm.maxntid", attrs_of.get("max_threads")), ("nvvm.minctasm", attrs_of.get("min_blocks"))):
            if v is not None:
                set.add(ctx.fn.attributes, f'"{key}"="{int(v)}"')  # a string attribute llvmlite does not list
        dims = attrs_of.get("cluster_dims")  # cluster_dims(x, y, z): .explicitcluster, .reqnctapercluster x, y, z
        if dims is not None:
            set.add(ctx.fn.attributes, '"nvvm.cluster_dim"="{},{},{}"'.format(*(int(d) for d in dims)))

    # --- the machine ------------------------------------------------------------------------------
    def _sreg(self, ctx: LoweringContext, name: str) -> ll.Value:
        fn = ctx.declare(f"llvm.nvvm.read.ptx.sreg.{name}", _I32, [])
        return ctx.b.call(fn, [])

    def _linear_tid(self, ctx: LoweringContext) -> ll.Value:
        b = ctx.b
        tx, ty, tz = (self._sreg(ctx, f"tid.{d}") for d in "xyz")
        nx, ny = (self._sreg(ctx, f"ntid.{d}") for d in "xy")
        return b.add(tx, b.mul(nx, b.add(ty, b.mul(ny, tz))))

    def special(self, ctx: LoweringContext, reg: str, dim: str) -> ll.Value:
        if reg in _SREG:
            return self._sreg(ctx, f"{_SREG[reg]}.{dim}")
        if reg == "lane_id":
            return self._sreg(ctx, "laneid")
        if reg == "warp_id":  # the warp's index in its block (not %warpid, which is the physical slot)
            return ctx.b.lshr(self._linear_tid(ctx), ll.Constant(_I32, 5))
        raise UnsupportedOnTarget(f"no special register '{reg}' on nvptx")

    def barrier(self, ctx: LoweringContext) -> None:
        fn = ctx.declare("llvm.nvvm.barrier.cta.sync.aligned.all", ll.VoidType(), [_I32])
        ctx.b.call(fn, [ll.Constant(_I32, 0)])

    def syncscope(self, scope: str) -> str | None:
        return {"block": "block", "device": "device", "system": None}[scope]

    # --- 8-bit floats: cvt on sm_89+ (PTX ISA 7.8, "cvt": e4m3x2/e5m2x2) ------------------------------
    def _fp8_hw(self, fmt) -> str | None:
        return {"f8e4m3": "e4m3", "f8e5m2": "e5m2"}.get(fmt.name) if self.has("fp8_convert") else None

    def minifloat_encode(self, ctx: LoweringContext, xs: list[ll.Value], fmt, saturate: bool) -> list[ll.Value]:
        """``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32`` converts two values at once (the first operand
        into the high byte); the software path's NaN, overflow and infinity rules are applied after
        it (minifloat.fix_encoded; for saturating E4M3, which the instruction gets right but for a
        NaN's sign, minifloat.or_signs: no compare), so the results equal the software path's."""
        hw = self._fp8_hw(fmt)
        if hw is None:
            return super().minifloat_encode(ctx, xs, fmt, saturate)
        b = ctx.b
        f32, i8, i16 = ll.FloatType(), ll.IntType(8), ll.IntType(16)
        cvt = ctx.declare(f"llvm.nvvm.ff.to.{hw}x2.rn", i16, [f32, f32])

        def pair(first: ll.Value, second: ll.Value) -> list[ll.Value]:  # second into the high byte
            two = b.call(cvt, [second, first])
            return [b.trunc(two, i8), b.trunc(b.lshr(two, ll.Constant(i16, 8)), i8)]
        if saturate and fmt.kind == "fn":  # E4M3 saturating: .satfinite's codes but for a NaN's sign
            out = []
            padded = list(xs) + [ll.Constant(f32, 0.0)] * (len(xs) % 2)
            for k, two in enumerate(self.minifloat_encode_pairs(ctx, padded, fmt, saturate)):
                out += [b.trunc(two, i8), b.trunc(b.lshr(two, ll.Constant(i16, 8)), i8)][:len(xs) - 2 * k]
            return out
        return minifloat.encode_pairs(b, xs, fmt, saturate, pair)

    def minifloat_encode_pairs(self, ctx: LoweringContext, xs: list[ll.Value], fmt,
                               saturate: bool) -> list[ll.Value] | None:
        """Saturating E4M3 (sm_89+) of f32 or f16 lanes ``xs`` (an even number): one
        ``cvt.rn.satfinite.e4m3x2.f32`` (or ``.f16x2``) a pair, its NaN's sign ORed in (minifloat.or_signs;
        LLVM drops the OR where it knows the sign bits clear, e.g. of abs(x)). None for the other
        conversions (their fix-ups are per byte)."""
        hw = self._fp8_hw(fmt)
        if hw is None or not saturate or fmt.kind != "fn":
            return None
        b = ctx.b
        f32, i16, i32 = ll.FloatType(), ll.IntType(16), ll.IntType(32)
        if isinstance(xs[0].type, ll.HalfType):  # cvt.rn.satfinite.e4m3x2.f16x2: element 0 in the low byte
            h2 = ll.VectorType(ll.HalfType(), 2)
            cvt = ctx.declare(f"llvm.nvvm.f16x2.to.{hw}x2.rn", i16, [h2])
            out = []
            for k in range(0, len(xs), 2):
                pair = b.insert_element(b.insert_element(ll.Constant(h2, ll.Undefined), xs[k], ll.Constant(i32, 0)),
                                        xs[k + 1], ll.Constant(i32, 1))
                out.append(minifloat.or_signs(b, b.call(cvt, [pair]), xs[k], xs[k + 1]))
            return out
        cvt = ctx.declare(f"llvm.nvvm.ff.to.{hw}x2.rn", i16, [f32, f32])
        return [minifloat.or_signs(b, b.call(cvt, [xs[k + 1], xs[k]]), xs[k], xs[k + 1])
                for k in range(0, len(xs), 2)]

    def minifloat_decode(self, ctx: LoweringContext, codes: list[ll.Value], fmt,
                         exact_nan: bool = True) -> list[ll.Value]:
        """``cvt.rn.f16x2.{e4m3x2,e5m2x2}`` (exact), then f16 to f32; NaNs as the software path, or
        (``exact_nan`` false) as the instruction gives them: 1.5 instructions a value, no fix-up."""
        hw = self._fp8_hw(fmt)
        if hw is None:
            return super().minifloat_decode(ctx, codes, fmt, exact_nan)
        b = ctx.b
        i16, f32 = ll.IntType(16), ll.FloatType()
        h2 = ll.VectorType(ll.HalfType(), 2)
        cvt = ctx.declare(f"llvm.nvvm.{hw}x2.to.f16x2.rn", h2, [i16])
        out = []
        for k in range(0, len(codes), 2):
            pair = codes[k:k + 2]
            word = b.zext(pair[0], i16)
            if len(pair) == 2:
                word = b.or_(word, b.shl(b.zext(pair[1], i16), ll.Constant(i16, 8)))
            halves = b.call(cvt, [word])
            for j, c in enumerate(pair):
                v = b.fpext(b.extract_element(halves, ll.Constant(_I32, j)), f32)
                out.append(minifloat.fix_decoded(b, c, v, fmt) if exact_nan else v)
        return out

    def atomic(self, ctx: LoweringContext, op: str, ptr: ll.Value, value: ll.Value, order: str,
               scope: str, signed: bool, is_float: bool) -> ll.Value:
        """Atomic read-modify-write. LLVM's NVPTX backend (22) drops the ordering and scope of an
        ``atomicrmw`` (it prints a plain ``atom``: relaxed, GPU scope), though it keeps those of loads,
        stores and cmpxchg; so any other ordering or scope is written as PTX's own
        ``atom{.sem}{.scope}{.space}.op.type`` (PTX ISA 8.x, "atom"; a seq_cst one is ``fence.sc``
        followed by an acquire ``atom``, as CUDA's libcu++ does)."""
        half = self._half_atomic_add(ctx, op, ptr, value, order, scope)
        if half is not None:
            return half
        kind = "f" if is_float else ("s" if op in ("min", "max") and signed else
                                     "u" if op in ("add", "min", "max") else "b")
        bits = value.type.width if isinstance(value.type, ll.IntType) else \
            {"float": 32, "double": 64}.get(str(value.type))
        ptx_op = {"exch": "exch"}.get(op, op)
        supported = bits in (32, 64) and (not is_float or op == "add")
        if (order == "relaxed" and scope == "device") or not supported:
            return super().atomic(ctx, op, ptr, value, order, scope, signed, is_float)
        sc = {"block": ".cta", "device": ".gpu", "system": ".sys"}[scope]
        sem = {"relaxed": ".relaxed", "acquire": ".acquire", "release": ".release",
               "acq_rel": ".acq_rel", "seq_cst": ".acquire"}[order]
        space = {1: ".global", 3: ".shared::cta"}.get(getattr(ptr.type, "addrspace", 0), "")
        text = (f"fence.sc{sc};\n\t" if order == "seq_cst" else "") + \
            f"atom{sem}{sc}{space}.{ptx_op}.{kind}{bits} $0, [$1], $2;"
        reg = {(False, 32): "r", (False, 64): "l", (True, 32): "f", (True, 64): "d"}[(is_float, bits)]
        ftype = ll.FunctionType(value.type, [ptr.type, value.type])
        return ctx.b.asm(ftype, text, f"={reg},l,{reg},~{{memory}}", [ptr, value], side_effect=True)

    def byte_perm(self, ctx: LoweringContext, x: ll.Value, y: ll.Value, s: ll.Value) -> ll.Value:
        """``prmt.b32`` in its default mode with bit 3 of each selector nibble cleared (that bit asks
        ``prmt`` to replicate the byte's sign; CUDA's ``__byte_perm`` reads only bits 0-2)."""
        m = ctx.b.and_(s, ll.Constant(_I32, 0x7777))
        return ctx.b.call(ctx.declare("llvm.nvvm.prmt", _I32, [_I32, _I32, _I32]), [x, y, m])

    def _half_atomic_add(self, ctx: LoweringContext, op: str, ptr: ll.Value, value: ll.Value, order: str,
                         scope: str) -> ll.Value | None:
        """A 16-bit float add (f16, bf16, <2 x half>, <2 x bfloat>) as PTX's ``atom.add.noftz`` (PTX
        ISA 8.x, "atom": .f16 sm_70+, .f16x2 sm_60+, .bf16 and .bf16x2 sm_90+), written out where LLVM
        22 would not give it (it selects the scalar forms only, for a relaxed GPU-scope add, and
        expands the packed ones into compare-and-swap loops); None where LLVM's lowering serves (its
        compare-and-swap loop where the arch lacks the instruction)."""
        t = value.type
        lane = t.element if isinstance(t, ll.VectorType) else t
        if op != "add" or not (isinstance(lane, (ll.HalfType, BFloatType)) and
                               (not isinstance(t, ll.VectorType) or t.count == 2)):
            return None
        packed = isinstance(t, ll.VectorType)
        name = ("bf16" if isinstance(lane, BFloatType) else "f16") + ("x2" if packed else "")
        sm = int("".join(ch for ch in self.arch[3:] if ch.isdigit()))
        if sm < (90 if name.startswith("bf16") else 70 if name == "f16" else 60):
            return None
        if not packed and order == "relaxed" and scope == "device":
            return None  # LLVM selects atom.add.noftz.f16 / .bf16 itself
        sc = {"block": ".cta", "device": ".gpu", "system": ".sys"}[scope]
        sem = {"relaxed": ".relaxed", "acquire": ".acquire", "release": ".release",
               "acq_rel": ".acq_rel", "seq_cst": ".acquire"}[order]
        space = {1: ".global", 3: ".shared::cta"}.get(getattr(ptr.type, "addrspace", 0), "")
        text = (f"fence.sc{sc};\n\t" if order == "seq_cst" else "") + \
            f"atom{sem}{sc}{space}.add.noftz.{name} $0, [$1], $2;"
        it = ll.IntType(32 if packed else 16)
        reg = "r" if packed else "h"
        ftype = ll.FunctionType(it, [ptr.type, it])
        old = ctx.b.asm(ftype, text, f"={reg},l,{reg},~{{memory}}", [ptr, ctx.b.bitcast(value, it)],
                        side_effect=True)
        return ctx.b.bitcast(old, t)

    def _activemask(self, ctx: LoweringContext) -> ll.Value:
        return ctx.b.call(ctx.declare("llvm.nvvm.activemask", _I32, []), [])

    def shuffle(self, ctx: LoweringContext, mode: str, value: ll.Value, lane: ll.Value) -> ll.Value:
        # c packs the segment mask (0: whole warp) and the clamp: 31 for idx/bfly/down, 0 for up.
        c = ll.Constant(_I32, 0 if mode == "up" else 0x1F)
        fn = ctx.declare(f"llvm.nvvm.shfl.sync.{_SHFL[mode]}.i32", _I32, [_I32, _I32, _I32, _I32])
        return ctx.b.call(fn, [self._activemask(ctx), value, lane, c])

    def ballot(self, ctx: LoweringContext, pred: ll.Value) -> ll.Value:
        fn = ctx.declare("llvm.nvvm.vote.ballot.sync", _I32, [_I32, _I1])
        return ctx.b.zext(ctx.b.call(fn, [self._activemask(ctx), pred]), _I64)

    def active_mask(self, ctx: LoweringContext) -> ll.Value:
        return ctx.b.zext(self._activemask(ctx), _I64)

    def read_first_lane(self, ctx: LoweringContext, value: ll.Value) -> ll.Value:
        mask = self._activemask(ctx)
        first = ctx.call_intrinsic("llvm.cttz", [mask, ll.Constant(_I1, 1)], overload=[_I32])
        return self.shuffle(ctx, "idx", value, first)

    def warp_sync(self, ctx: LoweringContext, mask: ll.Value | None = None) -> None:
        # With independent thread scheduling, lanes that took different paths need not be back
        # together at the next instruction: a mask names whom to wait for (activemask does not).
        fn = ctx.declare("llvm.nvvm.bar.warp.sync", ll.VoidType(), [_I32])
        m = self._activemask(ctx) if mask is None else ctx.b.trunc(mask, _I32)
        ctx.b.call(fn, [m])

    def nanosleep(self, ctx: LoweringContext, ns: ll.Value) -> None:
        ctx.b.call(ctx.declare("llvm.nvvm.nanosleep", ll.VoidType(), [_I32]), [ns])

    #: sched_barrier's PTX. ptxas has no scheduling barrier, and it schedules across what it merges into
    #: one basic block: a wgmma.wait_group after a softmax moves up to the first instruction that
    #: reuses a register the awaited wgmma reads or writes, which its register allocator makes the
    #: block's first (the P fragments of O += P V: tests/ops/test_attention_sm90.py). A branch it can
    #: neither fold nor if-convert ends the block: to a loop (never taken: %nsmid, the multiprocessors'
    #: count, is never 0, which ptxas cannot know). SASS (ptxas 13.0): a uniform S2UR, hoisted out of
    #: loops, and one BRA where the barrier stands. What it does not do (ptxas 13.0, 2026-11-29): keep
    #: arithmetic on its side (ptxas moves instructions without side effects across the branch), nor
    #: stay more than once in one basic block (the branches test one predicate; ptxas keeps the first).
    SCHED_BARRIER_PTX = ("{\n\t.reg .pred p;\n\t.reg .b32 n;\n\tmov.u32 n, %nsmid;\n\tsetp.ne.u32 p, n, 0;\n\t"
                         "@p bra kc_sched_done;\n\tkc_sched_spin:\n\tnanosleep.u32 1;\n\tbra.uni kc_sched_spin;\n\t"
                         "kc_sched_done:\n\t}")

    def sched_barrier(self, ctx: LoweringContext) -> None:
        ctx.b.asm(ll.FunctionType(ll.VoidType(), []), self.SCHED_BARRIER_PTX, "~{memory}", [], side_effect=True)

    def prefetch_l2(self, ctx: LoweringContext, p: ll.Value, nbytes: ll.Value) -> None:
        """sm_90 (PTX ISA 8.0): one ``cp.async.bulk.prefetch.L2.global [a], n`` over the 16-byte
        granules the range touches (the instruction takes a 16-byte aligned address and a multiple of
        16 bytes); nothing for an empty range or before sm_90."""
        if not self.has("tma"):
            return
        b = ctx.b
        i64 = ll.IntType(64)
        a = b.ptrtoint(p, i64)
        lo = b.and_(a, ll.Constant(i64, ~15))
        hi = b.and_(b.add(b.add(a, b.sext(nbytes, i64)), ll.Constant(i64, 15)), ll.Constant(i64, ~15))
        n = b.trunc(b.sub(hi, lo), _I32)
        with b.if_then(b.icmp_signed(">", nbytes, ll.Constant(_I32, 0))):
            ftype = ll.FunctionType(ll.VoidType(), [i64, _I32])
            b.asm(ftype, "cp.async.bulk.prefetch.L2.global [$0], $1;", "l,r,~{memory}", [lo, n], side_effect=True)

    # Programmatic dependent launch (PTX ISA 7.8, sm_90: griddepcontrol): a kernel holding
    # grid_dependency_wait is launched with programmatic stream serialisation (runtime/cuda.py), so it
    # may start before the launch ahead of it ends; griddepcontrol.wait is where it stops for that.
    # Before sm_90 the launch attribute does nothing, and neither do these.
    def grid_dependency_wait(self, ctx: LoweringContext) -> None:
        if self.has("sm_90"):
            ctx.b.call(ctx.declare("llvm.nvvm.griddepcontrol.wait", ll.VoidType(), []), [])

    def launch_dependents(self, ctx: LoweringContext) -> None:
        if self.has("sm_90"):
            ctx.b.call(ctx.declare("llvm.nvvm.griddepcontrol.launch.dependents", ll.VoidType(), []), [])

    # --- printf -----------------------------------------------------------------------------------
    def trap(self, ctx: LoweringContext, reason: str, message: str = "", function: str = "") -> None:
        """CUDA's ``__assertfail(message, file, line, function, 1)`` (what nvcc's ``assert`` calls; the
        CUDA device runtime's, like vprintf): the driver prints its own line, ``file:line: function:
        block: [x,y,z], thread: [x,y,z] Assertion `message` failed.``, after the lines printed before
        it, and the launch fails with CUDA_ERROR_ASSERT, which the runtime raises as
        DeviceAssertionError. A ``trap`` follows, in case it returns."""
        b = ctx.b
        generic = ll.PointerType()
        span = ctx.current_span
        gl = self.address_spaces[AddressSpace.GLOBAL]

        def text(s: str) -> ll.Value:
            return b.addrspacecast(ctx.string_constant(s, gl), generic)

        fail = ctx.declare("__assertfail", ll.VoidType(), [generic, generic, _I32, generic, ll.IntType(64)])
        b.call(fail, [text(message or reason), text(span.file.path if span is not None else "<unknown>"),
                      ll.Constant(_I32, span.line if span is not None else 0),
                      text(function or ctx.ir_fn.attrs.get("source_name", ctx.ir_fn.name)),
                      ll.Constant(ll.IntType(64), 1)])
        super().trap(ctx, reason, message, function)

    def index_error(self, ctx: LoweringContext, index: ll.Value, count: int, op: Any) -> None:
        # The line a failed assert prints (ir/assertion.py), through vprintf, before the trap.
        name = ctx.ir_fn.attrs.get("source_name", ctx.ir_fn.name)
        span = getattr(op, "span", None)
        fmt = index_format(str(span) if span is not None else "<unknown>", name, getattr(op, "name", ""), count)
        who = [self.special(ctx, reg, d) for reg in ("block_id", "thread_id") for d in "xyz"]
        self.printf(ctx, fmt, who + [index], [I32] * 6 + [I64])

    def printf(self, ctx: LoweringContext, fmt: str, args: list[ll.Value], types: list[Type]) -> None:
        """CUDA's device printf, as clang lowers it (clang/lib/CodeGen/CGGPUBuiltin.cpp,
        packArgsIntoNVPTXFormatBuffer and EmitNVPTXDevicePrintfCallExpr): ``i32 vprintf(ptr format,
        ptr args)``, a system call of the PTX ABI that ptxas and the driver provide. The arguments,
        already promoted (i32, i64, double, pointers), are stored in a local struct laid out by the
        data layout, each field at an offset aligned to its own size (4 for i32, 8 for i64, double
        and pointers), the struct 8-aligned when it holds an 8-byte field; with no arguments the
        buffer is a null pointer. Pointers are passed as generic addresses (addrspacecast), as
        vprintf dereferences %s arguments generically. The format is a private constant in global
        memory (clang emits it in the generic address space, which NVPTX places in .global: the PTX
        is the same) and is passed as a generic pointer too.

        The driver's vprintf (seen on CUDA 13, driver 580) reads neither the z, j and t length
        modifiers nor hh (the arguments after one are misread), nor a '*' precision (printed as is).
        z, j and t become l (size_t, intmax_t and ptrdiff_t are 64-bit here); hh is dropped after
        the value is narrowed to 8 bits on the device (sign- or zero-extended back by the
        conversion), which prints what C prints; a '*' precision is an error."""
        fmt, args = _vprintf_format(fmt, args, ctx.b)
        b = ctx.b
        generic = ll.PointerType()
        fmt_ptr = b.addrspacecast(ctx.string_constant(fmt, self.address_spaces[AddressSpace.GLOBAL]),
                                  generic)
        vprintf = ctx.declare("vprintf", _I32, [generic, generic])
        if not args:
            b.call(vprintf, [fmt_ptr, ll.Constant(generic, None)])
            return
        fields = []
        for a in args:
            if isinstance(a.type, ll.PointerType) and a.type.addrspace != 0:
                a = b.addrspacecast(a, generic)
            fields.append(a)
        struct = ll.LiteralStructType([a.type for a in fields])
        slot0 = ctx.alloca(struct, name="printf_args")
        sizes = [_field_size(a.type) for a in fields]
        slot0.align = max(sizes)
        buf = ctx.lowering.opaque(slot0)
        for k, (a, size) in enumerate(zip(fields, sizes)):
            slot = b.gep(buf, [ll.Constant(_I32, 0), ll.Constant(_I32, k)], inbounds=True,
                         source_etype=struct)
            b.store(a, slot, align=size)
        b.call(vprintf, [fmt_ptr, buf])

    # --- math -------------------------------------------------------------------------------------
    def math(self, ctx: LoweringContext, fn: str, args: list[ll.Value]) -> ll.Value:
        t = args[0].type
        scalar = t.element if isinstance(t, ll.VectorType) else t
        if fn in _APPROX:
            # PTX ISA 8.x, "Floating-Point Instructions": {ex2,lg2,sin,cos,rsqrt,rcp,tanh}.approx.f32
            # (tanh from sm_75). Written as PTX: LLVM 22 selects some of them only under afn flags
            # and aborts on others (fcos, flog2). f32 only; f16/bf16 go through f32; f64 versions
            # belong to kcompiler's own math library (std.math).
            if isinstance(scalar, ll.DoubleType):  # the type rules reject it first (math_unsupported)
                raise UnsupportedOnTarget(self.math_unsupported(fn, "f64")[0])
            b = ctx.b
            f32 = ll.VectorType(ll.FloatType(), t.count) if isinstance(t, ll.VectorType) else ll.FloatType()
            x = args[0] if t == f32 else b.fpext(args[0], f32)
            ftype = ll.FunctionType(ll.FloatType(), [ll.FloatType()])
            # tanh.approx has no .ftz form; the normal-range builtins leave subnormals unspecified, so
            # they are always the .ftz form: MUFU.RCP / MUFU.RSQ alone (without .ftz ptxas scales
            # arguments around it, 7 and 5 SASS instructions)
            ftz = ".ftz" if (self.approx_ftz or fn in NORMAL_RANGE_MATH) and fn != "fast_tanh" else ""
            r = self.per_lane(ctx, x, lambda v: b.asm(ftype, f"{_APPROX[fn]}.approx{ftz}.f32 $0, $1;", "=f,f", [v],
                                                        side_effect=False))
            return r if t == f32 else b.fptrunc(r, t)
        return super().math(ctx, fn, args)

    # --- emission ---------------------------------------------------------------------------------
    def target_machine(self, opt_level: int = 3):
        import llvmlite.binding as llvm

        initialize()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.arch, features=PTX_FEATURES, opt=opt_level, codemodel="default")

    def resource_limits(self) -> Any:
        """48 KiB of static shared memory, 512 KiB of local memory a thread, 32,764 bytes of
        parameters (archs.py ``RESOURCE_LIMITS``, with sources)."""
        lim = RESOURCE_LIMITS[self.arch]
        return ResourceLimits(
            static_shared=lim["static_shared"], shared_what="static shared memory of a block",
            shared_way_out=(f"more needs dynamic shared memory (up to {lim['dynamic_shared']:,} bytes on "
                            f"{self.arch}): dynamic_shared[T]() in the kernel and shared= bytes at launch"),
            private=lim["local"], private_what="local memory of a thread",
            params=lim["params"])

    def emit(self, llvm_module, kind: str) -> bytes | str:
        level = 2 if late_gvn_cost(llvm_module) > GVN_HEAVY else 3  # codegen.GVN_HEAVY says why
        ptx = mma.raise_ptx_version(machine_code(self.target_machine(level), llvm_module, "asm", _LARGE_BLOCK_OPTIONS))
        if kind == "asm":
            return ptx
        if kind == "obj":
            return cubin.assemble(ptx, self.arch)
        raise ValueError(f"nvptx emits 'asm' (PTX) or 'obj' (cubin), not '{kind}'")
