"""The warp-level matrix builtins (mma_sync, ldmatrix, cp_async, cp_async_commit, cp_async_wait):
located errors for misuse, the IR ops' verifier rules and printed form, and execution of the PTX
fragment layouts, one instruction at a time, against numpy: on CUDA (marked gpu) and on the CPU
target's emulation (``emulate_mma``), whose deferred cp.async is checked to catch a missing wait.
The PTX itself is checked in test_lowering_nvptx.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.frontend import check, load_program
from kcompiler.ir import Builder, Function, Module, Value, print_module
from kcompiler.ir.types import BF16, F16, F32, U32, VOID, AddressSpace, PointerType, VectorType
from kcompiler.ir.verifier import IRVerifyError, verify

from ...frontend_util import FakeTarget
from ...draws import fresh_rng

RNG = fresh_rng()
NV = FakeTarget(features=("sm_80", "mma", "ldmatrix", "cp_async"))
NV89 = FakeTarget(arch="sm_89", features=("sm_80", "sm_89", "mma", "mma_fp8", "ldmatrix", "cp_async"))
DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f8e4m3": ml_dtypes.float8_e4m3fn,
          "f8e5m2": ml_dtypes.float8_e5m2}


def compile_for(target: str, src: str):
    """``src`` compiled for 'cuda', or for 'cpu' with NVIDIA's warp-matrix instructions emulated."""
    if target == "cpu":
        return kc.compile(src, target="cpu", target_options={"emulate_mma": True})
    return kc.compile(src, target=target)


# --- one instruction of each kind, on the target ------------------------------------------------------

# One m16n8k16 product: A (16 x 16) and B (16 x 8) row-major through cp.async into shared memory,
# ldmatrix.x4 for A's fragment, ldmatrix.x2.trans for B's (k in rows), D stored by its layout.
ONE_MMA = """
kernel one_mma[T: type](a: ptr<T>, b: ptr<T>, d: ptr<f32>) {
    let sa = dynamic_shared[T]();
    let sb = sa + 256;
    let l = i32(lane_id);
    cp_async(sa + l * 8, a + l * 8, 16);
    if l < 16 {
        cp_async(sb + l * 8, b + l * 8, 16);
    }
    cp_async_commit();
    cp_async_wait[0]();
    barrier();
    let fa = ldmatrix[vec<T, 8>](sa + (l % 16) * 16 + l / 16 * 8);
    let fb = ldmatrix[vec<T, 4>](sb + (l % 16) * 8, trans = true);
    let r = mma_sync(fa, fb, vec<f32, 4>(0.25));
    let g = l / 4;
    let t = l % 4;
    d[g * 8 + 2 * t] = r[0];
    d[g * 8 + 2 * t + 1] = r[1];
    d[(g + 8) * 8 + 2 * t] = r[2];
    d[(g + 8) * 8 + 2 * t + 1] = r[3];
}
"""

# One m16n8k32 FP8 product: A (16 x 32) row-major, B given as N x K (8 x 32, k contiguous), both read
# untransposed by ldmatrix (an 8 x 16-byte matrix holds 16 FP8 elements a row).
ONE_FP8_MMA = """
kernel one_mma[TA: type, TB: type](a: ptr<TA>, b: ptr<TB>, d: ptr<f32>) {
    let sa = dynamic_shared[TA]();
    let sb = bitcast[ptr<TB, shared>](sa + 512);
    let l = i32(lane_id);
    cp_async(sa + l * 16, a + l * 16, 16);
    if l < 16 {
        cp_async(sb + l * 16, b + l * 16, 16);
    }
    cp_async_commit();
    cp_async_wait[0]();
    barrier();
    let fa = ldmatrix[vec<TA, 16>](sa + (l % 16) * 32 + l / 16 * 16);
    let fb = ldmatrix[vec<TB, 8>](sb + (l % 8) * 32 + l / 8 % 2 * 16);
    let r = mma_sync(fa, fb, vec<f32, 4>(0.25));
    let g = l / 4;
    let t = l % 4;
    d[g * 8 + 2 * t] = r[0];
    d[g * 8 + 2 * t + 1] = r[1];
    d[(g + 8) * 8 + 2 * t] = r[2];
    d[(g + 8) * 8 + 2 * t + 1] = r[3];
}
"""


