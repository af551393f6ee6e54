"""Helpers of the norms tests (test_norms.py, test_norms_variants.py): the dtypes with their unit
roundoffs and subnormal rounding, random inputs, the bound check, and the float64 references of the
fused residual add (rounded to the residual stream's type as the kernel stores it) and of rotary
embeddings (vLLM's cos/sin cache, GPT-NeoX and GPT-J styles); the tolerances are derived in
test_norms.py's module docstring."""
from __future__ import annotations

import ml_dtypes
import numpy as np

from ..draws import fresh_rng

RNG = fresh_rng()
U32 = 2.0 ** -24
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
UNIT = {"f32": 2.0 ** -24, "f16": 2.0 ** -11, "bf16": 2.0 ** -8}
#: Half the spacing of the type's subnormals: the absolute error of rounding a tiny result.
TINY = {"f32": 2.0 ** -150, "f16": 2.0 ** -25, "bf16": 2.0 ** -134}


def rand(shape, dt, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(DTYPES[dt])


def f64(a):
    return np.asarray(a).astype(np.float64)


def check(got, ref, bound, what, dt=None):
    """Every |got - ref| within bound (plus the subnormal rounding of ``dt``'s results)."""
    err = np.abs(f64(got) - ref)
    bound = bound + (TINY[dt] if dt else 0.0)
    bad = err > bound
    at = np.unravel_index(np.argmax(err - bound), err.shape)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} elements off, worst {err[at]:.3g} "
                           f"(bound {bound[at]:.3g}) at {at}: got {f64(got)[at]!r}, want {ref[at]!r}")


def residual_sum(x, r, dt):
    """x + r rounded to the residual stream's type, as the kernel stores it."""
    return f64((f64(x) + f64(r)).astype(DTYPES[dt]))


def rope_cache(max_pos, rot, dt="f32", base=10000.0):
    """vLLM's cos_sin_cache: (max_pos, rot), cos(p theta_i) then sin(p theta_i), theta_i = base^(-2i/rot)."""
    inv = base ** (-np.arange(0, rot, 2, dtype=np.float64) / rot)
    ang = np.arange(max_pos, dtype=np.float64)[:, None] * inv[None, :]
    return np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(DTYPES[dt])


def rope_ref(x, pos, cache, rot, interleaved):
    """x (T, H, D) float64 rotated: the numpy reference of both styles."""
    c = f64(cache)[pos][:, None, :rot // 2]
    s = f64(cache)[pos][:, None, rot // 2:]
    out = x.copy()
    if interleaved:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2] = a * c - b * s
        out[..., 1:rot:2] = b * c + a * s
    else:
        a, b = x[..., :rot // 2], x[..., rot // 2:rot]
        out[..., :rot // 2] = a * c - b * s
        out[..., rot // 2:rot] = b * c + a * s
    return out, np.abs(x[..., :rot]).sum(-1, keepdims=True)
