"""The accurate math builtins ``exp2``, ``log2``, ``sin``, ``cos``, ``tanh``, ``rsqrt`` and ``rcp``:
a call is a call of std.math's function of the same name (stdlib/math.kc: within the bound
docs/math.md gives, the same source on every target), which the program loader imports, under a
name no program can spell, into every file that calls one (program.py, ``MATH_ALIAS``). A vector
argument is computed lane by lane. Compiled with ``fast_math``, a call is the builtin approximation
of the same name with ``fast_`` before it (``sin`` -> ``fast_sin``: NVIDIA's sin.approx.f32, AMD's
v_sin_f32), except on f64, which stays accurate. The approximations themselves are the IR's math
ops (builtins_math.py).

Float ``%`` is lowered here too (:func:`float_rem`): a call of std.libm_rem's exact ``fmod`` on every
target, instead of LLVM's ``frem``, which NVPTX expands to the inexact ``x - trunc(x / y) * y``.
"""
from __future__ import annotations

from ..ir import Value
from ..ir.types import SCALARS, VectorType
from .builtin_registry import builtin
from .builtins import ACCURATE_MATH
from .builtins_math import math_operands
from .program import MATH_ALIAS, std_module
from .values import Poison

#: The accurate functions std.math has no f64 version of (yet).
NO_F64 = ("exp2", "log2")


@builtin(*ACCURATE_MATH)
def _accurate(fl, f, e, kw):
    name = f.fn.name
    (x,) = math_operands(fl, name, e)
    t = x.type
    et = t.elem if isinstance(t, VectorType) else t
    if str(et) == "f64":
        if name in NO_F64:
            fl.fail(f"{name} on f64 is not available: std.math's {name} takes f32, f16 and bf16", e.span,
                    hint="std.math has exp and log for f64 (math.exp, math.log); or compute in f32: "
                         f"{name}(f32(x))")
    elif fl.target.has("fast_math"):
        fast = ACCURATE_MATH[name]
        if (why := fl.target.math_unsupported(fast, str(et))) is not None:
            fl.fail(why[0], e.span, hint=why[1])
        return fl.b.math(fast, x)
    mod = fl.mod.imports[MATH_ALIAS]
    fn = fl.L.instance(mod, mod.fns[name], {"T": et}, e.span, fl)
    if fn is None:
        raise Poison()
    if not isinstance(t, VectorType):
        return fl.b.call(fn.name, [x], fn.ret)
    lanes: list[Value] = []
    for i in range(t.count):
        lane = fl.b.extract(x, fl.b.const(i, SCALARS["i32"]))
        lanes.append(fl.b.call(fn.name, [lane], fn.ret))
    return fl.b.vec_build(lanes)


def float_rem(fl, x: Value, y: Value, span) -> Value:
    """``x % y`` for floats ``x`` and ``y`` of one type (f16, bf16, f32, f64, or vectors of them, lane
    by lane): C's ``fmod``, exact, as a call of std.libm_rem's ``fmod[T]`` (loaded on the first
    float `%`: program.std_module). Raises Poison where the instantiation failed (its error is
    already reported)."""
    t = x.type
    et = t.elem if isinstance(t, VectorType) else t
    mod = std_module(fl.L.program, "libm_rem")
    fn = fl.L.instance(mod, mod.fns["fmod"], {"T": et}, span, fl)
    if fn is None:
        raise Poison()
    if not isinstance(t, VectorType):
        return fl.b.call(fn.name, [x, y], fn.ret)
    lanes: list[Value] = []
    for i in range(t.count):
        k = fl.b.const(i, SCALARS["i32"])
        lanes.append(fl.b.call(fn.name, [fl.b.extract(x, k), fl.b.extract(y, k)], fn.ret))
    return fl.b.vec_build(lanes)
