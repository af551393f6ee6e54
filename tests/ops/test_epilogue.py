"""Epilogue fusion and the matmul autotuner.

1. Compile-time fn parameters (kcompiler/frontend/fn_params.py): a fn bound by name in brackets, as a
   default, or from the host; the signature checked where it is bound; every misuse a located error.
2. std.matmul with an epilogue (stdlib/epilogue.kc, kcompiler.ops.matmul(epilogue=...)) against numpy
   in float64 on fresh random inputs of odd shapes: every stock epilogue, a user's epilogue from
   source, FP8 outputs with a per-tensor scale; on the CPU target (SIMT path, and the tensor-core path
   under emulate_mma with bounds checked) and on CUDA (marked gpu); the PTX assembled by ptxas.
3. The autotuner's cache logic (kcompiler/runtime/autotune.py) with an injected timing function, and
   on the GPU ops.matmul's tuning on torch tensors.

Tolerance: as tests/ops/test_matmul.py, the f32 accumulation error of the product is at most about
4 K u32 (|A| @ |B|); an epilogue f with Lipschitz constant L (1 for relu, bias, residual; under 1.2
for GELU and SiLU; s for a scale) carries it as L times that, adds its own few f32 roundings (8 u32
of the magnitudes involved: std.math's functions are within 2 ulp), then the output's rounding.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops, pipeline
from kcompiler.diagnostics import CompileError
from kcompiler.frontend import check, load_program
from kcompiler.frontend.program import stdlib_dir
from kcompiler.runtime import autotune as at
from kcompiler.runtime.cache import KernelCache

from ..frontend_util import NV
from ..ptxas_util import needs_ptxas, ptxas
from ..draws import fresh_rng

RNG = fresh_rng()
U32 = 2.0 ** -24
DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


# --- 1. compile-time fn parameters ------------------------------------------------------------------

LANG = """\
fn twice[T: type](x: T, col: i32) -> T { return x * T(2.0) + T(col); }
fn neg(x: f32, col: i32) -> f32 { return -x - f32(col); }
fn apply[G: fn(acc: f32, col: i32) -> f32](x: f32, col: i32) -> f32 { return G(x, col); }
fn apply_any[G: fn](x: f32, col: i32) -> f32 { return G(x, col); }
kernel k[EPI: fn(acc: f32, col: i32) -> f32 = twice](x: ptr<f32>, y: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        y[i] = apply[EPI](x[i], i) + 10.0 * apply_any[G = neg](x[i], i);
    }
}
"""


def test_fn_parameters_bind_by_default_by_name_and_through_brackets():
    """EPI's default (generic twice, T inferred as f32 from the signature), EPI given at launch, passed
    on in brackets to a fn with a signature and to a bare `fn` one (each call checked like a direct
    call); all inlined into one kernel per binding."""
    mod = kc.compile(LANG, target="cpu", path="fnparams.kc")
    n = 37
    x = RNG.standard_normal(n).astype(np.float32)
    i = np.arange(n, dtype=np.float64)
    y = np.zeros(n, np.float32)
    mod.k[2, 32](x, y, n)
    np.testing.assert_allclose(y, (2 * x + i) + 10 * (-x - i), rtol=1e-6, atol=1e-5)
    mod.k[2, 32](x, y, n, EPI="neg")
    np.testing.assert_allclose(y, (-x - i) + 10 * (-x - i), rtol=1e-6, atol=1e-5)


def test_fn_parameter_in_ptx_is_inlined():
    ptx = pipeline.compile_source_to(LANG, "fnparams.kc", stage="asm", target="nvptx", arch="sm_90a",
                                        kernel="k", comptime={"EPI": "neg"})
    assert "call" not in ptx and ".func" not in ptx
    assert ".entry k__EPI_neg" in ptx


def _error(src: str, launch_epi: str | None = None) -> CompileError:
    """The CompileError of ``src``: from kc check, or (``launch_epi``) from compiling kernel k with
    EPI given by the host."""
    with pytest.raises(CompileError) as ei:
        if launch_epi is None:
            check(load_program(src, "bad.kc", keep_going=True), NV)
        else:
            pipeline.compile_source_to(src, "bad.kc", stage="ir", target="nvptx", kernel="k",
                                          comptime={"EPI": launch_epi})
    return ei.value


def _located(err: CompileError, line: int, col: int, fragment: str) -> None:
    text = str(err)
    assert f"bad.kc:{line}:{col}: error:" in text and fragment in text, text
    assert "^" in text  # the caret line under the span


SIG_SRC = """\
fn one(x: f32) -> f32 { return x; }
fn two(x: f32, c: i32) -> f32 { return x; }
fn wrong_ret(x: f32, c: i32) -> f16 { return f16(x); }
fn gen[T: type, U: type](x: T, c: i32) -> U { return U(x); }
kernel k[EPI: fn(acc: f32, col: i32) -> f32 = two](y: ptr<f32>) {
    y[0] = EPI(1.0, 2);
}
"""


@pytest.mark.parametrize("name, line, fragment", [
    ("one", 1, "EPI expects fn(f32, i32) -> f32, and 'one' is fn(x: f32) -> f32"),
    ("wrong_ret", 3, "'wrong_ret' is fn(x: f32, c: i32) -> f16"),
    ("gen", 4, "its compile-time parameter U is not fixed by those types"),
])
def test_signature_mismatch_from_the_host_is_located_at_the_fn(name, line, fragment):
    err = _error(SIG_SRC, name)
    _located(err, line, 4, fragment)
    assert "EPI is declared at bad.kc:5:10" in str(err)


@pytest.mark.parametrize("src, line, col, fragment", [
    # bound in brackets: located at the argument
    ("fn one(x: f32) -> f32 { return x; }\n"
     "fn g[E: fn(acc: f32, col: i32) -> f32](x: f32) -> f32 { return E(x, 0); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = g[E = one](1.0);\n}\n",
     4, 18, "E expects fn(f32, i32) -> f32, and 'one' is fn(x: f32) -> f32"),
    # the default: located at it
    ("fn one(x: f32) -> f32 { return x; }\n"
     "kernel k[E: fn(f32, i32) -> f32 = one](y: ptr<f32>) {\n    y[0] = E(1.0, 0);\n}\n",
     2, 35, "'one' cannot be E of kernel 'k'"),
    # a call of the parameter with the wrong count, caught when the file is loaded
    ("fn two(x: f32, c: i32) -> f32 { return x; }\n"
     "kernel k[E: fn(f32, i32) -> f32 = two](y: ptr<f32>) {\n    y[0] = E(1.0);\n}\n",
     3, 12, "'E' is a fn(f32, i32) -> f32: it takes 2 arguments, found 1"),
    # an argument of the wrong type, against the declared signature
    ("fn two(x: f32, c: i32) -> f32 { return x; }\n"
     "kernel k[E: fn(f32, i32) -> f32 = two](y: ptr<f32>) {\n    y[0] = E(1.0, 2.5);\n}\n",
     3, 19, "as argument 2 (i32) of E"),
    # a default that is not a fn's name; a builtin; an unknown name
    ("kernel k[E: fn(f32) -> f32 = 1 + 2](y: ptr<f32>) {\n    y[0] = E(1.0);\n}\n",
     1, 30, "must name a fn"),
    ("kernel k[E: fn(f32) -> f32 = sqrt](y: ptr<f32>) {\n    y[0] = E(1.0);\n}\n",
     1, 30, "'sqrt' is a builtin, not a fn"),
    ("kernel k[E: fn(f32) -> f32 = nothere](y: ptr<f32>) {\n    y[0] = E(1.0);\n}\n",
     1, 30, "unknown name 'nothere'"),
    # the parameter used as a value, or as a type
    ("fn one(x: f32) -> f32 { return x; }\n"
     "kernel k[E: fn(f32) -> f32 = one](y: ptr<f32>) {\n    let f = E;\n    y[0] = 1.0;\n}\n",
     3, 13, "'E' is a compile-time fn ('one'), not a value; call it"),
    ("fn one(x: f32) -> f32 { return x; }\n"
     "kernel k[E: fn(f32) -> f32 = one](y: ptr<E>) {\n    y[0] = 1.0;\n}\n",
     2, 42, "'E' is a compile-time fn, not a type"),
    # a fn with compile-time arguments, or a kernel, passed as one
    ("fn id[T: type](x: T) -> T { return x; }\n"
     "fn g[E: fn(f32) -> f32](x: f32) -> f32 { return E(x); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = g[E = id[f32]](1.0);\n}\n",
     4, 18, "without compile-time arguments"),
    ("kernel other(y: ptr<f32>) { }\n"
     "fn g[E: fn(f32) -> f32](x: f32) -> f32 { return E(x); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = g[E = other](1.0);\n}\n",
     4, 18, "'other' is a kernel"),
    # an integer where a fn is expected
    ("fn g[E: fn(f32) -> f32](x: f32) -> f32 { return E(x); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = g[E = 3](1.0);\n}\n",
     3, 18, "is a fn: pass a fn's name"),
    # recursion through a binding (h -> g -> E = h), for both kinds
    ("fn g[E: fn(f32) -> f32](x: f32) -> f32 { return E(x); }\n"
     "fn h(x: f32) -> f32 { return g[E = h](x); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = h(1.0);\n}\n",
     2, 36, "'h' bound to E would call itself: h -> g -> E = h"),
    ("fn g[E: fn](x: f32) -> f32 { return E(x); }\n"
     "fn h(x: f32) -> f32 { return g[E = h](x); }\n"
     "kernel k(y: ptr<f32>) {\n    y[0] = h(1.0);\n}\n",
     2, 36, "'h' bound to E would call itself"),
], ids=["brackets", "default", "arity", "arg_type", "default_expr", "default_builtin", "default_unknown", "as_value",
        "as_type", "with_targs", "kernel", "integer", "recursion", "recursion_bare"])
def test_misuse_is_a_located_error(src, line, col, fragment):
    _located(_error(src), line, col, fragment)


def test_unknown_fn_from_the_host():
    err = _error(SIG_SRC, "nothere")
    _located(err, 5, 10, "EPI = 'nothere': no fn 'nothere' in bad.kc")
    mod = kc.compile(SIG_SRC, target="cpu", path="bad.kc")
    with pytest.raises(TypeError, match="EPI is a fn, given by its name"):
        mod.k[1, 1](np.zeros(1, np.float32), EPI=3)


def test_cli_takes_a_fn_name(tmp_path):
    f = tmp_path / "k.kc"
    f.write_text(LANG)
    r = subprocess.run([sys.executable, "-m", "kcompiler.cli", "compile", str(f), "--emit", "ir", "-P", "EPI=neg"],
                       capture_output=True, text=True, cwd=str(stdlib_dir().parent))
    assert r.returncode == 0, r.stderr
    assert "k__EPI_neg" in r.stdout


# --- 2. matmul with an epilogue ---------------------------------------------------------------------

def _gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _silu(x):
    return x / (1.0 + np.exp(-x))


#: stock epilogue -> (reference f(acc, x, y, s) in float64 with x and y broadcast to C's shape, the
#: Lipschitz constant of f in acc)
STOCK = {
    "identity": (lambda p, x, y, s: p, lambda x, y, s: 1.0),
    "relu": (lambda p, x, y, s: np.maximum(p, 0), lambda x, y, s: 1.0),
    "gelu": (lambda p, x, y, s: _gelu(p), lambda x, y, s: 1.2),
    "gelu_tanh": (lambda p, x, y, s: _gelu_tanh(p), lambda x, y, s: 1.2),
    "silu": (lambda p, x, y, s: _silu(p), lambda x, y, s: 1.2),
    "bias": (lambda p, x, y, s: p + x, lambda x, y, s: 1.0),
    "bias_relu": (lambda p, x, y, s: np.maximum(p + x, 0), lambda x, y, s: 1.0),
    "bias_gelu": (lambda p, x, y, s: _gelu(p + x), lambda x, y, s: 1.2),
    "bias_silu": (lambda p, x, y, s: _silu(p + x), lambda x, y, s: 1.2),
    "scale": (lambda p, x, y, s: s * p, lambda x, y, s: s),
    "scale_rows_cols": (lambda p, x, y, s: s * p * x * y, lambda x, y, s: np.abs(s * x * y)),
    "residual": (lambda p, x, y, s: p + y, lambda x, y, s: 1.0),
    "scale_bias_residual": (lambda p, x, y, s: s * p + x + y, lambda x, y, s: s),
}
#: the reduced-precision versions, checked into bf16 results (where they round like the accurate ones,
#: within one bf16 ulp: docs/math.md)
STOCK_RP = {"gelu_rp": "gelu_tanh", "silu_rp": "silu", "bias_gelu_rp": "bias_gelu_tanh", "bias_silu_rp": "bias_silu"}
REFERENCES = dict(STOCK, bias_gelu_tanh=(lambda p, x, y, s: _gelu_tanh(p + x), lambda x, y, s: 1.2))


def _inputs(name: str, M: int, N: int):
    """The x and y the stock epilogue ``name`` reads (x f32, y bf16: two element types), as ops.EPILOGUES
    says, fresh random values."""
    xs, ys = ops.EPILOGUES[name]
    shape = {"N": (N,), "M": (M,), "MN": (M, N)}
    x = RNG.standard_normal(shape[xs]).astype(np.float32) if xs else None
    y = RNG.standard_normal(shape[ys]).astype(ml_dtypes.bfloat16) if ys else None
    return x, y


def _check(c: np.ndarray, ref: np.ndarray, mag: np.ndarray, lip: float, acc_tol: np.ndarray) -> None:
    """``c`` equals ``ref`` within lip * acc_tol + 8 u32 * mag + c's own rounding (module docstring)."""
    u_out = float(ml_dtypes.finfo(c.dtype).eps) / 2
    tol = lip * acc_tol + 8 * U32 * mag + u_out * np.abs(ref) + 1e-30
    err = np.abs(c.astype(np.float64) - ref)
    assert np.isfinite(c.astype(np.float64)).all(), "non-finite results"
    worst = np.unravel_index(np.argmax(err - tol), err.shape)
    assert (err <= tol).all(), \
        f"C{list(worst)} = {c[worst]}, want {ref[worst]} (error {err[worst]:.3g} > {tol[worst]:.3g})"


