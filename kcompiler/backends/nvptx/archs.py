"""The NVIDIA chips kcompiler compiles for (PTX ``.target``), each with the features that
``comptime target.has(...)`` answers true for on it. Plain data: the backend record
(``__init__.py``) reads it without loading llvmlite."""
from __future__ import annotations

#: The architectures kcompiler targets, with what each adds for ``comptime target.has(...)``.
#: ``fp8_convert``: the chip converts between FP8 and wider floats (cvt.*.e4m3x2 / e5m2x2, sm_89 on);
#: ``fp8_ocp``: those converts take the OCP kinds E4M3 and E5M2 (as AMD's gfx950 / gfx1201; gfx942's
#: take only the FNUZ kinds, ``fp8_fnuz``).
ARCHS: dict[str, frozenset[str]] = {
    "sm_80": frozenset({"sm_80", "cp_async", "mma_bf16", "bf16"}),
    "sm_86": frozenset({"sm_80", "sm_86", "cp_async", "mma_bf16", "bf16"}),
    "sm_89": frozenset({"sm_80", "sm_86", "sm_89", "cp_async", "mma_bf16", "bf16", "fp8_convert", "fp8_ocp",
                        "mma_fp8"}),
    "sm_90": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "cp_async", "mma_bf16", "bf16", "fp8_convert",
                        "fp8_ocp", "mma_fp8", "tma", "mbarrier", "cluster"}),
    "sm_90a": frozenset({"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "cp_async", "mma_bf16", "bf16",
                         "fp8_convert", "fp8_ocp", "mma_fp8", "tma", "mbarrier", "cluster", "wgmma",
                         "setmaxnreg"}),
}

# Every arch here is sm_80 or later: tensor-core mma.sync (bf16/f16), ldmatrix and cp.async (mma.py).
# Named barriers (bar.sync / bar.arrive with an id and a count: sm_20 on) on every one.
ARCHS = {arch: features | {"nvptx", "mma", "ldmatrix", "named_barrier"} for arch, features in ARCHS.items()}

#: Compute capability (CUDA's ``major.minor``) -> the arch kcompiler compiles for on that chip. 9.0
#: maps to sm_90a, so that wgmma and setmaxnreg, which run only on sm_90a code, are available on Hopper.
ARCH_OF_CC: dict[tuple[int, int], str] = {(8, 0): "sm_80", (8, 6): "sm_86", (8, 7): "sm_86", (8, 9): "sm_89",
                                          (9, 0): "sm_90a"}


def arch_of_cc(cc: tuple[int, int]) -> str:
    """The arch for compute capability ``cc`` (:data:`ARCH_OF_CC`); an unknown newer chip gets the
    newest arch of its generation kcompiler knows (sm_90 from 9.0 on, else sm_80)."""
    if cc in ARCH_OF_CC:
        return ARCH_OF_CC[cc]
    if cc >= (9, 0):
        return "sm_90"
    return "sm_80"


#: What one kernel may use on each arch, in bytes (kcompiler.limits.ResourceLimits checks them before
#: ptxas or the driver fails without a location):
#: - ``static_shared``: static ``shared`` arrays of a block: 48 KiB (0xc000) on every arch here; more
#:   needs dynamic shared memory and the opt-in attribute (CUDA C++ Programming Guide, "Shared Memory"
#:   and "Technical Specifications per Compute Capability"; ptxas: "uses too much shared data (0xc004
#:   bytes, 0xc000 max)"). ``dynamic_shared``: what a launch may opt in to (227 KiB on sm_80 and sm_90,
#:   99 KiB on sm_86 and sm_89; same tables), named in the message.
#: - ``local``: local memory of a thread: 512 KiB (same tables). ptxas accepts more (8,000,000 bytes
#:   of stack frame assemble); the launch would fail.
#: - ``params``: the kernel parameter block: 32,764 bytes with CUDA 12.1+ on Volta and later ("CUDA
#:   12.1 Supports Large Kernel Parameters", NVIDIA technical blog; ptxas: "uses too much parameter
#:   space (0x8000 bytes, 0x7ffc max)").
RESOURCE_LIMITS: dict[str, dict[str, int]] = {
    arch: {"static_shared": 0xC000, "dynamic_shared": (99 if arch in ("sm_86", "sm_89") else 227) * 1024,
           "local": 512 * 1024, "params": 32764}
    for arch in ARCHS
}
