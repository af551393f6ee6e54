"""AMD's own compiler for tests that compare with it: :func:`find_clang` (a clang with the AMDGPU
backend and lld, or None) and :func:`fields` (the code object metadata compared, of one kernel)."""
from __future__ import annotations

import shutil

CLANGS = ("clang-22", "clang-21", "clang-20", "clang-19")

#: kernel_code_properties bits (AMDGPUUsage, "Kernel Descriptor"; SIDefines KERNEL_CODE_PROPERTY_*).
PROPERTY_BITS = {0: "private_segment_buffer", 1: "dispatch_ptr", 2: "queue_ptr", 3: "kernarg_segment_ptr",
                 4: "dispatch_id", 5: "flat_scratch_init", 6: "private_segment_size",
                 10: "wavefront_size32", 11: "uses_dynamic_stack"}


def find_clang() -> str | None:
    """A clang (newest first of :data:`CLANGS`) whose AMDGPU backend and lld link a HIP code object,
    or None."""
    for name in CLANGS:
        path = shutil.which(name)
        if path and (shutil.which("ld.lld") or shutil.which("ld.lld-" + name.split("-")[1])):
            return path
    return None


def fields(k) -> dict:
    """The compared metadata of one kernel (codeobject.KernelInfo)."""
    props = k.descriptor.kernel_code_properties
    return {
        "kernarg_segment_size": k.kernarg_segment_size,
        "kernarg_segment_align": k.kernarg_segment_align,
        "explicit_args": [(a.offset, a.size, a.value_kind) for a in k.explicit_args],
        "hidden_args": [(a.value_kind, a.offset) for a in k.hidden_args],
        "uses_dynamic_stack": k.uses_dynamic_stack,
        "wavefront_size": k.wavefront_size,
        "group_segment_fixed_size": k.group_segment_fixed_size,
        "max_flat_workgroup_size": k.max_flat_workgroup_size,
        "kernel_code_properties": sorted(n for b, n in PROPERTY_BITS.items() if props >> b & 1),
    }
