"""The whole pipeline from Python, on every target present (cpu; cuda with a GPU): the examples'
kernels against numpy, specialisation of generic kernels, and the public API's errors."""
from __future__ import annotations

import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.ir.types import F16, F32

from ..ptxas_util import needs_ptxas, ptxas
from ..paths import EXAMPLES
from ..draws import fresh_rng



@pytest.mark.parametrize("n", [1, 1000, 4096 + 3])
def test_vadd(target, n):
    m = kc.compile_file(EXAMPLES / "vadd.kc", target=target)
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    m.vadd[(n + 127) // 128, 128](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("dtype, tol", [(np.float16, 2e-3), (ml_dtypes.bfloat16, 1.6e-2),
                                        (np.float32, 1e-6)])
def test_saxpy_generic(target, dtype, tol):
    m = kc.compile_file(EXAMPLES / "saxpy.kc", target=target)
    n = 1003
    vec = 16 // np.dtype(dtype).itemsize
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    want = (np.float32(1.5) * x.astype(np.float32) + y.astype(np.float32)).astype(dtype)
    threads = 64
    m.saxpy[(n + threads * vec - 1) // (threads * vec), threads](x, y, 1.5, n, VEC=vec)
    np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=tol, atol=tol)


def test_specialisations_are_compiled_once(target):
    m = kc.compile_file(EXAMPLES / "saxpy.kc", target=target)
    x = np.zeros(64, np.float16)
    a1 = m.saxpy.specialize(x, x, 1.0, 64, VEC=8)
    a2 = m.saxpy.specialize(x, x, 2.0, 64, VEC=8)
    a3 = m.saxpy.specialize(x.astype(np.float32), x.astype(np.float32), 1.0, 64, VEC=4)
    assert a1 is a2 and a1 is not a3
    assert a1.meta["comptime"] == {"T": {"type": "f16"}, "VEC": 8}
    assert m.artifact("saxpy", T=F32) is m.artifact("saxpy", T=F32, VEC=4)


@pytest.mark.parametrize("keyword", ["comptime", "params"])  # params=: the keyword's older name
def test_module_comptime_default(target, keyword):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        m = kc.compile_file(EXAMPLES / "saxpy.kc", target=target, **{keyword: {"VEC": 2}})
    assert [x.category for x in w] == ([DeprecationWarning] if keyword == "params" else [])
    assert m.saxpy.specialize(np.zeros(4, np.float16), np.zeros(4, np.float16), 1.0, 4).meta["comptime"]["VEC"] == 2


def test_kernel_names_its_runtime_and_comptime_parameters():
    """One word, one meaning (issue 21): param_names are the launch's arguments, comptime_names the
    compile-time parameters that ``comptime`` values (and a launch's keywords) bind."""
    m = kc.compile_file(EXAMPLES / "saxpy.kc", target="cpu")
    assert m.saxpy.param_names == ["x", "y", "alpha", "n"]
    assert m.saxpy.comptime_names == ["T", "VEC"]
    with pytest.raises(TypeError, match="comptime= or params=, not both"):
        kc.compile_file(EXAMPLES / "saxpy.kc", target="cpu", comptime={"VEC": 2}, params={"VEC": 4})


def test_api_errors():
    with pytest.raises(ValueError, match="unknown target 'metal'"):
        kc.compile("kernel k(a: ptr<f32>) {}", target="metal")
    with pytest.raises(TypeError, match="unknown compile option opt"):
        kc.compile("kernel k(a: ptr<f32>) {}", target="cpu", opt=3)
    # hip compiles without an AMD GPU (the launch is what needs HIP: HipUnavailable)
    assert kc.compile("kernel k(a: ptr<f32>) {}", target="hip").target == "amdgcn"
    with pytest.raises(kc.CompileError, match=r"<string>:1:"):
        kc.compile("kernel k(a: ptr<f32>) { a[0] = nope; }", target="cpu")
    m = kc.compile(EXAMPLES.joinpath("saxpy.kc").read_text(), target="cpu")
    with pytest.raises(AttributeError, match="no kernel 'sxpy'.*saxpy"):
        m.sxpy
    with pytest.raises(TypeError, match="saxpy.*cannot infer.*T"):
        m.saxpy[1, 1](1.0, 2.0, 1.0, 4)
    with pytest.raises(TypeError, match="no compile-time parameter 'W'"):
        m.saxpy[1, 1](np.zeros(4, np.float32), np.zeros(4, np.float32), 1.0, 4, W=3)


def test_auto_target():
    from ..conftest import HAS_CUDA, HIP_MISSING

    m = kc.compile_file(EXAMPLES / "vadd.kc")
    assert m.target == ("nvptx" if HAS_CUDA else "cpu" if HIP_MISSING else "amdgcn")