def _reference(a, b, name, x, y, s, function=None):
    """(reference, magnitude of the terms, Lipschitz constant, accumulation bound) for the stock
    epilogue ``name`` of a @ b (computing REFERENCES[function], default its own)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    p = a64 @ b64
    acc_tol = 4 * a.shape[1] * U32 * (np.abs(a64) @ np.abs(b64))
    # x and y broadcast to C's shape as the epilogue reads them (per column, per row, or M x N)
    layout = {"N": lambda v: v[None, :], "M": lambda v: v[:, None], "MN": lambda v: v}
    xs, ys = ops.EPILOGUES[name]
    x64 = layout[xs](x.astype(np.float64)) if x is not None else 0.0
    y64 = layout[ys](y.astype(np.float64)) if y is not None else 0.0
    f, lip = REFERENCES[function or name]
    ref = f(p, x64, y64, s)
    lip_v = lip(x64, y64, s)
    mag = np.abs(p) * np.maximum(lip_v, 1) + np.abs(ref) + np.abs(x64) + np.abs(y64)
    return ref, mag, lip_v, acc_tol


#: (dtype, M, N, K) per stock epilogue: odd sizes, every input dtype, on the CPU the SIMT path
SHAPES = [("f32", 37, 45, 29), ("bf16", 33, 70, 41), ("f16", 19, 24, 72)]


@pytest.mark.parametrize("name", list(STOCK_RP))
def test_stock_epilogue_reduced_precision(target, name):
    M, N, K = 29, 40, 33
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    x, y = _inputs(name, M, N)
    c = ops.matmul(a, b, epilogue=ops.Epilogue(name, x=x, y=y), target=target)
    assert c.dtype == ml_dtypes.bfloat16
    ref, mag, lip, acc_tol = _reference(a, b, name, x, y, 1.0, STOCK_RP[name])
    # one bf16 ulp (2 u) where the accurate version has half of one
    _check(c, ref, mag + 2 * float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps) / 2 / (8 * U32) * np.abs(ref), lip,
           acc_tol)


@pytest.mark.slow(sample=7)  # on the CPU target 7 of the 13 by default (CI time); the GPU runs all
@pytest.mark.parametrize("name", list(STOCK))
def test_stock_epilogue(target, name):
    dt, M, N, K = SHAPES[list(STOCK).index(name) % len(SHAPES)]
    a = RNG.standard_normal((M, K)).astype(DTYPES[dt])
    b = RNG.standard_normal((K, N)).astype(DTYPES[dt])
    x, y = _inputs(name, M, N)
    s = 0.75
    c = ops.matmul(a, b, epilogue=ops.Epilogue(name, x=x, y=y, s=s), out_dtype=np.float32, target=target)
    ref, mag, lip, acc_tol = _reference(a, b, name, x, y, s)
    _check(c, ref, mag, lip, acc_tol)


def test_epilogue_into_a_narrow_output_with_transposed_b(target):
    """bf16 result of bias_relu with B read K-major (w.T): the epilogue's value is rounded once."""
    M, N, K = 50, 72, 64
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    w = RNG.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    bias = RNG.standard_normal(N).astype(ml_dtypes.bfloat16)
    c = ops.matmul(a, w.T, epilogue=ops.Epilogue("bias_relu", x=bias), target=target)
    assert c.dtype == ml_dtypes.bfloat16
    ref, mag, lip, acc_tol = _reference(a, w.T, "bias_relu", bias, None, 1.0)
    _check(c, ref, mag, lip, acc_tol)


