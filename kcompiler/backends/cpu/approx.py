"""The CPU target's model of the GPUs' approximate math instructions (the builtins ``fast_exp2``,
``fast_log2``, ``fast_sin``, ``fast_cos``, ``fast_tanh``, ``fast_rsqrt``, ``fast_rcp`` and the
normal-range ``fast_rcp_normal``, ``fast_rsqrt_normal``).

A GPU computes them with one special-function instruction (NVIDIA's ``sin.approx.f32`` ...: MUFU;
AMD's v_sin_f32 ...), whose error is documented only as a bound. The CPU computes the function in
f64 (LLVM's libm-accurate intrinsics), then moves the result by a deterministic amount within that
bound, so that a program tested on the CPU sees an approximation of the documented size, not libm's
correctly rounded answer, and the same input always gives the same result:

    r = f(x) + e(x) * b * (|f(x)| for a relative bound, max(1, |f(x)|) for fast_log2, 1 for sin/cos)

``e(x)`` in [-1, 1) is a hash of the f32 bits of |x| (a multiply-xorshift mixer: neighbouring inputs
get unrelated errors), applied with the sign of f(x), so that odd and even functions keep their
symmetry bit for bit (fast_sin(-x) = -fast_sin(x), fast_rcp(-x) = -fast_rcp(x), fast_cos(-x) =
fast_cos(x), as the GPUs' sign-magnitude instructions give and as libm's tanf, which divides by
fast_rcp_normal, relies on), then rounded once to the operand type. Zero and non-finite results (sin(0) = 0,
log2(0) = -inf, sin(inf) = NaN, rcp(0) = inf) are kept as they are. The bounds ``b`` (:data:`BOUNDS`) are the
vendors' documented ones for the NVIDIA instructions, the tighter of NVIDIA's and AMD's being no
promise a program may rely on:

- ``fast_sin``, ``fast_cos``: absolute 2^-21.41 and 2^-21.19 for x in [-pi, pi] (CUDA C++
  Programming Guide, Mathematical Functions appendix, "Intrinsic Functions", __sinf and __cosf,
  which are sin/cos.approx.f32). The PTX ISA (section 9.7.3.18 "Floating Point Instructions: sin",
  9.7.3.19 "cos") bounds the instructions by 2^-20.5 absolute in [-2pi, 2pi] and 2^-14.7 in
  [-100pi, 100pi], best effort beyond: the model keeps the [-pi, pi] bound everywhere, smaller
  than the GPU's error outside it.
- ``fast_log2``: absolute 2^-22 for x in (0.5, 2), otherwise relative 2^-22 (PTX ISA 9.7.3.20
  "lg2": lg2.approx.f32; the Guide's __log2f: 2^-22 absolute in [0.5, 2], 2 ulp otherwise):
  modelled as 2^-22 max(1, |log2 x|).
- ``fast_exp2``: 2 ulp from the correctly rounded result over the full range (PTX ISA 9.7.3.21
  "ex2": ex2.approx.f32; the Guide's __expf, ex2.approx of a rounded product, "2 +
  floor(abs(1.173 * x))" ulp): relative 2^-23.5 before the rounding.
- ``fast_tanh``: relative 2^-11 over the whole range (PTX ISA 9.7.3.22 "tanh": tanh.approx.f32,
  sm_75+; 2^-10.987 is the absolute bound of the f16 form, 9.7.4.9).
- ``fast_rsqrt``: relative 2^-22.9 over the positive finite range (PTX ISA 9.7.3.16 "rsqrt":
  rsqrt.approx.f32).
- ``fast_rcp``: 1 ulp (PTX ISA 9.7.3.13 "rcp": rcp.approx.f32, "maximum ulp error is 1 across the
  full range"): relative 2^-25 before the rounding.

The CPU target's ``approx_error`` option (a fixed relative factor on fast_rcp and fast_rsqrt, to
check code correcting them against a worst case) replaces the model for those two.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from llvmlite import ir as ll

if TYPE_CHECKING:
    from ..llvm.lower import LoweringContext

#: function -> (kind, amplitude): kind "rel" (relative to |f(x)|), "abs" (absolute) or "log"
#: (absolute below 1, relative above). The amplitude is the documented bound less the share of the
#: final rounding to f32 (2^-24 relative, 2^-25 absolute below 1), so that the rounded result stays
#: within the documented bound: fast_rcp's 1 ulp is half an ulp at most (2^-25) before the rounding,
#: fast_exp2's 2 ulp 2^-23.5 relative (at most 1.41 ulp).
BOUNDS: dict[str, tuple[str, float]] = {
    "fast_sin": ("abs", 2.0 ** -21.41 - 2.0 ** -25),
    "fast_cos": ("abs", 2.0 ** -21.19 - 2.0 ** -25),
    "fast_log2": ("log", 2.0 ** -22 - 2.0 ** -24),
    "fast_exp2": ("rel", 2.0 ** -23.5),
    "fast_tanh": ("rel", 2.0 ** -11 - 2.0 ** -24),
    "fast_rsqrt": ("rel", 2.0 ** -22.9 - 2.0 ** -24),
    "fast_rcp": ("rel", 2.0 ** -25),
}

def _const(t: ll.Type, v: float | int) -> ll.Constant:
    return ll.Constant(t, [v] * t.count) if isinstance(t, ll.VectorType) else ll.Constant(t, v)


def unit_hash(ctx: "LoweringContext", x32: ll.Value) -> ll.Value:
    """A double in [-1, 1) (or a vector of them) from the bits of f32 ``x32``: the 32-bit
    finaliser of MurmurHash3 (multiplications by odd constants and xor-shifts), as a signed
    fraction of 2^31."""
    b = ctx.b
    n = x32.type.count if isinstance(x32.type, ll.VectorType) else 0
    i32 = ll.VectorType(ll.IntType(32), n) if n else ll.IntType(32)
    f64 = ll.VectorType(ll.DoubleType(), n) if n else ll.DoubleType()
    h = b.bitcast(x32, i32)
    h = b.mul(h, _const(i32, 0x9E3779B1 - (1 << 32)))
    for shift, mul in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = b.xor(h, b.lshr(h, _const(i32, shift)))
        h = b.mul(h, _const(i32, mul - (1 << 32)))
    h = b.xor(h, b.lshr(h, _const(i32, 16)))
    return b.fmul(b.sitofp(h, f64), _const(f64, 2.0 ** -31))


def approximate(ctx: "LoweringContext", fn: str, x: ll.Value, exact) -> ll.Value:
    """The modelled approximation ``fn`` (a key of :data:`BOUNDS`) of float operand ``x`` (f16,
    bf16 or f32, scalar or vector): ``exact(v)`` computes the function of an f64 value ``v`` (an
    LLVM value) accurately; the result is perturbed as the module docstring says and rounded to
    ``x``'s type."""
    b = ctx.b
    t = x.type
    n = t.count if isinstance(t, ll.VectorType) else 0
    f32 = ll.VectorType(ll.FloatType(), n) if n else ll.FloatType()
    f64 = ll.VectorType(ll.DoubleType(), n) if n else ll.DoubleType()
    x32 = x if t == f32 else b.fpext(x, f32)
    r = exact(b.fpext(x32, f64))
    kind, bound = BOUNDS[fn]
    mag = ctx.call_intrinsic("llvm.fabs", [r])
    if kind == "abs":
        scale = _const(f64, bound)
    elif kind == "log":
        scale = b.fmul(ctx.call_intrinsic("llvm.maxnum", [mag, _const(f64, 1.0)]), _const(f64, bound))
    else:
        scale = b.fmul(mag, _const(f64, bound))
    i32 = ll.VectorType(ll.IntType(32), n) if n else ll.IntType(32)
    ax32 = b.bitcast(b.and_(b.bitcast(x32, i32), _const(i32, 0x7FFFFFFF)), f32)  # |x|: the sign does not hash
    sign = ctx.call_intrinsic("llvm.copysign", [_const(f64, 1.0), r])
    moved = b.fadd(r, b.fmul(b.fmul(unit_hash(ctx, ax32), scale), sign))
    finite = b.and_(b.fcmp_ordered("<", mag, _const(f64, float("inf"))),
                    b.fcmp_ordered("!=", mag, _const(f64, 0.0)))
    out = b.select(finite, moved, r)
    if kind == "abs":  # sin and cos stay within [-1, 1]
        out = ctx.call_intrinsic("llvm.minnum", [ctx.call_intrinsic("llvm.maxnum", [out, _const(f64, -1.0)]),
                                                 _const(f64, 1.0)])
        out = b.select(finite, out, r)
    return b.fptrunc(out, t)
