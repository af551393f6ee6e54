"""The toy target's builtin of the kernel language, ``toy_dot(a, b)``: a SurfaceBuiltin record whose
check is written against kcompiler.ir.builtin_surface.BuiltinCall and emits the toy's intrinsic
``toy.dot4``. The record's ``builtins`` field names :data:`BUILTINS`; no file of the package names it."""
from __future__ import annotations

from kcompiler.ir.builtin_surface import BuiltinCall, SurfaceBuiltin
from kcompiler.ir.types import F32

from .intrinsics import VEC4


def check_dot(call: BuiltinCall):
    """``toy_dot(a: vec<f32, 4>, b: vec<f32, 4>) -> f32``; each wrong operand a located error."""
    a, b = call.value(0), call.value(1)
    for k, v in enumerate((a, b)):
        if v.type != VEC4:
            call.fail(f"toy_dot multiplies vec<f32, 4>, found {v.type}", k, hint="toy_dot(a, b): a . b")
    call.require_feature("toy.dot4")
    return call.emit("toy.dot4", (a, b), F32)


BUILTINS = (SurfaceBuiltin("toy_dot", check_dot, 2, 2, doc="toy_dot(a: vec<f32, 4>, b: vec<f32, 4>) -> f32"),)
