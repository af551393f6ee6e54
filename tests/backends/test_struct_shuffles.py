"""Warp shuffles and read_first_lane of structs up to 16 bytes: moved as the struct's bytes in 32-bit
words (backends/llvm/lower_machine.py ``_as_words``: an aggregate goes through a private slot), every
field checked against numpy's indexing of the same lanes; a 4-byte struct (one word) and a 12-byte
one with a packed vec<u8, 3>; PTX through ptxas, AMDGCN assembled; over 16 bytes a located error."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas

SRC = """
struct P { a: f32, k: i16, h: f16, v: vec<u8, 3> }
struct Q { x: i16, y: u8 }
kernel k(o: ptr<P>, q: ptr<Q>) {
    let i = thread_id.x;
    let p = P { a: f32(i) * 1.5, k: -i16(i), h: f16(i), v: vec<u8, 3>(u8(i), u8(i + 1), u8(i + 2)) };
    o[3 * i] = shuffle_xor(p, 5);
    o[3 * i + 1] = shuffle(p, 31 - i32(i));
    o[3 * i + 2] = read_first_lane(p);
    q[i] = shuffle_down(Q { x: i16(i) - 7, y: u8(i * 3) }, 2);
}
"""
P = np.dtype([("a", np.float32), ("k", np.int16), ("h", np.float16), ("v", np.uint8, (3,))], align=True)
Q = np.dtype([("x", np.int16), ("y", np.uint8)], align=True)


def _expect(src: np.ndarray) -> dict:
    return {"a": src * 1.5, "k": -src, "h": src, "v": np.stack([src, src + 1, src + 2], 1)}


def test_struct_shuffles_move_every_field(target):
    o, q = np.zeros(96, P), np.zeros(32, Q)
    m = kc.compile(SRC, target=target, path="ss.kc")
    m.k[1, 32](o, q)
    lane = np.arange(32)
    for j, src in enumerate((lane ^ 5, 31 - lane, np.zeros(32, int))):
        got = o[j::3]
        for f, want in _expect(src).items():
            np.testing.assert_array_equal(got[f], want.astype(got[f].dtype), err_msg=f"slot {j} field {f}")
    down = np.where(lane + 2 < 32, lane + 2, lane)
    np.testing.assert_array_equal(q["x"], (down - 7).astype(np.int16))
    np.testing.assert_array_equal(q["y"], (down * 3).astype(np.uint8))


def test_struct_shuffles_ptx_and_amdgcn():
    ptx = compile_source_to(SRC, "ss.kc", "asm", "nvptx", "sm_90a")
    ptxas(ptx, "sm_90a")
    assert ptx.count("shfl.sync") >= 3 * 2 + 1  # 3 words for each P shuffle, 1 for Q
    for arch in ("gfx942", "gfx1100"):
        assert "ds_bpermute_b32" in compile_source_to(SRC, "ss.kc", "asm", "amdgcn", arch)


def test_struct_over_16_bytes_is_a_located_error():
    src = "struct W { a: f64, b: f64, c: f32 }\nkernel k(o: ptr<W>) { o[0] = shuffle_xor(o[1], 1); }\n"
    with pytest.raises(CompileError) as e:
        kc.compile(src, target="cpu", path="w.kc")
    assert "w.kc:2:" in str(e.value) and "at most 16 bytes" in str(e.value)