def small_values(shape, dtype) -> np.ndarray:
    """Random multiples of 1/8 in [-4, 4): exact in every input format, and their sums of 32 products
    exact in f32, so any order of summation gives the same D."""
    return (RNG.integers(-32, 32, shape) / 8).astype(dtype)


@pytest.mark.parametrize("elem", ["bf16", "f16"])
def test_one_mma_m16n8k16(target, elem):
    a, b = small_values((16, 16), DTYPES[elem]), small_values((16, 8), DTYPES[elem])
    d = np.full((16, 8), np.nan, np.float32)
    compile_for(target, ONE_MMA).one_mma[1, 32](a, b, d, T=elem, shared=1024)
    np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64) + 0.25)


@pytest.mark.parametrize("ta,tb", [("f8e4m3", "f8e4m3"), ("f8e4m3", "f8e5m2"), ("f8e5m2", "f8e5m2")])
def test_one_mma_m16n8k32_fp8(target, ta, tb):
    if target == "cuda":
        from kcompiler.backends import default_arch
        if default_arch("cuda") in ("sm_80", "sm_86"):
            pytest.skip("FP8 mma needs sm_89 or later")
    a, b = small_values((16, 32), DTYPES[ta]), small_values((32, 8), DTYPES[tb])
    d = np.full((16, 8), np.nan, np.float32)
    compile_for(target, ONE_FP8_MMA).one_mma[1, 32](a, np.ascontiguousarray(b.T), d, TA=ta, TB=tb, shared=1024)
    np.testing.assert_array_equal(d, a.astype(np.float64) @ b.astype(np.float64) + 0.25)


# Every lane's ldmatrix words, x1/x2/x4, plain and transposed, of a 32 x 8 u16 matrix whose element
# (r, c) is r * 8 + c; row addresses: lane l points at row l (its own).
LDMATRIX = """
kernel ld[NUM: i32, TRANS: bool](x: ptr<u16>, out: ptr<u16>) {
    let s = dynamic_shared[u16]();
    let l = i32(lane_id);
    cp_async(s + l * 8, x + l * 8, 16);
    cp_async_commit();
    cp_async_wait[0]();
    barrier();
    let v = ldmatrix[vec<u16, (2 * NUM)>](s + l * 8, trans = TRANS);
    store(out + l * 2 * NUM, v);
}
"""


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_layout(target, num, trans):
    x = np.arange(256, dtype=np.uint16)
    out = np.zeros((32, 2 * num), np.uint16)
    compile_for(target, LDMATRIX).ld[1, 32](x, out, NUM=num, TRANS=trans, shared=512)
    want = np.zeros_like(out)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(num):  # matrix j is rows 8j .. 8j + 7
            for i in range(2):
                r, c = (8 * j + g, 2 * t + i) if not trans else (8 * j + 2 * t + i, g)
                want[lane, 2 * j + i] = r * 8 + c
    np.testing.assert_array_equal(out, want)


# cp.async with a partial source (the rest zero-filled) and the 4- and 8-byte (.ca) forms.
CP_ASYNC = """
kernel cp(x: ptr<u32>, out: ptr<u32>) {
    let s = dynamic_shared[u32]();
    let l = i32(lane_id);
    cp_async(s + l * 4, x + l * 4, 16, l % 17);
    cp_async(s + 128 + l * 2, x + l * 2, 8);
    cp_async(s + 192 + l, x + l, 4, 4 * (l % 2));
    cp_async_commit();
    cp_async_wait[0]();
    barrier();
    for i in range(0, 7) {
        out[l * 7 + i] = s[l * 7 + i];
    }
}
"""


