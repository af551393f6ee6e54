"""The AMD chips kcompiler compiles for: CDNA (wave64) and RDNA (wave32), each with its wavefront
size and the features that ``comptime target.has(...)`` answers true for on it. Plain data: the
backend record (``__init__.py``) reads it without loading llvmlite."""
from __future__ import annotations

_CDNA = frozenset({"amdgcn", "cdna", "mfma", "wave64", "fp64_atomics", "bf16"})
_RDNA = frozenset({"amdgcn", "rdna", "wmma", "wave32", "bf16"})

#: The architectures kcompiler targets: their wavefront size and what ``target.has(...)`` answers.
ARCHS: dict[str, tuple[int, frozenset[str]]] = {
    "gfx90a": (64, _CDNA | {"gfx90a"}),                                   # MI200
    "gfx942": (64, _CDNA | {"gfx942", "fp8_convert", "fp8_fnuz", "mfma_fp8", "mfma_fp8_fnuz"}),   # MI300
    "gfx950": (64, _CDNA | {"gfx950", "fp8_convert", "fp8_ocp", "mfma_fp8", "mfma_fp8_ocp", "mfma_gfx950",
                            "mx_scale"}),  # MI350
    "gfx1100": (32, _RDNA | {"gfx1100"}),                                 # RDNA3 (RX 7900)
    "gfx1201": (32, _RDNA | {"gfx1201", "fp8_convert", "fp8_ocp", "wmma_fp8"}),  # RDNA4 (RX 9070)
}