def test_residual_in_place(target):
    """out is the residual y (C = A @ B + C): each element is read before it is written, by the same
    thread; host arrays are copied to the device once each (an input sharing out's memory is copied
    apart, so that its stale copy does not come back over the result)."""
    M, N, K = 31, 26, 45
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    r = RNG.standard_normal((M, N)).astype(np.float32)
    r0 = r.copy()
    assert ops.matmul(a, b, r, ops.Epilogue("residual", y=r), target=target) is r
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    ref = a64 @ b64 + r0
    _check(r, ref, np.abs(ref) + np.abs(r0), 1.0, 4 * K * U32 * (np.abs(a64) @ np.abs(b64)))


USER_SRC = """\
import std.math

// a user's epilogue: SwiGLU-style gate against a per-row vector, then a clamp
fn gated(acc: f32, row: i32, col: i32, ld: i32, gate: ptr<f32>, y: ptr<f16>, s: f32) -> f32 {
    return min(acc * math.sigmoid(f32(gate[row])), s) + f32(y[i64(row) * i64(ld) + i64(col)]);
}
"""


def test_user_epilogue_from_source(target):
    M, N, K = 41, 23, 30
    a = RNG.standard_normal((M, K)).astype(np.float16)
    b = RNG.standard_normal((K, N)).astype(np.float16)
    gate = RNG.standard_normal(M).astype(np.float32)
    y = RNG.standard_normal((M, N)).astype(np.float16)
    s = 1.5
    c = ops.matmul(a, b, epilogue=ops.Epilogue("gated", x=gate, y=y, s=s, source=USER_SRC), out_dtype=np.float32,
                   target=target)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    p = a64 @ b64
    sig = 1 / (1 + np.exp(-gate.astype(np.float64)))[:, None]
    ref = np.minimum(p * sig, s) + y.astype(np.float64)
    acc_tol = 4 * K * U32 * (np.abs(a64) @ np.abs(b64))
    _check(c, ref, np.abs(p) + np.abs(ref) + 2, 1.0, acc_tol)