def test_cp_async_copies_and_zero_fills(target):
    x = RNG.integers(1, 2**32, 128, dtype=np.uint32)
    out = np.zeros(224, np.uint32)
    compile_for(target, CP_ASYNC).cp[1, 32](x, out, shared=224 * 4)
    want = np.zeros(224, np.uint32)
    xb, wb = x.view(np.uint8), want.view(np.uint8)
    for lane in range(32):
        n = lane % 17
        wb[16 * lane: 16 * lane + n] = xb[16 * lane: 16 * lane + n]
    want[128:192] = x[:64]
    want[192:224] = np.where(np.arange(32) % 2 == 1, x[:32], 0)
    np.testing.assert_array_equal(out, want)


# Tiles in flight, waited for one group at a time: with WAIT the sum is right; without it the
# emulation (which makes a copy only when a wait needs it) hands out its placeholder, NaN.
PIPELINE = """
kernel pipe[WAIT: bool](x: ptr<f32>, out: ptr<f32>) {
    let s = dynamic_shared[f32]();
    let l = i32(lane_id);
    for t in comptime range(0, 3) {
        cp_async(s + t * 128 + l * 4, x + t * 128 + l * 4, 16);
        cp_async_commit();
    }
    var acc = 0.0;
    for t in comptime range(0, 3) {
        comptime if WAIT {
            cp_async_wait[2 - t]();
        }
        barrier();
        acc += s[t * 128 + (l * 4 + 5) % 128];
    }
    out[l] = acc;
}
"""


def test_emulated_cp_async_is_only_there_after_a_wait():
    x = RNG.standard_normal(384).astype(np.float32)
    m = compile_for("cpu", PIPELINE)
    out = np.zeros(32, np.float32)
    m.pipe[1, 32](x, out, WAIT=True, shared=384 * 4)
    idx = (np.arange(32) * 4 + 5) % 128
    np.testing.assert_allclose(out, x[idx] + x[128 + idx] + x[256 + idx], rtol=1e-6)
    m.pipe[1, 32](x, out, WAIT=False, shared=384 * 4)
    assert np.isnan(out).all()


def test_emulated_cp_async_source_is_bounds_checked():
    """Under check_bounds a 16-byte cp.async from a source 16-byte aligned in bounds passes, one that
    reads past the end of its array is a located error, as a GPU's fault would be."""
    from kcompiler.runtime.device import LaunchError

    src = """
kernel k(x: ptr<f32>, off: i32) {
    let s = dynamic_shared[f32]();
    cp_async(s, x + off, 16);
    cp_async_commit();
    cp_async_wait[0]();
}
"""
    m = kc.compile(src, target="cpu", target_options={"emulate_mma": True}, check_bounds=True, path="cpb.kc")
    x = np.zeros(8, np.float32)
    m.k[1, 32](x, 4, shared=64)
    with pytest.raises(LaunchError, match=r"cpb.kc:4:5"):
        m.k[1, 32](x, 6, shared=64)


# --- located errors --------------------------------------------------------------------------------

def errors(src: str, target=NV) -> list[tuple[int, int, str]]:
    try:
        check(load_program(src, "bad.kc", keep_going=True), target)
    except CompileError as e:
        return [(d.span.line, d.span.col, d.message) for d in e.diagnostics]
    return []


def one_error(src: str, target=NV) -> tuple[int, int, str]:
    errs = errors(src, target)
    assert len(errs) == 1, errs
    return errs[0]


MMA_ARGS = "kernel k(p: ptr<vec<bf16, 8>>, q: ptr<vec<bf16, 4>>, h: ptr<vec<f16, 4>>, d: ptr<vec<f32, 4>>) {\n"


@pytest.mark.parametrize("call,col,fragment", [
    ("mma_sync(p[0], q[0], d[0])", 0, None),
    ("mma_sync(d[0], q[0], d[0])", 21, "A fragment must be vec<bf16, 8> or vec<f16, 8>"),
    ("mma_sync(p[0], h[0], d[0])", 27, "B fragment must be vec<bf16, 4> to go with an A of vec<bf16, 8>, "
                                       "found vec<f16, 4>"),
    ("mma_sync(p[0], q[0], q[0])", 33, "accumulator must be vec<f32, 4>, found vec<bf16, 4>"),
])
def test_mma_sync_fragment_types(call, col, fragment):
    src = MMA_ARGS + f"    d[1] = {call};\n}}\n"
    if fragment is None:
        assert errors(src) == []
        return
    line, c, msg = one_error(src)
    assert (line, c) == (2, col) and fragment in msg, msg


