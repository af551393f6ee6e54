"""Const tables, array literals, the if expression and descending unsigned ranges on the GPU targets:
NVPTX assembled by ptxas (the table in the .const bank, read with ld.const), AMDGCN code objects for
gfx942 and gfx1100 (the table a constant in the read-only data the kernel addresses PC-relative); and,
marked gpu, the same kernels run on a CUDA GPU against the CPU target."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import needs_ptxas, ptxas

SRC = """
const TABLE: [f32; 9] = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
const K: [i32; 3] = [3, 1, 4];
fn weight(i: i32) -> f32 { return TABLE[i % 9]; }
kernel k(x: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    let c = [0.5, 0.25, 0.125];
    let v = if i < n { x[i] } else { 0.0 };
    var s = 0.0;
    for j in range(u32(K[i % 3]), 0u32, -1) { s += f32(j); }
    out[i] = v * weight(i) + c[i % 3] + s;
}
"""


def _expect(x, n, size):
    t, kk, c = list(range(1, 10)), [3, 1, 4], [0.5, 0.25, 0.125]
    return np.array([(x[i] if i < n else 0.0) * t[i % 9] + c[i % 3] + sum(range(kk[i % 3], 0, -1))
                     for i in range(size)], np.float32)


@needs_ptxas
@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_nvptx_table_in_const_bank(arch):
    ptx = compile_source_to(SRC, "t.kc", "asm", "nvptx", arch)
    assert ".const .align 4 .b8 kc_const_TABLE[36]" in ptx
    assert "ld.const" in ptx
    ptxas(ptx, arch)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_amdgcn_code_object(arch):
    asm = compile_source_to(SRC, "t.kc", "asm", "amdgcn", arch)
    assert ".Lkc_const_TABLE:" in asm and ".size\t.Lkc_const_TABLE, 36" in asm
    obj = compile_source_to(SRC, "t.kc", "obj", "amdgcn", arch)
    assert obj[:4] == b"\x7fELF" and int.from_bytes(obj[18:20], "little") == 224  # EM_AMDGPU
    llvm = compile_source_to(SRC, "t.kc", "llvm", "amdgcn", arch)
    assert "addrspace(4) constant [9 x float]" in llvm


def test_cpu_matches_python():
    m = kc.compile(SRC, target="cpu", path="t.kc", check_bounds=True)
    x = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    out = np.zeros(64, np.float32)
    m.k[2, 32](x, out, np.int32(50))
    np.testing.assert_allclose(out, _expect(x, 50, 64), rtol=1e-6)


@pytest.mark.gpu
def test_cuda_matches_python():
    m = kc.compile(SRC, target="cuda", path="t.kc")
    x = np.random.default_rng(0).standard_normal(50).astype(np.float32)
    out = np.zeros(64, np.float32)
    m.k[2, 32](x, out, np.int32(50))
    np.testing.assert_allclose(out, _expect(x, 50, 64), rtol=1e-6)