@pytest.mark.gpu
def test_torch_saxpy_no_copy():
    torch = pytest.importorskip("torch")
    m = kc.compile_file(EXAMPLES / "saxpy.kc", target="cuda")
    n = 1 << 16
    x = torch.randn(n, device="cuda", dtype=torch.float16)
    y = torch.randn(n, device="cuda", dtype=torch.float16)
    want = (1.5 * x.float() + y.float()).half()
    m.saxpy[(n + 1023) // 1024, 128](x, y, 1.5, n, VEC=8)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, want, rtol=2e-3, atol=2e-3)


DIVIDE = """
kernel divide[T: type](a: ptr<T>, b: ptr<T>, q: ptr<T>, r: ptr<T>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    }
}
"""


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint32, np.int64, np.uint64])
def test_integer_division_is_defined_everywhere(target, dtype):
    """Truncating division like C, and the cases LLVM leaves undefined given one meaning on every
    target: x / 0 = -1 (all ones), x % 0 = x, MIN / -1 = MIN, MIN % -1 = 0. (On the host they would
    trap.)"""
    info = np.iinfo(dtype)
    rng = fresh_rng()
    n = 1001
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b[::7] = 0
    b[3::11] = rng.integers(1, 5, len(b[3::11]), dtype=dtype)
    if info.min < 0:
        a[5::13], b[5::13] = info.min, -1
    q, r = np.full(n, 7, dtype), np.full(n, 7, dtype)
    kc.compile(DIVIDE, target=target).divide[(n + 127) // 128, 128](a, b, q, r, n)
    want_q, want_r = _divide_reference(a, b)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)


def _division_inputs(dtype, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ``a`` and ``b`` of ``dtype`` over the whole range, with divisors 0, small divisors and
    (signed types) MIN / -1 pairs mixed in at positions that fall on every lane of a vector."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b[::7] = 0
    b[3::11] = rng.integers(1, 5, len(b[3::11]), dtype=dtype)
    if info.min < 0:
        a[5::13], b[5::13] = info.min, -1
        b[6::17] = -1
    return a, b


def _divide_reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """C's truncating ``a / b`` and ``a % b`` elementwise in Python integers, with kcompiler's meaning of
    the cases C leaves undefined: x / 0 = -1 (all ones), x % 0 = x, MIN / -1 = MIN, MIN % -1 = 0."""
    dtype = a.dtype
    info = np.iinfo(dtype)
    want_q, want_r = np.empty_like(a), np.empty_like(a)
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist())):
        if y == 0:
            want_q[i], want_r[i] = np.array(-1).astype(dtype), x
        elif x == info.min and y == -1:
            want_q[i], want_r[i] = x, 0
        else:
            t = abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1)
            want_q[i], want_r[i] = t, x - t * y
    return want_q, want_r


VECTOR_DIVIDE = """
kernel divide[T: type, N: i32](a: ptr<T>, b: ptr<T>, q: ptr<T>, r: ptr<T>, n: i32) {
    let i = (block_id.x * block_dim.x + thread_id.x) * N;
    if i + N <= n {
        let x = load[vec<T, N>](a + i);
        let y = load[vec<T, N>](b + i);
        store(q + i, x / y);
        store(r + i, x % y);
    }
}
"""


@pytest.mark.parametrize("lanes", [2, 4])
@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64])
def test_vector_integer_division_is_lanewise(target, dtype, lanes):
    """``/`` and ``%`` on integer vectors (they crashed the lowering on signed types): each lane as
    the scalar operator, the undefined cases included (a lane's MIN / -1 or division by zero touches
    no other lane)."""
    n = 1000
    a, b = _division_inputs(dtype, n, seed=lanes)
    q, r = np.full(n, 7, dtype), np.full(n, 7, dtype)
    m = kc.compile(VECTOR_DIVIDE, target=target)
    m.divide[(n // lanes + 63) // 64, 64](a, b, q, r, n, N=lanes)
    want_q, want_r = _divide_reference(a, b)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)


@needs_ptxas
@pytest.mark.parametrize("t", ["i16", "i32", "i64", "u32"])
def test_vector_integer_division_ptx_assembles(t):
    """The guarded vector division's PTX (per-lane selects around div.s*/rem.s*) assembles."""
    from kcompiler.backends import get_target
    from kcompiler.pipeline import Source, emit

    src = Source(VECTOR_DIVIDE, "<vdiv>", ".")
    ptx = emit(src, "asm", get_target("nvptx", "sm_90a"), kernel="divide", comptime={"T": t, "N": 4})
    assert ("div.s" if t[0] == "i" else "div.u") in ptx
    ptxas(ptx)
