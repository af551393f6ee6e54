"""The names every kernel-language file sees without an import: machine builtins, math, memory
access and the scalar types. The checker uses the arities here; the lowering gives them meaning
through the handler each has in builtin_registry.py's table."""
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
    # AMD CDNA matrix fused multiply-add (comptime target.has("mfma"); "mfma_fp8" on gfx942/gfx950,
    # "mfma_gfx950" for gfx950's forms); frontend/mfma.py lists the forms, backends/amdgcn/mfma.py
    # gives the operand layouts (CDNA3 ISA, "Matrix Arithmetic Instructions").
    BuiltinFn("mfma", 3, 3, doc="mfma(a, b, c) -> c's type: D = A * B + C for one wavefront of 64 lanes, each "
                                "holding its fragments: a, b vec<bf16|f16, 4> with c vec<f32, 16> (32x32x8) or "
                                "vec<f32, 4> (16x16x16); vec<bf16|f16, 8> (gfx950: 32x32x16, 16x16x32); FP8 "
                                "vec<F8, 8> (32x32x16, 16x16x32) or vec<F8, 32> (gfx950: 32x32x64, 16x16x128)"),
    # Hopper: warpgroup MMA, TMA, mbarriers, setmaxnreg (comptime target.has("wgmma"), "tma", "mbarrier",
    # "setmaxnreg"); frontend/hopper.py checks them, backends/nvptx/wgmma.py and tma.py give the PTX.
    BuiltinFn("wgmma", 3, 3, ("accumulate", "trans_b"), brackets="required", bracket_what="the input type(s)",
              doc="wgmma[T(, TB)](a_desc: u64, b_desc: u64, acc: vec<f32, N / 2>, accumulate = true, trans_b = "
                  "false) -> vec<f32, N / 2>: D (64 x N) = A (64 x K) * B (K x N) (+ acc) by one warpgroup; K is "
                  "16 for bf16/f16, 32 for f8e4m3/f8e5m2; A and B in shared memory (wgmma_desc)"),
    BuiltinFn("wgmma_fence", 0, 0, doc="wgmma_fence(): order the accumulators' register accesses before wgmma"),
    BuiltinFn("wgmma_commit", 0, 0, doc="wgmma_commit(): close the warpgroup's pending wgmmas into a group"),
    BuiltinFn("wgmma_wait", 0, 0, brackets="required", bracket_what="a group count",
              doc="wgmma_wait[N](): wait until at most N of the warpgroup's wgmma groups are pending"),
    BuiltinFn("wgmma_desc", 1, 1, ("swizzle", "lbo", "sbo"),
              doc="wgmma_desc(p: ptr<T, shared>, swizzle = 128, lbo = 16, sbo = 1024) -> u64: the matrix "
                  "descriptor of the tile at p (1024-byte aligned for a swizzle)"),
    BuiltinFn("tma_load", 4, 8, doc="tma_load(dst: ptr<T, shared>, map: tensor_map, bar: ptr<u64, shared>, c0, "
                                    "...): copy the map's box at coordinates (c0 innermost) into dst; bar "
                                    "receives its bytes (mbarrier_arrive_expect_tx)"),
    BuiltinFn("mbarrier_init", 2, 2, doc="mbarrier_init(bar: ptr<u64, shared>, count: u32)"),
    BuiltinFn("mbarrier_arrive", 1, 1, doc="mbarrier_arrive(bar: ptr<u64, shared>)"),
    BuiltinFn("mbarrier_arrive_expect_tx", 2, 2,
              doc="mbarrier_arrive_expect_tx(bar: ptr<u64, shared>, bytes: u32): arrive, and make the phase "
                  "wait for that many more bytes of TMA copies"),
    BuiltinFn("mbarrier_try_wait", 2, 2, doc="mbarrier_try_wait(bar, parity: u32) -> bool: whether the phase "
                                             "of that parity has completed"),
    BuiltinFn("mbarrier_wait", 2, 2, doc="mbarrier_wait(bar, parity: u32): wait until the phase of that parity "
                                         "has completed"),
    BuiltinFn("fence_proxy_async", 0, 0, doc="fence_proxy_async(): order this thread's shared-memory writes "
                                             "before TMA / wgmma accesses to them"),
    BuiltinFn("setmaxnreg_inc", 0, 0, brackets="required", bracket_what="a register count",
              doc="setmaxnreg_inc[N](): the warpgroup's registers a thread grow to N (a kernel with launch_bounds)"),
    BuiltinFn("setmaxnreg_dec", 0, 0, brackets="required", bracket_what="a register count",
              doc="setmaxnreg_dec[N](): the warpgroup's registers a thread shrink to N"),
    BuiltinFn("launch_bounds", 1, 2, doc="launch_bounds(max_threads, min_blocks = 1): in a kernel, the most "
                                         "threads of a block and the fewest blocks a multiprocessor holds"),
    # --- thread-block clusters (hopper_cluster.py; one block, to port with the Hopper builtins) ---
    BuiltinFn("cluster_dims", 1, 3, doc="cluster_dims(x, y = 1, z = 1): in a kernel, launch it in clusters of "
                                        "x * y * z blocks (at most 8; the grid a multiple of it)"),
    BuiltinFn("cluster_ctarank", 0, 0, doc="cluster_ctarank() -> u32: this block's rank in its cluster"),
    BuiltinFn("cluster_arrive", 0, 0, doc="cluster_arrive(): arrive on the cluster barrier (release)"),
    BuiltinFn("cluster_wait", 0, 0, doc="cluster_wait(): wait until every thread of the cluster's blocks "
                                        "has arrived (acquire)"),
    BuiltinFn("mbarrier_arrive_cluster", 2, 2,
              doc="mbarrier_arrive_cluster(bar: ptr<u64, shared>, rank: u32): one arrival on the mbarrier at "
                  "bar's offset in block rank of the cluster"),
    BuiltinFn("tma_load_multicast", 5, 9,
              doc="tma_load_multicast(dst, map, bar, mask: u16, c0, ...): tma_load's box into dst of every "
                  "block of the cluster whose rank's bit is set in mask, each completing on its bar"),
    # ---
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
