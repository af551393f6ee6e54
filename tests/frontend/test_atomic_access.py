"""atomic_load / atomic_store: ordered accesses with a scope, on every target (execution on the CPU
and CUDA; the orders and scopes in the PTX and AMDGCN code)."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..filecheck_util import filecheck

SRC = """
kernel publish(flag: ptr<u32>, data: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        data[i] = f32(i) * 0.5;
        atomic_store(flag + i, 1u32, order = "release", scope = "device");
        if atomic_load(flag + i, order = "acquire", scope = "device") == 1u32 {
            out[i] = data[i] + 1.0;
        }
    }
}
"""


def test_publish(target):
    n = 1000
    flag, data, out = np.zeros(n, np.uint32), np.zeros(n, np.float32), np.full(n, np.nan, np.float32)
    kc.compile(SRC, target=target).publish[(n + 127) // 128, 128](flag, data, out, n)
    np.testing.assert_array_equal(flag, np.ones(n, np.uint32))
    np.testing.assert_array_equal(out, np.arange(n, dtype=np.float32) * 0.5 + 1.0)


def test_orders_and_scopes_in_the_code():
    filecheck(compile_source_to(SRC, "t.kc", "asm", "nvptx", "sm_90a"), """
        CHECK: st.release.gpu.global.b32
        CHECK: ld.acquire.gpu.global.b32
    """)
    ll = compile_source_to(SRC, "t.kc", "llvm", "amdgcn", "gfx942")
    filecheck(ll, """
        CHECK: store atomic i32 1, ptr addrspace(1) {{.*}} syncscope("agent") release, align 4
        CHECK: load atomic i32, ptr addrspace(1) {{.*}} syncscope("agent") acquire, align 4
    """)


@pytest.mark.parametrize("src, message", [
    ('kernel k(p: ptr<u32>) { atomic_store(p, 1u32, order = "acquire"); }', "order must be one of"),
    ('kernel k(p: ptr<u32>) { let x = atomic_load(p, order = "release"); }', "order must be one of"),
    ('kernel k(p: ptr<bool>) { let x = atomic_load(p); }', "atomic_load works on integers and floats"),
])
def test_errors(src, message):
    with pytest.raises(CompileError, match=message):
        kc.compile(src, target="cpu")


RMW = """
kernel rmw(pu: ptr<u32>, pi: ptr<i64>, pf: ptr<f32>, pd: ptr<f64>) {
    shared s: [u32; 32];
    s[thread_id.x] = 0u32;
    barrier();
    atomic_add(pu, 1u32, order = "relaxed", scope = "system");
    atomic_max(pi, i64(thread_id.x), order = "acq_rel", scope = "device");
    atomic_min(pi + 1, -i64(thread_id.x), order = "release", scope = "block");
    atomic_exch(pu + 1, u32(thread_id.x), order = "acquire", scope = "system");
    atomic_add(pf, 1.5, order = "seq_cst", scope = "device");
    atomic_add(pd, 0.25, order = "acq_rel", scope = "system");
    atomic_add(s, 1u32, order = "acq_rel", scope = "block");
    atomic_add(pu + 2, 1u32);
}
"""


def test_read_modify_write_orders_and_scopes_in_the_ptx(tmp_path):
    """LLVM's NVPTX backend prints every atomicrmw as a relaxed GPU-scope ``atom``; kcompiler writes
    the PTX itself for any other ordering or scope. The PTX assembles (ptxas, sm_90a)."""
    import shutil
    import subprocess

    ptx = compile_source_to(RMW, "t.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
        CHECK: atom.relaxed.sys.global.add.u32
        CHECK: atom.acq_rel.gpu.global.max.s64
        CHECK: atom.release.cta.global.min.s64
        CHECK: atom.acquire.sys.global.exch.b32
        CHECK: fence.sc.gpu;
        CHECK-NEXT: atom.acquire.gpu.global.add.f32
        CHECK: atom.acq_rel.sys.global.add.f64
        CHECK: atom.acq_rel.cta.shared::cta.add.u32
        CHECK: atom.global.add.u32
    """)
    if shutil.which("ptxas"):
        (tmp_path / "t.ptx").write_text(ptx)
        r = subprocess.run(["ptxas", "-arch=sm_90a", str(tmp_path / "t.ptx"), "-o", str(tmp_path / "t.cubin")],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


def test_read_modify_write_results(target):
    """The same kernel run: each atomic's result against the count of threads."""
    pu, pi = np.array([7, 0, 3], np.uint32), np.array([-5, 5], np.int64)
    pf, pd = np.array([0.5], np.float32), np.array([1.0], np.float64)
    blocks, threads = 3, 32
    kc.compile(RMW, target=target).rmw[blocks, threads](pu, pi, pf, pd)
    n = blocks * threads
    assert pu[0] == 7 + n and pu[2] == 3 + n and pu[1] < threads
    assert list(pi) == [threads - 1, -(threads - 1)]
    assert pf[0] == np.float32(0.5 + 1.5 * n) and pd[0] == 1.0 + 0.25 * n
