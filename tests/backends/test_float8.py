"""Small floats (f8e4m3, f8e5m2, f8e4m3fnuz, f8e5m2fnuz, e8m0, f6e2m3, f6e3m2, f4e2m1): conversions in
kernels equal ml_dtypes' casts bit for bit, for every f16 and bf16 input and 2^24 + f32 inputs (every exponent, ties and their
neighbours, subnormals, NaN payloads, infinities, zeros), both rounding modes, through the CPU target
(and CUDA where present); the hardware paths' fix-ups are checked against the software path on the
CPU, and the PTX and AMDGCN code show the converts."""
from __future__ import annotations

import ctypes
import re

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.numerics import mx, reference
from kcompiler.numerics.formats import FORMATS, ml_dtype
from kcompiler.pipeline import compile_source_to

from ..filecheck_util import filecheck
from ..ptxas_util import ptxas
from ..draws import fresh_rng

NAMES = list(FORMATS)
RNG = fresh_rng()


def f32_inputs() -> np.ndarray:
    """2^24 + f32 bit patterns: every 256th pattern (all exponents, signs, the exact ties of every
    format, zeros, infinities, NaNs), every f32 near each format's ties and code boundaries (±2 ulp),
    all positive subnormals' neighbourhood of 2^-127, and random NaN payloads."""
    grid = (np.arange(1 << 24, dtype=np.uint64) << 8).astype(np.uint32)
    near = []
    for f in FORMATS.values():
        codes = np.arange(256, dtype=np.uint8)
        v = reference.decode(codes, f).astype(np.float64)
        v = np.unique(np.abs(v[np.isfinite(v)]))
        mids = np.concatenate([(v[:-1] + v[1:]) / 2, v, [v[-1] * 1.0625, v[-1] * 1.125]])
        bits = mids.astype(np.float32).view(np.uint32)
        for d in (-2, -1, 0, 1, 2):
            near.append(bits + np.uint32(d & 0xFFFFFFFF))
    near = np.concatenate(near)
    near = np.concatenate([near, near | np.uint32(0x8000_0000)])
    sub = np.arange(0x3F_F000, 0x40_1000, dtype=np.uint32)
    nans = (RNG.integers(1, 1 << 23, 4096, dtype=np.uint32) | np.uint32(0x7F80_0000)) \
        | (RNG.integers(0, 2, 4096, dtype=np.uint32) << np.uint32(31))
    return np.concatenate([grid, near, sub, nans]).view(np.float32)


CAST = """
kernel enc[T: type, SAT: bool](x: ptr<f32>, y: ptr<T>, n: i64, per: i64) {
    let start = i64(block_id.x * block_dim.x + thread_id.x) * per;
    for k in range(0i64, per) {
        let i = start + k;
        if i < n {
            y[i] = convert[T](x[i], saturate = SAT);
        }
    }
}

kernel enc16[S: type, T: type](x: ptr<S>, y: ptr<T>, n: i64) {
    let i = i64(block_id.x * block_dim.x + thread_id.x);
    if i < n {
        y[i] = T(x[i]);
    }
}

kernel dec[T: type](c: ptr<T>, f: ptr<f32>, h: ptr<f16>, b: ptr<bf16>, d: ptr<f64>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        f[i] = f32(c[i]);
        h[i] = f16(c[i]);
        b[i] = bf16(c[i]);
        d[i] = f64(c[i]);
    }
}

kernel dec_any_nan[T: type](c: ptr<T>, f: ptr<f32>, h: ptr<f16>, n: i32) {
    let i = (block_id.x * block_dim.x + thread_id.x) * 2;
    if i + 2 <= n {
        let v = load[vec<T, 2>](c + i);
        store(f + i, convert[vec<f32, 2>](v, exact_nan = false));
        store(h + i, convert[vec<f16, 2>](v, exact_nan = false));
    }
}

kernel vec4[T: type](x: ptr<f32>, y: ptr<T>, back: ptr<f32>, n: i32) {
    let i = (block_id.x * block_dim.x + thread_id.x) * 4;
    if i + 4 <= n {
        let v = vec<T, 4>(load[vec<f32, 4>](x + i));
        store(y + i, v);
        store(back + i, vec<f32, 4>(v));
    }
}
"""


