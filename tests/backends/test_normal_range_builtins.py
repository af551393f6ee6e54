"""The normal-range builtins fast_rcp_normal and fast_rsqrt_normal: rcp and rsqrt for normal arguments with normal
results (and zeros, infinities, NaN), a subnormal argument or result left unspecified. NVIDIA: the
.ftz forms of rcp/rsqrt.approx.f32 (one MUFU instruction; the plain forms keep ptxas's subnormal
scaling), AMD: v_rcp_f32 / v_rsq_f32, the CPU: exact, with subnormals flushed as NVIDIA flushes them
and the approx_error option applied as to rcp and rsqrt. Checked against float64 on random normal
inputs over the whole range, on every target present."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.pipeline import compile_source_to

from ..filecheck_util import filecheck
from ..ptxas_util import ptxas
from ..draws import fresh_rng

RNG = fresh_rng()

SRC = """
kernel k[T: type](x: ptr<T>, r: ptr<T>, s: ptr<T>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        r[i] = fast_rcp_normal(x[i]);
        s[i] = fast_rsqrt_normal(x[i]);
    }
}
"""

#: Every builtin of both families on f32, f16 and a 2-vector, in one kernel.
MIXED = """
kernel m(x: ptr<f32>, h: ptr<f16>, v: ptr<vec<f32, 2>>) {
    x[0] = fast_rcp_normal(x[0]) + fast_rsqrt_normal(x[1]) + fast_rcp(x[2]) + fast_rsqrt(x[3]);
    h[0] = fast_rcp_normal(h[0]);
    v[0] = fast_rsqrt_normal(v[0]);
}
"""


def run(target: str, x: np.ndarray, **options) -> tuple[np.ndarray, np.ndarray]:
    m = kc.compile(SRC, target=target, path="normal_range.kc", target_options=options or None)
    r, s = np.full_like(x, np.nan), np.full_like(x, np.nan)
    m.k[(x.size + 127) // 128, 128](x, r, s, x.size, T={np.float32: "f32", np.float16: "f16"}[x.dtype.type])
    return r, s


def normal_sample(n: int) -> np.ndarray:
    """Random f32 bit patterns with 2^-126 <= |x| <= 2^126 (so that 1/x is normal too), both signs."""
    bits = RNG.integers(1 << 23, (253 << 23) + 1, n, dtype=np.uint32) | (RNG.integers(0, 2, n, dtype=np.uint32) << 31)
    return bits.view(np.float32)


def test_ptx_is_the_ftz_forms_and_ptxas_takes_it():
    """fast_rcp_normal / fast_rsqrt_normal are rcp/rsqrt.approx.ftz.f32 (also without the approx_ftz option),
    fast_rcp / fast_rsqrt stay the plain forms; f16 goes through f32, a vector lane by lane."""
    ptx = compile_source_to(MIXED, "m.kc", "asm", "nvptx", "sm_90a")
    filecheck(ptx, """
    CHECK: rcp.approx.ftz.f32
    CHECK: rsqrt.approx.ftz.f32
    CHECK: rcp.approx.f32
    CHECK: rsqrt.approx.f32
    CHECK: cvt.f32.f16
    CHECK: rcp.approx.ftz.f32
    CHECK: cvt.rn.f16.f32
    CHECK: rsqrt.approx.ftz.f32
    CHECK: rsqrt.approx.ftz.f32
    """)
    ptxas(ptx)


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_amdgcn_is_v_rcp_and_v_rsq(arch):
    """On AMD the normal-range forms are the same single instructions as rcp and rsqrt (f16's
    v_rcp_f16, as rcp on f16)."""
    text = compile_source_to(MIXED, "m.kc", "asm", "amdgcn", arch)
    assert text.count("v_rcp_f32") == 2 and "v_rcp_f16" in text and text.count("v_rsq_f32") == 4, text
    assert "v_div_scale" not in text and "__ocml_" not in text


def test_f64_on_nvptx_is_a_located_error():
    src = "kernel k(x: ptr<f64>) {\n    x[0] = fast_rcp_normal(x[0]);\n}\n"
    with pytest.raises(CompileError) as e:
        compile_source_to(src, "k.kc", "asm", "nvptx", "sm_90a")
    assert "k.kc:2:" in str(e.value) and "fast_rcp_normal on f64" in str(e.value)


def test_arity_and_type_errors_are_located():
    for call, msg in (("fast_rcp_normal(x[0], x[1])", "fast_rcp_normal"), ("fast_rsqrt_normal(1i32)", "floating-point")):
        src = f"kernel k(x: ptr<f32>) {{\n    x[0] = {call};\n}}\n"
        with pytest.raises(CompileError) as e:
            compile_source_to(src, "k.kc", "llvm", "cpu")
        assert "k.kc:2:" in str(e.value) and msg in str(e.value), str(e.value)


def test_normal_arguments_within_the_hardware_error(target):
    """On 2^16 random normal arguments (and reciprocals): within 2^-22.9 relative of float64 on a
    GPU (PTX ISA: rcp.approx 1 ulp, rsqrt.approx 2^-22.9), and on the CPU, which models those
    errors (backends/cpu/approx.py: rcp within 1 ulp of 1 / x); zeros,
    infinities and NaN as rcp/rsqrt give them."""
    x = normal_sample(1 << 16)
    r, s = run(target, x)
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want_r, want_s = 1.0 / x64, 1.0 / np.sqrt(x64)
    assert np.abs(r / want_r - 1).max() <= 2.0 ** -22.9
    pos = x > 0
    assert np.abs(s[pos] / want_s[pos] - 1).max() <= 2.0 ** -22.9
    assert np.isnan(s[~pos]).all()
    if target == "cpu":
        ulp = np.spacing(np.abs(want_r).astype(np.float32)).astype(np.float64)
        assert (np.abs(r - want_r) <= ulp).all() and (r != want_r.astype(np.float32)).any()
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan], np.float32)
    r, s = run(target, sp)
    assert list(r[:4]) == [np.inf, -np.inf, 0.0, -0.0] and np.signbit(r[3]) and np.isnan(r[4])
    assert list(s[:3]) == [np.inf, -np.inf, 0.0] and np.isnan(s[3]) and np.isnan(s[4])


def test_f16_through_f32(target):
    """Every finite positive f16 (its subnormals are normal in f32): rcp within 1 ulp of f16, rsqrt
    within 1.5 (the CPU target computes it in f16 as 1 / sqrt(x), two roundings)."""
    x = np.arange(1, 0x7C00, dtype=np.uint16).view(np.float16)
    r, s = run(target, x)
    x64 = x.astype(np.float64)
    for y, want, bound in ((r, 1.0 / x64, 1.0), (s, 1.0 / np.sqrt(x64), 1.5)):
        ok = want < 65504
        ulp = np.spacing(want[ok].astype(np.float16)).astype(np.float64)
        assert (np.abs(y[ok].astype(np.float64) - want[ok]) <= bound * ulp).all()


def test_cpu_flushes_subnormals_as_nvidia_does():
    """Outside the contract the CPU target flushes as NVIDIA's .ftz forms do (a subnormal argument is
    a zero of its sign, a subnormal reciprocal is a zero), so code that passes one fails in CI too."""
    x = np.array([2.0 ** -127, -(2.0 ** -149), 2.0 ** 127, -(2.0 ** 127), 2.0 ** -126, 2.0 ** 126], np.float32)
    r, s = run("cpu", x)
    assert list(r[:4]) == [np.inf, -np.inf, 0.0, -0.0] and np.signbit(r[3])
    np.testing.assert_allclose(r[4:], [2.0 ** 126, 2.0 ** -126], rtol=2.0 ** -23)   # normal: 1 ulp (modelled)
    assert s[0] == np.inf and s[1] == -np.inf
    np.testing.assert_allclose(s[[2, 4]], [2.0 ** -63.5, 2.0 ** 63], rtol=2.0 ** -22.9)


@pytest.mark.parametrize("d", [2.0 ** -21.7, -(2.0 ** -21.7)])
def test_cpu_approx_error_applies(d):
    """The CPU target's approx_error perturbs the normal-range forms as it does rcp and rsqrt."""
    x = normal_sample(4096)
    x = np.abs(x[np.abs(x) < 2.0 ** 100])
    r, s = run("cpu", x, approx_error=d)
    x64 = x.astype(np.float64)
    d32 = float(np.float32(1 + d)) - 1                  # the factor is an f32 constant
    assert np.allclose(r * x64 - 1, d32, rtol=0, atol=2.0 ** -23)
    assert np.allclose(s * np.sqrt(x64) - 1, d32, rtol=0, atol=2.0 ** -22)
