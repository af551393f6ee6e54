"""The AMD backend's builtin of the kernel language (kcompiler.ir.builtin_surface), read when the
frontend first resolves a name the language itself does not declare (the Backend record's
``builtins`` field names :data:`BUILTINS`): ``mfma``, CDNA's matrix fused multiply-add for one wavefront
(comptime ``target.has("mfma")``; ``"mfma_fp8"`` on gfx942/gfx950, ``"mfma_gfx950"`` for gfx950's
forms), type-checked against :class:`~kcompiler.ir.builtin_surface.BuiltinCall` (located errors for
fragment types that form no instruction, for FP8 of the wrong flavour and for a target without the
instruction) and lowered to the target intrinsic ``amdgcn.mfma`` (intrinsics.py) through the IR's
``intrinsic`` op.

``mfma(a, b, c)``: D = A (M x K) * B (K x N) + C, each lane of the 64 holding ``a`` and ``b`` (M * K / 64
elements each) and ``c`` (M * N / 64 f32). The shape follows from the types (intrinsics.py's
:data:`~kcompiler.backends.amdgcn.intrinsics.MFMA_FORMS`); the operand layouts are AMD's (mfma.py
states them, with the ISA sections: CDNA3 ISA, "Matrix Arithmetic Instructions").
"""
from __future__ import annotations

from typing import Any

from ...ir.builtin_surface import BuiltinCall, SurfaceBuiltin
from ...ir.core import Value
from ...ir.types import BF16, F16, F32, VectorType
from .intrinsics import MFMA_FORMS

#: FP8 element types by the flavour a chip's MFMA reads: gfx942 (CDNA3) the FNUZ formats, gfx950
#: (CDNA4) the OCP ones (CDNA3 ISA, "Matrix Arithmetic Instructions": FP8/BF8; CDNA4 ISA, same
#: chapter). The target feature that says which: ``mfma_fp8_fnuz`` / ``mfma_fp8_ocp``.
F8_BY_FLAVOUR = {"mfma_fp8_fnuz": ("f8e4m3fnuz", "f8e5m2fnuz"), "mfma_fp8_ocp": ("f8e4m3", "f8e5m2")}

_FORMS_HINT = ("mfma takes a, b: vec<bf16|f16, 4> (32x32x8, 16x16x16), vec<bf16|f16, 8> (gfx950: 32x32x16, "
               "16x16x32), FP8 vec<F8, 8> (gfx942/gfx950: 32x32x16, 16x16x32) or vec<F8, 32> (gfx950: "
               "32x32x64, 16x16x128); c: vec<f32, 16> (32x32) or vec<f32, 4> (16x16)")


def _kind(t: Any) -> str | None:
    if not isinstance(t, VectorType):
        return None
    if t.elem in (F16, BF16):
        return "16-bit"
    if t.elem.name in ("f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"):
        return "fp8"
    return None


def _form(call: BuiltinCall, a: Value, b: Value, c: Value) -> tuple[str, str, int, str]:
    """The MFMA form of the operands' types: (shape, feature, C's length, the operands' kind)."""
    ka, kb = _kind(a.type), _kind(b.type)
    if ka is None:
        call.fail(f"mfma's A fragment must be a vector of bf16, f16 or FP8, found {a.type}", 0, hint=_FORMS_HINT)
    if kb != ka or b.type.count != a.type.count:
        call.fail(f"mfma's B fragment must be a {a.type.count}-element vector of {a.type.elem} to go with an A "
                  f"of {a.type}{' (or of the other FP8 format)' if ka == 'fp8' else ''}, found {b.type}", 1,
                  hint="A and B hold the same number of elements a lane")
    if ka == "16-bit" and b.type.elem != a.type.elem:
        call.fail(f"mfma's A and B must be of one 16-bit type, found {a.type} and {b.type}", 1)
    n = a.type.count
    cn = c.type.count if isinstance(c.type, VectorType) and c.type.elem == F32 else 0
    form = MFMA_FORMS.get((ka, n, cn))
    if form is None:
        if cn not in (4, 16):
            call.fail(f"mfma's accumulator must be vec<f32, 16> (32x32 tiles) or vec<f32, 4> (16x16), found "
                      f"{c.type}", 2, hint=_FORMS_HINT)
        call.fail(f"no MFMA instruction takes {a.type} operands", 0, hint=_FORMS_HINT)
    shape, feature = form
    return shape, feature, cn, ka


def check_mfma(call: BuiltinCall) -> Value | None:
    """Check and lower ``mfma(a, b, c)``: the types against the forms and the target, then
    ``amdgcn.mfma``. Every mistake is a located error."""
    a, b, c = call.value(0), call.value(1), call.value(2)
    shape, feature, cn, ka = _form(call, a, b, c)
    n = a.type.count
    instr = (f"v_mfma_f32_{shape}_f8f6f4" if n == 32 else
             f"v_mfma_f32_{shape}_{'fp8/bf8' if ka == 'fp8' else a.type.elem}")
    call.require_feature("amdgcn.mfma", feature, subject=f"mfma {shape} ({instr})")
    t = call.target
    if ka == "fp8":
        for at, v in ((0, a), (1, b)):
            for flavour, names in F8_BY_FLAVOUR.items():
                if t.has(flavour) and v.type.elem.name not in names:
                    call.fail(f"MFMA on {t.name} {getattr(t, 'arch', '')} reads FP8 as {' and '.join(names)}, "
                              f"not {v.type.elem}", at,
                              hint=f"convert the data to {names[0] if 'e4' in v.type.elem.name else names[1]}"
                                   f" (gfx942 reads the FNUZ formats, gfx950 the OCP ones)")
    return call.emit("amdgcn.mfma", [a, b, c], VectorType(F32, cn), shape=shape)


#: The AMD builtins (what the Backend record names).
BUILTINS = (
    SurfaceBuiltin("mfma", check_mfma, 3, 3,
                   doc="mfma(a, b, c) -> c's type: D = A * B + C for one wavefront of 64 lanes, each "
                       "holding its fragments: a, b vec<bf16|f16, 4> with c vec<f32, 16> (32x32x8) or "
                       "vec<f32, 4> (16x16x16); vec<bf16|f16, 8> (gfx950: 32x32x16, 16x16x32); FP8 "
                       "vec<F8, 8> (32x32x16, 16x16x32) or vec<F8, 32> (gfx950: 32x32x64, 16x16x128)"),
)

__all__ = ["BUILTINS", "F8_BY_FLAVOUR", "check_mfma"]
