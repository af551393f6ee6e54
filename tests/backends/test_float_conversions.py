"""Float conversions between f64, f32, f16 and bf16 on every target, bit-exact against ml_dtypes /
numpy (round to nearest even, subnormals kept, as GPUs convert), on random bit patterns."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc

from ..draws import fresh_rng

SRC = """
kernel convert(d: ptr<f64>, f: ptr<f32>, bd: ptr<bf16>, hd: ptr<f16>, bf: ptr<bf16>, hf: ptr<f16>,
               fh: ptr<f32>, fb: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        bd[i] = bf16(d[i]);
        hd[i] = f16(d[i]);
        bf[i] = bf16(f[i]);
        hf[i] = f16(f[i]);
        fh[i] = f32(hf[i]);
        fb[i] = f32(bf[i]);
    }
}
"""


def random_floats(rng, n: int, dtype, bits: int) -> np.ndarray:
    """Half random bit patterns (NaNs, infinities, subnormals included), half values near the
    target formats' ranges, and the edges of the f16/bf16 rounding."""
    raw = rng.integers(0, 2 ** bits, n, dtype=np.uint64).astype(f"u{bits // 8}").view(dtype).copy()
    k = n // 2
    raw[:k] = (rng.standard_normal(k) * np.exp2(rng.integers(-140, 20, k))).astype(dtype)
    raw[:8] = np.array([65504, 65519.99, 65520, -65536, 2 ** -24, 2 ** -25, 3 * 2 ** -26, 1e-45], dtype)
    return raw


def same_bits(got, want) -> int:
    g, w = np.asarray(got), np.asarray(want)
    nan = np.isnan(g.astype(np.float64)) & np.isnan(w.astype(np.float64))
    return int(((g.view(f"u{g.itemsize}") != w.view(f"u{w.itemsize}")) & ~nan).sum())


def assert_correctly_rounded(x: np.ndarray, got: np.ndarray, ref: np.ndarray) -> None:
    """``got`` equals ``ref`` except where ``ref`` rounded twice: ml_dtypes converts f64 to bf16
    through f32, which is off when the f32 lands on a bf16 midpoint. There, ``got`` must be the
    bf16 nearest to ``x`` in exact arithmetic (ties to even)."""
    from fractions import Fraction

    g, r = got.view(np.uint16), ref.view(np.uint16)
    for i in np.nonzero((g != r) & ~np.isnan(x))[0]:
        exact = Fraction(float(x[i]))
        cands = sorted({int(r[i]), int(r[i]) + 1, int(r[i]) - 1} - {-1, 65536},
                       key=lambda b: (abs(Fraction(float(np.uint16(b).view(ml_dtypes.bfloat16))) - exact)
                                      if np.isfinite(float(np.uint16(b).view(ml_dtypes.bfloat16))) else
                                      Fraction(10) ** 400, b & 1))
        assert int(g[i]) == cands[0], (float(x[i]), hex(int(g[i])), hex(cands[0]))


def test_conversions_are_exact(target):
    rng = fresh_rng()
    n = 1 << 18
    d, f = random_floats(rng, n, np.float64, 64), random_floats(rng, n, np.float32, 32)
    outs = [np.zeros(n, t) for t in (ml_dtypes.bfloat16, np.float16, ml_dtypes.bfloat16, np.float16,
                                     np.float32, np.float32)]
    kc.compile(SRC, target=target).convert[(n + 255) // 256, 256](d, f, *outs, n)
    bd, hd, bf, hf, fh, fb = outs
    with np.errstate(all="ignore"):
        assert_correctly_rounded(d, bd, d.astype(ml_dtypes.bfloat16))
        assert same_bits(hd, d.astype(np.float16)) == 0
        assert same_bits(bf, f.astype(ml_dtypes.bfloat16)) == 0
        assert same_bits(hf, f.astype(np.float16)) == 0
        assert same_bits(fh, hf.astype(np.float32)) == 0
        assert same_bits(fb, bf.astype(np.float32)) == 0


@pytest.mark.parametrize("name", ["__truncsfbf2", "__truncdfbf2", "__truncsfhf2", "__truncdfhf2",
                                  "__extendhfsf2"])
def test_cpu_builtins_are_registered(name):
    """The CPU target's stand-ins for compiler-rt resolve (a kernel calling them would crash else)."""
    import llvmlite.binding as llvm

    from kcompiler.backends.cpu import builtins
    from kcompiler.runtime.cpu import _host_target

    builtins.install(_host_target().target_machine(2))
    assert llvm.address_of_symbol(name)
