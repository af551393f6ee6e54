"""std.math's own f32 exp and log (no libdevice, no ocml): ulp error against float64 on 2^20 random
inputs per function (the documented bound is asserted), special values, and the f16/bf16 versions
over all 2^16 inputs. Runs on the CPU target (the same .kc source every target compiles) and CUDA."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc

RNG = np.random.default_rng()

SRC = """
import std.math
kernel ev[T: type](x: ptr<T>, e: ptr<T>, l: ptr<T>, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n {
        e[i] = math.exp(x[i]);
        l[i] = math.log(x[i]);
    }
}
"""

#: The documented bounds (docs/LANGUAGE.md, "Math"), in ulp of the f32 result.
BOUNDS = {"exp": 1.0, "log": 1.0}


def run(target, x):
    m = kc.compile(SRC, target=target, path="math_test.kc")
    e, l = np.empty_like(x), np.empty_like(x)
    m.ev[(x.size + 255) // 256, 256](x, e, l, x.size, T={np.float32: "f32", np.float16: "f16"}.get(
        x.dtype.type, "bf16"))
    return e, l


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulp of the f32 result (ulp of the binade of ref; 2^-149 below the normals)."""
    ref = ref.astype(np.float64)
    exp = np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -149)))
    return np.abs(y.astype(np.float64) - ref) / 2.0 ** np.maximum(exp - 23, -149)


def test_exp_and_log_f32_within_their_bounds(target):
    n = 1 << 20
    x_exp = RNG.uniform(-104.0, 88.8, n).astype(np.float32)                    # the whole finite range
    x_log = RNG.integers(1, 0x7F80_0000, n, dtype=np.uint32).view(np.float32)  # every positive binade
    e, _ = run(target, x_exp)
    _, l = run(target, x_log)
    with np.errstate(all="ignore"):
        for name, x, y, ref in (("exp", x_exp, e, np.exp(x_exp.astype(np.float64))),
                                ("log", x_log, l, np.log(x_log.astype(np.float64)))):
            ok = np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float32).max)
            err = ulp_error(y[ok], ref[ok])
            assert err.max() <= BOUNDS[name], (name, err.max(), x[ok][err.argmax()])
            assert (y[ok] == ref[ok].astype(np.float32)).mean() > 0.9  # mostly correctly rounded


def test_special_values(target):
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0 ** -149, 2.0 ** -130, 88.72283935546875,
                  np.float32(88.72283935546875) * np.float32(1 + 2 ** -23), -103.97208404541015625, -110.0,
                  np.finfo(np.float32).max], np.float32)
    e, l = run(target, x)
    with np.errstate(all="ignore"):
        want_e, want_l = np.exp(x.astype(np.float64)), np.log(x.astype(np.float64))
    assert np.array_equal(np.isnan(e), np.isnan(want_e)) and np.array_equal(np.isnan(l), np.isnan(want_l))
    with np.errstate(over="ignore"):
        want_e32 = want_e.astype(np.float32)  # exp(max f32) overflows f32: inf is the right answer
    fin_e, fin_l = np.isfinite(want_e32), ~np.isnan(want_l)
    assert (ulp_error(e[fin_e], want_e[fin_e]) <= 1).all()
    assert np.array_equal(np.isinf(e), np.isinf(want_e32))
    assert l[0] == -np.inf and l[1] == -np.inf and l[2] == np.inf and e[3] == 0.0 and e[2] == np.inf
    assert (ulp_error(l[fin_l & np.isfinite(want_l)], want_l[fin_l & np.isfinite(want_l)]) <= 1).all()


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_f16_and_bf16_through_f32(target, dtype):
    """Every 16-bit input: within 1 ulp of the correctly rounded result, and equal to it for more than
    99.9% (one f32 rounding, then one to 16 bits)."""
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    e, l = run(target, x)
    with np.errstate(all="ignore"):
        for y, ref in ((e, np.exp(x.astype(np.float64))), (l, np.log(x.astype(np.float64)))):
            want = ref.astype(dtype)
            yf, wf = y.astype(np.float64), want.astype(np.float64)
            both_nan = np.isnan(yf) & np.isnan(wf)
            same = (yf == wf) | both_nan
            assert same.mean() > 0.999
            bits_y = y.view(np.int16).astype(np.int64)
            bits_w = want.view(np.int16).astype(np.int64)
            assert (np.abs(bits_y - bits_w)[~same & np.isfinite(wf)] <= 1).all()


#: Documented bounds (ulp of the f32 result) of the functions ops.math runs.
OPS_BOUNDS = {"exp": 1.0, "log": 1.0, "sigmoid": 2.5, "silu": 3.0}
REFS = {"exp": np.exp, "log": np.log, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "silu": lambda v: v / (1 + np.exp(-v))}


@pytest.mark.parametrize("name", list(OPS_BOUNDS))
def test_ops_math_within_bounds(target, name):
    """kcompiler.ops.math on 2^20 inputs over the whole useful range (subnormal results included)
    plus 2^18 around zero, against float64."""
    from kcompiler import ops

    if name == "log":
        x = RNG.integers(1, 0x7F80_0000, 1 << 20, dtype=np.uint32).view(np.float32)
    else:
        x = np.concatenate([RNG.uniform(-120, 100, 1 << 20), RNG.standard_normal(1 << 18) * 4]).astype(np.float32)
    y = ops.math(name, x, target=target)
    assert y.shape == x.shape and y.dtype == np.float32
    with np.errstate(all="ignore"):
        ref = REFS[name](x.astype(np.float64))
    ok = np.abs(ref) <= np.finfo(np.float32).max
    err = ulp_error(y[ok], ref[ok])
    assert err.max() <= OPS_BOUNDS[name], (name, err.max(), x[ok][err.argmax()])
    with pytest.raises(ValueError, match="unknown function"):
        ops.math("erf", x)
