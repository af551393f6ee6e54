"""Array literals, const tables, the conditional expression and the addresses of local and shared
arrays, run on the CPU target and compared with numpy / Python (GPU: the same kernels on the H100 in
test_consts_gpu below, marked gpu)."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime.device import LaunchError

SRC = """
const N = 3;
const SCALE: f32 = 2.0 * 1.5;
const TABLE: [f32; 5] = [1.0, 2.0, SCALE, 4.0, 8.0];
const IDX = [N, N * 2, 7];
const BIG = if N > 2 { 100 } else { 200 };
fn pick(i: i32) -> f32 { return TABLE[i]; }
kernel tables(x: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    let c = [1.0, 2.0, 3.0];
    var w = [0.5, 0.25, x[0]];
    w[1] = w[1] * 2.0;
    let g = if i < n { x[i] } else { -1.0 };
    out[i] = g + c[i % 3] + pick(i % 5) + TABLE[IDX[0]] + w[i % 3] + f32(IDX[1]) + f32(BIG);
}
kernel generic[K: i32 = 4](out: ptr<i32>) {
    const W = [K, K * 2, K * 3];
    const H: [i32; K] = [i32; K](7);
    var acc = [i32; 8](0);
    let i = i32(thread_id.x);
    acc[i % 8] = W[i % 3] + H[i % K];
    out[i] = acc[i % 8];
}
kernel addresses(x: ptr<f32>, out: ptr<f32>) {
    shared tile: [f32; 64];
    let i = i32(thread_id.x);
    tile[i] = x[i];
    barrier();
    let p = tile + 8;                       // the address of tile[8]: ptr<f32, shared>
    var loc = [f32; 4](1.0, 2.0, 3.0, 4.0);
    let q = loc + 1;                        // the address of loc[1]: ptr<f32, local>
    q[0] = 20.0;
    out[i] = p[i % 8] + loc[1] + (q + 1)[0] + f32(i32(thread_id.x) % 2);
}
kernel guarded(x: ptr<f32>, out: ptr<f32>, n: i32, m: i32) {
    let i = i32(thread_id.x);
    out[i] = if i < n { x[i] } else if i < m { 2.0 * x[i - n] } else { 0.0 };
}
kernel select_both(x: ptr<f32>, out: ptr<f32>, n: i32) {
    let i = i32(thread_id.x);
    out[i] = select(i < n, x[i], 0.0);
}
"""


@pytest.fixture(scope="module")
def mod():
    return kc.compile(SRC, target="cpu", path="consts.kc", check_bounds=True)


def test_tables_literals_and_if_expression(mod):
    x = np.arange(8, dtype=np.float32) + 10
    out = np.zeros(16, np.float32)
    mod.tables[1, 16](x, out, np.int32(8))
    t, c, w = [1, 2, 3, 4, 8], [1, 2, 3], [0.5, 0.5, x[0]]
    expect = [(x[i] if i < 8 else -1) + c[i % 3] + t[i % 5] + t[3] + w[i % 3] + 6 + 100 for i in range(16)]
    np.testing.assert_allclose(out, np.array(expect, np.float32))


@pytest.mark.parametrize("k", [2, 4, 5])
def test_const_from_compile_time_parameters(k):
    m = kc.compile(SRC, target="cpu", path="consts.kc")
    out = np.zeros(32, np.int32)
    m.generic[1, 32](out, K=k)
    np.testing.assert_array_equal(out, [[k, 2 * k, 3 * k][i % 3] + 7 for i in range(32)])


def test_addresses_of_shared_and_local_arrays(mod):
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    out = np.zeros(64, np.float32)
    mod.addresses[1, 64](x, out)
    np.testing.assert_allclose(out, [x[8 + i % 8] + 20 + 3 + i % 2 for i in range(64)], rtol=1e-6)


def test_if_expression_does_not_load_the_side_not_taken(mod):
    """Under check_bounds every load past x's 4 elements is an error: the if expression loads x[i] only
    where i < n (and x[i - n] where n <= i < m), so 16 threads over 4 elements run clean."""
    x = np.array([1, 2, 3, 4], np.float32)
    out = np.full(16, -5, np.float32)
    mod.guarded[1, 16](x, out, np.int32(4), np.int32(8))
    np.testing.assert_array_equal(out, [1, 2, 3, 4, 2, 4, 6, 8] + [0] * 8)


def test_select_still_evaluates_both_sides(mod):
    """select's both-sides meaning is kept: its x[i] is loaded for every thread, which check_bounds
    reports (the reason the if expression exists)."""
    with pytest.raises(LaunchError, match=r"out-of-bounds load from 'x'\[4\]"):
        mod.select_both[1, 16](np.zeros(4, np.float32), np.zeros(16, np.float32), np.int32(4))


def test_tables_of_every_scalar_kind():
    src = """
    const B = [true, false, true];
    const U: [u8; 3] = [255, 0, 7];
    const D: [f64; 3] = [0.1, 0.2, 0.3];
    const H: [f16; 3] = [1, 2.5, 65504.0];
    kernel k(o: ptr<f64>) {
        let i = i32(thread_id.x) % 3;
        o[thread_id.x] = (if B[i] { 1000.0f64 } else { 0.0f64 }) + f64(U[i]) + D[i] + f64(H[i]);
    }
    """
    m = kc.compile(src, target="cpu", path="kinds.kc", check_bounds=True)
    out = np.zeros(6, np.float64)
    m.k[1, 6](out)
    expect = [[1000 + 255 + 0.1 + 1, 0 + 0.2 + 2.5, 1000 + 7 + 0.3 + 65504][i % 3] for i in range(6)]
    np.testing.assert_allclose(out, expect)
