"""std.libm_exp (stdlib/libm_exp.kc): the accurate f32 exp2, exp10, expm1, log2, log10, log1p and pow,
and the f64 expd and logd (std.libm_exp_f64), all written in the kernel language.

Each f32 function: 2^20 fresh random inputs per run (half uniform over the interesting domain, half
random bit patterns: every binade, both signs, subnormals) plus targeted hard cases (reduction
boundaries, thresholds, the neighbourhood of 1 and of the zeros), against float64, within the
documented bound (BOUNDS); special values exactly; exact cases exact. pow on random (x, y) pairs
built so that y log2|x| covers the whole result range (x near 1, integer y, negative x, results
near overflow and in the subnormals) and C99 Annex F's special cases. f16/bf16 through the generic
wrappers on every 16-bit input. f64 exp and log against an extended-precision reference (x87 long
double where numpy has it, else mpmath) on 2^18 inputs each. Runs on the CPU target (the same .kc
source every target compiles) and CUDA."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.numerics.mathfns import compare_16

from ..draws import fresh_rng

RNG = fresh_rng()

UNARY = ("exp2", "exp10", "expm1", "log2", "log10", "log1p")

SRC = "import std.libm_exp as lx\nimport std.libm_exp_f64 as lxd\n" + "".join(f"""
kernel k_{f}[T: type](x: ptr<T>, y: ptr<T>, n: i64) {{
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n {{ y[i] = lx.{f}(x[i]); }}
}}
""" for f in UNARY) + """
kernel k_pow[T: type](x: ptr<T>, y: ptr<T>, z: ptr<T>, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n { z[i] = lx.pow(x[i], y[i]); }
}
kernel k_f32(x: ptr<f32>, y: ptr<f32>, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n {
        let v = x[i];
        y[i] = lx.exp2f(v) + lx.exp10f(v) + lx.expm1f(v) + lx.log2f(v) + lx.log10f(v) + lx.log1pf(v)
            + lx.powf(v, v);
    }
}
kernel k_expd(x: ptr<f64>, y: ptr<f64>, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n { y[i] = lxd.expd(x[i]); }
}
kernel k_logd(x: ptr<f64>, y: ptr<f64>, n: i64) {
    let i = i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x);
    if i < n { y[i] = lxd.logd(x[i]); }
}
"""

#: The documented bounds in ulp (stdlib/libm_exp.kc; CUDA's are exp2f 2, exp10f 2, expm1f 1, log2f 1,
#: log10f 2, log1pf 1, powf 4, exp 1, log 1). Measured maxima are about 0.53-0.6 (f32) and 0.53 (f64).
BOUNDS = {"exp2": 1.0, "exp10": 1.0, "expm1": 1.0, "log2": 1.0, "log10": 1.0, "log1p": 1.0, "pow": 1.0,
          "expd": 1.0, "logd": 1.0}

#: float64 references (accurate to well under 2^-50 relative: far below an f32 ulp).
REF = {"exp2": np.exp2, "exp10": lambda x: np.power(10.0, x), "expm1": np.expm1, "log2": np.log2,
       "log10": np.log10, "log1p": np.log1p}

#: where the uniform half of each random sample is drawn (the function's finite, non-trivial range)
DOMAIN = {"exp2": (-151.0, 128.0), "exp10": (-45.5, 38.6), "expm1": (-18.0, 88.8), "log2": (0.0, 1e4),
          "log10": (0.0, 1e4), "log1p": (-1.0, 1e3)}

TYPES = {np.dtype(np.float32): "f32", np.dtype(np.float16): "f16", np.dtype(ml_dtypes.bfloat16): "bf16",
         np.dtype(np.float64): "f64"}

_MODULES: dict[str, object] = {}


def module(target):
    if target not in _MODULES:
        _MODULES[target] = kc.compile(SRC, target=target, path="libm_exp_test.kc")
    return _MODULES[target]


def run(target, name, *args):
    """lx.<name>(args...) elementwise; the generic wrappers take T from the arrays' dtype."""
    args = [np.ascontiguousarray(a) for a in args]
    out = np.empty_like(args[0])
    n = out.size
    kern = getattr(module(target), "k_" + name)
    grid = ((n + 255) // 256, 256)
    if name in ("expd", "logd"):
        kern[grid](*args, out, n)
    else:
        kern[grid](*args, out, n, T=TYPES[args[0].dtype])
    return out


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulp of the f32 result (ulp of ref's binade; 2^-149 below the normals)."""
    ref = np.asarray(ref, np.float64)
    e = np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126)))
    return np.abs(np.asarray(y, np.float64) - ref) / 2.0 ** (e - 23)


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def bits32(n: int) -> np.ndarray:
    """n random f32 bit patterns (every binade, both signs, subnormals, inf and NaN)."""
    return RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


