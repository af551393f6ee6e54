"""``check_bounds`` on the indices of fixed-size arrays (issue 22): local arrays (``var a: [f32; 8]``)
and static shared arrays, which the check of host-passed memory does not cover, are checked against
their length on every access: the CPU target stops the launch with a LaunchError naming the kernel,
file:line:col, the access, the index and the length, and the block and thread; NVIDIA prints the
same through vprintf and fails with CUDA_ERROR_ASSERT (__assertfail); AMD traps."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import compile_source_to
from kcompiler.runtime.device import LaunchError
from tests.ptxas_util import needs_ptxas, ptxas

SRC = """\
kernel local_write(out: ptr<f32>, k: i32) {
    var a: [f32; 8];
    for i in range(0, 8) { a[i] = f32(i); }
    a[k] = 100.0;
    out[0] = a[3] + a[7];
}

kernel shared_read(out: ptr<f32>, k: i32) {
    shared s: [f32; 32];
    s[thread_id.x] = f32(thread_id.x);
    barrier();
    out[thread_id.x] = s[i32(thread_id.x) + k];
}

kernel dyn(out: ptr<f32>, k: i32) {
    let s = dynamic_shared[f32]();
    s[thread_id.x] = f32(thread_id.x);
    barrier();
    out[thread_id.x] = s[i32(thread_id.x) + k];
}

kernel grid2(out: ptr<f32>, r: i32, c: i32) {
    var m: [[f32; 4]; 3];
    for i in range(0, 3) { for j in range(0, 4) { m[i][j] = f32(i * 4 + j); } }
    out[0] = m[r][c];
}
"""


def _mod(check_bounds=True):
    return kc.compile(SRC, target="cpu", path="arr.kc", check_bounds=check_bounds)


def test_in_range_accesses_run():
    out = np.zeros(32, np.float32)
    m = _mod()
    m.local_write[1, 1](out, 7)
    assert out[0] == 103.0
    m.shared_read[1, 32](out, 0)
    np.testing.assert_array_equal(out, np.arange(32, dtype=np.float32))
    m.grid2[1, 1](out, 2, 3)
    assert out[0] == 11.0


@pytest.mark.parametrize("k", [8, 9, -1, 1 << 30])
def test_local_array_write_out_of_range(k):
    with pytest.raises(LaunchError) as e:
        _mod().local_write[1, 3](np.zeros(1, np.float32), k)
    assert str(e.value) == (f"kernel 'local_write': out-of-bounds store to an array element at arr.kc:4:5, "
                            f"thread (0,0,0) block (0,0,0): index {k} is out of range for an array of 8 "
                            f"elements")


def test_shared_array_read_out_of_range():
    with pytest.raises(LaunchError, match=r"^kernel 'shared_read': out-of-bounds load from an array element "
                                          r"at arr\.kc:12:5, thread \(29,0,0\) block \(0,0,0\): index 32 is out "
                                          r"of range for an array of 32 elements$"):
        _mod().shared_read[1, 32](np.zeros(32, np.float32), 3)


def test_dynamic_shared_memory_against_the_launch_size():
    """The cpu target checks a dynamic_shared pointer's accesses against the launch's shared= bytes."""
    out = np.zeros(32, np.float32)
    m = _mod()
    m.dyn[1, 32](out, 0, shared=128)
    np.testing.assert_array_equal(out, np.arange(32, dtype=np.float32))
    with pytest.raises(LaunchError, match=r"^kernel 'dyn': out-of-bounds load from dynamic shared memory at byte "
                                          r"128 \(4 bytes\) at arr\.kc:19:5, thread \(31,0,0\) block \(0,0,0\): "
                                          r"the block has 0 bytes of static shared memory and 128 of dynamic"):
        m.dyn[1, 32](out, 1, shared=128)
    with pytest.raises(LaunchError, match=r"out-of-bounds store to dynamic shared memory at byte 64 .* at "
                                          r"arr\.kc:17:5, thread \(16,0,0\)"):
        m.dyn[1, 32](out, 0, shared=64)


@pytest.mark.parametrize("r, c, index, length", [(3, 0, 3, 3), (0, 4, 4, 4), (1, -2, -2, 4)])
def test_each_index_of_a_nested_array(r, c, index, length):
    """m[1][4] would land inside m[2] in memory: each index is checked against its own length."""
    with pytest.raises(LaunchError, match=rf"index {index} is out of range for an array of {length} elements"):
        _mod().grid2[1, 1](np.zeros(1, np.float32), r, c)


def test_unchecked_compiles_no_check():
    ll = compile_source_to(SRC, "arr.kc", "llvm", "cpu", kernel="local_write")
    checked = compile_source_to(SRC, "arr.kc", "llvm", "cpu", kernel="local_write",
                                options=kc.CompileOptions(check_bounds=True))
    assert "index_out_of_range" not in ll and "index_out_of_range" in checked


@needs_ptxas
def test_ptx_checks_indices():
    for kernel in ("local_write", "shared_read", "grid2"):
        ptx = compile_source_to(SRC, "arr.kc", "asm", "nvptx", "sm_90a", kernel=kernel,
                                options=kc.CompileOptions(check_bounds=True))
        assert "vprintf" in ptx and "__assertfail" in ptx, kernel
        ptxas(ptx)
        plain = compile_source_to(SRC, "arr.kc", "asm", "nvptx", "sm_90a", kernel=kernel)
        assert "__assertfail" not in plain


def test_amdgcn_traps_on_a_bad_index():
    asm = compile_source_to(SRC, "arr.kc", "asm", "amdgcn", "gfx942", kernel="local_write",
                            options=kc.CompileOptions(check_bounds=True))
    assert "s_trap" in asm


GPU_SCRIPT = """
import numpy as np, kcompiler as kc
mod = kc.compile(open({path!r}).read(), target="nvptx", path="arr.kc", check_bounds=True)
out = np.zeros(32, np.float32)
mod.shared_read[1, 32](out, 0)
assert (out == np.arange(32)).all()
try:
    mod.local_write[1, 1](out, 9)
    print("NO ERROR")
except kc.DeviceAssertionError as e:
    print("EXC:", e, flush=True)
"""


@pytest.mark.gpu
def test_index_check_on_the_gpu(tmp_path):
    """On the H100, in a child (the context is unusable afterwards)."""
    src = tmp_path / "arr.kc"
    src.write_text(SRC)
    r = subprocess.run([sys.executable, "-c", GPU_SCRIPT.format(path=str(src))], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert ("arr.kc:4:5: kernel 'local_write': block (0,0,0), thread (0,0,0): out-of-bounds store to an "
            "array element: index 9 is out of range for an array of 8 elements") in r.stdout, (r.stdout, r.stderr)
    assert "EXC:" in r.stdout and "CUDA_ERROR_ASSERT" in r.stdout, (r.stdout, r.stderr)
