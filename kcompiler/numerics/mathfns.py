"""The functions of std.math as data: each one's arity, documented error bound, CUDA's bound, a
float64 reference and the inputs that exercise it. kcompiler.ops.math, the tests and
benchmarks/bench_math.py (which measures every f32 input on a GPU and writes docs/math.md) all read
this table, so a function added here is called, tested and measured the same way everywhere.

Bounds are |result - exact| in ulp of the f32 result (see :func:`ulp_error`): a correctly rounded
function has 0.5. ``cuda`` is the bound the CUDA C++ Programming Guide gives for the single-precision
function of the same name (Appendix "Mathematical Functions", "Single-Precision Floating-Point
Functions"; None where CUDA has no such function); CUDA counts ulps from the correctly rounded
result (its 0 is correctly rounded), so its n is n + 0.5 in this module's measure.
References are float64 formulas written for any array namespace with numpy's names (numpy on the
host, torch on the GPU; ``xp.erf`` and friends are supplied for numpy here); float64 is more than
enough to round an f32 result except within 2^-29 ulp of a rounding boundary, which is below what
these tables report.
"""
from __future__ import annotations

import math as _m
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np


@dataclass(frozen=True)
class MathFunction:
    """One std.math function. ``bound``: the documented max ulp error of the accurate f32 version
    (fast versions have no bound: docs/math.md gives what they measured); ``domain``:
    (lo, hi) of the uniform sample that the CI check draws besides random bit patterns; ``f64``: an
    f64 version exists; ``vectors``: 4-element vectors a thread in kcompiler.ops.math's kernel (2
    where the function is too long to hide one vector's load behind its own code: gelu, 54 SASS
    instructions an element, ran 1% below torch's copy-bound ops with 1 and 0.4% above with 2 on
    the H100, benchmarks/bench_elementwise.py; every other function ran fastest with 1)."""

    name: str
    reference: Callable[[Any, Any], Any] | Callable[[Any, Any, Any], Any]
    bound: float
    cuda: float | None
    domain: tuple[float, float]
    arity: int = 1
    f64: bool = False
    vectors: int = 1

    def ref(self, xp: Any, *args: Any) -> Any:
        """The float64 reference on ``args`` (float64 arrays of namespace ``xp``)."""
        return self.reference(xp, *args)


class _NumpyNS:
    """numpy with the functions numpy lacks (erf, erfc) and torch's names, as one namespace."""

    def __getattr__(self, name: str) -> Any:
        return getattr(np, {"asin": "arcsin", "acos": "arccos", "atan": "arctan", "atan2": "arctan2"}.get(name, name))

    erf = staticmethod(np.frompyfunc(_m.erf, 1, 1))
    erfc = staticmethod(np.frompyfunc(_m.erfc, 1, 1))


NUMPY = _NumpyNS()


def _f(x: Any) -> Any:
    return x.astype(np.float64) if isinstance(x, np.ndarray) else x


def _sigmoid(xp: Any, x: Any) -> Any:
    return 1.0 / (1.0 + xp.exp(-x))


def _gelu_tanh(xp: Any, x: Any) -> Any:
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    return x / (1.0 + xp.exp(-2.0 * u))          # x/2 (1 + tanh u), without 1 + tanh's cancellation


def _cbrt(xp: Any, x: Any) -> Any:
    # |x|^(1/3) with 1/3 rounded: relative error |ln x| 2^-54 / 3, below 2^-27 ulp of an f32 result
    return xp.copysign(xp.abs(x) ** (1.0 / 3.0), x)


def _remainder(xp: Any, x: Any, y: Any) -> Any:
    # IEEE remainder of f32 operands, exact in float64: r = fmod(|x|, 2|y|) in [0, 2|y|) (exact; the
    # quotient so far even), minus |y| where r > |y|/2 (an odd quotient), and minus |y| once more where
    # that left r >= |y|/2 (r was at least 3|y|/2; at exactly 3|y|/2 the tie goes to the even quotient,
    # as it does at exactly |y|/2, which stays); x's sign
    ay = xp.abs(y)
    r = xp.fmod(xp.abs(x), 2.0 * ay)
    odd = r > 0.5 * ay
    r = xp.where(odd, r - ay, r)
    r = xp.where(odd & (r >= 0.5 * ay), r - ay, r)
    return r * xp.copysign(xp.ones_like(x), x)


