"""Module / Kernel / launch over the real devices, on every target present (cpu, and cuda with a GPU),
with a kernel built as IR directly (no frontend)."""
from __future__ import annotations

import numpy as np
import pytest

from kcompiler.backends import get_target
from kcompiler.ir.types import F32, I32, PointerType
from kcompiler.runtime.module import Module, device_for

from ..runtime_fakes import IrProgram, global_index, ir_kernel


def _vadd(b, a, bb, out, n):
    i = global_index(b)
    then, _ = b.if_(b.cmp("lt", i, n))
    with b.at(then):
        b.store(b.elemptr(out, i), b.add(b.load(b.elemptr(a, i)), b.load(b.elemptr(bb, i))))


def vadd_module(target: str) -> Module:
    canonical = {"cuda": "nvptx"}.get(target, target)
    dev = device_for(canonical)
    P = PointerType(F32)
    tgt = get_target(canonical, dev.arch if canonical == "nvptx" else None)
    return Module(IrProgram(tgt, {"vadd": ir_kernel("vadd", [("a", P), ("b", P), ("out", P),
                                                             ("n", I32)], _vadd)}), dev)


@pytest.mark.parametrize("n", [1, 255, 1000 + 3])
def test_vadd_numpy(target, n):
    m = vadd_module(target)
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    m.vadd[(n + 127) // 128, 128](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)
    out2 = np.full(n, np.nan, np.float32)
    m.vadd[((n + 63) // 64,), (64, 1, 1)](a, b, out2, np.int32(n))
    np.testing.assert_array_equal(out2, a + b)


def test_arguments_checked_before_the_device_sees_them(target):
    m = vadd_module(target)
    a = np.zeros(8, np.float32)
    with pytest.raises(TypeError, match="vadd: parameter 'b' expects ptr<f32>.*float64"):
        m.vadd[1, 8](a, np.zeros(8), a, 8)
    with pytest.raises(ValueError, match="vadd: parameter 'n' expects i32, but 4294967296"):
        m.vadd[1, 8](a, a, a, 2**32)