def test_user_epilogue_errors_are_located_in_its_source():
    a = np.ones((4, 8), np.float32)
    bad_sig = "fn e(acc: f32, row: i32) -> f32 {\n    return acc;\n}\n"
    with pytest.raises(CompileError) as ei:
        ops.matmul(a, a.T.copy(), epilogue=ops.Epilogue("e", source=bad_sig), target="cpu")
    text = str(ei.value)
    assert "<kcompiler.ops.matmul epilogue>:1:4: error: 'e' cannot be EPI" in text
    assert "EPI expects fn(f32, i32, i32, i32, ptr<f32>, ptr<f32>, f32) -> f32" in text
    bad_body = "fn e(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
               "    return acc + undefined_name;\n}\n"
    with pytest.raises(CompileError, match=r"epilogue>:2:18: error: unknown name 'undefined_name'"):
        ops.matmul(a, a.T.copy(), epilogue=ops.Epilogue("e", source=bad_body), target="cpu")


@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2"])
def test_fp8_output_with_a_per_tensor_scale(target, fmt):
    """C = f8(saturate(acc * s)): rounded to nearest even once, overflows clamped to the largest finite
    value (s chosen so that some do overflow)."""
    dt = {"f8e4m3": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}[fmt]
    top = float(ml_dtypes.finfo(dt).max)
    M, N, K = 45, 38, 52
    a = RNG.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((K, N)).astype(ml_dtypes.bfloat16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    p = a64 @ b64
    s = 1.5 * top / np.abs(p).max()  # the largest products overflow
    c = ops.matmul(a, b, epilogue=ops.Epilogue(f"to_{fmt}", s=s), out_dtype=dt, target=target)
    assert c.dtype == dt
    v = p * s
    acc_tol = s * 4 * K * U32 * (np.abs(a64) @ np.abs(b64)) + 8 * U32 * np.abs(v)
    got = c.astype(np.float64)
    assert np.isfinite(got).all()
    sat = np.abs(v) > top + acc_tol
    assert sat.any() and (got[sat] == np.sign(v[sat]) * top).all()
    # elsewhere: the value rounded once to the format (half its ulp: 2^-(mantissa bits + 1) relative,
    # or half the smallest subnormal)
    mant = {"f8e4m3": 3, "f8e5m2": 2}[fmt]
    tiny = float(ml_dtypes.finfo(dt).smallest_subnormal)
    want = np.clip(v, -top, top)
    assert (np.abs(got - want) <= 2.0 ** -(mant + 1) * np.abs(want) + tiny / 2 + acc_tol).all()


def test_epilogue_misuse():
    a = np.ones((4, 8), np.float32)
    b = np.ones((8, 6), np.float32)
    with pytest.raises(ValueError, match="no stock epilogue 'nope'"):
        ops.matmul(a, b, epilogue="nope", target="cpu")
    with pytest.raises(ValueError, match=r"reads x, an array of shape \(6,\)"):
        ops.matmul(a, b, epilogue="bias", target="cpu")
    with pytest.raises(ValueError, match=r"reads x of shape \(6,\), not \(4,\)"):
        ops.matmul(a, b, epilogue=ops.Epilogue("bias", x=np.ones(4, np.float32)), target="cpu")
    with pytest.raises(ValueError, match="relu does not read y"):
        ops.matmul(a, b, epilogue=ops.Epilogue("relu", y=np.ones((4, 6), np.float32)), target="cpu")
    with pytest.raises(TypeError, match="ops.Epilogue or a stock"):
        ops.matmul(a, b, epilogue=3, target="cpu")
    with pytest.raises(TypeError, match="out_dtype must be one of"):
        ops.matmul(a, b, out_dtype=np.int8, target="cpu")


#: (T, OUT, tiles, B_KMAJOR, epilogue): the tensor-core path's store_pair, paired (ALIGNED) and not
TC_CONFIGS = [
    ("bf16", "bf16", dict(BM=32, BN=32, BK=32, WM=16, WN=16, STAGES=3), False, "bias_silu"),
    ("f16", "f32", dict(BM=64, BN=32, BK=16, WM=32, WN=16, STAGES=2), True, "scale_bias_residual"),
]


@pytest.fixture(scope="module")
def emulated_matmul():
    # every global access checked as a GPU would fault on it, so an epilogue called outside C shows
    return kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu", target_options={"emulate_mma": True},
                           check_bounds=True)