def around(points, width: int = 64) -> np.ndarray:
    """The f32 neighbours of each point: every f32 within +-width ulp."""
    p = np.asarray(points, np.float32).view(np.int32).astype(np.int64)
    out = (p[:, None] + np.arange(-width, width + 1)[None, :]).ravel()
    return out.astype(np.int32).view(np.float32)


def hard_cases(name: str) -> np.ndarray:
    """Inputs next to each function's reduction boundaries, thresholds and zeros."""
    ln2 = np.log(2.0)
    if name == "exp2":
        pts = np.concatenate([np.arange(-150, 128) + 0.5, np.arange(-151, 129), [-149.5, -126.0, 127.99]])
    elif name == "exp10":
        k = np.arange(-151, 129)
        pts = np.concatenate([(k + 0.5) * np.log10(2.0), np.arange(-45, 39), [38.5318394, -45.1544993]])
    elif name == "expm1":
        k = np.arange(-26, 129)
        pts = np.concatenate([(k + 0.5) * ln2, k * ln2, [88.7228317, -17.5, 2.0 ** -25, -(2.0 ** -25), 1e-3]])
    elif name in ("log2", "log10"):
        e = 2.0 ** np.arange(-149, 128, dtype=np.float64)
        pts = np.concatenate([e, e * np.sqrt(2.0), 10.0 ** np.arange(-38, 39)])
    else:  # log1p
        pts = np.concatenate([2.0 ** np.arange(-24, 128, dtype=np.float64) * np.sqrt(2.0) - 1,
                              -(2.0 ** -np.arange(1, 25, dtype=np.float64)), 2.0 ** -np.arange(1, 26, dtype=np.float64),
                              [-1 + 2.0 ** -24, 1e30, 3e38]])
    with np.errstate(over="ignore"):
        return around(pts.astype(np.float32))


def check_f32(name, x, y, bound):
    """Finite results within bound ulp; NaN exactly where the reference is NaN; overflow to the
    infinity of the right sign; returns (max error, fraction correctly rounded)."""
    with np.errstate(all="ignore"):
        ref = REF[name](x.astype(np.float64))
        r32 = ref.astype(np.float32)
    assert np.array_equal(np.isnan(y), np.isnan(ref)), (name, x[np.isnan(y) != np.isnan(ref)][:8])
    inf = np.isinf(r32)
    assert np.array_equal(y[inf], r32[inf]), (name, x[inf][y[inf] != r32[inf]][:8])
    fin = np.isfinite(r32)
    err = ulp_error(y[fin], ref[fin])
    worst = x[fin][err.argmax()]
    assert err.max() <= bound, (name, err.max(), worst)
    return err.max(), (y[fin] == r32[fin]).mean()


@pytest.mark.parametrize("name", UNARY)
def test_f32_random_and_hard_cases_within_bound(target, name):
    n = 1 << 19
    x = np.concatenate([RNG.uniform(*DOMAIN[name], n).astype(np.float32), bits32(n), hard_cases(name)])
    y = run(target, name, x)
    _, same = check_f32(name, x, y, BOUNDS[name])
    assert same > 0.95, (name, same)             # most are correctly rounded (docs/math.md: 97-99.9%)


@pytest.mark.slow(sample=3)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("name", UNARY)
def test_f32_dense_binades(target, name):
    """Every f32 in the binades where the error peaks (reduction boundaries, cancellation near 0)."""
    lows = {"exp2": [0.25, -0.25], "exp10": [0.125, -0.125], "expm1": [0.25, -0.25],
            "log2": [1.0, 0.5], "log10": [1.0, 0.5], "log1p": [0.25, -0.25]}[name]
    xs = []
    for lo in lows:
        b = int(np.float32(abs(lo)).view(np.uint32))
        xs.append(np.copysign(np.arange(b, b + (1 << 23), dtype=np.uint32).view(np.float32), lo))
    x = np.concatenate(xs).astype(np.float32)
    check_f32(name, x, run(target, name, x), BOUNDS[name])