_LN10 = 2.302585092994046

FUNCTIONS: dict[str, MathFunction] = {f.name: f for f in [
    MathFunction("exp", lambda xp, x: xp.exp(x), 1, 2, (-104, 89), f64=True),
    MathFunction("exp2", lambda xp, x: xp.exp2(x), 1, 2, (-150, 128)),
    MathFunction("exp10", lambda xp, x: xp.exp(x * _LN10), 1, 2, (-46, 39)),
    MathFunction("expm1", lambda xp, x: xp.expm1(x), 1, 1, (-20, 89)),
    MathFunction("log", lambda xp, x: xp.log(x), 1, 1, (0, 1e4), f64=True),
    MathFunction("log2", lambda xp, x: xp.log2(x), 1, 1, (0, 1e4)),
    MathFunction("log10", lambda xp, x: xp.log10(x), 1, 2, (0, 1e4)),
    MathFunction("log1p", lambda xp, x: xp.log1p(x), 1, 1, (-1, 1e3)),
    MathFunction("pow", lambda xp, x, y: xp.power(x, y), 1, 4, (0, 10), arity=2),
    MathFunction("sqrt", lambda xp, x: xp.sqrt(x), 0.5, 0, (0, 1e4), f64=True),
    MathFunction("rsqrt", lambda xp, x: 1.0 / xp.sqrt(x), 0.51, 2, (0, 1e4)),
    MathFunction("rcp", lambda xp, x: 1.0 / x, 0.5, 0, (-1e4, 1e4)),
    MathFunction("sin", lambda xp, x: xp.sin(x), 1, 2, (-100, 100), f64=True),
    MathFunction("cos", lambda xp, x: xp.cos(x), 1, 2, (-100, 100), f64=True),
    MathFunction("tan", lambda xp, x: xp.tan(x), 1.5, 4, (-100, 100)),
    MathFunction("asin", lambda xp, x: xp.asin(x), 1, 2, (-1, 1)),
    MathFunction("acos", lambda xp, x: xp.acos(x), 1, 2, (-1, 1)),
    MathFunction("atan", lambda xp, x: xp.atan(x), 1, 2, (-100, 100)),
    MathFunction("atan2", lambda xp, y, x: xp.atan2(y, x), 1, 3, (-100, 100), arity=2),
    MathFunction("sinh", lambda xp, x: xp.sinh(x), 1, 3, (-90, 90)),
    MathFunction("cosh", lambda xp, x: xp.cosh(x), 1, 2, (-90, 90)),
    MathFunction("tanh", lambda xp, x: xp.tanh(x), 1.5, 2, (-10, 10), f64=True),
    MathFunction("erf", lambda xp, x: xp.erf(x), 1, 2, (-5, 5)),
    MathFunction("erfc", lambda xp, x: xp.erfc(x), 2, 4, (-5, 11)),
    MathFunction("sigmoid", _sigmoid, 2.5, None, (-120, 100)),
    MathFunction("silu", lambda xp, x: x * _sigmoid(xp, x), 3, None, (-120, 100)),
    MathFunction("gelu", lambda xp, x: 0.5 * x * xp.erfc(-x * 0.7071067811865476), 2, None, (-15, 15),
                 vectors=2),
    MathFunction("gelu_tanh", _gelu_tanh, 1, None, (-15, 15)),
    MathFunction("cbrt", _cbrt, 0.5, 1, (-1e3, 1e3), f64=True),
    MathFunction("hypot", lambda xp, x, y: xp.hypot(x, y), 0.5, 3, (-1e4, 1e4), arity=2, f64=True),
    MathFunction("fmod", lambda xp, x, y: xp.fmod(x, y), 0, 0, (-1e4, 1e4), arity=2, f64=True),
    MathFunction("remainder", _remainder, 0, 0, (-1e4, 1e4), arity=2, f64=True),
    MathFunction("softplus", lambda xp, x: xp.logaddexp(xp.zeros_like(x), x), 1.5, None, (-110, 100)),
]}

#: The functions with a fast version (math.fast_<name>, stdlib/libm_fast.kc).
FAST = ("exp", "exp2", "exp10", "log", "log2", "log10", "pow", "sin", "cos", "tan", "rsqrt", "rcp", "tanh",
        "sigmoid", "silu", "gelu_tanh", "softplus")


