"""Warp shuffles and read_first_lane of any value up to 16 bytes (``vec<f32, 4>``, ``vec<f16, 8>``,
``vec<i64, 2>``, f64, i64, small ones), moved as 32-bit words (backends/llvm/lower_machine.py
``_as_words``), run against numpy's indexing of the same lanes; PTX through ptxas; AMDGCN's words
counted."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas

SRC = """
kernel k(x: ptr<T>, o: ptr<T>) {
    let i = thread_id.x;
    let v = x[i];
    o[6 * i] = shuffle_xor(v, 5);
    o[6 * i + 1] = shuffle_up(v, 3);
    o[6 * i + 2] = shuffle_down(v, 2);
    o[6 * i + 3] = shuffle(v, 31 - i32(i));
    o[6 * i + 4] = read_first_lane(v);
    if i % 3 != 0 { o[6 * i + 5] = read_first_lane(v); }
}
"""

#: (type, numpy dtype, lanes per value).
TYPES = [("vec<f32, 4>", np.float32, 4), ("vec<f16, 8>", np.float16, 8), ("vec<i64, 2>", np.int64, 2),
         ("vec<f64, 2>", np.float64, 2), ("vec<u32, 3>", None, 3), ("f64", np.float64, 1), ("i64", np.int64, 1),
         ("vec<u8, 4>", np.uint8, 4), ("vec<bf16, 4>", None, 4), ("i8", np.int8, 1), ("vec<u16, 2>", np.uint16, 2)]


def _lanes() -> dict[str, np.ndarray]:
    """The source lane of each of the 32 lanes, per result slot (CUDA's rules: a source outside the
    warp reads the lane's own value; read_first_lane: the lowest active lane)."""
    l = np.arange(32)
    return {"xor": l ^ 5, "up": np.where(l >= 3, l - 3, l), "down": np.where(l + 2 < 32, l + 2, l),
            "idx": 31 - l, "first": np.zeros(32, int), "first_active": np.full(32, 1)}


@pytest.mark.parametrize("t,dt,n", [x for x in TYPES if x[1] is not None], ids=[x[0] for x in TYPES if x[1] is not None])
def test_shuffles_move_every_byte(target, t, dt, n):
    rng = np.random.default_rng(5)
    raw = rng.integers(0, 256, 32 * n * np.dtype(dt).itemsize, dtype=np.uint8)
    x = raw.view(dt).reshape(32, n) if n > 1 else raw.view(dt)
    o = np.zeros((32 * 6,) + x.shape[1:], dt)
    m = kc.compile(SRC.replace("T", t), target=target, path="shuffle.kc")
    m.k[1, 32](x, o)
    src = _lanes()
    got = o.reshape((32, 6) + x.shape[1:])
    for j, key in enumerate(("xor", "up", "down", "idx", "first")):
        np.testing.assert_array_equal(_bytes(got[:, j]), _bytes(x[src[key]]), err_msg=key)
    active = np.arange(32) % 3 != 0
    np.testing.assert_array_equal(_bytes(got[active, 5]), _bytes(x[np.full(active.sum(), 1)]))


def _bytes(a: np.ndarray) -> np.ndarray:
    """The bytes of ``a`` (compared as bytes: NaN payloads must move too)."""
    return np.ascontiguousarray(a).view(np.uint8)


WIDE = """
kernel k(x: ptr<vec<f32, 4>>, h: ptr<vec<f16, 8>>, d: ptr<f64>) {
    let i = thread_id.x;
    x[i] = shuffle_xor(x[i], 1);
    h[i] = shuffle_down(h[i], 1);
    d[i] = read_first_lane(d[i]);
}
"""


def test_ptx_moves_words_and_ptxas_takes_it():
    ptx = compile_source_to(WIDE, "w.kc", "asm", "nvptx", "sm_80")
    assert ptx.count("shfl.sync.bfly.b32") == 4 and ptx.count("shfl.sync.down.b32") == 4, ptx
    ptxas(ptx, "sm_80")


@pytest.mark.parametrize("arch,wave", [("gfx942", 64), ("gfx1100", 32)])
def test_amdgcn_moves_words(arch, wave):
    text = compile_source_to(WIDE, "w.kc", "asm", "amdgcn", arch)
    assert text.count("ds_bpermute_b32") >= 8 and text.count("v_readfirstlane_b32") >= 2, text


def test_too_wide_is_a_located_error():
    src = "kernel k(x: ptr<vec<f64, 4>>) {\n    x[0] = shuffle_xor(x[0], 1);\n}\n"
    with pytest.raises(CompileError) as e:
        compile_source_to(src, "w.kc", "llvm", "cpu")
    assert "w.kc:2:24" in str(e.value) and "at most 16 bytes, found vec<f64, 4> (32 bytes)" in str(e.value)