def test_f32_special_values(target):
    inf, nan, tiny, fmax = np.inf, np.nan, 2.0 ** -149, np.finfo(np.float32).max
    cases = {
        "exp2": [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan), (128.0, inf), (-150.0, 0.0),
                 (-149.0, tiny), (-149.5, tiny), (-151.0, 0.0), (tiny, 1.0), (fmax, inf), (-fmax, 0.0),
                 (np.float32(128) - np.float32(2.0 ** -17), 2.0 ** (128 - 2.0 ** -17))],
        "exp10": [(0.0, 1.0), (-0.0, 1.0), (inf, inf), (-inf, 0.0), (nan, nan), (fmax, inf), (-fmax, 0.0),
                  (38.531837463378906, 3.4028e38), (38.53184127807617, inf),     # the last finite, the first inf
                  (-45.15449905395508, tiny), (-45.154502868652344, 0.0)],        # the last nonzero, the first 0
        "expm1": [(0.0, 0.0), (-0.0, -0.0), (inf, inf), (-inf, -1.0), (nan, nan), (tiny, tiny), (-tiny, -tiny),
                  (88.72283172607421875, 3.4027e38), (88.72283935546875, inf), (-18.0, -1.0), (-fmax, -1.0),
                  (fmax, inf)],
        "log2": [(1.0, 0.0), (0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (nan, nan), (-1.0, nan),
                 (tiny, -149.0), (-tiny, nan), (fmax, 128.0)],
        "log10": [(1.0, 0.0), (0.0, -inf), (-0.0, -inf), (inf, inf), (-inf, nan), (nan, nan), (-1.0, nan),
                  (tiny, -44.85), (fmax, 38.53)],
        "log1p": [(0.0, 0.0), (-0.0, -0.0), (-1.0, -inf), (-2.0, nan), (inf, inf), (-inf, nan), (nan, nan),
                  (tiny, tiny), (-tiny, -tiny), (fmax, 88.72)],
    }
    for name, pairs in cases.items():
        x = np.array([p[0] for p in pairs], np.float32)
        want = np.array([p[1] for p in pairs], np.float64)
        y = run(target, name, x)
        for xi, yi, wi in zip(x, y, want):
            if np.isnan(wi):
                assert np.isnan(yi), (name, xi, yi)
            elif np.isinf(wi) or wi == 0 or xi == wi or abs(wi) == tiny:
                assert yi == wi and np.signbit(yi) == np.signbit(wi), (name, xi, yi, wi)
            else:
                with np.errstate(all="ignore"):
                    ref = REF[name](np.float64(xi))
                assert np.isfinite(yi) and ulp_error(yi, ref) <= BOUNDS[name], (name, xi, yi, ref)


def test_f32_exact_cases(target):
    """2^n, 10^n (n = 0..10), log2(2^n), log10(10^n) and pow at small integer powers are exact."""
    n = np.arange(-149, 128).astype(np.float32)
    assert np.array_equal(run(target, "exp2", n), np.exp2(n.astype(np.float64)).astype(np.float32))
    assert np.array_equal(run(target, "log2", np.exp2(n.astype(np.float64)).astype(np.float32)), n)
    k = np.arange(0, 11).astype(np.float32)
    p10 = (10.0 ** k.astype(np.float64)).astype(np.float32)
    assert np.array_equal(run(target, "exp10", k), p10)
    assert np.array_equal(run(target, "log10", p10), k)
    x = np.concatenate([RNG.uniform(-100, 100, 1 << 12).astype(np.float32), bits32(1 << 12)])
    x = x[np.isfinite(x)]
    assert np.array_equal(run(target, "pow", x, np.ones_like(x)), x)
    i = np.arange(-4096, 4097).astype(np.float32)
    assert np.array_equal(run(target, "pow", i, np.full_like(i, 2.0)), i * i)
    assert np.array_equal(run(target, "pow", i[::16], np.full_like(i[::16], 3.0)), i[::16] ** 3)
    m = np.arange(-20, 21).astype(np.float32)
    assert np.array_equal(run(target, "pow", np.full_like(m, 2.0), m), np.exp2(m))
    assert np.array_equal(run(target, "pow", np.full_like(m, -2.0), m), (-2.0) ** m.astype(np.float64))