@pytest.mark.parametrize("tgt,where", [(FakeTarget("cpu", "host", 32, ("cpu",)), "cpu host"),
                                       (FakeTarget("amdgcn", "gfx942", 64, ("mfma",)), "amdgcn gfx942")])
def test_mma_sync_is_refused_where_the_target_has_none(tgt, where):
    line, col, msg = one_error(MMA_ARGS + "    d[1] = mma_sync(p[0], q[0], d[0]);\n}\n", tgt)
    assert (line, col) == (2, 12)
    assert f"mma_sync is not available on this target ({where})" in msg


def test_fp8_mma_needs_sm_89():
    src = ("kernel k(p: ptr<vec<f8e4m3, 16>>, q: ptr<vec<f8e5m2, 8>>, d: ptr<vec<f32, 4>>) {\n"
           "    d[1] = mma_sync(p[0], q[0], d[0]);\n}\n")
    assert errors(src, NV89) == []
    line, col, msg = one_error(src, NV)
    assert (line, col) == (2, 12) and "FP8 mma.sync (NVIDIA sm_89 or later)" in msg


def test_unguarded_mma_on_the_cpu_target_is_a_located_error():
    src = MMA_ARGS + "    d[1] = mma_sync(p[0], q[0], d[0]);\n}\n"
    with pytest.raises(CompileError, match=r"t.kc:2:12: error: mma_sync is not available on this target \(cpu"):
        kc.compile(src, target="cpu", path="t.kc").k[1, 32]
    # behind comptime if target.has("mma") the same source compiles for the CPU
    guarded = MMA_ARGS + '    comptime if target.has("mma") {\n        d[1] = mma_sync(p[0], q[0], d[0]);\n    }\n}\n'
    d = np.zeros((2, 4), np.float32)
    kc.compile(guarded, target="cpu").k[1, 32](np.zeros((1, 8), ml_dtypes.bfloat16),
                                               np.zeros((1, 4), ml_dtypes.bfloat16), np.zeros((1, 4), np.float16), d)


@pytest.mark.parametrize("body,col,fragment", [
    ("let v = ldmatrix[vec<bf16, 8>](g);", 36, "ldmatrix reads shared memory: it needs a ptr<bf16, shared>"),
    ("let v = ldmatrix[vec<bf16, 6>](s);", 13, "loads 12 bytes a lane; it loads 1, 2 or 4 matrices"),
    ("let v = ldmatrix[vec<f32, 4>](f);", 13, "it loads vec<T, N> from ptr<T, shared> with T of 16 bits"),
    ("let v = ldmatrix[vec<u8, 8>](b, trans = true);", 37, "ldmatrix transposes 16-bit elements, not u8"),
    ("let v = ldmatrix(s);", 13, "ldmatrix needs a type in brackets"),
    ("cp_async(s, g, 12);", 20, "cp_async copies 4, 8 or 16 bytes, not 12"),
    ("cp_async(g, g, 16);", 14, "the destination must be a ptr<bf16, shared>, found ptr<bf16>"),
    ("cp_async(s, s, 16);", 17, "the source must be a ptr<bf16>, found ptr<bf16, shared>"),
    ("cp_async(s, h, 16);", 5, "cp_async from ptr<f16> into ptr<bf16, shared>: the element types differ"),
    ("cp_async(s, g, 16, 17);", 24, "source size must be an integer from 0 to 16"),
    ("cp_async_wait();", 5, "cp_async_wait needs a count in brackets"),
    ("cp_async_wait[-1]();", 19, "group count must be 0 or more"),
])
def test_ldmatrix_and_cp_async_misuse(body, col, fragment):
    src = ("kernel k(g: ptr<bf16>, h: ptr<f16>) {\n    let s = dynamic_shared[bf16]();\n"
           "    let f = dynamic_shared[f32]();\n    let b = dynamic_shared[u8]();\n"
           f"    {body}\n}}\n")
    line, c, msg = one_error(src)
    assert (line, c) == (5, col) and fragment in msg, (line, c, msg)


