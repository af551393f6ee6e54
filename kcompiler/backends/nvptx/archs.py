"""The NVIDIA chips kcompiler compiles for (PTX ``.target``), each with the features that
``comptime target.has(...)`` answers true for on it. Plain data: the backend record
(``__init__.py``) reads it without loading llvmlite."""
from __future__ import annotations

#: The architectures kcompiler targets, with what each adds for ``comptime target.has(...)``.
ARCHS: dict[str, frozenset[str]] = {
    "sm_80": frozenset({"sm_80", "cp_async", "mma_bf16", "bf16"}),
    "sm_86": frozenset({"sm_80", "sm_86", "cp_async", "mma_bf16", "bf16"}),
    "sm_89": frozenset({"sm_80", "sm_86", "sm_89", "cp_async", "mma_bf16", "bf16", "fp8_convert", "mma_fp8"}),
    "sm_90": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "cp_async", "mma_bf16", "bf16", "fp8_convert",
                        "mma_fp8", "tma", "mbarrier", "cluster"}),
    "sm_90a": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "cp_async", "mma_bf16", "bf16",
                         "fp8_convert", "mma_fp8", "tma", "mbarrier", "cluster", "wgmma", "setmaxnreg"}),
}

# Every arch here is sm_80 or later: tensor-core mma.sync (bf16/f16), ldmatrix and cp.async (mma.py).
ARCHS = {arch: features | {"nvptx", "mma", "ldmatrix"} for arch, features in ARCHS.items()}
