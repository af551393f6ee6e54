"""The NVIDIA target: LLVM's NVPTX backend, PTX out, a cubin through ptxas or nvJitLink.

Special registers, barriers and warp operations use the NVVM intrinsics that LLVM documents
(https://llvm.org/docs/NVPTXUsage.html); their PTX meaning is in the PTX ISA (sections on special
registers, ``bar.sync``, ``shfl.sync``, ``vote.sync``, and the memory consistency model's scopes).
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...ir.types import AddressSpace
from ..llvm.lower import LoweringContext, UnsupportedOnTarget
from ..target import Target

_I1, _I32, _I64 = ll.IntType(1), ll.IntType(32), ll.IntType(64)

#: The architectures kcompiler targets, with what each adds for ``comptime target.has(...)``.
ARCHS: dict[str, frozenset[str]] = {
    "sm_80": frozenset({"sm_80", "cp_async", "mma_bf16", "bf16"}),
    "sm_86": frozenset({"sm_80", "sm_86", "cp_async", "mma_bf16", "bf16"}),
    "sm_89": frozenset({"sm_80", "sm_86", "sm_89", "cp_async", "mma_bf16", "bf16", "fp8_convert", "mma_fp8"}),
    "sm_90": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "cp_async", "mma_bf16", "bf16", "fp8_convert",
                        "mma_fp8", "tma", "cluster"}),
    "sm_90a": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "cp_async", "mma_bf16", "bf16",
                         "fp8_convert", "mma_fp8", "tma", "cluster", "wgmma", "setmaxnreg"}),
}

_SREG = {"thread_id": "tid", "block_id": "ctaid", "block_dim": "ntid", "grid_dim": "nctaid"}
_SHFL = {"idx": "idx", "xor": "bfly", "down": "down", "up": "up"}


class NvptxTarget(Target):
    """NVIDIA GPUs of compute capability 8.0 to 9.0 (``arch`` in :data:`ARCHS`)."""

    name = "nvptx"
    triple = "nvptx64-nvidia-cuda"
    data_layout = "e-p6:32:32-i64:64-i128:128-i256:256-v16:16-v32:32-n16:32:64"
    warp_size = 32
    # Pointers to constant memory are pointers to global memory that the kernel only reads.
    address_spaces = {AddressSpace.GLOBAL: 1, AddressSpace.SHARED: 3, AddressSpace.LOCAL: 0,
                      AddressSpace.CONST: 1}
    alloca_space = 0
    binary_kind = "cubin"

    def __init__(self, arch: str = "sm_90"):
        if arch not in ARCHS:
            raise ValueError(f"unknown NVIDIA architecture '{arch}': expected one of {', '.join(ARCHS)}")
        self.arch = arch
        self.features = ARCHS[arch] | {"nvptx"}

    # --- functions ----------------------------------------------------------------------------------
    def declare_kernel(self, ctx: LoweringContext) -> None:
        ctx.fn.calling_convention = "ptx_kernel"

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

    # --- memory -----------------------------------------------------------------------------------
    def dynamic_shared(self, ctx: LoweringContext) -> ll.Value:
        gv = ctx.module.globals.get("kc_dynamic_shared")
        if gv is None:
            gv = ll.GlobalVariable(ctx.module, ll.ArrayType(ll.IntType(8), 0), "kc_dynamic_shared",
                                   addrspace=3)
            gv.linkage = "external"
            gv.align = 16
        return gv

    # --- math -------------------------------------------------------------------------------------
    def math(self, ctx: LoweringContext, fn: str, args: list[ll.Value]) -> ll.Value:
        t = args[0].type
        scalar = t.element if isinstance(t, ll.VectorType) else t
        if fn in ("exp2", "log2", "sin", "cos"):
            # PTX has these in f32 only (ex2/lg2/sin/cos .approx); f16/bf16 go through f32. f64
            # versions belong to kcompiler's own math library (std.math).
            if isinstance(scalar, ll.DoubleType):
                raise UnsupportedOnTarget(f"{fn} on f64 is not a hardware instruction on nvptx: use "
                                          f"std.math's f64 version")
            if not isinstance(scalar, ll.FloatType):
                f32 = ll.VectorType(ll.FloatType(), t.count) if isinstance(t, ll.VectorType) else ll.FloatType()
                r = super().math(ctx, fn, [ctx.b.fpext(a, f32) for a in args])
                return ctx.b.fptrunc(r, t)
        return super().math(ctx, fn, args)

    # --- emission ---------------------------------------------------------------------------------
    def target_machine(self, opt_level: int = 3):
        import llvmlite.binding as llvm
        from ..llvm import initialize

        initialize()
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.arch, features="", opt=opt_level, codemodel="default")

    def emit(self, llvm_module, kind: str) -> bytes | str:
        ptx = self.target_machine().emit_assembly(llvm_module)
        if kind == "asm":
            return ptx
        if kind == "obj":
            from .cubin import assemble
            return assemble(ptx, self.arch)
        raise ValueError(f"nvptx emits 'asm' (PTX) or 'obj' (cubin), not '{kind}'")
