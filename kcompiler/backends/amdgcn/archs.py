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

#: What one kernel may use on each arch, in bytes (kcompiler.limits.ResourceLimits checks them first:
#: past them LLVM's AMDGPU backend reports an error that ends the process it runs in):
#: - ``lds``: static ``shared`` arrays (LDS) of a workgroup: 64 KiB on gfx9 (gfx90a, gfx942), gfx11
#:   and gfx12; 160 KiB on gfx950. Source: LLVM's AMDGPU subtarget features
#:   (FeatureAddressableLocalMemorySize65536 / ...163840) and its tests lds-limit-diagnostics*.ll
#:   ("local memory (65540) exceeds limit (65536)").
#: - ``private``: the private segment (scratch) of one work-item: the largest per-wave scratch the
#:   COMPUTE_TMPRING_SIZE.WAVESIZE field can describe, divided by the wavefront size (LLVM
#:   GCNSubtarget::getMaxWaveScratchSize; AMDGPUUsage, "Private Segment Buffer"): gfx9, a 13-bit field
#:   of 256-dword units, 1024 * 8191 / 64 = 131,056; gfx11, 15 bits of 64 dwords, 256 * 32767 / 32 =
#:   262,136; gfx12, 18 bits of 64 dwords, 256 * 262143 / 32 = 2,097,144. LLVM's test
#:   stack-size-overflow.ll: "stack frame size (131061) exceeds limit (131056)".
#: - ``private_reserve``: what LLVM's frame adds to a kernel's arrays (measured: 4 bytes for a kernel
#:   of one array; 16 kept); register spills can add more: past the limit the code generator, run in
#:   a child process (backends/llvm/codegen.py), ends that process, and kcompiler reports a located
#:   error at the kernel (docs/LANGUAGE.md, "Limits").
RESOURCE_LIMITS: dict[str, dict[str, int]] = {
    "gfx90a": {"lds": 65536, "private": 131056, "private_reserve": 16},
    "gfx942": {"lds": 65536, "private": 131056, "private_reserve": 16},
    "gfx950": {"lds": 163840, "private": 131056, "private_reserve": 16},
    "gfx1100": {"lds": 65536, "private": 262136, "private_reserve": 16},
    "gfx1201": {"lds": 65536, "private": 2097144, "private_reserve": 16},
}
