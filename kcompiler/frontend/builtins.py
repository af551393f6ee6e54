"""The names every kernel-language file sees without an import: machine builtins, math, memory
access and the scalar types. The checker uses the arities here; the lowering gives them meaning
through the handler each has in builtin_registry.py's table.

These are the vendor-neutral names. The builtins of one vendor's instructions (``wgmma``,
``mma_sync``, ``mfma``...) are contributed by the backends (:mod:`kcompiler.ir.builtin_surface`) and
found by :func:`vendor_function`, after every other name (the checker's and the lowering's name
resolution)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ir import builtin_surface
from ..ir.core import ATOMIC_OPS, MATH_FUNCTIONS, MEMORY_ORDERS, SCOPES
from ..ir.types import SCALARS


@dataclass(frozen=True)
class BuiltinFn:
    """``min_args``..``max_args`` positional arguments, the keyword arguments it takes, and whether
    it takes compile-time arguments in brackets (``load[vec<f16, 8>](p)``): 'no', 'yes', 'required'."""

    name: str
    min_args: int
    max_args: int
    kwargs: tuple[str, ...] = ()
    brackets: str = "no"
    doc: str = ""
    #: what the brackets hold, for messages ("cp_async_wait needs a count in brackets")
    bracket_what: str = "a type"
    #: the backend's record (kcompiler.ir.builtin_surface.SurfaceBuiltin) for a vendor builtin, whose
    #: check lowers its calls (builtins_surface.py); None for the language's own
    surface: Any = field(default=None, compare=False, repr=False)


_MATH_DOCS = {
    "fast_rcp_normal": "fast_rcp_normal(x): fast_rcp(x) for x whose reciprocal and itself are normal numbers "
                       "(or 0, inf, NaN); a subnormal argument or result gives an unspecified value (NVIDIA "
                       "flushes it to zero): one hardware instruction, without the subnormal handling around "
                       "fast_rcp",
    "fast_rsqrt_normal": "fast_rsqrt_normal(x): fast_rsqrt(x) for x normal (or 0, inf, negative, NaN); a "
                         "subnormal argument gives an unspecified value (NVIDIA flushes it to zero): one "
                         "hardware instruction, without the subnormal handling around fast_rsqrt",
    **{f: f"{f}(x): the machine's approximation of {f[5:]} (f32; NVIDIA {f[5:]}.approx.f32, AMD's "
          f"instruction; docs/math.md)" for f in ("fast_exp2", "fast_log2", "fast_sin", "fast_cos", "fast_tanh",
                                                  "fast_rsqrt", "fast_rcp")},
}

#: The accurate math builtins, each with its approximation: a call of ``sin(x)`` is a call of
#: std.math's ``sin`` (within its documented bound on every target; frontend/builtins_libm.py), or,
#: compiled with ``fast_math``, the builtin ``fast_sin`` (f64 stays accurate).
ACCURATE_MATH = {"exp2": "fast_exp2", "log2": "fast_log2", "sin": "fast_sin", "cos": "fast_cos",
                 "tanh": "fast_tanh", "rsqrt": "fast_rsqrt", "rcp": "fast_rcp"}

_FNS = [
    BuiltinFn("barrier", 0, 0, doc="barrier(): every thread of the block waits here"),
    BuiltinFn("fence", 0, 1, ("scope",), doc='fence(scope = "block"|"device"|"system")'),
    *[BuiltinFn(f"atomic_{op}", 2, 2, ("order", "scope"), doc=f"atomic_{op}(p, v) -> old value")
      for op in ATOMIC_OPS],
    BuiltinFn("atomic_cas", 3, 3, ("order", "scope"), doc="atomic_cas(p, cmp, new) -> old value"),
    BuiltinFn("atomic_load", 1, 1, ("order", "scope"), doc="atomic_load(p) -> the value (order relaxed, "
                                                           "acquire or seq_cst)"),
    BuiltinFn("atomic_store", 2, 2, ("order", "scope"), doc="atomic_store(p, v) (order relaxed, release "
                                                            "or seq_cst)"),
    BuiltinFn("shuffle", 2, 2, doc="shuffle(v, lane)"),
    BuiltinFn("shuffle_xor", 2, 2, doc="shuffle_xor(v, mask)"),
    BuiltinFn("shuffle_down", 2, 2, doc="shuffle_down(v, delta)"),
    BuiltinFn("shuffle_up", 2, 2, doc="shuffle_up(v, delta)"),
    BuiltinFn("ballot", 1, 1, doc="ballot(pred) -> u64"),
    BuiltinFn("active_mask", 0, 0, doc="active_mask() -> u64"),
    BuiltinFn("read_first_lane", 1, 1, doc="read_first_lane(v)"),
    BuiltinFn("warp_sync", 0, 1, doc="warp_sync([mask: u64]): the lanes of mask (default: the active "
                                     "ones) reconverge here"),
    BuiltinFn("nanosleep", 1, 1, doc="nanosleep(ns: u32): back off a spin loop (a hint)"),
    BuiltinFn("sched_barrier", 0, 0,
              doc="sched_barrier(): the machine code's scheduler moves no instruction across this point "
                  "(LLVM's on AMD: clang's __builtin_amdgcn_sched_barrier(0); nothing on the CPU). On NVIDIA a "
                  "branch that ends ptxas's basic block: waits, memory and other side-effecting instructions "
                  "stay on their side, but ptxas may still move arithmetic across it, and keeps one barrier "
                  "of several in a basic block. For software pipelines: a wait placed after independent "
                  "work stays after it"),
    BuiltinFn("prefetch_l2", 2, 2,
              doc="prefetch_l2(p: ptr<T>, bytes: i32): a hint to bring global memory [p, p + bytes) into L2 "
                  "(NVIDIA sm_90: one cp.async.bulk.prefetch.L2; elsewhere nothing)"),
    BuiltinFn("grid_dependency_wait", 0, 0,
              doc="grid_dependency_wait(): wait until the launch before this one on the stream has finished "
                  "and its writes are visible (CUDA's programmatic dependent launch; a kernel that calls "
                  "it may start before that launch ends)"),
    BuiltinFn("launch_dependents", 0, 0,
              doc="launch_dependents(): the next launch on the stream may start once every block of this "
                  "one has called it or ended (a hint; CUDA's programmatic dependent launch)"),
    BuiltinFn("hostcall_buffer", 0, 0, doc="hostcall_buffer() -> u64: the launch's hostcall buffer "
                                           "(std.hostcall uses it; 0 when there is none)"),
    BuiltinFn("hostcall_interrupt", 1, 1, doc="hostcall_interrupt(event_id: u32): wake the host "
                                              "listener (std.hostcall uses it)"),
    *[BuiltinFn(f, 1, 1, doc=_MATH_DOCS.get(f, f"{f}(x)")) for f in MATH_FUNCTIONS if f not in ("fma", "copysign")],
    *[BuiltinFn(f, 1, 1, doc=f"{f}(x): accurate (std.math's {f}: docs/math.md); {a}(x) is the machine's "
                             f"approximation") for f, a in ACCURATE_MATH.items()],
    BuiltinFn("fma", 3, 3, doc="fma(a, b, c) = a * b + c, rounded once"),
    BuiltinFn("copysign", 2, 2, doc="copysign(magnitude, sign)"),
    # Bit operations (ir.core.BIT_FUNCTIONS) on integers of 8 to 64 bits, scalars or vectors.
    BuiltinFn("popcount", 1, 1, doc="popcount(x) -> i32: the number of set bits"),
    BuiltinFn("clz", 1, 1, doc="clz(x) -> i32: leading zero bits (the width for 0)"),
    BuiltinFn("ctz", 1, 1, doc="ctz(x) -> i32: trailing zero bits (the width for 0)"),
    BuiltinFn("ffs", 1, 1, doc="ffs(x) -> i32: 1 + the index of the lowest set bit, 0 for 0 (CUDA __ffs)"),
    BuiltinFn("brev", 1, 1, doc="brev(x): the bits in reverse order"),
    BuiltinFn("bswap", 1, 1, doc="bswap(x): the bytes in reverse order (16 to 64 bits)"),
    BuiltinFn("mulhi", 2, 2, doc="mulhi(a, b): the high half of the double-width product a * b"),
    BuiltinFn("funnel_shl", 3, 3, doc="funnel_shl(hi, lo, n): the high half of hi:lo << (n mod width)"),
    BuiltinFn("funnel_shr", 3, 3, doc="funnel_shr(hi, lo, n): the low half of hi:lo >> (n mod width)"),
    BuiltinFn("byte_perm", 3, 3, doc="byte_perm(x: u32, y: u32, s: u32) -> u32: byte k is byte (s >> 4k) & 7 "
                                     "of y:x (CUDA __byte_perm)"),
    # Float classification (ir.core.FCLASS_TESTS): every float type, the 8/6/4-bit formats included.
    BuiltinFn("isnan", 1, 1, doc="isnan(x) -> bool"),
    BuiltinFn("isinf", 1, 1, doc="isinf(x) -> bool"),
    BuiltinFn("isfinite", 1, 1, doc="isfinite(x) -> bool: neither NaN nor infinite"),
    BuiltinFn("signbit", 1, 1, doc="signbit(x) -> bool: the sign bit is set (NaNs and -0 included)"),
    BuiltinFn("min", 2, 2, doc="min(a, b)"),
    BuiltinFn("max", 2, 2, doc="max(a, b)"),
    BuiltinFn("select", 3, 3, doc="select(cond, a, b)"),
    BuiltinFn("load", 1, 1, brackets="yes", doc="load[vec<T, N>](p): one wide load"),
    BuiltinFn("store", 2, 2, doc="store(p, v): one wide store"),
    BuiltinFn("bitcast", 1, 1, brackets="required", doc="bitcast[T](x)"),
    BuiltinFn("convert", 1, 1, ("saturate", "exact_nan"), brackets="required",
              doc="convert[T](x, saturate = false, exact_nan = true): T(x); into an 8-bit float, saturate = "
                  "true clamps overflows and infinities to the largest finite value instead of NaN/Inf; from "
                  "one, exact_nan = false lets a NaN code give the convert instruction's NaN (sign and "
                  "payload unspecified) instead of ml_dtypes' bits"),
    BuiltinFn("dynamic_shared", 0, 0, brackets="required", doc="dynamic_shared[T]() -> ptr<T, shared>"),
    # The vendors' builtins (wgmma, mma_sync, mfma...) are not declared here: each backend contributes
    # its own (kcompiler.ir.builtin_surface; backends/<name>/builtins.py), found by vendor_function() below.
    # A kernel's launch bounds: every GPU backend reads the IR function's max_threads / min_blocks (NVIDIA's
    # .maxntid / .minnctapersm, AMD's amdgpu-flat-work-group-size); builtins_kernel.py checks them.
    BuiltinFn("launch_bounds", 1, 2, doc="launch_bounds(max_threads, min_blocks = 1): in a kernel, the most "
                                         "threads of a block and the fewest blocks a multiprocessor holds"),
    BuiltinFn("compile_error", 1, 1, doc='compile_error("message"): a compile error at this call when '
                                         'the code around it is compiled (in a comptime if branch taken)'),
    # Variadic: the checker and the lowering check the count against the format (printf_format.py).
    BuiltinFn("assert", 1, 34, doc='assert(cond, "format", args...): where cond is false, print the '
                                   'message with the location, block and thread, and trap (fails the '
                                   'launch); compiled out under the release option'),
    BuiltinFn("printf", 1, 33, doc='printf("format", args...): the format a string literal, at most 32 '
                                   'arguments, checked against the format at compile time'),
]

#: Builtin functions by name.
FUNCTIONS: dict[str, BuiltinFn] = {f.name: f for f in _FNS}

#: Builtin values: the special registers with .x/.y/.z, the scalar ones, and compile-time ones.
DIM_REGISTERS = ("thread_id", "block_id", "block_dim", "grid_dim")
SCALAR_REGISTERS = ("lane_id", "warp_id")
VALUES = frozenset(DIM_REGISTERS + SCALAR_REGISTERS + ("warp_size", "target"))

#: Fields of ``target`` (``target.has`` is called).
TARGET_FIELDS = ("name", "arch", "warp_size", "has")

#: Scalar type names (usable as conversion functions: ``f32(x)``).
TYPES = SCALARS

ADDRESS_SPACES = ("global", "shared", "local", "const")

ORDERS = MEMORY_ORDERS
FENCE_SCOPES = SCOPES

ALL_NAMES = frozenset(FUNCTIONS) | VALUES | frozenset(TYPES) | {"range"}


_BRACKETS = {"none": "no", "optional": "yes", "required": "required"}
_FROM_SURFACE: dict[Any, BuiltinFn] = {}


def vendor_function(name: str) -> BuiltinFn | None:
    """The builtin ``name`` that a backend contributes (any registered backend's, whatever the target:
    kcompiler.ir.builtin_surface), as a declaration; None if none does."""
    rec = builtin_surface.lookup(name)
    if rec is None:
        return None
    fn = _FROM_SURFACE.get(rec)
    if fn is None:
        fn = _FROM_SURFACE[rec] = BuiltinFn(rec.name, rec.min_args, rec.max_args, tuple(rec.kwargs),
                                            _BRACKETS[rec.brackets], rec.doc, rec.bracket_what, surface=rec)
    return fn


def all_names() -> frozenset[str]:
    """Every name a file sees without an import, the backends' builtins included (for suggestions)."""
    return ALL_NAMES | frozenset(builtin_surface.builtins())