def test_f32_direct_names(target):
    """The f32 kernels under their own names (exp2f, ..., powf) are the generic wrappers' f32 path."""
    x = RNG.uniform(0.5, 3.0, 1 << 12).astype(np.float32)
    out = np.empty_like(x)
    module(target).k_f32[(x.size + 255) // 256, 256](x, out, x.size)
    want = sum(run(target, f, x).astype(np.float64) for f in UNARY) + run(target, "pow", x, x)
    assert np.allclose(out, want, rtol=1e-6)


# --- pow -------------------------------------------------------------------------------------------

def pow_sample(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) pairs: y chosen so that y log2|x| spans the result range (overflow to the subnormals),
    x of every binade, x near 1 (with huge y), negative x with integer y (odd and even), uniform
    pairs, random bit patterns for both, results near the overflow and underflow thresholds."""
    def y_for(x, lo, hi):
        with np.errstate(all="ignore"):
            return (RNG.uniform(lo, hi, x.size) / np.log2(np.abs(x.astype(np.float64)))).astype(np.float32)

    m = n // 8
    xs, ys = [], []
    x = RNG.integers(1, 0x7F80_0000, m, dtype=np.uint32).view(np.float32)
    xs.append(x), ys.append(y_for(x, -152, 130))
    x = RNG.uniform(0, 10, m).astype(np.float32)
    xs.append(x), ys.append(RNG.uniform(-40, 40, m).astype(np.float32))
    x = (1 + RNG.uniform(-1, 1, m) * 2.0 ** -RNG.integers(1, 24, m)).astype(np.float32)
    x[x == 1] = 0.75
    xs.append(x), ys.append(y_for(x, -152, 130))
    x = -RNG.uniform(0, 10, m).astype(np.float32)
    xs.append(x), ys.append(np.round(RNG.uniform(-45, 45, m)).astype(np.float32))
    x = -(1 + RNG.uniform(0, 1, m) * 2.0 ** -RNG.integers(1, 24, m)).astype(np.float32)
    x[x == -1] = -1.5
    xs.append(x), ys.append((np.round(y_for(x, -150, 127) / 2) * 2 + 1).astype(np.float32))
    xs.append(bits32(m)), ys.append(bits32(m))
    x = RNG.integers(1, 0x7F80_0000, m, dtype=np.uint32).view(np.float32)
    xs.append(x), ys.append(y_for(x, -152, -120))
    x = RNG.integers(1, 0x7F80_0000, m, dtype=np.uint32).view(np.float32)
    xs.append(x), ys.append(y_for(x, 120, 128.5))
    return np.concatenate(xs), np.concatenate(ys)


def pow_reference(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """pow(x, y) in float64 with C99's special cases for NaN (Annex F.9.4.4, which CUDA's powf and
    std.math's pow follow): pow(x, +-0) = 1 and pow(+1, y) = 1 for every x and y, a NaN included. numpy
    calls glibc, which gives NaN there for a signaling NaN (ISO/IEC TS 18661-1) and keeps a 16-bit
    signaling NaN signaling through astype: random 16-bit pairs hit (sNaN, 0) or (1, sNaN) in about one
    run in ten. The NaNs are made quiet first."""
    x, y = (np.asarray(v).astype(np.float64) for v in (x, y))
    x, y = (np.where(np.isnan(v), np.nan, v) for v in (x, y))
    with np.errstate(all="ignore"):
        return np.power(x, y)


def ulp_error_past_the_top(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """ulp_error with the exponent unbounded above, for results at f32's overflow threshold: +-inf read
    as +-2^128 (IEEE 754 rounds to inf exactly what rounds to 2^128 or more with an unbounded exponent)
    and the ulp 2^104 of f32's top binade past it. A result within b ulp there is within b ulp here:
    FLT_MAX for a reference just past FLT_MAX + ulp/2, inf for one just below it."""
    yy = np.asarray(y, np.float64)
    yy = np.where(np.isinf(yy), np.copysign(2.0 ** 128, yy), yy)
    ref = np.asarray(ref, np.float64)
    e = np.minimum(np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126))), 127)
    return np.abs(yy - ref) / 2.0 ** (e - 23)


def test_pow_f32_random_pairs(target):
    x, y = pow_sample(1 << 20)
    z = run(target, "pow", x, y)
    ref = pow_reference(x, y)
    with np.errstate(all="ignore"):
        r32 = ref.astype(np.float32)
    assert np.array_equal(np.isnan(z), np.isnan(ref))
    # Overflow to the infinity of the right sign, or within the bound of the threshold: the pairs built to
    # land near 2^128 put about 1.4e-3 references a run in the one ulp [FLT_MAX, 2^128), where a result
    # within the bound may round the other way (51 of 790,000 such pairs did, each within 5e-4 ulp of the
    # midpoint: FLT_MAX for inf or inf for FLT_MAX, 0.5009 ulp), which the plain ulp_error called an
    # infinite error: a ~1e-7 flake a run.
    inf = np.isinf(r32)
    off = inf & (z != r32)
    assert (ulp_error_past_the_top(z[off], ref[off]) <= BOUNDS["pow"]).all(), (x[off][:4], y[off][:4], z[off][:4])
    fin = np.isfinite(r32)
    err = ulp_error_past_the_top(z[fin], ref[fin])
    assert err.max() <= BOUNDS["pow"], (err.max(), x[fin][err.argmax()], y[fin][err.argmax()])
    assert (z[fin] == r32[fin]).mean() > 0.99
    zero = fin & (r32 == 0)
    assert np.array_equal(np.signbit(z[zero]), np.signbit(r32[zero]))


def test_pow_c99_special_cases(target):
    """C99 Annex F (F.9.4.4), every case, with the signs of zeros and infinities."""
    inf, nan = np.inf, np.nan
    cases = [
        # pow(x, +-0) = 1 for any x, NaN included; pow(+1, y) = 1 for any y, NaN included
        (nan, 0.0, 1.0), (nan, -0.0, 1.0), (inf, 0.0, 1.0), (-inf, -0.0, 1.0), (0.0, 0.0, 1.0), (-3.0, 0.0, 1.0),
        (1.0, nan, 1.0), (1.0, inf, 1.0), (1.0, -inf, 1.0), (1.0, 1e30, 1.0),
        # NaN otherwise
        (nan, 1.0, nan), (2.0, nan, nan), (-1.0, nan, nan), (nan, inf, nan),
        # pow(+-0, y): odd integer y < 0 -> +-inf; other y < 0 -> +inf; odd y > 0 -> +-0; other y > 0 -> +0
        (0.0, -3.0, inf), (-0.0, -3.0, -inf), (-0.0, -2.0, inf), (-0.0, -0.5, inf), (-0.0, -inf, inf),
        (0.0, 3.0, 0.0), (-0.0, 3.0, -0.0), (-0.0, 2.0, 0.0), (-0.0, 0.5, 0.0), (-0.0, inf, 0.0),
        (-0.0, -1e30, inf), (-0.0, 1e30, 0.0),
        # pow(-1, +-inf) = 1; pow(x, -inf): |x| < 1 -> +inf, |x| > 1 -> +0; pow(x, +inf) the opposite
        (-1.0, inf, 1.0), (-1.0, -inf, 1.0), (0.5, -inf, inf), (-0.5, -inf, inf), (2.0, -inf, 0.0),
        (-2.0, -inf, 0.0), (0.5, inf, 0.0), (-0.5, inf, 0.0), (2.0, inf, inf), (-2.0, inf, inf),
        # pow(-inf, y): odd y < 0 -> -0, other y < 0 -> +0, odd y > 0 -> -inf, other y > 0 -> +inf
        (-inf, -3.0, -0.0), (-inf, -2.0, 0.0), (-inf, -0.5, 0.0), (-inf, 3.0, -inf), (-inf, 2.0, inf),
        (-inf, 0.5, inf), (inf, -2.0, 0.0), (inf, 0.5, inf), (inf, -inf, 0.0), (inf, inf, inf),
        # negative finite x: non-integer y -> NaN, integer y -> the sign of (-1)^y
        (-2.0, 0.5, nan), (-2.0, -1.5, nan), (-2.0, 3.0, -8.0), (-2.0, 2.0, 4.0), (-2.0, -1.0, -0.5),
        (-1.0, 16777217.0, 1.0), (-1.0, 16777215.0, -1.0), (-1.0, 1e30, 1.0), (-1.0, -3.0, -1.0),
        # overflow and underflow, with the sign; subnormal results
        (10.0, 39.0, inf), (-10.0, 39.0, -inf), (10.0, -46.0, 0.0), (-10.0, -47.0, -0.0), (-10.0, -46.0, 0.0),
        (2.0, 128.0, inf), (2.0, -149.0, 2.0 ** -149), (-2.0, -149.0, -(2.0 ** -149)), (2.0, -150.0, 0.0),
        (0.5, 149.0, 2.0 ** -149), (2.0, -126.5, 2.0 ** -126.5), (3e38, 2.0, inf), (1e-30, 5.0, 0.0),
        (1.0000001, 1e30, inf), (0.99999994, 1e30, 0.0), (2.0 ** -149, 1.0, 2.0 ** -149), (2.0 ** -149, 0.5, 2.0 ** -74.5),
    ]
    x = np.array([c[0] for c in cases], np.float32)
    y = np.array([c[1] for c in cases], np.float32)
    want = np.array([c[2] for c in cases], np.float64)
    z = run(target, "pow", x, y)
    for xi, yi, zi, wi in zip(x, y, z, want):
        if np.isnan(wi):
            assert np.isnan(zi), (xi, yi, zi)
        else:
            w32 = np.float32(wi)
            assert zi == w32 and np.signbit(zi) == np.signbit(w32), (xi, yi, zi, wi)


# --- f16 and bf16 through f32 ----------------------------------------------------------------------

def check_16(y, ref, dtype):
    """Within 1 ulp of the correctly rounded 16-bit result everywhere, equal to it for > 99.9%."""
    same, dist = compare_16(y, ref, dtype)
    assert same > 0.999 and dist <= 1, (same, dist)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("name", UNARY)
def test_f16_and_bf16_every_input(target, name, dtype):
    x = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    y = run(target, name, x)
    assert y.dtype == np.dtype(dtype)
    with np.errstate(all="ignore"):
        check_16(y, REF[name](x.astype(np.float64)), dtype)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_pow_f16_and_bf16(target, dtype):
    """Every 16-bit x against a set of exponents, and random 16-bit pairs."""
    xs = np.arange(1 << 16, dtype=np.uint16).view(dtype)
    exps = [0.5, 2.0, 3.0, -1.0, -2.5, 7.0, 0.1]
    x = np.concatenate([xs] * len(exps) + [RNG.integers(0, 1 << 16, 1 << 17, dtype=np.uint16).view(dtype)])
    y = np.concatenate([np.full(1 << 16, e, dtype) for e in exps]
                       + [RNG.integers(0, 1 << 16, 1 << 17, dtype=np.uint16).view(dtype)])
    z = run(target, "pow", x, y)
    check_16(z, pow_reference(x, y), dtype)


def test_f64_generic_wrappers_refused():
    m = kc.compile(SRC, target="cpu", path="libm_exp_f64.kc")
    x = np.ones(4)
    for name in UNARY:
        with pytest.raises(CompileError, match=f"std.math.{name} has no f64 version yet"):
            getattr(m, "k_" + name)[1, 32](x, np.empty_like(x), 4, T="f64")
    with pytest.raises(CompileError, match="std.math.pow has no f64 version yet"):
        m.k_pow[1, 32](x, x, np.empty_like(x), 4, T="f64")


# --- f64 -------------------------------------------------------------------------------------------

LONG = np.finfo(np.longdouble).nmant >= 63       # x87 extended (or quad): 11+ bits beyond double


def ref64(name: str, x: np.ndarray) -> np.ndarray:
    """exp or log of float64 x in extended precision: numpy's long double where it has 64+ bits,
    else mpmath (as float64 pairs hi + lo in a long-double-free way)."""
    if LONG:
        with np.errstate(all="ignore"):
            return (np.exp if name == "expd" else np.log)(x.astype(np.longdouble))
    import mpmath as mp

    mp.mp.prec = 120
    fn = mp.exp if name == "expd" else mp.log
    return np.array([fn(mp.mpf(float(v))) if np.isfinite(v) and (name == "expd" or v > 0) else
                     (np.exp(v) if name == "expd" else np.log(v)) for v in x], dtype=object)


def ulp_error64(y: np.ndarray, ref) -> np.ndarray:
    if LONG:
        ref = np.asarray(ref, np.longdouble)
        e = np.floor(np.log2(np.maximum(np.abs(ref), np.longdouble(2.0) ** -1022)))
        return (np.abs(y.astype(np.longdouble) - ref) / np.longdouble(2.0) ** (e - 52)).astype(np.float64)
    import mpmath as mp

    out = []
    for yi, r in zip(y.tolist(), ref):
        e = max(int(mp.floor(mp.log(abs(r), 2))), -1022) if r != 0 else -1022
        out.append(float(abs(mp.mpf(yi) - r) / mp.mpf(2) ** (e - 52)))
    return np.array(out)


def f64_sample(name: str, n: int) -> np.ndarray:
    if not LONG:
        n = n // 16                                # mpmath: fewer points
    q = n // 4
    if name == "expd":
        parts = [RNG.uniform(-745.2, 709.8, q), RNG.uniform(-1, 1, q) * 2.0 ** RNG.integers(-60, 1, q),
                 RNG.uniform(-745.2, -708.0, q), RNG.uniform(-0.35, 0.35, q)]
    else:
        parts = [RNG.integers(1, 0x7FF0_0000_0000_0000, 2 * q, dtype=np.uint64).view(np.float64),
                 1 + RNG.uniform(-1, 1, q) * 2.0 ** RNG.integers(-52, 0, q), RNG.uniform(0.7, 1.42, q)]
    return np.concatenate(parts)


@pytest.mark.parametrize("name", ["expd", "logd"])
def test_f64_within_bound(target, name):
    x = f64_sample(name, 1 << 18)
    y = run(target, name, x)
    ref = ref64(name, x)
    with np.errstate(all="ignore"):
        fin = np.isfinite(np.asarray(ref, np.float64))
    assert np.isfinite(y[fin]).all()
    err = ulp_error64(y[fin], ref[fin])
    assert err.max() <= BOUNDS[name], (name, err.max(), x[fin][err.argmax()])
    if LONG:
        assert (err <= 0.5).mean() > 0.99                 # all but ~0.2% are correctly rounded


def test_f64_special_values(target):
    inf, nan = np.inf, np.nan
    dmax, dmin, dtiny = np.finfo(np.float64).max, 2.0 ** -1022, 2.0 ** -1074
    ln2 = np.log(2.0)
    x = np.array([0.0, -0.0, inf, -inf, nan, dtiny, dmax, -dmax,
                  709.782712893384, np.nextafter(709.782712893384, inf),     # the last finite, the first inf
                  -745.1332191019411, -745.1332191019412,    # e^x = 2^-1075 (1 + 1e-13), (1 - 1.5e-14)
                  -1073 * ln2, -1060.5 * ln2, -1022 * ln2])                # subnormal and smallest normal
    y = run(target, "expd", x)
    assert y[0] == 1 and y[1] == 1 and y[2] == inf and y[3] == 0 and np.isnan(y[4]) and y[5] == 1
    assert y[6] == inf and y[7] == 0 and np.isfinite(y[8]) and y[8] > 1.79e308 and y[9] == inf
    assert y[10] == dtiny and y[11] == 0.0
    assert y[12] == 2 * dtiny and 0.99 * dmin < y[14] < 1.01 * dmin
    i = [8, 12, 13, 14]
    assert ulp_error64(y[i], ref64("expd", x[i])).max() <= BOUNDS["expd"]
    x = np.array([1.0, 0.0, -0.0, inf, -inf, nan, -1.0, -dtiny, dtiny, dmin, dmax, np.e, 2.0, 0.5, 3 * dtiny])
    y = run(target, "logd", x)
    assert y[0] == 0 and not np.signbit(y[0]) and y[1] == -inf and y[2] == -inf and y[3] == inf
    assert np.isnan(y[4]) and np.isnan(y[5]) and np.isnan(y[6]) and np.isnan(y[7])
    fin = x[8:]
    assert ulp_error64(y[8:], ref64("logd", fin)).max() <= BOUNDS["logd"]
    # every power of two: e ln2, rounded once
    n = np.arange(-1074, 1024)
    y = run(target, "logd", np.exp2(n.astype(np.float64)))
    assert ulp_error64(y, ref64("logd", np.exp2(n.astype(np.float64)))).max() <= 0.5 + 1e-3
