"""Real AMD code objects for the runtime tests, built WITHOUT kcompiler's AMDGCN backend: hand-written
LLVM IR for ``amdgcn-amd-amdhsa`` compiled with llvmlite and linked with the ``ld.lld`` of the
``ziglang`` package (``python -m ziglang ld.lld -shared``), the way clang/hipcc make one.

Two kernels (AMDGPUUsage, "Code Object V5 Metadata" says what to expect of them):

- ``store_n(ptr addrspace(1) %a, i32 %n)``: ``a[workitem.id.x] = n``; explicit arguments at 0 (8 bytes,
  global_buffer) and 8 (4 bytes, by_value), hidden arguments from 16;
- ``with_lds(ptr addrspace(1) %out, float %x)``: goes through a 256-float LDS array, so its
  ``group_segment_fixed_size`` is 1024.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import subprocess
import sys
import tempfile

import pytest

IR = r"""
target triple = "amdgcn-amd-amdhsa"

@lds = internal addrspace(3) global [256 x float] undef, align 4

declare i32 @llvm.amdgcn.workitem.id.x()

define amdgpu_kernel void @store_n(ptr addrspace(1) %a, i32 %n) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %p = getelementptr inbounds i32, ptr addrspace(1) %a, i32 %i
  store i32 %n, ptr addrspace(1) %p, align 4
  ret void
}

define amdgpu_kernel void @with_lds(ptr addrspace(1) %out, float %x) {
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %q = getelementptr inbounds [256 x float], ptr addrspace(3) @lds, i32 0, i32 %i
  store volatile float %x, ptr addrspace(3) %q, align 4
  %v = load volatile float, ptr addrspace(3) %q, align 4
  %p = getelementptr inbounds float, ptr addrspace(1) %out, i32 %i
  store float %v, ptr addrspace(1) %p, align 4
  ret void
}

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}
"""


def relocatable(arch: str, features: str = "") -> bytes:
    """The unlinked object (ET_REL) of :data:`IR` for ``arch``."""
    import llvmlite.binding as llvm

    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    module = llvm.parse_assembly(IR)
    module.verify()
    tm = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(
        cpu=arch, features=features, opt=2, reloc="pic", codemodel="default")
    return tm.emit_object(module)


@functools.lru_cache(maxsize=None)
def code_object(arch: str, features: str = "") -> bytes:
    """The linked code object (HSACO) of :data:`IR` for ``arch``; skips the test without ziglang."""
    if importlib.util.find_spec("ziglang") is None:
        pytest.skip("needs the ziglang package (pip install ziglang) for its ld.lld")
    obj = relocatable(arch, features)
    with tempfile.TemporaryDirectory(prefix="kc-test-hsaco-") as tmp:
        src, out = os.path.join(tmp, "in.o"), os.path.join(tmp, "out.hsaco")
        with open(src, "wb") as f:
            f.write(obj)
        r = subprocess.run([sys.executable, "-m", "ziglang", "ld.lld", "-shared", "--no-undefined",
                            "-o", out, src], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        with open(out, "rb") as f:
            return f.read()