@pytest.mark.parametrize("shape", [(40, 56, 48), (33, 45, 27)], ids=["aligned", "odd"])
@pytest.mark.parametrize("cfg", range(len(TC_CONFIGS)))
def test_tensor_core_path_epilogue_emulated(emulated_matmul, cfg, shape):
    T, OUT, tiles, b_kmajor, name = TC_CONFIGS[cfg]
    M, N, K = shape
    a = RNG.standard_normal((M, K)).astype(DTYPES[T])
    b = RNG.standard_normal((K, N)).astype(DTYPES[T])
    x, y = _inputs(name, M, N)
    s = 0.75
    c = np.full((M, N), np.nan, DTYPES[OUT])
    aligned = K % 8 == 0 and N % 8 == 0
    threads = tiles["BM"] // tiles["WM"] * (tiles["BN"] // tiles["WN"]) * 32
    grid = (-(-N // tiles["BN"]), -(-M // tiles["BM"]))
    bb = np.ascontiguousarray(b.T) if b_kmajor else b
    emulated_matmul.matmul_epilogue[grid, threads](
        a, bb, c, M, N, K, K, K if b_kmajor else N, N, x, y if y is not None else c.astype(np.float32),
        np.float32(s), T=T, OUT=OUT, B_KMAJOR=b_kmajor, ALIGNED=aligned, EPI=f"epilogue.{name}",
        shared=ops.matmul_shared_bytes(tiles, 2, b_kmajor), **tiles)
    ref, mag, lip, acc_tol = _reference(a, b, name, x, y, s)
    _check(c, ref, mag, lip, acc_tol)


@needs_ptxas
@pytest.mark.parametrize("name, T, OUT", [("bias_relu", "bf16", "bf16"), ("to_f8e4m3", "f16", "f8e4m3")])
def test_epilogue_ptx_assembles(tmp_path, name, T, OUT):
    """sm_90a PTX of the tensor-core path with an epilogue: the epilogue inlined (no calls), mma.sync
    present, ptxas accepts it without spilling."""
    ptx = pipeline.emit_file(stdlib_dir() / "matmul.kc", "asm", target="nvptx", arch="sm_90a",
                                kernel="matmul_epilogue",
                                comptime=dict(T=T, OUT=OUT, ALIGNED=True, Y="bf16", EPI=f"epilogue.{name}"))
    assert "mma.sync.aligned.m16n8k16" in ptx
    assert "call" not in ptx and ".func" not in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


def test_epilogue_amdgcn_assembly():
    """gfx942 (MFMA path, stdlib/matmul_amd.kc): the epilogue is inlined there too, next to v_mfma (checked
    statically: no AMD GPU here)."""
    asm = pipeline.emit_file(stdlib_dir() / "matmul.kc", "asm", target="amdgcn", arch="gfx942",
                             kernel="matmul_epilogue", comptime=dict(T="bf16", OUT="bf16", EPI="epilogue.bias_silu_rp"))
    assert "v_mfma" in asm
    assert "s_swappc" not in asm and "s_setpc" not in asm  # no calls


# --- 2b. block epilogues: MXFP8 quantisation of the product in the store --------------------------------

from kcompiler.numerics import mx  # noqa: E402

F8 = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}


def _same_bits(got, want) -> None:
    g, w = np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8)
    bad = np.argwhere(g != w)
    if len(bad):
        at = tuple(bad[0])
        raise AssertionError(f"{len(bad)} differ, first at {at}: {g[at]:#x}, want {w[at]:#x}")


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_mx_epilogue_exact_product(target, fmt):
    """MXFP8 by the block epilogue on products that f32 holds exactly (small integers times powers of
    two): bit for bit kcompiler.numerics.mx.quantize of the float64 product, odd M and K, zero rows, a
    column block of zeros, blocks of every magnitude."""
    M, N, K = 37, 96, 29
    a = RNG.integers(-8, 9, (M, K)) * np.exp2(RNG.integers(-12, 12, (M, 1)))
    b = RNG.integers(-8, 9, (K, N)).astype(np.float64)
    a[4] = 0
    b[:, 32:64] = 0
    a, b = a.astype(ml_dtypes.bfloat16), b.astype(ml_dtypes.bfloat16)
    codes, scales = ops.matmul(a, b, epilogue=f"to_mxfp8_{fmt}", target=target)
    assert codes.dtype == F8[fmt] and scales.dtype == ml_dtypes.float8_e8m0fnu and scales.shape == (M, 3)
    want_c, want_s = mx.quantize((a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32), f"f8{fmt}")
    _same_bits(scales, want_s)
    _same_bits(codes, want_c)