# --- the IR ops --------------------------------------------------------------------------------------

def test_ir_ops_verify_and_print():
    sh = PointerType(BF16, AddressSpace.SHARED)
    fn = Function("k", [Value(sh, "s"), Value(PointerType(BF16), "g")], VOID, "kernel")
    s, g = fn.params
    b = Builder(fn.body)
    b.intrinsic("nvptx.cp_async", [s, g, b.const(16, U32)], bytes=16)
    b.intrinsic("nvptx.cp_async.commit_group")
    b.intrinsic("nvptx.cp_async.wait_group", n=0)
    fa = b.intrinsic("nvptx.ldmatrix", [s], VectorType(BF16, 8), num=4, trans=False)
    fb = b.intrinsic("nvptx.ldmatrix", [s], VectorType(BF16, 4), num=2, trans=True)
    b.intrinsic("nvptx.mma.sync", [fa, fb, b.const(0.0, VectorType(F32, 4))], VectorType(F32, 4), shape="m16n8k16")
    m = Module("m", [fn])
    verify(m)
    text = print_module(m)
    for piece in ("intrinsic nvptx.cp_async {bytes=16}", "intrinsic nvptx.cp_async.commit_group\n",
                  "intrinsic nvptx.cp_async.wait_group {n=0}", "intrinsic nvptx.ldmatrix {num=4, trans=False}",
                  "intrinsic nvptx.ldmatrix {num=2, trans=True}", "intrinsic nvptx.mma.sync {shape=m16n8k16}"):
        assert piece in text, text


@pytest.mark.parametrize("build,message", [
    (lambda b, s, g: b.intrinsic("nvptx.mma.sync", [b.const(0, VectorType(F16, 8)), b.const(0, VectorType(BF16, 4)),
                                     b.const(0.0, VectorType(F32, 4))], VectorType(F32, 4), shape="m16n8k16"),
     "B fragment of type vec<bf16, 4> (needs vec<f16, 4>)"),
    (lambda b, s, g: b.intrinsic("nvptx.mma.sync", [b.const(0, VectorType(F16, 8)), b.const(0, VectorType(F16, 4)),
                                     b.const(0.0, VectorType(F32, 4))], VectorType(F32, 4), shape="m8n8k4"),
     "shape='m8n8k4' is not one of"),
    (lambda b, s, g: b.intrinsic("nvptx.ldmatrix", [g], VectorType(BF16, 8), num=4, trans=False), "needs a shared pointer"),
    (lambda b, s, g: b.intrinsic("nvptx.ldmatrix", [s], VectorType(BF16, 4), num=4, trans=False),
     "gives vec<bf16, 8>, not vec<bf16, 4>"),
    (lambda b, s, g: b.intrinsic("nvptx.cp_async", [s, g, b.const(16, U32)], bytes=32), "cp_async of 32 bytes"),
    (lambda b, s, g: b.intrinsic("nvptx.cp_async", [g, s, b.const(16, U32)], bytes=16), "needs a shared pointer"),
    (lambda b, s, g: b.intrinsic("nvptx.cp_async.wait_group", n=-1), "cp_async_wait n=-1"),
])
def test_ir_ops_verifier_rejects(build, message):
    fn = Function("k", [Value(PointerType(BF16, AddressSpace.SHARED), "s"), Value(PointerType(BF16), "g")],
                  VOID, "kernel")
    b = Builder(fn.body)
    build(b, *fn.params)
    with pytest.raises(IRVerifyError, match=message.replace("(", r"\(").replace(")", r"\)")):
        verify(Module("m", [fn]))
