"""The contract between the shared LLVM lowering and a vendor target.

A :class:`Target` is the whole of what differs between NVIDIA, AMD and the host CPU: the triple and
data layout, the numbers of the address spaces, the warp size, the special registers, barriers, warp
operations, shared memory, atomics' scopes, the kernel calling convention, and the final emission.
``backends/llvm/lower.py`` lowers kcompiler's IR once and calls these hooks wherever the targets
differ; it never names a vendor. Adding a target is one folder with one subclass and one
:class:`~kcompiler.backends.registry.Backend` record (docs/ARCHITECTURE.md, "How to add a target").

Hooks receive a :class:`LoweringContext` (defined in ``backends/llvm/lower.py``): ``ctx.b`` is the
llvmlite ``ir.IRBuilder`` at the current position, ``ctx.module`` the llvmlite ``ir.Module``,
``ctx.fn`` the llvmlite function being built, ``ctx.ir_fn`` the kcompiler IR function,
``ctx.lltype(t)`` converts an IR type, and ``ctx.state`` is a dict a target may use per function.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..ir.core import NORMAL_RANGE_MATH
from ..ir.printf import format_hash, format_table
from ..ir.types import AddressSpace, Type
from .errors import UnsupportedOnTarget
from .registry import load_object
from ..limits import ResourceLimits


#: The longest name an LLVM local (argument, alloca, phi) is given from a source name. LLVM cuts local
#: names at 1,024 characters when it reads IR text (-non-global-value-max-name-size), so two names
#: sharing a 1,024-character prefix would become one ("redefinition of argument"); llvmlite makes the
#: shortened names unique within their function (``name``, ``name.1``, ...).
LOCAL_NAME_MAX = 64


def local_name(hint: str | None) -> str:
    """``hint`` (a source name) as the name of an LLVM local: at most :data:`LOCAL_NAME_MAX`
    characters ('' for none: LLVM numbers it)."""
    return (hint or "")[:LOCAL_NAME_MAX]


if TYPE_CHECKING:
    from ..ir.intrinsics import Intrinsic  # pragma: no cover
    from llvmlite import ir as ll

    from .llvm.lower import LoweringContext


def _ll() -> Any:
    """``llvmlite.ir``, imported at first use: importing this module (``import kcompiler``, a warm
    ``kc compile``) must not load llvmlite."""
    from llvmlite import ir

    return ir


@dataclass(frozen=True)
class CompileOptions:
    """Options that change generated code (and so are part of the cache key).

    ``opt_level``: LLVM pipeline level 0-3. ``check_bounds``: on targets that support it (cpu), check
    every access to memory passed from the host (unchecked, a CPU kernel's overrun writes the host
    process's own memory: heap corruption or a segfault). Raises ValueError for a value of another
    type or range. ``fast_math``: allow reassociation and approximate
    division/sqrt in f32 (LLVM's ``fast`` flags), and std.math's functions become their fast versions
    (``comptime target.has("fast_math")``; docs/math.md). ``release``: device ``assert`` compiles to
    nothing (C's ``NDEBUG``; ``comptime target.has("release")`` is true); asserts are still checked
    at compile time.
    """

    opt_level: int = 3
    check_bounds: bool = False
    fast_math: bool = False
    release: bool = False

    def __post_init__(self) -> None:
        # Checked where the options are given: a bad value would otherwise fail at the first launch,
        # inside LLVM.
        if type(self.opt_level) is not int or not 0 <= self.opt_level <= 3:
            raise ValueError(f"opt_level must be an integer from 0 to 3, not {self.opt_level!r}")
        for name in ("check_bounds", "fast_math", "release"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, not {getattr(self, name)!r}")


class Target:
    """Base class of the targets. Subclasses set the class attributes and override the hooks.

    Attributes:
        name: canonical target name ('nvptx', 'amdgcn', 'cpu'): its Backend record's.
        arch: the chip ('sm_90a', 'gfx942', or the host CPU's name).
        triple, data_layout: LLVM's.
        warp_size: lanes per warp (wavefront), known at compile time.
        address_spaces: LLVM address-space number of each IR address space.
        alloca_space: the address space allocas live in.
        features: what ``comptime target.has("...")`` answers true for.
    """

    name: str = ""
    arch: str = ""
    triple: str = ""
    data_layout: str = ""
    warp_size: int = 32
    address_spaces: dict[AddressSpace, int] = {}
    alloca_space: int = 0
    features: frozenset[str] = frozenset()
    #: The file suffix of ``emit("obj")`` and what the runtime loads ('cubin', 'hsaco', 'so').
    binary_kind: str = "obj"
    #: How printf reaches the host: 'vprintf' (the IR op, lowered by :meth:`printf`) or 'hostcall'
    #: (the frontend calls std.hostcall's printf service; docs/amd-hostcall.md).
    printf_method: str = "vprintf"
    #: Symbols the target's code or its runtime declares in a kernel's module besides the program's
    #: own (NVIDIA: the CUDA device runtime's vprintf, malloc, free, __assertfail). A kernel of such
    #: a name, exported as it is, is refused with a located error, as nvcc refuses an extern "C"
    #: kernel that redeclares one; a device function of such a name is renamed (it is internal).
    reserved_symbols: frozenset[str] = frozenset()

    def reserved_kernel_message(self, name: str, symbol: str) -> str:
        """The error for kernel ``name`` whose symbol, ``symbol``, is one of :attr:`reserved_symbols`."""
        return (f"a kernel cannot be named '{name}' on {self.name}: its symbol '{symbol}' is one its runtime "
                f"reserves ({', '.join(sorted(self.reserved_symbols))})")

    def function_symbol(self, name: str, is_kernel: bool) -> str:
        """The LLVM symbol of the program's function whose IR symbol is ``name``: ``name`` itself on
        the GPUs, where the runtime loads kernels by it; the CPU target prefixes every one."""
        return name

    def hostcall_printf_option(self, printf: str) -> None:
        """Check and apply the ``printf`` target option of a target without vprintf (cpu, amdgcn):
        ``"hostcall"`` (the default: std.hostcall's printf service) or ``"buffered"`` (records in a
        buffer printed after the kernel: std.printf_buffer, docs/amd-hostcall.md §12). Raises
        ValueError for another value."""
        if printf not in ("hostcall", "buffered"):
            raise ValueError(f"{self.name} target: printf goes through the hostcall protocol or a "
                             f"printf buffer here; the printf option may be 'hostcall' or "
                             f"'buffered', not {printf!r}")
        self.printf_method = printf

    def has(self, feature: str) -> bool:
        """Whether the target has ``feature`` (e.g. 'wgmma', 'fp8_convert', 'sm_90')."""
        return feature in self.features

    def resource_limits(self) -> Any:
        """The :class:`kcompiler.limits.ResourceLimits` of this arch (static shared memory, local
        memory per thread, the kernel parameter block), which kcompiler checks before the target's
        tools would fail on them. The default checks none."""
        return ResourceLimits()

    def describe(self) -> dict[str, Any]:
        """Facts for the cache key and for ``--emit`` headers."""
        return {"target": self.name, "arch": self.arch, "warp_size": self.warp_size}

    # --- functions and the kernel calling convention --------------------------------------------------
    def kernel_extra_params(self) -> list[ll.Type]:
        """LLVM types of hidden parameters appended to every kernel's parameter list (none on GPUs)."""
        return []

    def declare_kernel(self, ctx: "LoweringContext") -> None:
        """Mark ``ctx.fn`` as a kernel entry point (calling convention, metadata, attributes)."""
        raise NotImplementedError

    def begin_function(self, ctx: "LoweringContext") -> None:
        """Emit anything a function needs at its entry (called with the builder in the entry block)."""

    def lower_return(self, ctx: "LoweringContext", value: ll.Value | None) -> None:
        """Emit a return of ``value`` (None for void). The builder's block is terminated afterwards."""
        if value is None:
            ctx.b.ret_void()
        else:
            ctx.b.ret(value)

    # --- the machine ------------------------------------------------------------------------------
    def special(self, ctx: "LoweringContext", reg: str, dim: str) -> ll.Value:
        """The i32 value of special register ``reg`` ('thread_id', 'block_id', 'block_dim',
        'grid_dim', 'lane_id', 'warp_id') in dimension ``dim`` ('x', 'y', 'z')."""
        raise NotImplementedError

    def barrier(self, ctx: "LoweringContext") -> None:
        """A barrier of every thread of the block, ordering shared and global memory at block scope."""
        raise NotImplementedError

    def fence(self, ctx: "LoweringContext", scope: str) -> None:
        """A sequentially consistent fence at ``scope`` ('block', 'device', 'system')."""
        ctx.b.fence("seq_cst", self.syncscope(scope))

    def syncscope(self, scope: str) -> str | None:
        """LLVM's syncscope name for an IR scope (None is LLVM's default, system scope)."""
        return None

    def shuffle(self, ctx: "LoweringContext", mode: str, value: ll.Value, lane: ll.Value) -> ll.Value:
        """Warp shuffle of a 32- or 64-bit ``value``: mode 'idx' reads lane ``lane``, 'xor' lane
        ``lane_id ^ lane``, 'down' lane ``lane_id + lane``, 'up' ``lane_id - lane``; a source outside
        the warp gives the thread's own value (CUDA's rule). Other types are bitcast by the caller."""
        raise NotImplementedError

    def byte_perm(self, ctx: "LoweringContext", x: ll.Value, y: ll.Value, s: ll.Value) -> ll.Value | None:
        """CUDA's ``__byte_perm(x, y, s)`` on i32 values by the target's byte-permute instruction, or
        None for the portable shifts and masks (backends/llvm/lower_bits.py ``byte_perm_bits``): byte k
        of the result is byte ``(s >> 4k) & 7`` of ``y:x``."""
        return None

    def ballot(self, ctx: "LoweringContext", pred: ll.Value) -> ll.Value:
        """i64 with bit k set when lane k is active and its i1 ``pred`` is true."""
        raise NotImplementedError

    def active_mask(self, ctx: "LoweringContext") -> ll.Value:
        """i64 with a bit per active lane."""
        raise NotImplementedError

    def read_first_lane(self, ctx: "LoweringContext", value: ll.Value) -> ll.Value:
        """The 32- or 64-bit ``value`` of the lowest active lane."""
        raise NotImplementedError

    def warp_sync(self, ctx: "LoweringContext", mask: ll.Value | None = None) -> None:
        """The lanes of the i64 ``mask`` (None: the active lanes) reconverge; memory accesses before
        it are visible to the other lanes after it (CUDA's __syncwarp(mask))."""
        raise NotImplementedError

    def nanosleep(self, ctx: "LoweringContext", ns: ll.Value) -> None:
        """A hint to back off a spin loop for about ``ns`` (i32) nanoseconds; may do nothing."""

    def sched_barrier(self, ctx: "LoweringContext") -> None:
        """The machine-code scheduler (the target's assembler or LLVM's) moves no instruction across
        this point; may do nothing (the default: the CPU target, where nothing runs asynchronously)."""

    def prefetch_l2(self, ctx: "LoweringContext", p: ll.Value, nbytes: ll.Value) -> None:
        """A hint to bring global memory [p, p + nbytes) (nbytes an i32) into the L2 cache; may do
        nothing (the default)."""

    def grid_dependency_wait(self, ctx: "LoweringContext") -> None:
        """Wait until the stream's previous launch has ended and its memory is visible. Nothing where
        launches start only after the one before them ends (the default: stream order already holds);
        NVIDIA sm_90+ overrides it (programmatic dependent launch)."""

    def launch_dependents(self, ctx: "LoweringContext") -> None:
        """Let the stream's next launch start early (a hint); nothing where launches never overlap."""

    def spin_point(self, ctx: "LoweringContext", value: ll.Value, failed: ll.Value | None = None) -> None:
        """After an atomic read inside a ``while`` loop (atomic_load, atomic_cas, atomic exch; a ``for``
        loop is counted, so it ends without help; ``value`` the
        integer read, ``failed`` an i1, for a CAS, true where it did not swap): where the threads of
        a block are not all running at once, let the others run when the thread may be spinning on
        one of them. GPUs: nothing (sm_70+'s independent thread scheduling, AMD's wavefronts)."""

    def trap(self, ctx: "LoweringContext", reason: str, message: str = "", function: str = "") -> None:
        """Stop this thread and fail the launch (the IR op ``trap``; ``reason``: 'assert', or 'bounds'
        from :meth:`check_index`; ``message``: the failed condition's text, ``function``: the name of
        the function it is in, where known).
        GPUs: ``llvm.trap`` (NVPTX ``trap``, AMDGCN ``s_trap 2``): the launch ends with an error
        (CUDA_ERROR_ASSERT / ILLEGAL_INSTRUCTION; the CUDA context is then unusable, as after a
        failed CUDA ``assert``). The builder continues in a new, unreachable block."""
        b = ctx.b
        b.call(ctx.declare("llvm.trap", _ll().VoidType(), []), [])
        b.unreachable()
        b.position_at_end(b.append_basic_block("after_trap"))

    # --- printf -----------------------------------------------------------------------------------
    def printf(self, ctx: "LoweringContext", fmt: str, args: list[ll.Value], types: list[Type]) -> None:
        """Print ``fmt`` (a format checked by the frontend: kcompiler.ir.printf parses it) with ``args``,
        whose IR ``types`` are the promoted ones: i32, u32, i64, u64, f64, or pointers in any address
        space (for %s and %p). Targets without a printf raise UnsupportedOnTarget (a located error)."""
        raise UnsupportedOnTarget(f"printf is not supported on this target yet ({self.name})")

    # --- hostcall (printf's transport where there is no vprintf) ---------------------------------------
    def hostcall_buffer(self, ctx: "LoweringContext") -> ll.Value:
        """The i64 address of the launch's hostcall buffer (docs/amd-hostcall.md), 0 when none was
        given. On AMD the HIP runtime passes it as a hidden kernel argument; elsewhere kcompiler's
        runtime sets the module global ``kc_hostcall_buffer``."""
        return self.runtime_word(ctx, "kc_hostcall_buffer")

    def runtime_word(self, ctx: "LoweringContext", name: str) -> ll.Value:
        """Load the i64 module global ``name`` (global address space, 8-aligned, 0 until kcompiler's
        runtime writes it before a launch: the CPU target through its address, CUDA through
        ``cuModuleGetGlobal``), defining it at its first use in the module."""
        ll = _ll()
        gv = ctx.module.globals.get(name)
        if gv is None:
            gv = ll.GlobalVariable(ctx.module, ll.IntType(64), name,
                                   addrspace=self.address_spaces[AddressSpace.GLOBAL])
            gv.initializer = ll.Constant(ll.IntType(64), 0)
            gv.align = 8
        return ctx.b.load(gv, typ=ll.IntType(64), align=8)

    # --- the printf buffer (printf="buffered": std.printf_buffer, docs/amd-hostcall.md §12) -------------
    def printf_buffer(self, ctx: "LoweringContext", fmt: str) -> ll.Value:
        """The i64 address of the launch's printf buffer (0 when none was given), for a record of
        format ``fmt``, which is registered under its hash (:meth:`emit_printf_formats` writes the
        module's formats at the end). Here: the module global ``kc_printf_buffer``, which kcompiler's
        runtime sets (CPU target, NVIDIA)."""
        self.register_printf_format(ctx, fmt)
        return self.runtime_word(ctx, "kc_printf_buffer")

    def register_printf_format(self, ctx: "LoweringContext", fmt: str) -> None:
        """Note buffered-printf format ``fmt`` under its hash for :meth:`emit_printf_formats`. Raises
        UnsupportedOnTarget where two formats of the module share a hash (2^-64 for a pair)."""
        formats = ctx.lowering.printf_formats
        h = format_hash(fmt)
        if formats.setdefault(h, fmt) != fmt:
            raise UnsupportedOnTarget(f"printf formats {formats[h]!r} and {fmt!r} have the same "
                                      f"64-bit hash {h:#x}; reword one")

    def emit_printf_formats(self, module: ll.Module, formats: dict[int, str]) -> None:
        """Record the module's buffered-printf formats (hash -> format) where the runtime finds them:
        here the constant global ``kc_printf_formats`` (kcompiler.runtime.printf_buffer
        ``format_table`` writes and ``read_format_table`` reads its layout)."""
        ll = _ll()
        data = format_table(formats)
        ty = ll.ArrayType(ll.IntType(8), len(data))
        gv = ll.GlobalVariable(module, ty, "kc_printf_formats",
                               addrspace=self.address_spaces[AddressSpace.GLOBAL])
        gv.initializer = ll.Constant(ty, bytearray(data))
        gv.global_constant = True
        gv.align = 8

    def hostcall_interrupt(self, ctx: "LoweringContext", event_id: ll.Value) -> None:
        """Wake the host's hostcall listener after a doorbell update (AMD: an s_sendmsg interrupt with
        the signal's event id). Targets whose host side polls emit nothing."""

    # --- memory -----------------------------------------------------------------------------------
    def shared_array(self, ctx: "LoweringContext", symbol: str, lltype: ll.Type) -> ll.Value:
        """A pointer (in the shared address space) to a static shared array ``symbol`` of ``lltype``,
        one per block. Called once per ``shared`` op."""
        ll = _ll()
        gv = ll.GlobalVariable(ctx.module, lltype, ctx.unique_symbol(symbol),
                               addrspace=self.address_spaces[AddressSpace.SHARED])
        gv.linkage = "internal"
        gv.initializer = ll.Constant(lltype, ll.Undefined)
        gv.align = 16
        return gv

    def dynamic_shared(self, ctx: "LoweringContext") -> ll.Value:
        """A pointer (shared address space, 16-byte aligned) to the block's dynamic shared memory,
        whose size the launch gives. The default is what NVPTX and AMDGPU both read as dynamic
        shared memory / LDS: an external zero-sized array in the shared address space, placed after
        the static shared memory."""
        ll = _ll()
        gv = ctx.module.globals.get("kc_dynamic_shared")
        if gv is None:
            gv = ll.GlobalVariable(ctx.module, ll.ArrayType(ll.IntType(8), 0), "kc_dynamic_shared",
                                   addrspace=self.address_spaces[AddressSpace.SHARED])
            gv.linkage = "external"
            gv.align = 16
        return gv

    def atomic(self, ctx: "LoweringContext", op: str, ptr: ll.Value, value: ll.Value, order: str,
               scope: str, signed: bool, is_float: bool) -> ll.Value:
        """Atomic read-modify-write; returns the old value."""
        llop = {"add": "fadd" if is_float else "add", "exch": "xchg", "and": "and", "or": "or",
                "xor": "xor",
                "min": "fmin" if is_float else ("min" if signed else "umin"),
                "max": "fmax" if is_float else ("max" if signed else "umax")}[op]
        inst = ctx.b.atomic_rmw(llop, ptr, value, LLVM_ORDERS[order])
        set_syncscope(inst, self.syncscope(scope))
        return inst

    def atomic_cas(self, ctx: "LoweringContext", ptr: ll.Value, cmp: ll.Value, new: ll.Value,
                   order: str, scope: str) -> ll.Value:
        """Atomic compare-and-swap; returns the old value."""
        o = LLVM_ORDERS[order]
        fail = {"release": "monotonic", "acq_rel": "acquire"}.get(o, o)
        pair = ctx.b.cmpxchg(ptr, cmp, new, o, fail)
        set_syncscope(pair, self.syncscope(scope))
        return ctx.b.extract_value(pair, 0)

    def check_access(self, ctx: "LoweringContext", ptr: ll.Value, nbytes: int, op: Any,
                     memtype: ll.Type | None = None, align: int | None = None) -> None:
        """Under ``check_bounds``, emit a check that [ptr, ptr+nbytes) lies in host-passed memory and
        is aligned as the access needs (``align``, or ``memtype``'s natural alignment: a GPU faults on
        a misaligned access). ``op`` is the IR op (its ``span`` locates the access, its name says
        load/store/atomic). Targets without a checker emit nothing."""

    def check_index(self, ctx: "LoweringContext", index: ll.Value, count: int, op: Any) -> None:
        """Under ``check_bounds``, emit a check that the i64 ``index`` (sign-extended where the
        language's index is signed: a negative one fails too) into an array of ``count`` elements is
        below ``count``; ``op`` is the memory op it leads to (span, load/store/atomic). GPUs: an out-of-
        range index prints what :meth:`index_error` prints, then traps (:meth:`trap`)."""
        ll_ = _ll()
        b = ctx.b
        ok = b.icmp_unsigned("<", index, ll_.Constant(index.type, count))
        bad = b.append_basic_block("index_out_of_range")
        cont = b.append_basic_block("index_checked")
        br = b.cbranch(ok, cont, bad)
        br.set_weights([1 << 20, 1])
        b.position_at_end(bad)
        self.index_error(ctx, index, count, op)
        self.trap(ctx, "bounds", f"array index < {count}",
                  ctx.ir_fn.attrs.get("source_name", ctx.ir_fn.name))
        b.branch(cont)  # from the unreachable block trap left the builder in
        b.position_at_end(cont)

    def check_shared(self, ctx: "LoweringContext", ptr: ll.Value, nbytes: int, op: Any) -> None:
        """Under ``check_bounds``, emit a check that [ptr, ptr+nbytes) lies in the block's shared
        memory (static arrays and the launch's dynamic bytes: what ``dynamic_shared[T]()`` points
        into). Targets without a checker emit nothing."""

    def index_error(self, ctx: "LoweringContext", index: ll.Value, count: int, op: Any) -> None:
        """Report an array index out of range before the trap (by default nothing: AMD's printf is
        the frontend's hostcall, which a backend cannot call)."""

    # --- 8-bit floats ----------------------------------------------------------------------------
    def minifloat_encode(self, ctx: "LoweringContext", xs: list[ll.Value], fmt: Any,
                      saturate: bool) -> list[ll.Value]:
        """The i8 codes of the f32 values ``xs`` in ``fmt`` (a numerics.formats.Float8Format), round
        to nearest even, ``saturate`` as in formats' docstring. The default is the software path
        (backends/llvm/minifloat.py); a target with convert instructions overrides this and must give
        the same bits. ``xs`` holds a vector's lanes in order, so pairs can share an instruction."""
        from .llvm import minifloat  # lazy: llvmlite, which `import kcompiler` does not load
        return [minifloat.encode(ctx.b, x, fmt, saturate) for x in xs]

    def minifloat_encode_pairs(self, ctx: "LoweringContext", xs: list[ll.Value], fmt: Any,
                               saturate: bool) -> list[ll.Value] | None:
        """:meth:`minifloat_encode`'s codes of an even number of f32 (or, where the target converts
        those directly, f16) ``xs`` two to an i16 (the first of a pair in the low byte), the same bits,
        where the target converts pairs in one instruction; None (the default) where it does not. A
        vector conversion is then built of 16-bit lanes, which LLVM packs into words without splitting
        and re-joining bytes."""
        return None

    def minifloat_decode(self, ctx: "LoweringContext", codes: list[ll.Value], fmt: Any,
                         exact_nan: bool = True) -> list[ll.Value]:
        """The f32 values of the i8 ``codes`` in ``fmt`` (exact); software by default. ``exact_nan``
        false: a NaN code may give any NaN (a hardware path may skip its fix-up of the NaN's bits)."""
        from .llvm import minifloat  # lazy: llvmlite, which `import kcompiler` does not load
        return [minifloat.decode(ctx.b, c, fmt) for c in codes]

    def access_align(self, memtype: ll.Type, align: int | None) -> int | None:
        """The alignment to give LLVM for a load or store of ``memtype`` whose IR asks for ``align``
        (None: the type's natural alignment). GPU targets keep it: vector loads need it there."""
        return align

    # --- target intrinsics (kcompiler.ir.intrinsics) -----------------------------------------------
    # The IR's one op for a vendor's instructions. The frontend refuses a builtin (a located error)
    # where ``has(feature)`` is false; these checks are the backstop for IR built directly.
    def lowers_intrinsic(self, intrinsic: "Intrinsic") -> bool:
        """Whether this target can lower ``intrinsic``: by default those its own backend registers
        (the name's prefix is the target's name) when it has the intrinsic's feature."""
        return intrinsic.backend == self.name and self.has(intrinsic.feature)

    def intrinsic_lowering(self, intrinsic: "Intrinsic") -> str:
        """Import path of the function that lowers ``intrinsic`` here (its backend's LLVM lowering)."""
        return intrinsic.lower

    def lower_intrinsic(self, ctx: "LoweringContext", op: Any, intrinsic: "Intrinsic",
                        args: list[ll.Value]) -> ll.Value | None:
        """Lower intrinsic op ``op`` (its registry entry ``intrinsic``; ``args`` the operands' LLVM
        values) with :meth:`intrinsic_lowering`; returns the result's value or None. Raises
        UnsupportedOnTarget naming the builtin, the intrinsic and the target where
        :meth:`lowers_intrinsic` is false (the lowering reports it at the op's location)."""
        if not self.lowers_intrinsic(intrinsic):
            raise UnsupportedOnTarget(f"{intrinsic.builtin} is not available on this target ({self.name} "
                                      f"{self.arch}): it does not lower intrinsic {intrinsic.name}")
        return load_object(self.intrinsic_lowering(intrinsic))(self, ctx, op, args)

    # --- math -------------------------------------------------------------------------------------
    #: Builtins of MATH_FUNCTIONS that have no f64 form on this target (GPU targets: the hardware's f32
    #: approximations), for :meth:`math_unsupported`.
    no_f64_math: frozenset[str] = frozenset()

    def math_unsupported(self, fn: str, elem: str) -> tuple[str, str] | None:
        """Why builtin ``fn`` (of ``MATH_FUNCTIONS``) cannot compile for this target on elements of
        scalar type ``elem`` (a name: 'f64'), as (reason, hint), or None when it can. The type rules
        ask this (a located error at the call), and the backends raise it as a last resort."""
        if elem != "f64" or fn not in self.no_f64_math:
            return None
        base = NORMAL_RANGE_MATH.get(fn, fn).removeprefix("fast_")
        reason = (f"{fn} on f64 is not available on {self.name} ({self.arch}): the builtin is the hardware's "
                  f"f32 approximation, and f64 has none")
        if base in ("sin", "cos", "tanh", "rsqrt", "rcp"):
            hint = f"use the accurate {base}(x): std.math's, which has f64"
        else:
            hint = (f"std.math has exp and log for f64 (math.exp, math.log); or compute in f32: "
                    f"{fn}(f32(x))")
        return reason, hint

    def math(self, ctx: "LoweringContext", fn: str, args: list[ll.Value]) -> ll.Value:
        """A math function of ``MATH_FUNCTIONS`` on float operands (scalars or vectors); the default
        is LLVM's intrinsic, which the CPU computes as accurately as libm (the approximations
        ``fast_sin`` ... as ``llvm.sin`` ...). GPU targets override the approximations (fast_exp2,
        fast_log2, fast_sin, fast_cos, fast_rsqrt, fast_rcp, fast_tanh) with their instructions; the
        CPU target perturbs them as the GPUs' documented errors allow (backends/cpu/approx.py). The
        normal-range forms (fast_rcp_normal, fast_rsqrt_normal) are their functions here."""
        ll = _ll()
        fn = NORMAL_RANGE_MATH.get(fn, fn).removeprefix("fast_")
        name = {"abs": "fabs", "round": "roundeven"}.get(fn, fn)
        one = ll.Constant(args[0].type, 1.0)
        if fn == "rsqrt":
            return ctx.b.fdiv(one, ctx.call_intrinsic("llvm.sqrt", args))
        if fn == "rcp":
            return ctx.b.fdiv(one, args[0])
        return ctx.call_intrinsic(f"llvm.{name}", args)

    def widened(self, ctx: "LoweringContext", fn: str, args: list[ll.Value]) -> ll.Value:
        """``self.math(fn)`` computed in f32 on 16-bit float operands (scalars or vectors) and rounded
        back once: for a chip with no 16-bit form of an instruction (AMD has no bf16 v_rsq/v_rcp)."""
        ll = _ll()
        t = args[0].type
        f32 = ll.VectorType(ll.FloatType(), t.count) if isinstance(t, ll.VectorType) else ll.FloatType()
        r = self.math(ctx, fn, [ctx.b.fpext(a, f32) for a in args])
        return ctx.b.fptrunc(r, t)

    @staticmethod
    def per_lane(ctx: "LoweringContext", x: ll.Value, scalar_fn) -> ll.Value:
        """``scalar_fn`` applied to each lane of vector ``x`` (or to scalar ``x``): for instructions
        that exist on scalars only."""
        ll = _ll()
        if not isinstance(x.type, ll.VectorType):
            return scalar_fn(x)
        out: ll.Value = ll.Constant(x.type, ll.Undefined)
        for i in range(x.type.count):
            lane = ctx.b.extract_element(x, ll.Constant(ll.IntType(32), i))
            out = ctx.b.insert_element(out, scalar_fn(lane), ll.Constant(ll.IntType(32), i))
        return out

    # --- emission ---------------------------------------------------------------------------------
    def target_machine(self, opt_level: int = 3) -> Any:
        """A fresh llvmlite TargetMachine for this target (a JIT takes ownership of one)."""
        raise NotImplementedError

    def finalize_module(self, module: ll.Module) -> None:
        """Last changes to the llvmlite module before it is printed (module flags, annotations)."""

    def rewrite_optimized(self, ref: Any) -> Any:
        """The optimised ``llvmlite.binding.ModuleRef`` as this target emits it (and ``--emit llvm``
        prints it), rewritten or not: a hook for what must see the program after LLVM's
        optimisation, as instruction selection does (the CPU target's ``contract="nvptx"``).
        The default returns ``ref``."""
        return ref

    def emit(self, llvm_module: Any, kind: str) -> bytes | str:
        """Emit an optimised ``llvmlite.binding.ModuleRef``: kind 'asm' (PTX, AMDGCN or host assembly,
        as text) or 'obj' (cubin, HSACO, or a shared object, as bytes)."""
        raise NotImplementedError


LLVM_ORDERS = {"relaxed": "monotonic", "acquire": "acquire", "release": "release", "acq_rel": "acq_rel",
           "seq_cst": "seq_cst"}


def set_syncscope(inst: Any, scope: str | None) -> None:
    """llvmlite's builder has no syncscope argument; patch the instruction's printed form."""
    if scope is None:
        return
    inst.ordering = f'syncscope("{scope}") {inst.ordering}' if hasattr(inst, "ordering") else None
