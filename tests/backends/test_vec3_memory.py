"""Vectors whose lane count is not a power of two lie in memory as their lanes, packed: ``vec<u8, 3>``
is 3 bytes aligned as a lane (CUDA's ``uchar3``), ``vec<f32, 3>`` 12 bytes aligned 4 (``float3``),
so ``ptr<vec<T, 3>>`` indexes a numpy ``(n, 3)`` array row by row. (LLVM pads ``<3 x i8>`` to 4
bytes; lowered as that vector, ``b[i]`` stepped 4 bytes and ran past the array.)"""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.ir.types import VectorType, U8, F32, alignof, sizeof
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas
from ..draws import fresh_rng

SRC = """
kernel twice(b: ptr<vec<T, N>>, o: ptr<vec<T, N>>, n: i32) {
    let i = i32(block_id.x * block_dim.x + thread_id.x);
    if i < n { o[i] = b[i] + b[i]; }
}

kernel through_shared(b: ptr<vec<T, N>>, o: ptr<vec<T, N>>) {
    shared tile: [vec<T, N>; 32];
    var loc: [vec<T, N>; 4] = [vec<T, N>; 4](b[0]);
    let i = thread_id.x;
    tile[31 - i] = b[i];
    barrier();
    loc[i % 4] = tile[i];
    o[i] = loc[i % 4];
}
"""

CASES = [("u8", np.uint8, 3), ("f32", np.float32, 3), ("f16", np.float16, 5), ("i64", np.int64, 3),
         ("u16", np.uint16, 6)]


def _src(t: str, n: int) -> str:
    return SRC.replace("vec<T, N>", f"vec<{t}, {n}>")


def test_layout_is_the_lanes_packed():
    assert (sizeof(VectorType(U8, 3)), alignof(VectorType(U8, 3))) == (3, 1)
    assert (sizeof(VectorType(F32, 3)), alignof(VectorType(F32, 3))) == (12, 4)


@pytest.mark.parametrize("t,dt,n", CASES, ids=[f"{c[0]}x{c[2]}" for c in CASES])
def test_rows_of_a_numpy_array(target, t, dt, n):
    rng = np.random.default_rng(3)
    rows = 37
    b = rng.integers(0, 50, (rows, n)).astype(dt)
    o = np.zeros_like(b)
    guard = np.full((4, n), 7, dt)  # o's neighbour in one buffer: a stride past 3 lanes would reach it
    buf = np.concatenate([o, guard])
    m = kc.compile(_src(t, n), target=target, path="v3.kc")
    m.twice[2, 32](b, buf, rows)
    np.testing.assert_array_equal(buf[:rows], b + b)
    np.testing.assert_array_equal(buf[rows:], guard)


@pytest.mark.parametrize("t,dt,n", CASES[:2], ids=[f"{c[0]}x{c[2]}" for c in CASES[:2]])
def test_local_and_shared_arrays(target, t, dt, n):
    b = np.arange(32 * n).reshape(32, n).astype(dt)
    o = np.zeros_like(b)
    m = kc.compile(_src(t, n), target=target, path="v3.kc")
    m.through_shared[1, 32](b, o)
    np.testing.assert_array_equal(o, b[::-1])


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_ptx_steps_by_the_packed_size(arch):
    ptx = compile_source_to(_src("u8", 3), "v3.kc", "asm", "nvptx", arch)
    ptxas(ptx, arch)
    assert "mul.wide.s32" in ptx and ", 3;" in ptx  # the row's address: i * 3 bytes


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_amdgcn_assembles(arch):
    text = compile_source_to(_src("f32", 3), "v3.kc", "asm", "amdgcn", arch)
    assert "twice" in text and "through_shared" in text


BOOLS = """
kernel bools(x: ptr<i32>, o: ptr<i32>) {
    var loc: [vec<bool, 3>; 2] = [vec<bool, 3>; 2](vec<bool, 3>(false));
    let i = i32(thread_id.x);
    loc[i % 2] = vec<bool, 3>(x[3 * i] > 0, x[3 * i + 1] > 0, x[3 * i + 2] > 0);
    let v = loc[i % 2];
    o[3 * i] = i32(v[0]);
    o[3 * i + 1] = i32(v[1]);
    o[3 * i + 2] = i32(v[2]);
}
"""


def test_bool_lanes_round_trip_through_memory(target):
    """vec<bool, 3> lies in memory as 3 bytes: stored and loaded again as one vector of bytes
    (kcompiler/backends/llvm/lower_memory.py: zext to bytes, trunc back), every lane kept."""
    x = fresh_rng().integers(-1, 2, 3 * 32).astype(np.int32)
    o = np.full_like(x, 9)
    kc.compile(BOOLS, target=target, path="b3.kc").bools[1, 32](x, o)
    np.testing.assert_array_equal(o, (x > 0).astype(np.int32))


def test_loaded_and_stored_as_one_vector_of_lanes():
    """A load or store of a 3-lane vector is one LLVM load or store of <3 x T> aligned as a lane: the
    same 12 bytes as the array [3 x T] (a vector's store size is its lanes'), without converting
    the array lane by lane."""
    text = compile_source_to(_src("f32", 3), "v3.kc", "llvm", "cpu")
    assert "load <3 x float>, ptr" in text and "store <3 x float>" in text, text
    assert "[3 x float] undef" not in text