def ulp_error(y: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """|y - ref| in ulp of the f32 result: the ulp of the binade of ``ref`` (2^-149 below the
    normals), the measure CUDA's tables use. ``ref`` in float64."""
    ref = np.asarray(ref, np.float64)
    e = np.floor(np.log2(np.maximum(np.abs(ref), 2.0 ** -126)))
    return np.abs(np.asarray(y, np.float64) - ref) / 2.0 ** (e - 23)


def sample(fn: MathFunction, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` f32 inputs per argument: half uniform over ``fn.domain``, half random finite bit
    patterns (every binade, subnormals and both signs), plus the special values."""
    out = []
    for _ in range(fn.arity):
        u = rng.uniform(*fn.domain, n // 2).astype(np.float32)
        bits = rng.integers(0, 1 << 32, n - n // 2, dtype=np.uint64).astype(np.uint32)
        bits = bits[(bits & 0x7F80_0000) != 0x7F80_0000]
        special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 2.0 ** -149, -(2.0 ** -149),
                            np.finfo(np.float32).max, -np.finfo(np.float32).max, 0.5, 2.0], np.float32)
        out.append(np.concatenate([special, u, bits.view(np.float32)]))
    m = min(len(a) for a in out)
    return [a[:m] for a in out]


def check(fn: MathFunction, args: list[np.ndarray], y: np.ndarray, bound: float) -> tuple[float, float, str]:
    """Compare f32 results ``y`` of ``fn`` on f32 ``args`` with the float64 reference: returns (max
    ulp error over the finite references, share of results equal to the correctly rounded one, a
    description of the worst input). NaN must give NaN exactly where the reference is NaN, and
    results beyond the f32 range must be the infinity of their sign."""
    with np.errstate(all="ignore"):
        ref = np.asarray(fn.ref(NUMPY, *[_f(a) for a in args]), np.float64)
        want = ref.astype(np.float32)
    nan_ok = np.isnan(y) == np.isnan(ref)
    finite = np.isfinite(ref) & (np.abs(ref) <= np.finfo(np.float32).max)
    err = np.zeros(y.shape)
    with np.errstate(all="ignore"):
        err[finite] = ulp_error(y[finite], ref[finite])
    over = np.isinf(want) & ~np.isnan(ref)
    err[over & (y != want)] = np.inf
    err[~nan_ok] = np.inf
    same = (y == want) | (np.isnan(y) & np.isnan(want))
    k = int(np.argmax(err))
    worst = ", ".join(f"{a[k]!r}" for a in args) + f" -> {y[k]!r}, want {ref[k]!r}"
    return float(err.max()), float(same.mean()), worst


def round_to_16(ref: np.ndarray, dtype: Any) -> np.ndarray:
    """float64 values correctly rounded to ``dtype`` (np.float16 or ml_dtypes.bfloat16): numpy rounds
    float64 -> float16 once, but ml_dtypes' float64 -> bfloat16 goes through f32 (two roundings), so
    bf16 is rounded here at 8 significant bits (2^-133 the subnormal quantum)."""
    ref = np.asarray(ref, np.float64)
    with np.errstate(all="ignore"):
        if dtype == np.float16:
            return ref.astype(np.float16)
        _, e = np.frexp(ref)
        q = np.maximum(e - 8, -133).astype(np.int64)
        r = np.ldexp(np.rint(np.ldexp(ref, -q)), q)
        return np.where(np.isfinite(ref), r, ref).astype(dtype)


def compare_16(y: np.ndarray, ref: np.ndarray, dtype: Any) -> tuple[float, int]:
    """16-bit results ``y`` against the float64 reference ``ref``: (share equal to the correctly
    rounded result, NaN where it is NaN included; the largest distance in ulp of the 16-bit format,
    2^20 where one is NaN and the other is not)."""
    want = round_to_16(ref, dtype)
    yf, wf = y.astype(np.float32), want.astype(np.float32)
    nan_y, nan_w = np.isnan(yf), np.isnan(wf)
    same = (yf == wf) | (nan_y & nan_w)

    def ordered(v: np.ndarray) -> np.ndarray:
        b = v.view(np.uint16).astype(np.int64)
        return np.where(b & 0x8000, -(b & 0x7FFF), b & 0x7FFF)

    dist = np.abs(ordered(y) - ordered(want))
    dist[nan_y & nan_w] = 0
    dist[nan_y != nan_w] = 1 << 20
    return float(same.mean()), int(dist.max())