@pytest.mark.slow(sample=2)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("dtype, shape", [("f32", (45, 64, 33)), ("bf16", (70, 160, 41)), ("f16", (19, 32, 72))])
def test_mx_epilogue_random(target, dtype, shape):
    """On fresh random inputs, alone and after a per-element bias + GELU, into out pairs of either scale
    type: bit for bit mx.quantize of the same kernel's f32 result (the same accumulation), and that
    result within the product's tolerance of float64."""
    M, N, K = shape
    a = RNG.standard_normal((M, K)).astype(DTYPES[dtype])
    b = RNG.standard_normal((K, N)).astype(DTYPES[dtype])
    bias = RNG.standard_normal(N).astype(np.float32)
    for fmt, per in (("e4m3", ops.Epilogue("identity")), ("e5m2", ops.Epilogue("bias_gelu", x=bias))):
        f32 = ops.matmul(a, b, epilogue=per, out_dtype=np.float32, target=target)
        ref, mag, lip, acc_tol = _reference(a, b, per.fn, per.x, None, 1.0)
        _check(f32, ref, mag, lip, acc_tol)
        out = (np.full((M, N), np.nan, F8[fmt]), np.zeros((M, N // 32), np.uint8))
        got = ops.matmul(a, b, out=out, epilogue=dataclasses_replace(per, block=f"to_mxfp8_{fmt}"), target=target)
        assert got[0] is out[0] and got[1] is out[1]
        want_c, want_s = mx.quantize(f32, f"f8{fmt}")
        _same_bits(out[1], want_s)
        _same_bits(out[0], want_c)


def dataclasses_replace(ep, **kw):
    import dataclasses
    return dataclasses.replace(ep, **kw)


def test_mx_epilogue_nan_and_inf(target):
    """A NaN in A poisons its row's blocks (NaN scale 0xFF, NaN codes); an infinite product likewise;
    the other rows are untouched (the library's choice, kcompiler.numerics.mx)."""
    M, N, K = 20, 64, 16
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    a[3, 7] = np.nan
    a[9, 2] = np.inf
    codes, scales = ops.matmul(a, b, epilogue="to_mxfp8_e4m3", target=target)
    f32 = ops.matmul(a, b, target=target)
    want_c, want_s = mx.quantize(f32, "f8e4m3")
    assert (scales.view(np.uint8)[[3, 9]] == 0xFF).all()
    _same_bits(scales, want_s)
    _same_bits(codes, want_c)


def test_mx_epilogue_after_a_user_epilogue(target):
    """A user's epilogue from source, then the MXFP8 block epilogue (std.epilogue as the user's module
    imports it for the kernel): bit for bit mx.quantize of the user's epilogue's f32 result."""
    M, N, K = 21, 64, 19
    a = RNG.standard_normal((M, K)).astype(np.float32)
    b = RNG.standard_normal((K, N)).astype(np.float32)
    src = "fn twice(acc: f32, row: i32, col: i32, ld: i32, x: ptr<f32>, y: ptr<f32>, s: f32) -> f32 {\n" \
          "    return s * acc + f32(row);\n}\n"
    codes, scales = ops.matmul(a, b, epilogue=ops.Epilogue("twice", s=2.0, source=src, block="to_mxfp8_e4m3"),
                               target=target)
    f32 = ops.matmul(a, b, epilogue=ops.Epilogue("twice", s=2.0, source=src), out_dtype=np.float32, target=target)
    want_c, want_s = mx.quantize(f32, "f8e4m3")
    _same_bits(scales, want_s)
    _same_bits(codes, want_c)


def test_mx_epilogue_misuse():
    a = np.ones((4, 8), np.float32)
    with pytest.raises(ValueError, match="blocks of 32 columns: N = 40"):
        ops.matmul(a, np.ones((8, 40), np.float32), epilogue="to_mxfp8_e4m3", target="cpu")
    b = np.ones((8, 64), np.float32)
    with pytest.raises(TypeError, match="gives f8e4m3 codes, not out_dtype"):
        ops.matmul(a, b, epilogue="to_mxfp8_e4m3", out_dtype="bf16", target="cpu")
    with pytest.raises(TypeError, match=r"out is a pair \(codes, scales\)"):
        ops.matmul(a, b, out=np.empty((4, 64), ml_dtypes.float8_e4m3fn), epilogue="to_mxfp8_e4m3", target="cpu")
    with pytest.raises(ValueError, match=r"scales must be a contiguous \(4, 2\) array"):
        ops.matmul(a, b, out=(np.empty((4, 64), ml_dtypes.float8_e4m3fn), np.empty((4, 3), np.uint8)),
                   epilogue="to_mxfp8_e4m3", target="cpu")
    with pytest.raises(TypeError, match="codes must be an array of f8e5m2"):
        ops.matmul(a, b, out=(np.empty((4, 64), ml_dtypes.float8_e4m3fn), np.empty((4, 2), np.uint8)),
                   epilogue="to_mxfp8_e5m2", target="cpu")
    with pytest.raises(ValueError, match="no block epilogue 'to_nvfp4'"):
        ops.matmul(a, b, epilogue=ops.Epilogue("relu", block="to_nvfp4"), target="cpu")


#: (T, tiles, B_KMAJOR, target options): the tensor-core path (a quad of lanes, 8 elements each), and
#: AMD's MFMA path with 32x32 tiles (32 lanes, one each) and 16x16 tiles (16 lanes, two each)
BLOCK_PATHS = [
    ("bf16", dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=3), False, {"emulate_mma": True}),
    ("f16", dict(BM=64, BN=128, BK=32, WM=32, WN=64, STAGES=2), True, {"emulate_mma": True}),
    ("bf16", dict(BM=64, BN=64, BK=32, WM=32, WN=32, STAGES=2), True, {"emulate_mfma": "gfx942"}),
    ("bf16", dict(BM=32, BN=64, BK=16, WM=16, WN=32, STAGES=2), False, {"emulate_mfma": "gfx942"}),
]
_BLOCK_MODULES: dict = {}


@pytest.mark.parametrize("path", range(len(BLOCK_PATHS)), ids=["mma", "mma-kmajor", "mfma32", "mfma16"])
def test_mx_epilogue_emulated_paths(path):
    """kernel matmul_block_epilogue on the tensor-core and MFMA paths (emulated, every access bounds
    checked), odd M and K, N past the last tile, aligned stores and not: bit for bit mx.quantize of the
    same path's f32 result."""
    T, tiles, b_kmajor, opts = BLOCK_PATHS[path]
    key = tuple(opts.items())
    if key not in _BLOCK_MODULES:
        _BLOCK_MODULES[key] = kc.compile_file(stdlib_dir() / "matmul.kc", target="cpu", target_options=opts,
                                              check_bounds=True)
    mod = _BLOCK_MODULES[key]
    M, N, K = 37, 96 + 64 * (path % 2), 40 - 3 * (path % 2)
    a = RNG.standard_normal((M, K)).astype(DTYPES[T])
    b = RNG.standard_normal((K, N)).astype(DTYPES[T])
    bb = np.ascontiguousarray(b.T) if b_kmajor else b
    mfma = "emulate_mfma" in opts
    threads = tiles["BM"] // tiles["WM"] * (tiles["BN"] // tiles["WN"]) * (64 if mfma else 32)
    grid = (-(-N // tiles["BN"]), -(-M // tiles["BM"]))
    common = dict(T=T, B_KMAJOR=b_kmajor, ALIGNED=K % 8 == 0, shared=ops.matmul_shared_bytes(tiles, 2, b_kmajor, mfma),
                  **tiles)
    args = (a, bb)
    sizes = (M, N, K, K, K if b_kmajor else N, N)
    f32 = np.full((M, N), np.nan, np.float32)
    mod.matmul[grid, threads](*args, f32, *sizes, OUT="f32", **common)
    codes = np.full((M, N), np.nan, ml_dtypes.float8_e4m3fn)
    scales = np.zeros((M, N // 32), ml_dtypes.float8_e8m0fnu)
    unread = np.zeros(1, np.float32)
    mod.matmul_block_epilogue[grid, threads](*args, codes, *sizes, unread, unread, np.float32(1), scales, OUT="f8e4m3",
                                             **common)
    want_c, want_s = mx.quantize(f32, "f8e4m3")
    _same_bits(scales, want_s)
    _same_bits(codes, want_c)


@needs_ptxas
@pytest.mark.parametrize("kernel_file, kernel, params", [
    ("matmul.kc", "matmul_block_epilogue", dict(T="bf16", OUT="f8e4m3", ALIGNED=True)),
    ("matmul_sm90.kc", "matmul_sm90_block_epilogue", dict(T="bf16", OUT="f8e5m2", BEPI="epilogue.to_mxfp8_e5m2",
                                                          X="bf16", EPI="epilogue.bias_gelu_rp")),
], ids=["mma", "wgmma"])
def test_mx_epilogue_ptx_assembles(kernel_file, kernel, params):
    """sm_90a: the block epilogue inlined (no calls), its amax exchanged by shfl.sync.bfly, no spills."""
    ptx = pipeline.emit_file(stdlib_dir() / kernel_file, "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=params)
    assert "shfl.sync.bfly" in ptx and "call" not in ptx and ".func" not in ptx
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log


def test_mx_epilogue_amdgcn_assembly():
    """gfx942: the MFMA path with the block epilogue assembles (checked statically: no AMD GPU here)."""
    asm = pipeline.emit_file(stdlib_dir() / "matmul.kc", "asm", target="amdgcn", arch="gfx942",
                             kernel="matmul_block_epilogue", comptime=dict(T="bf16"))
    assert "v_mfma" in asm and "s_swappc" not in asm


# --- 3. the autotuner -------------------------------------------------------------------------------

CANDS = [dict(BM=64, BN=64), dict(BM=128, BN=128), dict(BM=128, BN=64)]
PROBLEM = dict(op="test", M=1024, T="bf16")


def _timer(times: dict[int, float], calls: list):
    def time_fn(c):
        calls.append(c)
        t = times[c["BM"] * 1000 + c["BN"]]
        if t is None:
            raise at.CandidateRejected("does not fit")
        return t
    return time_fn


def _records(d) -> list:
    """The autotune records under ``d``: each JSON cache entry's checksummed value."""
    return [json.loads(p.read_text())["value"] for p in d.rglob("*.json")]


def test_autotune_times_once_and_caches_on_disk(tmp_path):
    cache = KernelCache(tmp_path, disk=True)
    calls: list = []
    t = _timer({64064: 3.0, 128128: 1.0, 128064: 2.0}, calls)
    assert at.autotune(PROBLEM, CANDS, t, cache=cache, enabled=True) == dict(BM=128, BN=128)
    assert len(calls) == 3
    (rec,) = _records(tmp_path)
    assert rec["choice"] == dict(BM=128, BN=128) and rec["times"] == [3.0, 1.0, 2.0] and rec["problem"] == PROBLEM
    # another process (a fresh cache object on the same folder): no timing
    fresh = KernelCache(tmp_path, disk=True)
    assert at.autotune(PROBLEM, CANDS, _timer({}, calls), cache=fresh, enabled=True) == dict(BM=128, BN=128)
    assert len(calls) == 3
    # another problem class, or another candidate list: tuned anew
    assert at.autotune(dict(PROBLEM, M=2048), CANDS, _timer({64064: 1.0, 128128: 2.0, 128064: 3.0}, calls),
                       cache=fresh, enabled=True) == dict(BM=64, BN=64)
    assert at.autotune(PROBLEM, CANDS[:2], _timer({64064: 0.5, 128128: 2.0}, calls), cache=fresh,
                       enabled=True) == dict(BM=64, BN=64)
    assert len(calls) == 3 + 3 + 2 and len(_records(tmp_path)) == 3


def test_autotune_skips_rejected_candidates(tmp_path):
    cache = KernelCache(tmp_path, disk=True)
    got = at.autotune(PROBLEM, CANDS, _timer({64064: 3.0, 128128: None, 128064: 2.0}, []), cache=cache,
                      enabled=True)
    assert got == dict(BM=128, BN=64)
    assert _records(tmp_path)[0]["times"] == [3.0, None, 2.0]


def test_failed_or_interrupted_tuning_leaves_no_entry(tmp_path):
    cache = KernelCache(tmp_path, disk=True)
    with pytest.raises(at.TuningFailed):
        at.autotune(PROBLEM, CANDS, _timer({64064: None, 128128: None, 128064: None}, []), cache=cache,
                    enabled=True)
    assert _records(tmp_path) == []

    def interrupted(c):
        if c["BM"] == 128:
            raise KeyboardInterrupt
        return 1.0
    with pytest.raises(KeyboardInterrupt):
        at.autotune(PROBLEM, CANDS, interrupted, cache=cache, enabled=True)

    def broken(c):
        raise RuntimeError("device lost")
    with pytest.raises(RuntimeError, match="device lost"):
        at.autotune(PROBLEM, CANDS, broken, cache=cache, enabled=True)
    with pytest.raises(ValueError, match="returned nan"):
        at.autotune(PROBLEM, CANDS, lambda c: float("nan"), cache=cache, enabled=True)
    assert _records(tmp_path) == [] and list(tmp_path.rglob("*.tmp")) == []
    # and the next call tunes from the start
    calls: list = []
    assert at.autotune(PROBLEM, CANDS, _timer({64064: 3.0, 128128: 1.0, 128064: 2.0}, calls), cache=cache,
                       enabled=True) == dict(BM=128, BN=128)
    assert len(calls) == 3


def test_tuning_disabled_returns_the_default_without_timing(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path, disk=True)
    calls: list = []
    t = _timer({64064: 3.0, 128128: 1.0, 128064: 2.0}, calls)
    assert at.autotune(PROBLEM, CANDS, t, cache=cache, enabled=False) == CANDS[0]
    assert at.autotune(PROBLEM, CANDS, t, cache=cache, enabled=False, default=CANDS[2]) == CANDS[2]
    monkeypatch.setenv("KC_TUNE", "0")
    assert at.autotune(PROBLEM, CANDS, t, cache=cache) == CANDS[0]
    assert calls == [] and _records(tmp_path) == []
    monkeypatch.setenv("KC_TUNE", "1")
    assert at.autotune(PROBLEM, CANDS, t, cache=cache) == dict(BM=128, BN=128)
    # a cached choice is used even with tuning off
    monkeypatch.setenv("KC_TUNE", "0")
    assert at.autotune(PROBLEM, CANDS, _timer({}, calls), cache=KernelCache(tmp_path, disk=True)) == \
        dict(BM=128, BN=128)


def test_damaged_record_is_a_miss(tmp_path):
    cache = KernelCache(tmp_path, disk=True)
    at.autotune(PROBLEM, CANDS, _timer({64064: 3.0, 128128: 1.0, 128064: 2.0}, []), cache=cache, enabled=True)
    (path,) = tmp_path.rglob("*.json")
    path.write_text('{"choice": {"BM": 7, "BN": 7}}')  # not a candidate
    assert at.cached_choice(PROBLEM, CANDS, KernelCache(tmp_path, disk=True)) is None
    path.write_text("{not json")
    calls: list = []
    fresh = KernelCache(tmp_path, disk=True)
    assert at.autotune(PROBLEM, CANDS, _timer({64064: 1.0, 128128: 2.0, 128064: 3.0}, calls), cache=fresh,
                       enabled=True) == dict(BM=64, BN=64)
    assert len(calls) == 3 and _records(tmp_path)[0]["choice"] == dict(BM=64, BN=64)


def test_ops_matmul_does_not_tune_on_the_cpu(monkeypatch):
    def no_timing(*args, **kwargs):
        raise AssertionError("timed on the CPU target")
    monkeypatch.setattr(at, "autotune", no_timing)
    a = RNG.standard_normal((9, 17)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((17, 11)).astype(ml_dtypes.bfloat16)
    c = ops.matmul(a, b, out_dtype=np.float32, target="cpu")
    np.testing.assert_allclose(c, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_ops_matmul_tunes_on_device_arrays(tmp_path, monkeypatch):
    """torch CUDA tensors on the mma.sync path (odd K: rows that TMA cannot read, so not the Hopper
    path): the first call times the candidates and records the choice; the second (same size class,
    another shape) uses it without timing; results are right either way."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("KC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KC_TUNE", "1")
    timed: list = []
    real = at.autotune

    def spy(problem, candidates, time_fn, **kw):
        return real(problem, candidates, lambda c: (timed.append(c), time_fn(c))[1], **kw)
    monkeypatch.setattr(at, "autotune", spy)
    for M, N, K in [(700, 520, 261), (650, 600, 299)]:  # one size class: 1024 x 1024 x 512
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16)
        bias = torch.randn(N, device="cuda", dtype=torch.float32)
        c = ops.matmul(a, w.T, epilogue=ops.Epilogue("bias_relu", x=bias), out_dtype=torch.float32)
        torch.cuda.synchronize()
        ref = torch.relu(a.double() @ w.double().T + bias.double())
        tol = 4 * K * U32 * (a.double().abs() @ w.double().abs().T) + 8 * U32 * (ref.abs() + bias.double().abs()) + 1e-30
        assert ((c.double() - ref).abs() <= tol).all()
    assert len(timed) == len(ops.MATMUL_TUNE_CANDIDATES)
    recs = [r for r in _records(tmp_path) if isinstance(r, dict) and r.get("problem", {}).get("op") == "matmul"]
    assert len(recs) == 1 and recs[0]["choice"] in ops.MATMUL_TUNE_CANDIDATES
    assert recs[0]["problem"]["device"] and recs[0]["problem"]["M"] == 1024