@pytest.fixture(scope="module")
def inputs() -> np.ndarray:
    return f32_inputs()


def _module(target):
    return kc.compile(CAST, target=target, path="float8.kc")


def _bad(x, got, want):
    i = np.nonzero(got != want)[0]
    return f"{i.size} differ, first: " + ", ".join(
        f"x={x.view(np.uint32)[k]:#010x} got {got[k]:#04x} want {want[k]:#04x}" for k in i[:5])


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_f32_to_float8_bit_exact(target, inputs, name, saturate):
    x = inputs
    y = np.zeros(x.size, ml_dtype(name))
    per = 64
    threads = (x.size + per - 1) // per
    _module(target).enc[(threads + 255) // 256, 256](x, y, x.size, per, T=name, SAT=saturate)
    got, want = y.view(np.uint8), reference.encode(x, name, saturate)
    assert (got == want).all(), _bad(x, got, want)


@pytest.mark.parametrize("src", ["f16", "bf16"])
@pytest.mark.parametrize("name", NAMES)
def test_every_f16_and_bf16_to_float8(target, name, src):
    dt = np.float16 if src == "f16" else ml_dtypes.bfloat16
    x = np.arange(1 << 16, dtype=np.uint16).view(dt)
    y = np.zeros(x.size, ml_dtype(name))
    _module(target).enc16[(x.size + 255) // 256, 256](x, y, x.size, S=src, T=name)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtype(name)).view(np.uint8)
    assert (y.view(np.uint8) == want).all(), _bad(x.astype(np.float32), y.view(np.uint8), want)


@pytest.mark.parametrize("name", NAMES)
def test_f64_sources_equal_ml_dtypes(target, name):
    """An f64 rounds to f32 first, as ml_dtypes does with an f64 array: the same bits, also just
    beside every tie of the format (where rounding twice and once differ)."""
    f = FORMATS[name]
    v = reference.decode(np.arange(1 << f.bits, dtype=np.uint8), f).astype(np.float64)
    v = np.unique(np.abs(v[np.isfinite(v)]))
    mids = (v[:-1] + v[1:]) / 2
    x = np.concatenate([mids * (1 + 2.0 ** -k) for k in (20, 30, 40, 50)]
                       + [mids * (1 - 2.0 ** -k) for k in (20, 30, 40, 50)]
                       + [RNG.standard_normal(1 << 14) * v.max() / 3])
    x = np.concatenate([x, -x])
    y = np.zeros(x.size, ml_dtype(name))
    _module(target).enc16[(x.size + 255) // 256, 256](x, y, x.size, S="f64", T=name)
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtype(name)).view(np.uint8)
    assert (y.view(np.uint8) == want).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_code_to_f32_f16_bf16_f64(target, name):
    n = 1 << FORMATS[name].bits
    codes = np.arange(n, dtype=np.uint8).view(ml_dtype(name))
    f, h = np.zeros(n, np.float32), np.zeros(n, np.float16)
    b, d = np.zeros(n, ml_dtypes.bfloat16), np.zeros(n, np.float64)
    _module(target).dec[1, 256](codes, f, h, b, d, n, T=name)
    with np.errstate(invalid="ignore", over="ignore"):
        for arr, dt in ((f, np.float32), (h, np.float16), (b, ml_dtypes.bfloat16), (d, np.float64)):
            want = codes.astype(dt)
            same = (arr.view(f"u{arr.itemsize}") == want.view(f"u{arr.itemsize}")) | \
                (np.isnan(arr.astype(np.float64)) & np.isnan(want.astype(np.float64)))
            assert same.all(), (dt, np.nonzero(~same)[0][:5])
    # f32 results bit for bit, NaNs included (the quiet NaN with the code's sign)
    assert (f.view(np.uint32) == codes.astype(np.float32).view(np.uint32)).all()


@pytest.mark.parametrize("name", NAMES)
def test_every_code_with_any_nan(target, name):
    """convert[T](c, exact_nan = false): every code's value bit for bit, a NaN code a NaN (of any sign
    and payload: on NVIDIA sm_89+ the cvt instruction's, with no fix-up)."""
    n = 1 << FORMATS[name].bits
    codes = np.arange(n, dtype=np.uint8).view(ml_dtype(name))
    f, h = np.zeros(n, np.float32), np.zeros(n, np.float16)
    _module(target).dec_any_nan[1, 128](codes, f, h, n, T=name)
    with np.errstate(invalid="ignore", over="ignore"):
        for arr, dt in ((f, np.float32), (h, np.float16)):
            want = codes.astype(dt)
            nan = np.isnan(want)
            assert (np.isnan(arr) == nan).all(), (dt, np.nonzero(np.isnan(arr) != nan)[0][:5])
            assert (arr[~nan].view(f"u{arr.itemsize}") == want[~nan].view(f"u{arr.itemsize}")).all(), dt


@pytest.mark.parametrize("name", NAMES)
def test_vectors_convert_lane_by_lane(target, name):
    n = 4 * 257
    x = (RNG.standard_normal(n) * 2.0 ** RNG.integers(-12, 12, n)).astype(np.float32)
    y, back = np.zeros(n, ml_dtype(name)), np.zeros(n, np.float32)
    _module(target).vec4[(n // 4 + 63) // 64, 64](x, y, back, n, T=name)
    want = reference.encode(x, name)
    assert (y.view(np.uint8) == want).all(), _bad(x, y.view(np.uint8), want)
    assert (back.view(np.uint32) == reference.decode(want, name).view(np.uint32)).all()


# --- the hardware paths' fix-ups, checked on the CPU ---------------------------------------------------

def _jit_loop(name: str, pointers: int, body):
    """A host function ``name(p_1, .., p_pointers, n)`` that runs ``body(b, i, pointers)`` for i < n
    (llvmlite's IRBuilder b, i an i64), JIT-compiled: (the engine, which must outlive it, the ctypes
    function)."""
    import llvmlite.binding as llvm
    from llvmlite import ir as ll

    from kcompiler.backends.llvm import initialize

    initialize()
    i64, ptr = ll.IntType(64), ll.PointerType()
    m = ll.Module()
    m.triple = llvm.get_process_triple()
    fn = ll.Function(m, ll.FunctionType(ll.VoidType(), [ptr] * pointers + [i64]), name)
    *ptrs, n = fn.args
    b = ll.IRBuilder(fn.append_basic_block())
    loop, done = fn.append_basic_block(), fn.append_basic_block()
    entry = b.block
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ll.Constant(i64, 0), entry)
    body(b, i, ptrs)
    i2 = b.add(i, ll.Constant(i64, 1))
    i.add_incoming(i2, b.block)
    b.cbranch(b.icmp_unsigned("<", i2, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    mod = llvm.parse_assembly(str(m))
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, llvm.Target.from_default_triple().create_target_machine(opt=2))
    engine.finalize_object()
    f = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * pointers, ctypes.c_int64)(engine.get_function_address(name))
    return engine, f


def _jit_fixup(name: str, saturate: bool):
    """A host function running minifloat.fix_encoded on a simulated convert instruction: the
    saturating software result with its NaN sign dropped and FNUZ zeros signed, as a chip might."""
    from llvmlite import ir as ll

    from kcompiler.backends.llvm import minifloat

    fmt = FORMATS[name]
    i8, f32 = ll.IntType(8), ll.FloatType()

    def body(b, i, ptrs):
        src, dst = ptrs
        x = b.load(b.gep(src, [i], source_etype=f32), typ=f32)
        hw = minifloat.encode(b, x, fmt, True)
        if fmt.signed and fmt.kind != "fnuz":  # a chip's NaN without the sign
            nan = b.fcmp_unordered("uno", x, x)
            hw = b.select(nan, ll.Constant(i8, fmt.nan_code), hw)
        if fmt.kind == "fnuz":  # a chip's -0 (0x80, FNUZ's NaN) for negative values that round to zero
            zero = b.icmp_unsigned("==", hw, ll.Constant(i8, 0))
            neg = b.fcmp_ordered("<", x, ll.Constant(f32, 0.0))
            hw = b.select(b.and_(zero, neg), ll.Constant(i8, 0x80), hw)
        b.store(minifloat.fix_encoded(b, x, hw, fmt, saturate), b.gep(dst, [i], source_etype=i8))

    return _jit_loop("fix", 2, body)


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz"])
def test_hardware_fixups_give_the_software_bits(inputs, name, saturate):
    """What NVIDIA's satfinite cvt and AMD's packed converts do differently (saturation, NaN sign,
    -0 in FNUZ) is repaired by minifloat.fix_encoded: simulated here, the result equals the reference."""
    engine, fix = _jit_fixup(name, saturate)
    x = inputs
    out = np.zeros(x.size, np.uint8)
    fix(x.ctypes.data, out.ctypes.data, x.size)
    want = reference.encode(x, name, saturate)
    assert (out == want).all(), _bad(x, out, want)


def test_satfinite_e4m3_signs_give_the_software_bits(inputs):
    """NVIDIA's saturating E4M3 convert (cvt.rn.satfinite.e4m3x2.f32, simulated: the saturating
    reference with every NaN 0x7F and every zero unsigned, as a chip might) with minifloat.or_signs
    applied to each pair equals the reference (the NVPTX target's saturating E4M3 path)."""
    from llvmlite import ir as ll

    from kcompiler.backends.llvm import minifloat

    i16, i64, f32 = ll.IntType(16), ll.IntType(64), ll.FloatType()

    def body(b, i, ptrs):
        src, hw, dst = ptrs
        first = b.load(b.gep(src, [b.mul(i, ll.Constant(i64, 2))], source_etype=f32), typ=f32)
        second = b.load(b.gep(src, [b.add(b.mul(i, ll.Constant(i64, 2)), ll.Constant(i64, 1))], source_etype=f32),
                        typ=f32)
        two = b.load(b.gep(hw, [i], source_etype=i16), typ=i16)
        b.store(minifloat.or_signs(b, two, first, second), b.gep(dst, [i], source_etype=i16))

    engine, f = _jit_loop("signs", 3, body)
    x = np.ascontiguousarray(inputs[: inputs.size // 2 * 2], np.float32)
    want = reference.encode(x, "f8e4m3", True)
    chip = np.where(np.isnan(x), np.uint8(0x7F), np.where((want & 0x7F) == 0, np.uint8(0), want)).astype(np.uint8)
    assert (chip != want).any()  # the simulated chip differs (NaN signs, -0)
    hw16 = np.ascontiguousarray(chip.view(np.uint16))
    out = np.zeros(x.size // 2, np.uint16)
    f(x.ctypes.data, hw16.ctypes.data, out.ctypes.data, out.size)
    got = out.view(np.uint8)
    assert (got == want).all(), _bad(x, got, want)


# --- the code: hardware converts where the chip has them ----------------------------------------------

SRC8 = """
kernel k(x: ptr<f32>, y: ptr<T8>, z: ptr<f32>) {
    let v = vec<T8, 2>(load[vec<f32, 2>](x));
    store(y, v);
    store(z, vec<f32, 2>(load[vec<T8, 2>](y)));
}
"""


@pytest.mark.parametrize("arch", ["sm_89", "sm_90a"])
def test_ptx_uses_cvt_on_sm89_and_later(arch, tmp_path):

    for t, hw in (("f8e4m3", "e4m3"), ("f8e5m2", "e5m2")):
        ptx = compile_source_to(SRC8.replace("T8", t), "k.kc", "asm", "nvptx", arch)
        filecheck(ptx, f"""
            CHECK: .version 8.1
            CHECK: cvt.rn.satfinite.{hw}x2.f32
            CHECK: cvt.rn.f16x2.{hw}x2
        """)
        ptxas(ptx, arch)
    from kcompiler.backends.nvptx.target import NvptxTarget
    soft = compile_source_to(SRC8.replace("T8", "f8e4m3"), "k.kc", "asm", NvptxTarget(arch, float8="software"))
    assert "e4m3x2" not in soft
    for t in ("f8e4m3", "f8e4m3fnuz", "e8m0"):
        assert "e4m3x2" not in compile_source_to(SRC8.replace("T8", t), "k.kc", "asm", "nvptx", "sm_80")
    assert "e4m3x2" not in compile_source_to(SRC8.replace("T8", "f8e4m3fnuz"), "k.kc", "asm", "nvptx", "sm_90a")


SRC_ANY_NAN = """
kernel k(y: ptr<T8>, z: ptr<f32>) {
    store(z, convert[vec<f32, 2>](load[vec<T8, 2>](y), exact_nan = EXACT));
}
"""


@pytest.mark.parametrize("target, arch, fmt", [("nvptx", "sm_90a", "f8e4m3"), ("nvptx", "sm_89", "f8e5m2"),
                                               ("amdgcn", "gfx950", "f8e4m3"), ("amdgcn", "gfx942", "f8e4m3fnuz")])
def test_any_nan_skips_the_nan_fixup(target, arch, fmt):
    """exact_nan = false: the hardware convert alone. exact_nan = true puts ml_dtypes' quiet NaN (with
    the code's sign; FNUZ: -NaN) after it: a select between the instruction's value and those bits;
    without it there is no select, and the code is shorter."""

    def code(exact):
        return compile_source_to(SRC_ANY_NAN.replace("T8", fmt).replace("EXACT", exact), "k.kc", "llvm", target,
                                 arch)
    exact, fast = code("true"), code("false")
    hw = {"nvptx": "to.f16x2", "amdgcn": "cvt.f32."}[target]
    assert hw in exact and hw in fast
    assert " select " in exact and " select " not in fast
    assert len(fast) < len(exact)
    if target == "nvptx":
        ptxas(compile_source_to(SRC_ANY_NAN.replace("T8", fmt).replace("EXACT", "false"), "k.kc", "asm", target, arch),
              arch)


@pytest.mark.parametrize("arch, fmt, hw", [("gfx942", "f8e4m3fnuz", "fp8"), ("gfx942", "f8e5m2fnuz", "bf8"),
                                           ("gfx950", "f8e4m3", "fp8"), ("gfx950", "f8e5m2", "bf8"),
                                           ("gfx1201", "f8e4m3", "fp8")])
def test_amdgcn_uses_packed_converts(arch, fmt, hw):
    asm = compile_source_to(SRC8.replace("T8", fmt), "k.kc", "asm", "amdgcn", arch)
    filecheck(asm, f"""
        CHECK: v_cvt_pk_{hw}_f32
        CHECK: v_cvt_f32_{hw}
    """)


@pytest.mark.parametrize("target, arch, ocp", [("nvptx", "sm_80", False), ("nvptx", "sm_89", True),
                                               ("nvptx", "sm_90a", True), ("amdgcn", "gfx942", False),
                                               ("amdgcn", "gfx950", True), ("amdgcn", "gfx1201", True),
                                               ("amdgcn", "gfx1100", False)])
def test_fp8_ocp_says_which_chips_convert_the_ocp_kinds(target, arch, ocp):
    """``fp8_ocp`` (what std.decode asks before converting E4M3 rows in hardware) is true exactly where
    the chip's converts take OCP E4M3 / E5M2, and float8="software" takes it away with the converts."""
    from kcompiler.backends.amdgcn.target import AmdgcnTarget
    from kcompiler.backends.nvptx.target import NvptxTarget
    make = NvptxTarget if target == "nvptx" else AmdgcnTarget
    t = make(arch)
    assert t.has("fp8_ocp") == ocp
    assert not (ocp and not t.has("fp8_convert"))
    assert not (t.has("fp8_ocp") and t.has("fp8_fnuz"))
    soft = make(arch, float8="software")
    assert not soft.has("fp8_ocp") and not soft.has("fp8_convert")


@pytest.mark.parametrize("arch, fmt", [("gfx942", "f8e4m3"), ("gfx950", "f8e4m3fnuz"), ("gfx1100", "f8e4m3")])
def test_amdgcn_without_the_format_uses_software(arch, fmt):
    asm = compile_source_to(SRC8.replace("T8", fmt), "k.kc", "asm", "amdgcn", arch)
    assert "v_cvt_pk_fp8" not in asm and "v_cvt_f32_fp8" not in asm


# --- the language's rules -------------------------------------------------------------------------------

@pytest.mark.parametrize("body, message", [
    ("let a = f8e4m3(x[0]); let b = a + a;", "cannot apply '+' to f8e4m3: small floats are for storage"),
    ("let a = f8e5m2(x[0]); let b = a < a;", "cannot apply '<' to f8e5m2"),
    ("let a = e8m0(x[0]); let b = -a;", "cannot apply '-' to e8m0"),
    ("let a = f8e4m3(n);", "cannot convert i32 to f8e4m3: small floats convert to and from f16, bf16, f32"),
    ("let a = i32(f8e4m3(x[0]));", "cannot convert f8e4m3 to i32"),
    ("let a = convert[f32](x[0], saturate = true);", "saturate applies to conversions into small floats"),
    ("let a = convert[f8e4m3](x[0], saturate = 1);", "saturate must be a compile-time bool"),
    ("let a = convert[f16](x[0], exact_nan = false);", "exact_nan applies to conversions from small floats, not "
                                                       "from f32"),
    ("let a = convert[f32](f8e4m3(x[0]), exact_nan = 0);", "exact_nan must be a compile-time bool"),
])
def test_errors(body, message):
    src = f"kernel k(x: ptr<f32>, n: i32) {{\n    {body}\n}}\n"
    with pytest.raises(CompileError, match=r"k.kc:2:\d+: error: " + re.escape(message)):
        compile_source_to(src, "k.kc", "llvm", "cpu", None)


def test_kernel_parameters_are_not_float8():
    with pytest.raises(CompileError, match=r"k.kc:1:13: error: kernel parameter 'a' is a f8e4m3: small "
                                           r"floats are passed in arrays"):
        compile_source_to("kernel k(a: f8e4m3, y: ptr<f32>) { y[0] = f32(a); }", "k.kc", "llvm", "cpu", None)


def test_constant_conversions_equal_the_runtime_ones():
    src = """
kernel k(y: ptr<f8e4m3>, z: ptr<e8m0>) {
    y[0] = f8e4m3(0.1);
    y[1] = convert[f8e4m3](1000.0, saturate = true);
    y[2] = f8e4m3(1000.0);
    z[0] = e8m0(3.0);
}
"""
    y, z = np.zeros(3, ml_dtypes.float8_e4m3fn), np.zeros(1, ml_dtypes.float8_e8m0fnu)
    kc.compile(src, target="cpu").k[1, 1](y, z)
    assert list(y.view(np.uint8)) == [reference.encode(np.float32(0.1), "f8e4m3")[()], 0x7E, 0x7F]
    assert z.view(np.uint8)[0] == 0x81  # 3 = 1.5 * 2^1: E8M0 rounds the tie up, to 4


@pytest.mark.parametrize("name", NAMES)
def test_ops_cast(target, name):
    """kcompiler.ops.cast: numpy in, numpy out, any shape; both modes; and back to f32 and bf16."""
    from kcompiler import ops

    x = (RNG.standard_normal((3, 37, 11)) * 2.0 ** RNG.integers(-20, 20, (3, 37, 11))).astype(np.float32)
    x.flat[:4] = [np.inf, -np.inf, np.nan, -0.0]
    for saturate in (False, True):
        y = ops.cast(x, ml_dtype(name), saturate=saturate, target=target)
        assert y.shape == x.shape and y.dtype == ml_dtype(name)
        assert (y.view(np.uint8) == reference.encode(x, name, saturate)).all()
    back = ops.cast(y, "bf16", target=target)
    with np.errstate(invalid="ignore", over="ignore"):
        want = y.astype(ml_dtypes.bfloat16)
    assert np.array_equal(back.astype(np.float32), want.astype(np.float32), equal_nan=True)
    with pytest.raises(TypeError, match="saturate applies to small-float results"):
        ops.cast(x, np.float16, saturate=True, target=target)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 255, 2049, 100_003])
def test_ops_cast_every_length(target, n):
    """The cast kernel's 8-wide body and its scalar tail: every element converted, none written past."""
    from kcompiler import ops

    x = (RNG.standard_normal(n) * 300).astype(np.float32)
    y = ops.cast(x, ml_dtypes.float8_e5m2, target=target)
    assert (y.view(np.uint8) == x.astype(ml_dtypes.float8_e5m2).view(np.uint8)).all()
    h = ops.cast(y, np.float16, target=target)
    assert np.array_equal(h, y.astype(np.float16), equal_nan=True)


@pytest.mark.gpu
def test_ops_cast_torch_views_against_torch():
    """torch in, torch out on the GPU, also for a view whose data is not 32-byte aligned (the scalar
    path), against torch's own casts."""
    torch = pytest.importorskip("torch")
    from kcompiler import ops

    x = torch.randn(4099, device="cuda") * 500
    for view in (x, x[1:], x[3:-5]):
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            got = ops.cast(view, dt)
            assert got.is_cuda and got.dtype == dt and got.shape == view.shape
            assert torch.equal(got.view(torch.uint8), view.to(dt).view(torch.uint8))
    codes, scales = ops.mx_quantize(x[32:].to(torch.bfloat16)[1:].reshape(-1)[:4032], "f8e4m3")
    rc, rs = mx.quantize(x[32:].to(torch.bfloat16)[1:].reshape(-1)[:4032].float().cpu().numpy(), "f8e4m3")
    assert (codes.cpu().view(torch.uint8).numpy() == rc.view(np.uint8)).all()
    assert (scales.cpu().view(torch.uint8).numpy() == rs.view(np.uint8)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["f8e4m3", "f8e5m2"])
def test_cuda_software_path_equals_hardware_path(inputs, name):
    """On a GPU with FP8 converts (sm_89+) the same kernel with float8="software" gives the same
    bits as the cvt path, both equal to ml_dtypes, in both modes."""
    x = inputs
    per = 64
    grid = ((x.size + per - 1) // per + 255) // 256
    for opts in ({}, {"float8": "software"}):
        mod = kc.compile(CAST, target="cuda", path="float8.kc", target_options=opts)
        for saturate in (False, True):
            y = np.zeros(x.size, ml_dtype(name))
            mod.enc[grid, 256](x, y, x.size, per, T=name, SAT=saturate)
            want = reference.encode(x, name, saturate)
            assert (y.view(np.uint8) == want).all(), (opts, saturate, _bad(x, y.view(np.uint8), want))


@pytest.mark.slow  # CI time: a pairwise sample by default (a third of the 2,016 compiles), -m slow: all
def test_every_small_float_expression_compiles_or_is_a_located_error(full_sweep):
    """Each small float against every scalar type in each kind of expression: a compiled kernel or a
    CompileError at the line, never an internal error. By default a fixed third of the triples, chosen
    so that every (small float, scalar type), (small float, expression) and (scalar type, expression)
    pair still compiles at least once (CI time); -m slow: every triple."""
    from kcompiler.ir.types import SCALARS

    exprs = ["a + b", "a < b", "-a", "{T}(a)", "{U}(a)", "convert[{T}](a, saturate = true)", "bitcast[u8](a)",
             "vec<{T}, 2>(a)", "a == b", "select(true, a, b)", "min(a, b)", "abs(a)"]
    bad = []
    for i, t in enumerate(NAMES):
        for j, u in enumerate(SCALARS):
            for k, e in enumerate(exprs):
                if not full_sweep and (i + j + k) % 3:
                    continue
                src = (f"kernel k(x: ptr<{t}>, y: ptr<{u}>) {{\n    let a = x[0];\n    let b = y[0];\n"
                       f"    let c = {e.format(T=t, U=u)};\n}}\n")
                try:
                    compile_source_to(src, "k.kc", "llvm", "cpu", None)
                except CompileError as err:
                    if "k.kc:" not in str(err):
                        bad.append((src, str(err)))
                except Exception as err:  # noqa: BLE001 - what the test is looking for
                    bad.append((src, repr(err)))
    assert not bad, bad[:3]


VEC8 = """
kernel enc8[ABS: bool, S: type = f32](x: ptr<S>, y: ptr<f8e4m3>, n: i64) {
    let i = i64(block_id.x * block_dim.x + thread_id.x) * 8;
    if i + 8 <= n {
        var v = load[vec<S, 8>](x + i);
        comptime if ABS {
            v = abs(v);
        }
        store(y + i, convert[vec<f8e4m3, 8>](v, saturate = true));
    }
}
"""


@pytest.mark.parametrize("use_abs", [False, True], ids=["plain", "abs"])
def test_ptx_saturating_e4m3_vector_packs_words(use_abs):
    """A saturating E4M3 vector conversion (FP8 attention's P fragment: stdlib/attention_sm90.kc's p_frag)
    is built of 16-bit lanes, one cvt.rn.satfinite.e4m3x2.f32 a pair joined two to a word, not split
    into bytes and re-joined (prmt / bfi / 16-bit shifts: 4-10 SASS instructions a pair); where the
    signs are known clear (abs), the NaN-sign fix-up (minifloat.or_signs) folds away too."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.pipeline import emit
    from kcompiler.pipeline import Source
    ptx = emit(Source(VEC8, "k.kc", "."), "asm", NvptxTarget("sm_90a"), comptime={"ABS": use_abs})
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 4
    assert not re.search(r"\b(prmt|bfi|shr\.u16)\b", ptx), ptx
    if use_abs:
        assert not re.search(r"\b(or|and)\.b16\b", ptx), ptx
    ptxas(ptx, "sm_90a")


@pytest.mark.parametrize("use_abs", [False, True], ids=["plain", "abs"])
def test_ptx_saturating_e4m3_from_f16_vector(use_abs):
    """From f16 pairs (a kernel that computes in f16 and stores E4M3, e.g. quantising f16 activations)
    the saturating E4M3 vector conversion is one cvt.rn.satfinite.e4m3x2.f16x2 a pair, with no
    conversion through f32; the NaN-sign fix-up folds away where the signs are known clear (abs)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.pipeline import Source, emit
    ptx = emit(Source(VEC8, "k.kc", "."), "asm", NvptxTarget("sm_90a"), comptime={"ABS": use_abs, "S": "f16"})
    assert ptx.count("cvt.rn.satfinite.e4m3x2.f16x2") == 4 and "cvt.f32.f16" not in ptx, ptx
    assert "e4m3x2.f32" not in ptx and not re.search(r"\b(prmt|bfi)\b", ptx), ptx
    if use_abs:
        assert not re.search(r"\b(or|and)\.b16\b", ptx), ptx
    ptxas(ptx, "sm_90a")


def test_saturating_e4m3_from_every_f16_pair(target):
    """Every f16 value (NaNs of both signs, infinities, subnormals) through the vector conversion from
    f16 (on sm_89+ one cvt.rn.satfinite.e4m3x2.f16x2 a pair and the NaN-sign fix-up) gives ml_dtypes'
    saturating bits, as the f32 route does; the CPU target takes the software path."""
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    y = np.zeros(x.size, ml_dtype("f8e4m3"))
    kc.compile(VEC8, target=target, path="vec8.kc").enc8[(x.size // 8 + 255) // 256, 256](x, y, x.size, ABS=False,
                                                                                         S="f16")
    want = reference.encode(x.astype(np.float32), "f8e4m3", True)
    assert (y.view(np.uint8) == want).all(), _bad(x.astype(np.float32), y.view(np.uint8), want)


@pytest.mark.gpu
@pytest.mark.parametrize("use_abs", [False, True], ids=["plain", "abs"])
def test_cuda_saturating_e4m3_vector_bits(inputs, use_abs):
    """The 16-bit-lane vector form of the saturating E4M3 conversion gives ml_dtypes' bits (NaN signs
    included) on the GPU, as the scalar one does."""
    x = inputs[: inputs.size // 8 * 8].copy()
    if use_abs:
        x = np.abs(x)
    mod = kc.compile(VEC8, target="cuda", path="vec8.kc")
    y = np.zeros(x.size, ml_dtype("f8e4m3"))
    mod.enc8[(x.size // 8 + 255) // 256, 256](x, y, x.size, ABS=use_abs)
    want = reference.encode(x, "f8e4m3", True)
    assert (y.view(np.uint8) == want).all(), _bad(x, y.view(np.uint8), want)
