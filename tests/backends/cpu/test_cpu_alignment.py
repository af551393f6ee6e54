"""Alignment on the CPU target. A GPU faults on a misaligned access; a host faults too (SIGSEGV, which
kills the Python process) on the aligned vector moves LLVM emits for a ``vec`` access or a vector
spilled into a thread's coroutine frame. The CPU target must never crash the process: vector
accesses are compiled with the element's alignment, frames and shared memory are allocated aligned,
and ``check_bounds`` reports a misaligned access as an error at its source line."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime.device import LaunchError

from ...draws import fresh_rng

RNG = fresh_rng()

VEC_COPY = """
kernel scale[N: i32](x: ptr<f32>, y: ptr<f32>, a: f32, n: i64) {
    let i = i64(block_id.x * block_dim.x + thread_id.x) * i64(N);
    if i + i64(N) <= n {
        store(y + i, load[vec<f32, N>](x + i) * a);
    }
}
"""


def misaligned(n: int, offset_bytes: int) -> np.ndarray:
    """A float32 array of n random values whose data starts ``offset_bytes`` past a 64-byte
    boundary (numpy alone gives 16-byte alignment at best)."""
    raw = np.empty(n + 32, np.float32)
    skip = ((-raw.ctypes.data) % 64 + offset_bytes) // 4
    a = raw[skip: skip + n]
    assert a.ctypes.data % 64 == offset_bytes
    a[:] = RNG.standard_normal(n, dtype=np.float32)
    return a


@pytest.mark.parametrize("vec", [4, 8, 16])
@pytest.mark.parametrize("offset", [4, 16, 48])
def test_vector_access_to_misaligned_numpy_array_runs(vec, offset):
    n = 64 * vec * 3 + vec  # a partial last block
    x, y = misaligned(n, offset), misaligned(n, (offset + 8) % 64)
    mod = kc.compile(VEC_COPY, target="cpu", path="scale.kc")
    mod.scale[(n // vec + 63) // 64, 64](x, y, np.float32(1.5), n, N=vec)
    np.testing.assert_array_equal(y, x * np.float32(1.5))


def test_check_bounds_reports_a_misaligned_vector_load():
    src = """
kernel shifted(x: ptr<f32>, n: i64) {
    let i = i64(thread_id.x) * 4;
    let v = load[vec<f32, 4>](x + i + 1);
    store(x + i, v);
}
"""
    mod = kc.compile(src, target="cpu", path="shifted.kc", check_bounds=True)
    x = misaligned(64, 4)  # under check_bounds the array is copied to a 256-byte aligned buffer
    with pytest.raises(LaunchError, match=r"misaligned load from 'x'\[1\] \(size 64\), 16 bytes at "
                                          r"shifted.kc:4:13, thread \(0,0,0\) block \(0,0,0\)"):
        mod.shifted[1, 8](x, 64)


def test_check_bounds_accepts_aligned_accesses_of_any_numpy_array():
    """Under check_bounds arrays are copied as a GPU allocation would be (256-byte aligned), so a
    kernel that is correct on a GPU passes whatever numpy's allocator gave."""
    n = 8 * 64 + 8
    x, y = misaligned(n, 4), misaligned(n, 36)
    mod = kc.compile(VEC_COPY, target="cpu", path="scale.kc", check_bounds=True)
    mod.scale[(n // 8 + 63) // 64, 64](x, y, np.float32(-2.0), n, N=8)
    np.testing.assert_array_equal(y, x * np.float32(-2.0))


LIVE_ACROSS_BARRIER = """
kernel rotate(x: ptr<f32>, y: ptr<f32>) {
    shared tile: [vec<f32, 16>; 64];
    let t = i64(thread_id.x);
    let base = (i64(block_id.x) * 64 + t) * 16;
    let v = load[vec<f32, 16>](x + base);
    let w = v * 2.0;
    tile[t] = v;
    barrier();
    let u = tile[(t + 1) % 64];
    barrier();
    store(y + base, u + w);
}
"""


@pytest.mark.parametrize("arch", ["host", "host-w64"])
def test_vectors_live_across_barriers_and_in_shared_memory(arch):
    """A 64-byte vector held across barriers lives in the thread's coroutine frame, and an array of
    them in shared memory: both need 64-byte alignment for the moves LLVM emits."""
    blocks = 5
    x = misaligned(blocks * 64 * 16, 16)
    y = misaligned(blocks * 64 * 16, 32)
    mod = kc.compile(LIVE_ACROSS_BARRIER, target="cpu", arch=arch, path="rotate.kc")
    mod.rotate[blocks, 64](x, y)
    v = x.reshape(blocks, 64, 16)
    want = np.roll(v, -1, axis=1) + v * np.float32(2.0)
    np.testing.assert_array_equal(y.reshape(blocks, 64, 16), want)
