"""The ``mfma`` builtin in the frontend: AMD CDNA's matrix fused multiply-add for one wavefront,
type-checked (located errors for fragment types that form no instruction, for FP8 of the wrong
flavour and for a target without the instruction) and lowered to the AMD target intrinsic
``amdgcn.mfma`` (backends/amdgcn/intrinsics.py) through the IR's ``intrinsic`` op.

``mfma(a, b, c)``: D = A (M x K) * B (K x N) + C, each lane of the 64 holding ``a`` and ``b`` (M * K / 64
elements each) and ``c`` (M * N / 64 f32). The shape follows from the types (the intrinsic's table of
forms, read through the registry); the
operand layouts are AMD's (backends/amdgcn/mfma.py states them, with the ISA sections).
"""
from __future__ import annotations

from typing import Any

from ..ir.intrinsics import get as intrinsic
from ..ir.types import BF16, F16, F32, VectorType
from .builtin_registry import builtin, require_feature

#: The builtins this file lowers, and the ``target.has`` feature each needs at least.
FEATURES = {"mfma": "mfma"}

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


@builtin(*FEATURES)
def lower_builtin(fl: Any, f: Any, e: Any, kw: dict) -> Any:
    """Lower ``mfma(a, b, c)`` (call ``e`` of BuiltinRef ``f``) in FnLowering ``fl``: checks the types
    against the intrinsic's forms and the target, and emits ``amdgcn.mfma``. Every mistake is a located
    CompileError."""
    a, b, c = (fl._value(x) for x in e.args)
    ka, kb = _kind(a.type), _kind(b.type)
    if ka is None:
        fl.fail(f"mfma's A fragment must be a vector of bf16, f16 or FP8, found {a.type}", e.args[0].span,
                hint=_FORMS_HINT)
    if kb != ka or b.type.count != a.type.count:
        fl.fail(f"mfma's B fragment must be a {a.type.count}-element vector of {a.type.elem} to go with an A "
                f"of {a.type}{' (or of the other FP8 format)' if ka == 'fp8' else ''}, found {b.type}",
                e.args[1].span, hint="A and B hold the same number of elements a lane")
    if ka == "16-bit" and b.type.elem != a.type.elem:
        fl.fail(f"mfma's A and B must be of one 16-bit type, found {a.type} and {b.type}", e.args[1].span)
    n = a.type.count
    cn = c.type.count if isinstance(c.type, VectorType) and c.type.elem == F32 else 0
    form = intrinsic("amdgcn.mfma").tables["forms"].get((ka, n, cn))
    if form is None:
        if cn not in (4, 16):
            fl.fail(f"mfma's accumulator must be vec<f32, 16> (32x32 tiles) or vec<f32, 4> (16x16), found "
                    f"{c.type}", e.args[2].span, hint=_FORMS_HINT)
        fl.fail(f"no MFMA instruction takes {a.type} operands", e.args[0].span, hint=_FORMS_HINT)
    shape, feature = form
    instr = (f"v_mfma_f32_{shape}_f8f6f4" if n == 32 else
             f"v_mfma_f32_{shape}_{'fp8/bf8' if ka == 'fp8' else a.type.elem}")
    require_feature(fl, "amdgcn.mfma", e.span, feature, subject=f"mfma {shape} ({instr})")
    t = fl.target
    if ka == "fp8":
        for arg, v in ((e.args[0], a), (e.args[1], b)):
            for flavour, names in F8_BY_FLAVOUR.items():
                if t.has(flavour) and v.type.elem.name not in names:
                    fl.fail(f"MFMA on {t.name} {getattr(t, 'arch', '')} reads FP8 as {' and '.join(names)}, "
                            f"not {v.type.elem}",
                            arg.span, hint=f"convert the data to {names[0] if 'e4' in v.type.elem.name else names[1]}"
                                           f" (gfx942 reads the FNUZ formats, gfx950 the OCP ones)")
    return fl.b.intrinsic("amdgcn.mfma", [a, b, c], VectorType(F32, cn), shape=shape)


__all__ = ["F8_BY_FLAVOUR", "FEATURES", "lower_builtin"]
