"""The bit builtins (popcount, clz, ctz, ffs, brev, bswap, mulhi, funnel_shl/funnel_shr, byte_perm) and
float classification (isnan, isinf, isfinite, signbit), run on every target present against
references written here in Python / numpy / ml_dtypes (classification: every bit pattern of the 16-,
8-, 6- and 4-bit types); NVIDIA's PTX assembled by ptxas, AMDGCN's checked for its instructions."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.diagnostics import CompileError
from kcompiler.numerics.formats import FORMATS
from kcompiler.pipeline import compile_source_to

from ..ptxas_util import ptxas

RNG = np.random.default_rng(22)

INTS = {"i8": np.int8, "u8": np.uint8, "i16": np.int16, "u16": np.uint16, "i32": np.int32, "u32": np.uint32,
        "i64": np.int64, "u64": np.uint64}

UNARY = """
kernel k[T: type](x: ptr<T>, c: ptr<i32>, v: ptr<T>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        c[4 * i] = popcount(x[i]); c[4 * i + 1] = clz(x[i]); c[4 * i + 2] = ctz(x[i]); c[4 * i + 3] = ffs(x[i]);
        v[2 * i] = brev(x[i]);
        comptime if T != i8 && T != u8 { v[2 * i + 1] = bswap(x[i]); } else { v[2 * i + 1] = x[i]; }
    }
}
kernel b[T: type](x: ptr<T>, y: ptr<T>, s: ptr<u32>, o: ptr<T>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        o[3 * i] = mulhi(x[i], y[i]);
        o[3 * i + 1] = funnel_shl(x[i], y[i], s[i]);
        o[3 * i + 2] = funnel_shr(x[i], y[i], s[i]);
    }
}
kernel p(x: ptr<u32>, y: ptr<u32>, s: ptr<u32>, o: ptr<u32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { o[i] = byte_perm(x[i], y[i], s[i]); }
}
"""


def random_ints(t: str, n: int) -> np.ndarray:
    """Random values of type ``t`` with the edge cases (0, 1, all ones, the sign bit, single bits) first."""
    dt = np.dtype(INTS[t])
    bits = dt.itemsize * 8
    edge = [0, 1, (1 << bits) - 1, 1 << (bits - 1), (1 << (bits - 1)) - 1] + [1 << k for k in range(bits)]
    u = np.array(edge + [int(v) for v in RNG.integers(0, 1 << 63, n, dtype=np.uint64)], dtype=np.uint64)
    u &= np.uint64((1 << bits) - 1) if bits < 64 else np.uint64(0xFFFF_FFFF_FFFF_FFFF)
    return u.astype(f"u{dt.itemsize}").view(dt)


def _unsigned(v: int, bits: int) -> int:
    return v & ((1 << bits) - 1)


@pytest.mark.parametrize("t", list(INTS))
def test_unary_bit_operations(target, t):
    x = random_ints(t, 2000)
    bits = x.dtype.itemsize * 8
    m = kc.compile(UNARY, target=target, path="bits.kc")
    c = np.zeros(4 * x.size, np.int32)
    v = np.zeros(2 * x.size, x.dtype)
    m.k[(x.size + 127) // 128, 128](x, c, v, x.size, T=t)
    want_c, want_v = [], []
    for xi in x.tolist():
        u = _unsigned(xi, bits)
        s = format(u, f"0{bits}b")
        ctz = bits if u == 0 else (u & -u).bit_length() - 1
        want_c += [s.count("1"), bits - u.bit_length(), ctz, 0 if u == 0 else ctz + 1]
        want_v += [int(s[::-1], 2), int.from_bytes(u.to_bytes(bits // 8, "little"), "big") if bits > 8 else u]
    np.testing.assert_array_equal(c, np.array(want_c, np.int32))
    np.testing.assert_array_equal(v.astype(f"u{bits // 8}") if bits > 8 else v.view(np.uint8),
                                  np.array(want_v, dtype=np.uint64).astype(f"u{bits // 8}"))


@pytest.mark.parametrize("t", list(INTS))
def test_mulhi_and_funnel_shifts(target, t):
    x, y = random_ints(t, 2000), random_ints(t, 2000)[::-1].copy()
    bits = x.dtype.itemsize * 8
    s = RNG.integers(0, 1 << 32, x.size, dtype=np.uint64).astype(np.uint32)
    s[:70] = np.arange(70)
    m = kc.compile(UNARY, target=target, path="bits.kc")
    o = np.zeros(3 * x.size, x.dtype)
    m.b[(x.size + 127) // 128, 128](x, y, s, o, x.size, T=t)
    mask = (1 << bits) - 1
    want = []
    for a, b_, n in zip(x.tolist(), y.tolist(), s.tolist()):
        hi = (a * b_) >> bits          # Python ints: exact, signed or not as the values are
        cat = (_unsigned(a, bits) << bits) | _unsigned(b_, bits)
        k = n % bits                   # the shift (u32) converted to T, modulo the width
        want += [hi & mask, ((cat << k) >> bits) & mask, (cat >> k) & mask]
    got = o.view(f"u{bits // 8}") if bits > 8 else o.view(np.uint8)
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint64).astype(got.dtype))


def test_byte_perm(target):
    n = 4096
    x, y = (RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32) for _ in range(2))
    s = RNG.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)  # bit 3 of a nibble and bits 16+ ignored
    s[:8] = [0x3210, 0x7654, 0x0123, 0x4567, 0xFFFF, 0x8888, 0x1111_3175, 0x0000]
    m = kc.compile(UNARY, target=target, path="bits.kc")
    o = np.zeros(n, np.uint32)
    m.p[n // 128, 128](x, y, s, o, n)
    want = []
    for a, b_, sel in zip(x.tolist(), y.tolist(), s.tolist()):
        eight = (a | b_ << 32).to_bytes(8, "little")
        want.append(int.from_bytes(bytes(eight[(sel >> 4 * k) & 7] for k in range(4)), "little"))
    np.testing.assert_array_equal(o, np.array(want, np.uint32))


VEC = """
kernel k(x: ptr<vec<u16, 4>>, c: ptr<vec<i32, 4>>, h: ptr<vec<u16, 4>>) {
    c[0] = popcount(x[0]); c[1] = clz(x[0]); c[2] = ffs(x[0]);
    h[0] = bswap(x[0]); h[1] = mulhi(x[0], x[1]); h[2] = funnel_shl(x[0], x[1], 3);
}
"""


def test_vectors_lane_by_lane():
    m = kc.compile(VEC, target="cpu")
    x = np.array([0, 1, 0x8001, 0xFFFF, 0x1234, 0x00F0, 0xABCD, 7], np.uint16)
    c, h = np.zeros(12, np.int32), np.zeros(12, np.uint16)
    m.k[1, 1](x, c, h)
    a, b_ = x[:4].astype(int), x[4:].astype(int)
    np.testing.assert_array_equal(c[:4], [bin(v).count("1") for v in a])
    np.testing.assert_array_equal(c[4:8], [16 - int(v).bit_length() for v in a])
    np.testing.assert_array_equal(c[8:12], [0 if v == 0 else (int(v) & -int(v)).bit_length() for v in a])
    np.testing.assert_array_equal(h[:4], x[:4].byteswap())
    np.testing.assert_array_equal(h[4:8], (a * b_) >> 16)
    np.testing.assert_array_equal(h[8:12], ((a << 3) | (b_ >> 13)) & 0xFFFF)


# --- classification ---------------------------------------------------------------------------------

CLASSIFY = """
kernel k[T: type](x: ptr<T>, o: ptr<u8>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        let v = x[i];
        o[i] = u8(isnan(v)) | u8(isinf(v)) << 1 | u8(isfinite(v)) << 2 | u8(signbit(v)) << 3;
    }
}
kernel v4(x: ptr<vec<f16, 4>>, o: ptr<vec<u8, 4>>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        let v = x[i];
        let one = vec<u8, 4>(1);
        let zero = vec<u8, 4>(0);
        o[i] = select(isnan(v), one, zero) | select(isinf(v), one, zero) << 1 | select(isfinite(v), one, zero) << 2
             | select(signbit(v), one, zero) << 3;
    }
}
"""

#: (kernel type, numpy dtype, number of codes) of the types classified on every bit pattern.
SMALL = [("f16", np.float16, 1 << 16), ("bf16", ml_dtypes.bfloat16, 1 << 16)] + [
    (name, getattr(ml_dtypes, f.ml_dtypes), 1 << f.bits) for name, f in FORMATS.items()]


def _classes(x: np.ndarray) -> np.ndarray:
    """The reference: numpy's / ml_dtypes' own isnan, isinf, isfinite and signbit."""
    with np.errstate(invalid="ignore"):
        return (np.isnan(x).astype(np.uint8) | np.isinf(x).astype(np.uint8) << 1
                | np.isfinite(x).astype(np.uint8) << 2 | np.signbit(x).astype(np.uint8) << 3)


@pytest.mark.parametrize("t,dt,codes", SMALL, ids=[s[0] for s in SMALL])
def test_classification_of_every_bit_pattern(target, t, dt, codes):
    raw = np.arange(codes, dtype=np.uint16 if codes > 256 else np.uint8)
    x = raw.view(dt)
    m = kc.compile(CLASSIFY, target=target, path="classify.kc")
    o = np.full(codes, 0xFF, np.uint8)
    m.k[(codes + 255) // 256, 256](x, o, codes, T=t)
    np.testing.assert_array_equal(o, _classes(x))


@pytest.mark.parametrize("t,dt", [("f32", np.float32), ("f64", np.float64)])
def test_classification_f32_f64(target, t, dt):
    special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, -np.nan, np.finfo(dt).max,
                        -np.finfo(dt).max, np.finfo(dt).tiny, np.finfo(dt).smallest_subnormal,
                        -np.finfo(dt).smallest_subnormal], dt)
    ibits = np.uint32 if t == "f32" else np.uint64
    rnd = RNG.integers(0, np.iinfo(ibits).max, 1 << 16, dtype=ibits, endpoint=True).view(dt)
    # NaNs with every kind of payload, both signs
    exp = np.array(0x7F80_0000 if t == "f32" else 0x7FF << 52, ibits)
    nans = (exp | RNG.integers(1, 1 << 20, 256, dtype=ibits) | (np.arange(256, dtype=ibits) % 2 << (ibits(0).nbytes * 8 - 1))).view(dt)
    x = np.concatenate([special, rnd, nans])
    m = kc.compile(CLASSIFY, target=target, path="classify.kc")
    o = np.zeros(x.size, np.uint8)
    m.k[(x.size + 255) // 256, 256](x, o, x.size, T=t)
    np.testing.assert_array_equal(o, _classes(x))


def test_classification_of_f16_vectors(target):
    x = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    m = kc.compile(CLASSIFY, target=target, path="classify.kc")
    o = np.zeros(x.size, np.uint8)
    m.v4[(x.size // 4 + 255) // 256, 256](x, o, x.size // 4)
    np.testing.assert_array_equal(o, _classes(x))


# --- the machine code ---------------------------------------------------------------------------------

MACHINE = """
kernel k(a: ptr<u32>, b: ptr<i64>, c: ptr<i32>, h: ptr<f16>, o: ptr<bool>) {
    a[0] = u32(popcount(a[1]) + clz(a[2])) + brev(a[3]) + bswap(a[4]) + byte_perm(a[5], a[6], a[7]);
    a[8] = mulhi(a[9], a[10]);
    c[0] = mulhi(c[1], c[2]) + funnel_shl(c[3], c[4], c[5]);
    b[0] = mulhi(b[1], b[2]) + i64(ffs(b[3]));
    o[0] = isnan(h[0]) || signbit(h[1]);
}
"""


def test_ptx_uses_the_instructions_and_ptxas_takes_it():
    ptx = compile_source_to(MACHINE, "m.kc", "asm", "nvptx", "sm_80")
    for ins in ("popc.b32", "clz.b32", "brev.b32", "prmt.b32", "mul.hi.u32", "mul.hi.s32", "mul.hi.s64",
                "shf.l.wrap.b32"):
        assert ins in ptx, ins
    ptxas(ptx, "sm_80")


@pytest.mark.parametrize("arch", ["gfx942", "gfx1100"])
def test_amdgcn_uses_the_instructions(arch):
    """Each is one instruction (the scalar unit's where the operands are uniform, as here)."""
    text = compile_source_to(MACHINE, "m.kc", "asm", "amdgcn", arch)
    for ins in ("_bcnt", "_brev_b32", "v_perm_b32", "_mul_hi_u32", "_mul_hi_i32"):
        assert ins in text, (arch, ins)


def test_byte_perm_selector_on_amdgcn_folds():
    """A constant selector becomes one v_perm_b32 with the selector rewritten to bytes."""
    text = compile_source_to("kernel k(a: ptr<u32>) { let i = thread_id.x; "
                             "a[i] = byte_perm(a[i + 1], a[i + 2], 0x5140u32); }", "m.kc", "asm", "amdgcn", "gfx1100")
    perms = [ln.split() for ln in text.splitlines() if "v_perm_b32" in ln]
    assert len(perms) == 1 and perms[0][-1] == "0x5010400", perms  # nibbles 0, 4, 1, 5 as bytes


# --- errors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call,msg", [
    ("popcount(f[0])", "popcount needs integers, found f32"),
    ("clz(1.5)", "clz needs integers"),
    ("bswap(u[0])", "bswap needs integers of 16, 32 or 64 bits, found u8"),
    ("mulhi(f[0], f[1])", "mulhi needs integers"),
    ("funnel_shl(w[0], w[1], 1.0)", "funnel_shl needs integers"),
    ("byte_perm(w[0], u[0], 0u32)", "byte_perm takes 32-bit integers"),
    ("isnan(w[0])", "isnan needs a floating-point value, found u32"),
    ("signbit(true)", "signbit needs a floating-point value"),
    # operands that are neither scalars nor vectors (a pointer, an array literal): located errors too
    ("clz([0])", "clz needs integers, found ptr<i32, local>"),
    ("popcount(w)", "popcount needs integers, found ptr<u32>"),
    ("mulhi(w, 3)", "mulhi needs integers, found ptr<u32>"),
    ("funnel_shr(w[0], f, 1)", "funnel_shr needs integers, found ptr<f32>"),
    ("isinf(f)", "isinf needs a floating-point value, found ptr<f32>"),
])
def test_wrong_types_are_located_errors(call, msg):
    src = f"kernel k(f: ptr<f32>, u: ptr<u8>, w: ptr<u32>, o: ptr<u32>) {{\n    let r = {call};\n}}\n"
    with pytest.raises(CompileError) as e:
        compile_source_to(src, "k.kc", "llvm", "cpu")
    text = str(e.value)
    assert "k.kc:2:" in text and msg in text and "^" in text, text
