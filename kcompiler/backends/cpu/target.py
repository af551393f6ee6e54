"""The CPU target: kernels compiled for the host, run with GPU semantics by ``runtime/cpu.py``.

Every GPU thread is an LLVM coroutine (``coroutine.py``) with a hidden last parameter, a pointer to
its ThreadContext (``abi.py``), from which special registers are read. A barrier or warp operation
records what the thread waits for and suspends; the native block scheduler (``scheduler.py``) resumes
threads when a GPU would let them go on. Shared memory is a per-block host buffer (static arrays at
fixed offsets, the dynamic part after them, 16-byte aligned); local arrays are allocas, which live in
the coroutine frame; atomics are host atomics at system scope.

Semantics chosen where GPUs and hosts could differ:

- integers: bit-identical to a GPU (two's complement wrap-around; division by zero is as undefined
  as on a GPU, and on x86 it traps).
- floats: IEEE single/double rounding, denormals kept (as nvcc without ``-ftz``). The shared lowering
  marks arithmetic ``contract`` (nvcc's default ``-fmad=true``), so LLVM fuses ``a * b + c`` into an
  FMA where the host has one (x86-64 with FMA3, AArch64). Which pairs are fused differs: the
  host's LLVM fuses a product only where it has a single use, NVPTX fuses it into every add or
  subtract it feeds in its basic block, also where it has other uses (a product kept rounded for
  an error-free transformation is then fused into a later sum on the GPU only: std.math's softplus
  measured 1.64 ulp on the H100 and 1.125 here before 1ba73ce). ``contract="nvptx"`` fuses as
  NVPTX does (``contract.py``), so CI sees those differences too; otherwise compare floats with a
  tolerance of a few ulps. ``math`` functions are LLVM intrinsics, computed by the host's libm
  (correctly rounded or within 1 ulp, often more accurate than a GPU's approximations).
- warp size: 32 unless asked for 64, to run wave64 (CDNA) code: ``CpuTarget(warp_size=64)``
  (``kc.compile(..., target="cpu", target_options={"warp_size": 64})``), or the arch spelling
  ``"host-w64"`` (also ``"cpu-w64"``, ``"w64"``, ``"<llvm cpu>-w64"``).
- device functions are inlined into kernels before lowering (:attr:`inline_device_functions`): a
  barrier or warp operation must sit in the kernel's coroutine, and special registers need the
  kernel's context. A device function that is still called after inlining (recursion) may not use
  them.

Kernel binary: a relocatable host object (``emit(..., "obj")``), loaded by the runtime's JIT linker,
with the kernel's thunk ``kc.<kernel>.kc_start`` (every function of the program has the LLVM symbol
``kc.<its IR symbol>``: :data:`SYMBOL_PREFIX`) and a JSON description ``__kc_cpu_info`` (warp size,
static shared bytes, argument layout, the source locations of barriers, warp operations and checked
accesses, for error messages).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import llvmlite.binding as llvm
from llvmlite import ir as ll

from ...diagnostics import CompileError
from ...ir.core import APPROX_MATH, NORMAL_RANGE_MATH
from ...ir.types import AddressSpace
from ..target import Target, local_name
from . import approx, contract, coroutine, hopper, mfma, warp_matrix
from .cpu_names import check_cpu_name
from .abi import (ACCESS_ATOMIC, ACCESS_LOAD, ACCESS_STORE, ERR_ASSERT, ERR_BOUNDS, ERR_FAULT, ERR_INDEX,
                  ERR_MISALIGNED, ERR_SHARED, WAIT_BARRIER, WAIT_RUN, WAIT_WARP, WARP_ACTIVE_MASK, WARP_BALLOT,
                  WARP_FIRST_LANE, WARP_SHUFFLE, load_launch, load_thread, store_launch, store_thread)
from .scheduler import START_TYPE, claim_error
from ..llvm import initialize
from ..llvm.codegen import machine_code

if TYPE_CHECKING:  # pragma: no cover
    from ..llvm.lower import LoweringContext

I1, I8, I32, I64 = ll.IntType(1), ll.IntType(8), ll.IntType(32), ll.IntType(64)
PTR = ll.PointerType()
INFO_SYMBOL = "__kc_cpu_info"
CHECK_FUNCTION = "__kc_check_access"
RECORD_FUNCTION = "__kc_record_error"
THUNK_SUFFIX = ".kc_start"
#: The prefix of the LLVM symbol of every function of the program (kernels and device functions):
#: with a dot, which no identifier of the language has, so that no kernel or fn name can be a
#: symbol of the C library, of the runtime (``__kc_*``) or of LLVM (``llvm.*``), or one LLVM calls
#: by itself (``memcpy``, ``fmaf``, ...)
SYMBOL_PREFIX = "kc."

#: Limits of a launch, as CUDA has them on sm_90 (H100): threads per block, block and grid
#: dimensions, shared memory per block (227 KiB, the opt-in maximum).
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
MAX_SHARED_BYTES = 227 * 1024


@dataclass
class _ModuleState:
    """What the CPU target learns while lowering one module, written out by finalize_module."""

    locations: list[str] = field(default_factory=list)
    #: why an emulated instruction faults, by the location id of its check (CpuTarget.fault)
    faults: dict[int, str] = field(default_factory=dict)
    kernels: dict[str, dict[str, Any]] = field(default_factory=dict)
    check_function: ll.Function | None = None
    record_function: ll.Function | None = None
    #: device functions that use what only a kernel has: name -> (what, span of the first use)
    needs_kernel: dict[str, tuple[str, Any]] = field(default_factory=dict)


class CpuTarget(Target):
    """The host CPU (LLVM's native target) running GPU kernels; see the module docstring.

    ``arch``: ``"host"`` (also ``"native"``, ``"cpu"``, ``""``: this machine's CPU and features; the
    default) or an LLVM CPU name (``"x86-64-v3"``, ``"znver4"``), either optionally followed by
    ``-w32`` or ``-w64`` to choose the warp size (``"host-w64"``; a bare ``"w64"`` is the host).
    ``warp_size``: 32 or 64 (overrides the arch suffix). ``emulate_mma``: emulate NVIDIA's warp-level
    matrix instructions (mma_sync, ldmatrix, cp_async; ``target.has("mma")`` is then true), to run and
    check a tensor-core path without a GPU (warp_matrix.py). ``emulate_mfma``: emulate AMD's MFMA as
    chip ``"gfx90a"``, ``"gfx942"`` or ``"gfx950"`` does (``True``: gfx950), with warps of 64 lanes
    (``target.has("mfma")`` is then true; mfma.py). ``emulate_wgmma``: emulate NVIDIA's Hopper
    instructions (wgmma, TMA, mbarriers; ``target.has("wgmma")``, "tma", "mbarrier", "setmaxnreg" are
    then true; hopper.py), to run sm_90a code such as std.matmul_sm90. ``approx_error``: a relative
    error d (e.g. 2**-21.7, or negative) put on the builtins ``fast_rcp`` and ``fast_rsqrt`` and
    their normal-range forms ``fast_rcp_normal``, ``fast_rsqrt_normal`` (NVIDIA rcp/rsqrt.approx.f32,
    AMD v_rcp/v_rsq_f32: within 2^-22.9 relative or 1 ulp): their exact results are multiplied by
    1 + d instead of the error model every approximation gets by default (approx.py), so that code
    correcting the approximations can be checked against a worst case on the CPU (the normal-range
    forms also flush subnormals on f32, as NVIDIA's do). Raises
    ValueError for another warp size, for both emulations at once, for an MFMA with warps of 32, or
    for |approx_error| >= 2^-10, and for a CPU name LLVM does not know or that has no 64-bit mode
    (``cpu_names.check_cpu_name``).

    ``contract``: which multiply-adds become FMAs. ``"host"`` (the default): LLVM's own choice for
    this CPU, products with a single use. ``"nvptx"``: also every contractable add or subtract
    that a contractable product of its basic block feeds, whatever the product's other uses, as
    NVIDIA's code generation does (``contract.py`` has the rules and what they leave out). Raises
    ValueError for another value. ``printf``: ``"hostcall"`` (the default) or ``"buffered"``
    (records in a printf buffer, printed after the launch: docs/amd-hostcall.md §12).

    The ``"nvptx"`` contraction rewrites the optimised LLVM IR (:meth:`rewrite_optimized`), not
    kcompiler's IR: NVPTX fuses in instruction selection, after LLVM's optimisation, so the
    products and sums it sees are LLVM's: a ``var`` read twice is one product after mem2reg, two
    equal products are one after GVN, ``fma(x, 1.0, y)`` is an add after instcombine. A pass over
    kcompiler's IR would see none of these.
    """

    name = "cpu"
    binary_kind = "obj"
    printf_method = "hostcall"  # served by kcompiler.runtime.hostcall's listener
    #: The approximations have no f64 form on NVIDIA (their instructions are f32): not here either, so
    #: that a program the CPU accepts compiles for the GPUs.
    no_f64_math = frozenset(APPROX_MATH)
    #: The pipeline inlines every device function into the kernels before lowering (see module doc).
    inline_device_functions = True

    def __init__(self, arch: str | None = None, warp_size: int | None = None, emulate_mma: bool = False,
                 emulate_mfma: bool | str = False, emulate_wgmma: bool = False, approx_error: float = 0.0,
                 contract: str = "host", printf: str = "hostcall"):
        self.hostcall_printf_option(printf)
        initialize()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        cpu = arch or ""
        for suffix, ws in (("w32", 32), ("w64", 64)):
            if cpu == suffix or cpu.endswith("-" + suffix):
                cpu = cpu[: -len(suffix)].rstrip("-")
                warp_size = warp_size or ws
        self.emulate_mfma = "gfx950" if emulate_mfma is True else (emulate_mfma or "")
        if self.emulate_mfma and emulate_mma:
            raise ValueError("cpu target: emulate_mma (warps of 32) and emulate_mfma (wavefronts of 64) exclude "
                             "each other")
        if self.emulate_mfma and warp_size == 32:
            raise ValueError("cpu target: emulate_mfma needs wavefronts of 64 lanes, as AMD CDNA's")
        warp_size = warp_size or (64 if self.emulate_mfma else 32)
        if warp_size not in (32, 64):
            raise ValueError(f"cpu target: warp size must be 32 or 64, not {warp_size}")
        self.warp_size = warp_size
        host = cpu in ("", "host", "native", "cpu")
        if not host:
            check_cpu_name(cpu)  # before LLVM sees it: it would warn, or end the process (cpu_names.py)
        self.cpu_name = llvm.get_host_cpu_name() if host else cpu
        # Without AVX512-BF16's convert, which flushes subnormal inputs to zero (GPUs round them):
        # f32 -> bf16 then goes through builtins.__truncsfbf2, which rounds them as a GPU does.
        self.cpu_features = (llvm.get_host_cpu_features().flatten() if host else "").replace(
            "+avx512bf16", "-avx512bf16")
        self.arch = self.cpu_name if warp_size == 32 else f"{self.cpu_name}-w64"
        self.triple = llvm.get_process_triple()
        self.data_layout = str(self.target_machine(0).target_data)
        self._target_data = llvm.create_target_data(self.data_layout)
        self._abi: dict[tuple[str, str], int] = {}  # (what, type's text) -> bytes: _abi_bytes
        self.address_spaces = {s: 0 for s in AddressSpace}
        self.alloca_space = 0
        # named barriers (NVIDIA's bar.sync / bar.arrive, counted in warps of 32): named_barrier.py
        self.features = frozenset({"cpu", f"warp{warp_size}"} | ({"named_barrier"} if warp_size == 32 else set()))
        self.emulate_mma = bool(emulate_mma)
        if self.emulate_mma:
            if warp_size != 32:
                raise ValueError("cpu target: emulate_mma needs warps of 32 lanes, as NVIDIA's")
            self.features |= {"mma", "mma_fp8", "ldmatrix", "cp_async"}
        if self.emulate_mfma:
            self.features |= mfma.features(self.emulate_mfma)
        self.approx_error = float(approx_error)
        if not abs(self.approx_error) < 2.0 ** -10:
            raise ValueError(f"cpu target: approx_error must be a small relative error, |d| < 2^-10, not {approx_error}")
        if contract not in ("host", "nvptx"):
            raise ValueError(f"cpu target: contract must be 'host' or 'nvptx', not {contract!r}")
        self.contract = contract
        self.emulate_wgmma = bool(emulate_wgmma)
        if self.emulate_wgmma:
            if warp_size != 32:
                raise ValueError("cpu target: emulate_wgmma needs warps of 32 lanes, as NVIDIA's")
            self.features |= hopper.FEATURES

    def describe(self) -> dict[str, Any]:
        extra = {"emulate_mma": True} if self.emulate_mma else {}
        if self.emulate_wgmma:
            extra["emulate_wgmma"] = True
        if self.emulate_mfma:
            extra["emulate_mfma"] = self.emulate_mfma
        if self.approx_error:
            extra["approx_error"] = self.approx_error
        if self.contract != "host":
            extra["contract"] = self.contract
        return {**super().describe(), "cpu_features": self.cpu_features, **extra}

    def math(self, ctx: "LoweringContext", fn: str, args: list[ll.Value]) -> ll.Value:
        """Target.math, with the approximations (fast_exp2, fast_sin, ...) computed as approx.py
        models the GPUs' documented errors, and ``approx_error`` instead of that model on fast_rcp
        and fast_rsqrt and their normal-range forms (see the class docstring). fast_rcp_normal and
        fast_rsqrt_normal on f32 flush a subnormal argument or result to zero of its sign, as
        NVIDIA's .ftz forms do: their contract leaves these values open, and code that relies on
        them then fails on the CPU too."""
        t = args[0].type
        scalar = t.element if isinstance(t, ll.VectorType) else t
        base = NORMAL_RANGE_MATH.get(fn, fn)
        if base not in approx.BOUNDS or isinstance(scalar, ll.DoubleType):
            return super().math(ctx, fn, args)
        x = args[0]
        normal = fn in NORMAL_RANGE_MATH and scalar == ll.FloatType()
        if normal:
            x = self._flush_subnormal(ctx, x)
        if self.approx_error and base in ("fast_rcp", "fast_rsqrt"):
            v = super().math(ctx, fn, [x])
            f = 1.0 + self.approx_error
            n = v.type.count if isinstance(v.type, ll.VectorType) else 0
            v = ctx.b.fmul(v, ll.Constant(v.type, [f] * n if n else f))
        else:
            v = approx.approximate(ctx, base, x, lambda d: super(CpuTarget, self).math(ctx, base, [d]))
        return self._flush_subnormal(ctx, v) if normal else v

    @staticmethod
    def _flush_subnormal(ctx: "LoweringContext", x: ll.Value) -> ll.Value:
        """x, with subnormal lanes replaced by a zero of their sign (x * 0: x is finite there)."""
        n = x.type.count if isinstance(x.type, ll.VectorType) else 0
        tiny = ll.Constant(x.type, [2.0 ** -126] * n if n else 2.0 ** -126)
        zero = ll.Constant(x.type, [0.0] * n if n else 0.0)
        sub = ctx.b.fcmp_ordered("<", ctx.call_intrinsic("llvm.fabs", [x]), tiny)
        return ctx.b.select(sub, ctx.b.fmul(x, zero), x)

    # --- module state -----------------------------------------------------------------------------
    @staticmethod
    def _mstate(module: ll.Module) -> _ModuleState:
        st = getattr(module, "_kc_cpu_state", None)
        if st is None:
            st = _ModuleState()
            module._kc_cpu_state = st  # type: ignore[attr-defined]
        return st

    def _site(self, ctx: "LoweringContext", span: Any = None) -> int:
        """A new location id: ids grow in program order, which the scheduler's warp grouping uses."""
        locs = self._mstate(ctx.module).locations
        span = span if span is not None else ctx.current_span
        locs.append(str(span) if span is not None else f"<{ctx.ir_fn.name}>")
        return len(locs) - 1

    def _coroutine(self, ctx: "LoweringContext", what: str) -> coroutine.Coroutine | None:
        """The kernel's coroutine, or None in a device function. Device functions are inlined into
        kernels before lowering; one that is not (it is then dead, or recursive) gets placeholders
        here, and finalize_module rejects it if something still calls it."""
        co = ctx.state.get("cpu.coroutine")
        if co is None:
            self._mstate(ctx.module).needs_kernel.setdefault(ctx.fn.name, (what, ctx.current_span))
        return co

    # --- functions --------------------------------------------------------------------------------
    def function_symbol(self, name: str, is_kernel: bool) -> str:
        return SYMBOL_PREFIX + name

    def kernel_extra_params(self) -> list[ll.Type]:
        return [PTR]  # the ThreadContext

    def declare_kernel(self, ctx: "LoweringContext") -> None:
        ctx.fn.attributes.add("nounwind")
        self._mstate(ctx.module).kernels[ctx.fn.name] = {
            "static_shared": 0, "check_bounds": bool(ctx.options.check_bounds), "symbol": ctx.ir_fn.name}

    def begin_function(self, ctx: "LoweringContext") -> None:
        if ctx.ir_fn.is_kernel:
            tctx = ctx.extra_params[0]
            tctx.name = "kc.thread"
            ctx.state["cpu.coroutine"] = coroutine.begin(ctx.fn, ctx.b, tctx)
            if self.emulate_mma:
                warp_matrix.begin_function(ctx)

    def lower_return(self, ctx: "LoweringContext", value: ll.Value | None) -> None:
        ctx.b.branch(ctx.state["cpu.coroutine"].done)  # only kernels return through this hook

    # --- the machine ------------------------------------------------------------------------------
    def special(self, ctx: "LoweringContext", reg: str, dim: str) -> ll.Value:
        co = self._coroutine(ctx, reg)
        if co is None:
            return ll.Constant(I32, ll.Undefined)
        if reg in ("lane_id", "warp_id"):
            return load_thread(ctx.b, co.ctx, reg)
        return load_thread(ctx.b, co.ctx, reg, "xyz".index(dim))

    def barrier(self, ctx: "LoweringContext") -> None:
        co = self._coroutine(ctx, "barrier()")
        if co is not None:
            coroutine.suspend(co, ctx.b, WAIT_BARRIER, self._site(ctx))

    def _warp_op(self, ctx: "LoweringContext", what: str, op: int, value: ll.Value,
                 src: ll.Value | None = None) -> ll.Value:
        """Post ``value`` (zero-extended to i64) for warp operation ``op``, wait for the warp, and
        return the i64 result the scheduler computed."""
        co = self._coroutine(ctx, what)
        if co is None:
            return ll.Constant(I64, ll.Undefined)
        b = ctx.b
        store_thread(b, co.ctx, "wop", ll.Constant(I32, op))
        store_thread(b, co.ctx, "wval", value if value.type == I64 else b.zext(value, I64))
        if src is not None:
            store_thread(b, co.ctx, "wsrc", src)
        coroutine.suspend(co, b, WAIT_WARP, self._site(ctx))
        return load_thread(b, co.ctx, "wres")

    def shuffle(self, ctx: "LoweringContext", mode: str, value: ll.Value, lane: ll.Value) -> ll.Value:
        b = ctx.b
        co = self._coroutine(ctx, "shuffle")
        me = load_thread(b, co.ctx, "lane_id") if co is not None else lane
        # A source outside [0, lanes of this warp) -- also the huge unsigned value of me - lane < 0 --
        # gives the thread its own value; the scheduler checks the range.
        src = {"idx": lambda: lane, "xor": lambda: b.xor(me, lane), "down": lambda: b.add(me, lane),
               "up": lambda: b.sub(me, lane)}[mode]()
        r = self._warp_op(ctx, "shuffle", WARP_SHUFFLE, value, src)
        return b.trunc(r, value.type)

    def ballot(self, ctx: "LoweringContext", pred: ll.Value) -> ll.Value:
        return self._warp_op(ctx, "ballot", WARP_BALLOT, pred)

    def active_mask(self, ctx: "LoweringContext") -> ll.Value:
        return self._warp_op(ctx, "active_mask", WARP_ACTIVE_MASK, ll.Constant(I64, 0))

    def read_first_lane(self, ctx: "LoweringContext", value: ll.Value) -> ll.Value:
        return ctx.b.trunc(self._warp_op(ctx, "read_first_lane", WARP_FIRST_LANE, value), value.type)

    def nanosleep(self, ctx: "LoweringContext", ns: ll.Value) -> None:
        # The threads of a block share one host thread: a spin loop must let the others run (the
        # one it waits for may be among them), so backing off is a yield to the scheduler.
        co = self._coroutine(ctx, "nanosleep")
        if co is not None:
            coroutine.suspend(co, ctx.b, WAIT_RUN, self._site(ctx))

    #: Reads at one site in a row that find the value read there before, after which the thread
    #: yields (spin_point): a spin-wait spins this often between yields.
    SPIN_SAME = 8
    #: Atomic reads in loops a thread makes between yields at most (a loop reading two flags in turn).
    SPIN_READS = 4096

    def spin_point(self, ctx: "LoweringContext", value: ll.Value, failed: ll.Value | None = None) -> None:
        # The threads of a block share one host thread, switching only where they suspend: a thread
        # spinning on a flag that another thread of its block sets would spin forever. It yields
        # (WAIT_RUN, as nanosleep does) after SPIN_SAME reads in a row at this site found the value
        # of the read before (it is waiting; a CAS: only where it failed), or after SPIN_READS atomic
        # reads in while loops; ``spin`` tells the scheduler the first case, which counts towards a
        # deadlock (scheduler.py). Only reads inside a while loop get here (a for loop is counted):
        # such a read costs a few loads and stores of the ThreadContext, and a suspension point
        # that keeps the loop's values in the coroutine frame.
        co = self._coroutine(ctx, "an atomic in a loop")
        if co is None:
            return
        b = ctx.b
        site = self._site(ctx)
        v = value if value.type == I64 else b.zext(value, I64)
        tag = ll.Constant(I32, site + 1)
        zero = ll.Constant(I32, 0)
        same = b.and_(b.icmp_unsigned("==", load_thread(b, co.ctx, "spin_site"), tag),
                      b.icmp_unsigned("==", load_thread(b, co.ctx, "spin_val"), v))
        streak = b.select(same, b.add(load_thread(b, co.ctx, "spin_n"), ll.Constant(I32, 1)), zero)
        total = b.add(load_thread(b, co.ctx, "spin_total"), ll.Constant(I32, 1))
        waiting = b.icmp_unsigned(">=", streak, ll.Constant(I32, self.SPIN_SAME))
        go = b.or_(waiting, b.icmp_unsigned(">=", total, ll.Constant(I32, self.SPIN_READS)))
        if failed is not None:
            go = b.and_(go, failed)
        store_thread(b, co.ctx, "spin_site", tag)
        store_thread(b, co.ctx, "spin_val", v)
        store_thread(b, co.ctx, "spin_n", b.select(go, zero, streak))
        store_thread(b, co.ctx, "spin_total", b.select(go, zero, total))
        yield_ = b.append_basic_block("spin.yield")
        cont = b.append_basic_block("spin.cont")
        br = b.cbranch(go, yield_, cont)
        br.set_weights([1, 64])
        b.position_at_end(yield_)
        store_thread(b, co.ctx, "spin", b.zext(waiting, I32))
        coroutine.suspend(co, b, WAIT_RUN, site)
        b.branch(cont)
        b.position_at_end(cont)

    def trap(self, ctx: "LoweringContext", reason: str, message: str = "", function: str = "") -> None:
        # The launch stops with the error (the first one wins), the thread ends; the runtime raises
        # DeviceAssertionError with the message the thread printed before.
        if not self._stop(ctx, "assert", ERR_ASSERT):
            super().trap(ctx, reason, message, function)

    def fault(self, ctx: "LoweringContext", message: str) -> None:
        """Stop the launch where an emulated instruction would fault on a GPU (a misaligned bulk copy,
        a named barrier id out of range): the runtime raises LaunchError naming ``message``, the
        call's file:line:col and the thread. The builder continues in a new, unreachable block."""
        if not self._stop(ctx, "fault", ERR_FAULT, message):
            super().trap(ctx, "assert", message)

    def _stop(self, ctx: "LoweringContext", what: str, kind: int, fault: str | None = None) -> bool:
        """Claim the launch's error ``kind`` at the current location (recording ``fault``, the reason an
        ERR_FAULT gives, by that location) and end the thread; the builder continues in a new,
        unreachable block. False in a device function that is not a kernel (no coroutine)."""
        co = self._coroutine(ctx, what)
        if co is None:
            return False
        site = self._site(ctx)
        if fault is not None:
            self._mstate(ctx.module).faults[site] = fault
        self._record_error(ctx, co, kind, site)
        ctx.b.branch(co.error)
        ctx.b.position_at_end(ctx.b.append_basic_block(f"after_{what}"))
        return True

    def _record_error(self, ctx: "LoweringContext", co: coroutine.Coroutine, kind: int, site: int,
                      addr: ll.Value | None = None, nbytes: ll.Value | None = None,
                      access: int | None = None) -> None:
        """Claim the launch's error (the first one wins) and fill its fields (:meth:`_record_function`):
        ``kind`` (ERR_*), the location id ``site``, this thread and block, ``addr``/``nbytes``/``access``
        (0 where not given: the runtime reads them only for the kinds that give them)."""
        zero64 = ll.Constant(I64, 0)
        ctx.b.call(self._record_function(ctx.module),
                   [co.ctx, ll.Constant(I32, kind), ll.Constant(I32, site), zero64 if addr is None else addr,
                    zero64 if nbytes is None else nbytes, ll.Constant(I32, access or 0)])

    def _record_function(self, m: ll.Module) -> ll.Function:
        """``void __kc_record_error(ptr ctx, i32 kind, i32 loc, i64 addr, i64 nbytes, i32 access)``:
        claims the launch's error (the first one wins) and fills its fields and the thread's and
        block's ids. One noinline function a module, called from every failure path of the bounds
        checks and of trap: inlined, its ~30 instructions at each of a bounds-checked kernel's
        thousands of checks were half of its IR (and of its compile time)."""
        st = self._mstate(m)
        if st.record_function is not None:
            return st.record_function
        fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [PTR, I32, I32, I64, I64, I32]), RECORD_FUNCTION)
        fn.linkage = "internal"
        fn.attributes.add("noinline")
        fn.attributes.add("cold")
        tctx, kind, loc, addr, nbytes, access = fn.args
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        record, done = fn.append_basic_block("record"), fn.append_basic_block("done")
        launch = load_thread(b, tctx, "launch")
        b.cbranch(claim_error(b, launch), record, done)
        b.position_at_end(record)
        for field_, value in (("err_kind", kind), ("err_loc", loc), ("err_addr", addr), ("err_nbytes", nbytes),
                              ("err_access", access)):
            store_launch(b, launch, field_, value)
        for d in range(3):
            store_launch(b, launch, "err_tid", load_thread(b, tctx, "thread_id", d), d)
            store_launch(b, launch, "err_bid", load_thread(b, tctx, "block_id", d), d)
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()
        st.record_function = fn
        return fn

    def warp_sync(self, ctx: "LoweringContext", mask: ll.Value | None = None) -> None:
        # A warp operation is where the lanes of a warp meet: every active lane gets there first.
        self._warp_op(ctx, "warp_sync", WARP_ACTIVE_MASK, ll.Constant(I64, 0))

    # --- target intrinsics: NVIDIA's and AMD's, emulated when asked (warp_matrix.py, mfma.py, hopper.py)
    def lowers_intrinsic(self, intrinsic: Any) -> bool:
        # An emulation the options turned on gives the target its feature (emulate_mma: "mma",
        # "ldmatrix", "cp_async"; emulate_mfma: "mfma*"; emulate_wgmma: hopper.FEATURES).
        return intrinsic.emulate is not None and self.has(intrinsic.feature)

    def intrinsic_lowering(self, intrinsic: Any) -> str:
        return intrinsic.emulate

    # --- memory -----------------------------------------------------------------------------------
    def shared_array(self, ctx: "LoweringContext", symbol: str, lltype: ll.Type) -> ll.Value:
        co = self._coroutine(ctx, "a shared array")
        if co is None:
            return ll.Constant(PTR, None)
        info = self._mstate(ctx.module).kernels[ctx.fn.name]
        align = max(16, self._abi_bytes("alignment", lltype))
        offset = (info["static_shared"] + align - 1) // align * align
        info["static_shared"] = offset + self._abi_bytes("size", lltype)
        base = load_thread(ctx.b, co.ctx, "shared")
        return ctx.b.gep(base, [ll.Constant(I64, offset)], source_etype=I8, name=local_name(symbol))

    def dynamic_shared(self, ctx: "LoweringContext") -> ll.Value:
        co = self._coroutine(ctx, "dynamic shared memory")
        return load_thread(ctx.b, co.ctx, "dyn_shared") if co is not None else ll.Constant(PTR, None)

    def _abi_bytes(self, what: str, lltype: ll.Type) -> int:
        """The host ABI's ``what`` ('size' or 'alignment') of ``lltype`` in bytes, remembered by the
        type's text: llvmlite answers by parsing a module that holds a global of the type (a vector
        access asks at every load and store). Not remembered for a type that names a struct (its
        text is the name, which another program may give another body)."""
        text = str(lltype)
        get = lltype.get_abi_size if what == "size" else lltype.get_abi_alignment
        if "%" in text:
            return get(self._target_data)
        key = (what, text)
        n = self._abi.get(key)
        if n is None:
            n = self._abi[key] = get(self._target_data)
        return n

    def access_align(self, memtype: ll.Type, align: int | None) -> int | None:
        # A host faults (SIGSEGV, killing the process) on an aligned vector move to an address a GPU
        # would also refuse; the CPU target asks only for the element's alignment, so such a kernel
        # runs, and check_bounds reports the misaligned access as a GPU's "misaligned address".
        if isinstance(memtype, ll.VectorType):
            elem = self._abi_bytes("alignment", memtype.element)
            return min(align, elem) if align else elem
        return align

    def check_access(self, ctx: "LoweringContext", ptr: ll.Value, nbytes: int, op: Any,
                     memtype: ll.Type | None = None, align: int | None = None) -> None:
        co = self._coroutine(ctx, "a bounds-checked memory access")
        if co is None:
            return
        access = {"load": ACCESS_LOAD, "store": ACCESS_STORE}.get(getattr(op, "name", ""), ACCESS_ATOMIC)
        site = self._site(ctx, getattr(op, "span", None))
        check = self._check_function(ctx.module)
        if not align:
            align = self._abi_bytes("alignment", memtype) if memtype is not None else 1
        b = ctx.b
        ok = b.call(check, [co.ctx, ptr, ll.Constant(I64, nbytes), ll.Constant(I32, site),
                            ll.Constant(I32, access), ll.Constant(I64, align)])
        cont = b.append_basic_block("checked")
        br = b.cbranch(ok, cont, co.error)
        br.set_weights([1 << 20, 1])
        b.position_at_end(cont)

    def check_index(self, ctx: "LoweringContext", index: ll.Value, count: int, op: Any) -> None:
        # Out of range, the launch stops with ERR_INDEX (index, length, where, who) and the runtime
        # raises LaunchError naming them.
        co = self._coroutine(ctx, "a bounds-checked array access")
        if co is None:
            return
        b = ctx.b
        bad = b.append_basic_block("index_out_of_range")
        cont = b.append_basic_block("index_checked")
        br = b.cbranch(b.icmp_unsigned("<", index, ll.Constant(I64, count)), cont, bad)
        br.set_weights([1 << 20, 1])
        b.position_at_end(bad)
        access = {"load": ACCESS_LOAD, "store": ACCESS_STORE}.get(getattr(op, "name", ""), ACCESS_ATOMIC)
        self._record_error(ctx, co, ERR_INDEX, self._site(ctx, getattr(op, "span", None)),
                           addr=index, nbytes=ll.Constant(I64, count), access=access)
        b.branch(co.error)
        b.position_at_end(cont)

    def check_shared(self, ctx: "LoweringContext", ptr: ll.Value, nbytes: int, op: Any) -> None:
        # The block's shared memory is [ThreadContext.shared, .dyn_shared + the launch's dynamic bytes).
        co = self._coroutine(ctx, "a bounds-checked shared-memory access")
        if co is None:
            return
        b = ctx.b
        lo = b.ptrtoint(ptr, I64)
        base = b.ptrtoint(load_thread(b, co.ctx, "shared"), I64)
        end = b.add(b.ptrtoint(load_thread(b, co.ctx, "dyn_shared"), I64),
                    load_launch(b, load_thread(b, co.ctx, "launch"), "dyn_shared"))
        ok = b.and_(b.icmp_unsigned(">=", lo, base),
                    b.icmp_unsigned("<=", b.add(lo, ll.Constant(I64, nbytes)), end))
        bad = b.append_basic_block("shared_out_of_range")
        cont = b.append_basic_block("shared_checked")
        br = b.cbranch(ok, cont, bad)
        br.set_weights([1 << 20, 1])
        b.position_at_end(bad)
        access = {"load": ACCESS_LOAD, "store": ACCESS_STORE}.get(getattr(op, "name", ""), ACCESS_ATOMIC)
        self._record_error(ctx, co, ERR_SHARED, self._site(ctx, getattr(op, "span", None)),
                           addr=b.sub(lo, base), nbytes=ll.Constant(I64, nbytes), access=access)
        b.branch(co.error)
        b.position_at_end(cont)

    def _check_function(self, m: ll.Module) -> ll.Function:
        """``i1 __kc_check_access(ptr ctx, ptr p, i64 n, i32 loc, i32 access, i64 align)``: whether
        [p, p+n) lies in one host array of the launch's table and p is a multiple of ``align`` (a power
        of two); if not, records the error (first one wins)."""
        st = self._mstate(m)
        if st.check_function is not None:
            return st.check_function
        fn = ll.Function(m, ll.FunctionType(I1, [PTR, PTR, I64, I32, I32, I64]), CHECK_FUNCTION)
        fn.linkage = "internal"
        fn.attributes.add("noinline")  # one call per access keeps checked kernels small
        tctx, p, n, loc, access, align = fn.args
        b = ll.IRBuilder(fn.append_basic_block("entry"))
        head, body, nxt, miss, hit = (fn.append_basic_block(x) for x in ("head", "body", "next", "miss", "hit"))
        launch = load_thread(b, tctx, "launch")
        table = load_launch(b, launch, "table")
        count = load_launch(b, launch, "ntable")
        lo = b.ptrtoint(p, I64)
        hi = b.add(lo, n)
        kind = b.select(b.icmp_unsigned("!=", b.and_(lo, b.sub(align, ll.Constant(I64, 1))), ll.Constant(I64, 0)),
                        ll.Constant(I32, ERR_MISALIGNED), ll.Constant(I32, ERR_BOUNDS))
        entry = b.block
        b.cbranch(b.icmp_unsigned("==", kind, ll.Constant(I32, ERR_MISALIGNED)), miss, head)
        b.position_at_end(head)
        i = b.phi(I64, "i")
        i.add_incoming(ll.Constant(I64, 0), entry)
        b.cbranch(b.icmp_unsigned("<", i, count), body, miss)
        b.position_at_end(body)
        pair = ll.LiteralStructType([I64, I64])
        begin = b.load(b.gep(table, [i, ll.Constant(I32, 0)], source_etype=pair), typ=I64)
        end = b.load(b.gep(table, [i, ll.Constant(I32, 1)], source_etype=pair), typ=I64)
        inside = b.and_(b.icmp_unsigned(">=", lo, begin), b.icmp_unsigned("<=", hi, end))
        b.cbranch(inside, hit, nxt)
        b.position_at_end(nxt)
        i.add_incoming(b.add(i, ll.Constant(I64, 1)), nxt)
        b.branch(head)
        b.position_at_end(hit)
        b.ret(ll.Constant(I1, 1))
        b.position_at_end(miss)
        b.call(self._record_function(m), [tctx, kind, loc, lo, n, access])
        b.ret(ll.Constant(I1, 0))
        st.check_function = fn
        return fn

    # --- emission ---------------------------------------------------------------------------------
    def target_machine(self, opt_level: int = 3) -> Any:
        # jit=True picks the JIT's code model (large on x86-64), so the object links at any address.
        return llvm.Target.from_triple(self.triple).create_target_machine(
            cpu=self.cpu_name, features=self.cpu_features, opt=min(max(opt_level, 0), 3), jit=True)

    def finalize_module(self, module: ll.Module) -> None:
        st = self._mstate(module)
        self._reject_called(module, st)
        td = self._target_data
        kernels = {}
        for name, info in st.kernels.items():  # by LLVM symbol; the description by IR symbol
            fn = module.globals[name]
            params = self._thunk(module, fn, td)
            info = dict(info)
            kernels[info.pop("symbol")] = {**info, "thunk": name + THUNK_SUFFIX, "params": params,
                                           "arg_bytes": max((o + s for o, s in params), default=0)}
        text = json.dumps({"warp_size": self.warp_size, "kernels": kernels, "locations": st.locations,
                           "faults": {str(k): v for k, v in st.faults.items()}})
        data = bytearray(text.encode()) + b"\0"
        gv = ll.GlobalVariable(module, ll.ArrayType(I8, len(data)), INFO_SYMBOL)
        gv.initializer = ll.Constant(ll.ArrayType(I8, len(data)), data)
        gv.global_constant = True

    @staticmethod
    def _reject_called(module: ll.Module, st: _ModuleState) -> None:
        """A CompileError for a device function that needs a kernel's context and can still be called
        from a kernel (it was not inlined); the others are dead code that LLVM removes."""
        if not st.needs_kernel:
            return
        calls: dict[str, list[str]] = {}
        for fn in module.functions:
            calls[fn.name] = [i.callee.name for blk in fn.blocks for i in blk.instructions
                              if isinstance(i, ll.CallInstr) and isinstance(i.callee, ll.Function)]
        seen, todo = set(), [(k, k) for k in st.kernels]
        while todo:
            caller, name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            for callee in calls.get(name, ()):
                if callee in st.needs_kernel:
                    what, span = st.needs_kernel[callee]
                    raise CompileError(
                        f"{what} in device function '{callee.removeprefix(SYMBOL_PREFIX)}', which "
                        f"'{name.removeprefix(SYMBOL_PREFIX)}' calls and which was not "
                        f"inlined into it (only the kernel's own code, with the device functions inlined "
                        f"into it, may use it on the cpu target; recursive functions cannot be inlined)",
                        span)
                todo.append((name, callee))

    @staticmethod
    def _thunk(module: ll.Module, kernel: ll.Function, td: Any) -> list[tuple[int, int]]:
        """Emit ``void <kernel>.kc_start(ptr args, ptr ctx)``, which reads the kernel's arguments from
        ``args`` (each in 8-byte aligned slots, in order) and starts the kernel. Returns each
        argument's (offset, size) in ``args``."""
        thunk = ll.Function(module, START_TYPE, kernel.name + THUNK_SUFFIX)
        args, tctx = thunk.args
        b = ll.IRBuilder(thunk.append_basic_block("entry"))
        values, layout, off = [], [], 0
        for a in kernel.args[:-1]:
            t = a.type
            mem_t = I8 if t == I1 else t
            size = mem_t.get_abi_size(td)
            v = b.load(b.gep(args, [ll.Constant(I64, off)], source_etype=I8), typ=mem_t, align=8)
            values.append(b.trunc(v, I1) if t == I1 else v)
            layout.append((off, size))
            off += (size + 7) // 8 * 8
        b.call(kernel, values + [tctx])
        b.ret_void()
        return layout

    def rewrite_optimized(self, ref: Any) -> Any:
        """``ref``, with ``contract="nvptx"`` its multiply-adds fused as NVPTX fuses them
        (contract.fuse_like_nvptx); unchanged otherwise."""
        if self.contract != "nvptx":
            return ref
        text, fused = contract.fuse_like_nvptx(str(ref))
        if not fused:
            return ref
        out = llvm.parse_assembly(text)
        out.verify()
        return out

    def emit(self, llvm_module: Any, kind: str) -> bytes | str:
        tm = self.target_machine(3)
        if kind in ("asm", "obj"):
            return machine_code(tm, llvm_module, kind)
        if kind == "llvm":
            return str(llvm_module)
        raise ValueError(f"cpu target cannot emit {kind!r} (choose 'asm', 'obj' or 'llvm')")
