"""The names every kernel-language file sees without an import: machine builtins, math, memory
access and the scalar types. The checker uses the arities here; the lowering gives them meaning."""
from __future__ import annotations

from dataclasses import dataclass

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
    BuiltinFn("hostcall_buffer", 0, 0, doc="hostcall_buffer() -> u64: the launch's hostcall buffer "
                                           "(std.hostcall uses it; 0 when there is none)"),
    BuiltinFn("hostcall_interrupt", 1, 1, doc="hostcall_interrupt(event_id: u32): wake the host "
                                              "listener (std.hostcall uses it)"),
    *[BuiltinFn(f, 1, 1, doc=f"{f}(x)") for f in MATH_FUNCTIONS if f not in ("fma", "copysign")],
    BuiltinFn("fma", 3, 3, doc="fma(a, b, c) = a * b + c, rounded once"),
    BuiltinFn("copysign", 2, 2, doc="copysign(magnitude, sign)"),
    BuiltinFn("min", 2, 2, doc="min(a, b)"),
    BuiltinFn("max", 2, 2, doc="max(a, b)"),
    BuiltinFn("select", 3, 3, doc="select(cond, a, b)"),
    BuiltinFn("load", 1, 1, brackets="yes", doc="load[vec<T, N>](p): one wide load"),
    BuiltinFn("store", 2, 2, doc="store(p, v): one wide store"),
    BuiltinFn("bitcast", 1, 1, brackets="required", doc="bitcast[T](x)"),
    BuiltinFn("convert", 1, 1, ("saturate",), brackets="required",
              doc="convert[T](x, saturate = false): T(x); into an 8-bit float, saturate = true clamps "
                  "overflows and infinities to the largest finite value instead of NaN/Inf"),
    BuiltinFn("dynamic_shared", 0, 0, brackets="required", doc="dynamic_shared[T]() -> ptr<T, shared>"),
    # Warp-level matrix operations and asynchronous copies: NVIDIA sm_80+ (comptime target.has("mma"),
    # "ldmatrix", "cp_async"; "mma_fp8" for the FP8 form, sm_89+). backends/nvptx/mma.py gives the
    # fragment layouts (PTX ISA 8.x, "Matrix Fragments for mma.m16n8k16 / m16n8k32", "ldmatrix").
    BuiltinFn("mma_sync", 3, 3, doc="mma_sync(a, b, c) -> vec<f32, 4>: D = A * B + C for one warp, each lane "
                                    "holding its fragments: m16n8k16 with a: vec<bf16, 8>, b: vec<bf16, 4> (or "
                                    "f16), c: vec<f32, 4>; m16n8k32 with a: vec<f8e4m3, 16>, b: vec<f8e4m3, 8> "
                                    "(or f8e5m2, sm_89+)"),
    BuiltinFn("ldmatrix", 1, 1, ("trans",), brackets="required",
              doc="ldmatrix[vec<T, N>](p: ptr<T, shared>, trans = false) -> vec<T, N>: one warp loads N / 2 "
                  "(16-bit T; N / 4 for 8-bit T) 8x8 matrices, lane l giving the address of row l % 8 of "
                  "matrix l / 8; trans (16-bit T) transposes each"),
    BuiltinFn("cp_async", 3, 4, doc="cp_async(dst: ptr<T, shared>, src: ptr<T>, bytes[, src_bytes]): copy bytes "
                                    "(4, 8 or 16, a compile-time value) from global to shared memory "
                                    "asynchronously; only src_bytes (default bytes) are read, the rest of dst "
                                    "is zero-filled"),
    BuiltinFn("cp_async_commit", 0, 0, doc="cp_async_commit(): close this thread's group of cp_async copies"),
    BuiltinFn("cp_async_wait", 0, 0, brackets="required", bracket_what="a count",
              doc="cp_async_wait[N](): wait until at most N of this thread's committed cp_async groups are "
                  "pending (then barrier() before other threads read the data)"),
    BuiltinFn("compile_error", 1, 1, doc='compile_error("message"): a compile error at this call when '
                                         'the code around it is compiled (in a comptime if branch taken)'),
    # Variadic: the checker and the lowering check the count against the format (printf_format.py).
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
