"""The few compiler-rt routines host code for kernels may call, written here in LLVM IR.

LLVM lowers some float conversions on x86-64 to library calls (f64 → bf16 and f64 → f16 always;
f32 → bf16 without AVX512-BF16; f32 ↔ f16 without F16C). A kernel compiled for the CPU target is
loaded into an MCJIT engine with no compiler-rt, so kcompiler JITs these once per process and
registers their addresses for the dynamic linker (``llvm.add_symbol``).

All round to nearest, ties to even, as compiler-rt's do. The f64 → bf16/f16 routines first round
to f32 *to odd* (truncate, then set the last bit when the result is inexact), which keeps the
final rounding correct: f32 carries far more than the two extra bits that needs.
"""
from __future__ import annotations

import threading

import llvmlite.binding as llvm

#: The routines: name → LLVM IR definition.
ROUTINES = {
    # f32 → bf16: round the top 16 bits to nearest even; NaN stays a (quiet) NaN.
    "__truncsfbf2": """
define bfloat @__truncsfbf2(float %f) {
  %b = bitcast float %f to i32
  %lsb = lshr i32 %b, 16
  %odd = and i32 %lsb, 1
  %bias = add i32 %odd, 32767
  %r = add i32 %b, %bias
  %h = lshr i32 %r, 16
  %q = or i32 %lsb, 64
  %nan = fcmp uno float %f, %f
  %s = select i1 %nan, i32 %q, i32 %h
  %t = trunc i32 %s to i16
  %o = bitcast i16 %t to bfloat
  ret bfloat %o
}""",
    # f64 → f32 rounded to odd (see the module docstring).
    "__kc_double_to_float_odd": """
define float @__kc_double_to_float_odd(double %d) {
  %f = fptrunc double %d to float
  %back = fpext float %f to double
  %inexact = fcmp one double %back, %d
  %ab = call double @llvm.fabs.f64(double %back)
  %ad = call double @llvm.fabs.f64(double %d)
  %over = fcmp ogt double %ab, %ad
  %bits = bitcast float %f to i32
  %dec = zext i1 %over to i32
  %tz = sub i32 %bits, %dec
  %one = zext i1 %inexact to i32
  %odd = or i32 %tz, %one
  %r = select i1 %inexact, i32 %odd, i32 %bits
  %o = bitcast i32 %r to float
  ret float %o
}
declare double @llvm.fabs.f64(double)""",
    "__truncdfbf2": """
define bfloat @__truncdfbf2(double %d) {
  %f = call float @__kc_double_to_float_odd(double %d)
  %r = call bfloat @__truncsfbf2(float %f)
  ret bfloat %r
}
declare float @__kc_double_to_float_odd(double)
declare bfloat @__truncsfbf2(float)""",
    # f32 → f16: normal results by integer rounding, subnormal ones by scaling to an integer.
    "__truncsfhf2": """
define half @__truncsfhf2(float %f) {
entry:
  %b = bitcast float %f to i32
  %sign32 = and i32 %b, 2147483648
  %sign = lshr i32 %sign32, 16
  %a = and i32 %b, 2147483647
  %isnan = icmp ugt i32 %a, 2139095040
  br i1 %isnan, label %nan, label %notnan
nan:
  %m = lshr i32 %a, 13
  %mm = and i32 %m, 1023
  %n1 = or i32 %mm, 32256
  %n2 = or i32 %n1, %sign
  br label %done
notnan:
  %big = icmp uge i32 %a, 1199566848
  br i1 %big, label %inf, label %finite
inf:
  %i1 = or i32 %sign, 31744
  br label %done
finite:
  %normal = icmp uge i32 %a, 947912704
  br i1 %normal, label %norm, label %sub
norm:
  %rebias = sub i32 %a, 939524096
  %l = lshr i32 %a, 13
  %lo = and i32 %l, 1
  %bias = add i32 %lo, 4095
  %r = add i32 %rebias, %bias
  %h = lshr i32 %r, 13
  %h2 = or i32 %h, %sign
  br label %done
sub:
  %af = bitcast i32 %a to float
  %sc = fmul float %af, 16777216.0
  %rn = call float @llvm.roundeven.f32(float %sc)
  %iv = fptoui float %rn to i32
  %s2 = or i32 %iv, %sign
  br label %done
done:
  %res = phi i32 [ %n2, %nan ], [ %i1, %inf ], [ %h2, %norm ], [ %s2, %sub ]
  %t = trunc i32 %res to i16
  %o = bitcast i16 %t to half
  ret half %o
}
declare float @llvm.roundeven.f32(float)""",
    "__truncdfhf2": """
define half @__truncdfhf2(double %d) {
  %f = call float @__kc_double_to_float_odd(double %d)
  %r = call half @__truncsfhf2(float %f)
  ret half %r
}
declare float @__kc_double_to_float_odd(double)
declare half @__truncsfhf2(float)""",
    # f16 → f32: exact; subnormals through an exact integer-to-float conversion and scaling.
    "__extendhfsf2": """
define float @__extendhfsf2(half %x) {
entry:
  %h16 = bitcast half %x to i16
  %h = zext i16 %h16 to i32
  %sign = shl i32 %h, 16
  %s = and i32 %sign, 2147483648
  %e1 = lshr i32 %h, 10
  %e = and i32 %e1, 31
  %m = and i32 %h, 1023
  %isspecial = icmp eq i32 %e, 31
  %iszero = icmp eq i32 %e, 0
  br i1 %iszero, label %sub, label %rest
sub:
  %mf = uitofp i32 %m to float
  %v = fmul float %mf, 0x3E70000000000000
  %vb = bitcast float %v to i32
  %vs = or i32 %vb, %s
  br label %done
rest:
  %m13 = shl i32 %m, 13
  %e2 = add i32 %e, 112
  %e3 = select i1 %isspecial, i32 255, i32 %e2
  %e4 = shl i32 %e3, 23
  %r1 = or i32 %e4, %m13
  %r2 = or i32 %r1, %s
  br label %done
done:
  %res = phi i32 [ %vs, %sub ], [ %r2, %rest ]
  %o = bitcast i32 %res to float
  ret float %o
}""",
}

_lock = threading.Lock()
_engine = None


def install(target_machine) -> None:
    """JIT the routines once per process and make their names resolvable by every MCJIT engine."""
    global _engine
    with _lock:
        if _engine is not None:
            return
        text = "\n".join(ROUTINES.values())
        # Declarations repeat across routines: keep the first of each.
        seen, lines = set(), []
        for line in text.splitlines():
            if line.startswith("declare"):
                if line in seen or any(f"@{n}(" in line for n in ROUTINES):
                    continue
                seen.add(line)
            lines.append(line)
        mod = llvm.parse_assembly("\n".join(lines))
        mod.verify()
        engine = llvm.create_mcjit_compiler(mod, target_machine)
        engine.finalize_object()
        for name in ROUTINES:
            llvm.add_symbol(name, engine.get_function_address(name))
        _engine = engine
