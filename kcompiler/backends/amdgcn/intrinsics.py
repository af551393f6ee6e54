"""AMD's target intrinsics (``amdgcn.*``) as registry entries (kcompiler.ir.intrinsics): the
type rule, the LLVM lowering (mfma.py) and the CPU target's emulation (backends/cpu/mfma.py). Imports
no llvmlite: the lowerings are named by import path.

``amdgcn.mfma``: ``mfma(a, b, c) -> d = a * b + c`` by one wavefront; attr ``shape`` one of
:data:`MFMA_SHAPES` (M x N x K); per lane ``a`` and ``b`` vec<T, M * K / 64> (T f16 or bf16, one
type; or FP8, f8e4m3[fnuz] / f8e5m2[fnuz]), ``c`` and the result vec<f32, M * N / 64>. Its table
``forms`` (:data:`MFMA_FORMS`) is what the language's ``mfma`` builtin reads to choose the shape.
"""
from __future__ import annotations

from ...ir.core import Op
from ...ir.intrinsics import Intrinsic, register_intrinsics, require, result_type
from ...ir.types import BF16, F16, F32, VectorType

#: The forms of MFMA (AMD's ``v_mfma_f32_<shape>_<type>``): (operands '16-bit' (bf16/f16) or 'fp8',
#: elements of A and of B a lane holds, f32 of C a lane holds) -> (shape M x N x K, the target
#: feature it needs: ``mfma`` gfx90a+, ``mfma_fp8`` gfx942+, ``mfma_gfx950`` gfx950's new forms).
MFMA_FORMS: dict[tuple[str, int, int], tuple[str, str]] = {
    ("16-bit", 4, 16): ("32x32x8", "mfma"), ("16-bit", 4, 4): ("16x16x16", "mfma"),
    ("16-bit", 8, 16): ("32x32x16", "mfma_gfx950"), ("16-bit", 8, 4): ("16x16x32", "mfma_gfx950"),
    ("fp8", 8, 16): ("32x32x16", "mfma_fp8"), ("fp8", 8, 4): ("16x16x32", "mfma_fp8"),
    ("fp8", 32, 16): ("32x32x64", "mfma_gfx950"), ("fp8", 32, 4): ("16x16x128", "mfma_gfx950"),
}
#: What each feature of MFMA_FORMS is, with the chips that have it (``Intrinsic.needs``: the
#: frontend's "not available on this target" message; archs.py says which arch has which feature).
FEATURE_DOCS = {"mfma": "MFMA (AMD CDNA: gfx90a, gfx942, gfx950)",
                "mfma_fp8": "FP8 MFMA (AMD gfx942 and gfx950)",
                "mfma_gfx950": "an MFMA form of gfx950 (CDNA4)"}
#: Shapes (M x N x K) of ``amdgcn.mfma``.
MFMA_SHAPES = tuple(dict.fromkeys(shape for shape, _ in MFMA_FORMS.values()))

_MFMA_F8 = ("f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz")


def mfma_feature(shape: str, a_type: str) -> str:
    """The target feature the MFMA of ``shape`` on elements named ``a_type`` needs (MFMA_FORMS)."""
    M, _, K = (int(x) for x in shape.split("x"))
    kind = "16-bit" if a_type in ("bf16", "f16") else "fp8"
    return next(f for (k, n, _), (s, f) in MFMA_FORMS.items() if k == kind and s == shape and n == M * K // 64)


def _t_mfma(op: Op) -> None:
    a, b, c = (v.type for v in op.operands)
    shape = op.attrs["shape"]
    require(shape in MFMA_SHAPES, f"attribute shape={shape!r} is not one of {', '.join(MFMA_SHAPES)}")
    M, N, K = (int(x) for x in shape.split("x"))
    acc = VectorType(F32, M * N // 64)
    require(c == acc and result_type(op) == acc,
            f"mfma {shape} accumulator {c} and result {result_type(op)} (need {acc})")
    n = M * K // 64
    for what, t in (("A", a), ("B", b)):
        require(isinstance(t, VectorType) and t.count == n and (t.elem in (F16, BF16) or t.elem.name in _MFMA_F8),
                f"mfma {shape} {what} fragment of type {t} (needs vec<T, {n}>, T f16, bf16 or FP8)")
    require(a.elem == b.elem or (a.elem.name in _MFMA_F8 and b.elem.name in _MFMA_F8),  # type: ignore[union-attr]
            f"mfma of {a} x {b}: 16-bit A and B have one type")


#: Every AMD intrinsic, registered when this module is imported.
INTRINSICS = (
    Intrinsic(name="amdgcn.mfma", builtin="mfma", feature="mfma", operands=3, attrs=("shape",), result=True,
              type_rule=_t_mfma, lower=f"{__package__}.mfma:lower_mfma",
              emulate="kcompiler.backends.cpu.mfma:emulate_mfma", tables={"forms": MFMA_FORMS},
              needs=FEATURE_DOCS,
              doc="d = a * b + c by one wavefront of 64 lanes (layouts: mfma.py)"),
)

register_intrinsics(*INTRINSICS)

__all__ = ["FEATURE_DOCS", "INTRINSICS", "MFMA_FORMS", "MFMA_SHAPES", "mfma_feature"]
