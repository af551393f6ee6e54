"""The same kernels on the CPU target and on the GPU: integer results must be bit-identical, f32
results equal within rounding (the two LLVM pipelines may contract a*b+c into an fma differently)."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc

from ...draws import fresh_rng

pytestmark = pytest.mark.gpu

INTS = """
// Integer work where a wrong lowering shows: signed division and remainder of negative values,
// arithmetic vs logical shifts, wrap-around, 64-bit products, warp shuffles, atomics and a barrier.
kernel mix(x: ptr<i32>, out: ptr<i64>, hist: ptr<u32>, n: i32) {
    shared tile: [i32; 256];
    let i = block_id.x * block_dim.x + thread_id.x;
    var v: i32 = 0;
    if i < n {
        v = x[i];
    }
    tile[thread_id.x] = v;
    barrier();
    let w = tile[(thread_id.x + 1) % block_dim.x];
    let q = v / 7 + v % 7 + (v >> 3) + i32(u32(v) >> 5);
    var h = u32(v) * 2654435761u32 + u32(w);
    h ^= h >> 13;
    let s = shuffle_xor(q, 5) + shuffle_down(q, 3);
    let wide = i64(v) * i64(w) - i64(h);
    if i < n {
        out[i] = wide + i64(s);
        atomic_add(hist + (h % 64u32), 1u32);
    }
}
"""

FLOATS = """
kernel poly(x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    var v: f32 = 0.5;
    if i < n {
        v = x[i];
    }
    let other = shuffle_xor(v, 1);  // every lane of the warp takes part
    var acc: f32 = 0.0;
    for k in range(0, 16) {
        acc = acc * v + 1.0 / f32(k + 1);
    }
    if i < n {
        y[i] = acc + sqrt(abs(v)) + other;
    }
}
"""


def run_both(src, name, grid, block, make_args):
    outs = []
    for target in ("cpu", "cuda"):
        m = kc.compile(src, target=target)
        args = make_args()
        getattr(m, name)[grid, block](*args)
        outs.append(args)
    return outs


@pytest.mark.parametrize("n", [1000, 4097])
def test_integers_bit_identical(n):
    x = fresh_rng().integers(-2**31, 2**31 - 1, n, dtype=np.int32)
    blocks = (n + 255) // 256
    cpu, gpu = run_both(INTS, "mix", blocks, 256,
                        lambda: [x.copy(), np.full(n, -1, np.int64), np.zeros(64, np.uint32), n])
    np.testing.assert_array_equal(cpu[1], gpu[1])
    np.testing.assert_array_equal(cpu[2], gpu[2])
    assert cpu[2].sum() == n


def test_floats_within_rounding():
    n = 3001
    x = fresh_rng().uniform(-1.5, 1.5, n).astype(np.float32)
    cpu, gpu = run_both(FLOATS, "poly", (n + 127) // 128, 128, lambda: [x, np.full(n, np.nan, np.float32), n])
    a, b = cpu[1], gpu[1]
    assert np.all(np.isfinite(a)) and np.all(np.isfinite(b))
    ulps = np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))
    # 16 Horner steps, each at most one rounding apart (fma or not): a few ulp at most.
    assert ulps.max() <= 8, ulps.max()
    print(f"cpu vs gpu f32: max {ulps.max()} ulp, {np.count_nonzero(ulps)} of {n} differ")
