"""MX (OCP Microscaling v1.0) block quantisation to MXFP8, MXFP6 and MXFP4: stdlib/mx.kc through kcompiler.ops, against
the host reference (kcompiler.numerics.mx) bit for bit, the scales against the spec's formula
computed independently (float64 log2), and the round-trip error within the format's bound, on random,
heavy-tailed, tiny, all-zero and NaN/Inf blocks."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler import ops
from kcompiler.numerics import mx
from kcompiler.numerics.formats import FORMATS

from ..draws import fresh_rng

RNG = fresh_rng()


def blocks_of_every_kind(rows: int = 67, cols: int = 160) -> np.ndarray:
    """rows x cols f32 (5 blocks of 32 a row): normal, heavy-tailed (Student t, 1 degree of
    freedom, times wide powers of two), tiny (f32 subnormals included), all-zero rows, and a few
    NaNs and infinities."""
    x = RNG.standard_normal((rows, cols)).astype(np.float32)
    x[1::4] = (RNG.standard_t(1, (len(x[1::4]), cols)) * 2.0 ** RNG.integers(-40, 40, (len(x[1::4]), 1))).astype(np.float32)
    x[2::9] = (RNG.standard_normal((len(x[2::9]), cols)) * 1e-41).astype(np.float32)
    x[3::11] = 0.0
    x[5, 7], x[6, 40], x[7, 100] = np.nan, np.inf, -np.inf
    x[8, :32] = 448.0 * 2.0 ** 20  # exactly at the element format's largest value
    return x


@pytest.mark.parametrize("src", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1", "int8"])
def test_mx_quantize_matches_the_reference(target, fmt, src):
    x32 = blocks_of_every_kind()
    if src == "f16":
        x32 = np.clip(np.nan_to_num(x32, nan=np.nan, posinf=np.inf, neginf=-np.inf), -6e4, 6e4)
    x = x32.astype({"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[src])
    codes, scales = ops.mx_quantize(x, fmt, target=target)
    want_c, want_s = mx.quantize(x, fmt)
    assert codes.shape == x.shape and scales.shape == (x.shape[0], x.shape[1] // 32)
    assert (scales.view(np.uint8) == want_s.view(np.uint8)).all()
    assert (codes.view(np.uint8) == want_c.view(np.uint8)).all()
    back = ops.mx_dequantize(codes, scales, target=target)
    assert np.array_equal(back, mx.dequantize(want_c, want_s, fmt), equal_nan=True)


@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1", "int8"])
def test_scales_follow_the_spec_formula(fmt):
    """X = 2^(floor(log2(max |V|)) - emax_elem), E8M0-coded (OCP MX v1.0 §6.3), for finite nonzero
    blocks whose scale is in range; all-zero blocks get 2^-127, blocks with NaN/Inf the NaN scale."""
    x = blocks_of_every_kind()
    _, scales = mx.quantize(x, fmt)
    b = x.reshape(x.shape[0], -1, 32).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.abs(b).max(axis=-1)
        want = np.floor(np.log2(m)) - mx.ELEMENTS[fmt] + 127
    s = scales.view(np.uint8).astype(np.int64)
    finite = np.isfinite(b).all(axis=-1)
    ok = finite & (m > 0) & (want >= 0) & (want <= 254)
    assert ok.sum() > 100
    assert (s[ok] == want[ok]).all()
    assert (s[finite & (m == 0)] == 0).all()
    assert (s[~finite] == 0xFF).all()


@pytest.mark.parametrize("fmt", ["f8e4m3", "f8e5m2", "f6e2m3", "f6e3m2", "f4e2m1", "int8"])
def test_round_trip_error_within_the_format_bound(target, fmt):
    """|x - dequant(quant(x))| <= max(2^-(M+1) * blockmax, blockmax - Xmax_elem * X) per element: half an
    element ulp at the block's top binade, or the clamp of values between the format's largest and
    2^(emax+1) X. Blocks of subnormal f32 values are left out (they lose their bits to the scale)."""
    x = blocks_of_every_kind()
    codes, scales = ops.mx_quantize(x, fmt, target=target)
    back = ops.mx_dequantize(codes, scales, target=target)
    b = x.reshape(x.shape[0], -1, 32).astype(np.float64)
    y = back.reshape(b.shape).astype(np.float64)
    # MXINT8: steps of X/64 (6 fraction bits), largest 127/64 X
    mbits, top = (6, 127 / 64) if fmt == "int8" else (FORMATS[fmt].mbits, FORMATS[fmt].max_value)
    m = np.abs(b).max(axis=-1, keepdims=True)
    X = np.ldexp(1.0, scales.view(np.uint8).astype(np.int64) - 127)[..., None]
    bound = np.maximum(2.0 ** -(mbits + 1) * m, m - top * X)
    finite = np.isfinite(b).all(axis=-1, keepdims=True) & (m >= 2.0 ** -100)
    err = np.abs(y - b)
    assert ((err <= bound * (1 + 1e-12)) | ~finite).all()
    assert np.isnan(y[~np.broadcast_to(np.isfinite(b).all(axis=-1, keepdims=True), b.shape)]).all()
    if fmt == "int8":  # the symmetric range
        assert codes.min() >= -127 and codes.max() <= 127
    zero = (m == 0).squeeze(-1)
    assert (y[zero] == 0).all()


def test_mx_errors():
    with pytest.raises(ValueError, match="multiple of 32"):
        ops.mx_quantize(np.zeros((4, 48), np.float32), "f8e4m3")
    with pytest.raises(ValueError, match="fmt must be one of"):
        ops.mx_quantize(np.zeros((4, 64), np.float32), "f8e4m3fnuz")
    with pytest.raises(TypeError, match="f32, f16 or bf16"):
        ops.mx_quantize(np.zeros((4, 64), np.int32), "f8e4m3")


@pytest.mark.parametrize("fn, block, fmt", [("mx_dequantize", 32, "f8e4m3"), ("nvfp4_dequantize", 16, "f4e2m1")])
def test_dequantize_refuses_scales_of_another_count(fn, block, fmt):
    """Too few scales would be read past their end by the kernel: a ValueError instead; not an array:
    a TypeError."""
    x = np.random.default_rng(3).standard_normal((3, 4 * block)).astype(np.float32)
    codes, scales = (ops.mx_quantize(x, fmt, target="cpu") if fn == "mx_dequantize"
                     else ops.nvfp4_quantize(x, target="cpu"))
    deq = getattr(ops, fn)
    with pytest.raises(ValueError, match=f"one scale per {block} codes, shape \\(3, 4\\)"):
        deq(codes, scales[:, :3], target="cpu")
    with pytest.raises(TypeError, match="scales must be an array"):
        deq(codes, None, target="cpu")
    assert np.array_equal(deq(codes, scales.reshape(-1), target="cpu"), deq(codes, scales, target="cpu"),
                          equal_nan=True)  # another shape of the same count is read in order


def test_fp4_packing():
    """Two FP4 codes a byte, the first in the low nibble; unpacking gives the codes back."""
    x = blocks_of_every_kind()
    codes, _ = mx.quantize(x, "f4e2m1")
    packed = mx.pack_fp4(codes)
    c = codes.view(np.uint8)
    assert packed.shape == (x.shape[0], x.shape[1] // 2)
    assert (packed & 0xF == c[:, 0::2]).all() and (packed >> 4 == c[:, 1::2]).all()
    assert (mx.unpack_fp4(packed).view(np.uint8) == c).all()
    assert mx.pack_fp4(np.array([0x1, 0xF], np.uint8))[0] == 0xF1


@pytest.mark.parametrize("g", [1.0, 448.0 * 6 / 37.5])
def test_nvfp4_matches_the_reference_and_bounds(target, g):
    """NVFP4 (E2M1 elements, an E4M3 scale per 16): kernel = reference bit for bit; each block's
    scale is E4M3(amax / 6 * g); the round trip is within half an FP4 step of the block's top binade
    plus the scale's own rounding."""
    x = blocks_of_every_kind(rows=41, cols=160)
    codes, scales = ops.nvfp4_quantize(x, g, target=target)
    want_c, want_s = mx.nvfp4_quantize(x, g)
    assert codes.shape == x.shape and scales.shape == (41, 10)
    assert (scales.view(np.uint8) == want_s.view(np.uint8)).all()
    assert (codes.view(np.uint8) == want_c.view(np.uint8)).all()
    back = ops.nvfp4_dequantize(codes, scales, g, target=target)
    assert np.array_equal(back, mx.nvfp4_dequantize(want_c, want_s, g), equal_nan=True)
    b = x.reshape(41, -1, 16).astype(np.float64)
    amax = np.abs(b).max(axis=-1)
    finite = np.isfinite(b).all(axis=-1)
    from kcompiler.numerics import reference
    s_ref = reference.encode((amax / 6 * g).astype(np.float32), "f8e4m3", saturate=True)
    ok = finite & (amax / 6 * g < 448) & (amax / 6 * g > 2.0 ** -6)  # scales in E4M3's normal range
    assert (scales.view(np.uint8)[ok] == s_ref[ok]).all()
    y = back.reshape(b.shape).astype(np.float64)
    err = np.abs(y - b).max(axis=-1)
    assert (err[ok] <= amax[ok] * (0.25 + 2.0 ** -4) * 1.0001).all()
    with pytest.raises(ValueError, match="multiple of 16"):
        ops.nvfp4_quantize(np.zeros((2, 24), np.float32))


def test_fp4_packing_kernels(target):
    """ops.pack_fp4 / unpack_fp4 (stdlib kernels) equal the host packing, and round-trip."""
    x = blocks_of_every_kind()
    codes, _ = ops.mx_quantize(x, "f4e2m1", target=target)
    packed = ops.pack_fp4(codes, target=target)
    assert packed.dtype == np.uint8 and packed.shape == (x.shape[0], x.shape[1] // 2)
    assert (packed == mx.pack_fp4(codes)).all()
    assert (ops.unpack_fp4(packed, target=target).view(np.uint8) == codes.view(np.uint8)).all()
    with pytest.raises(ValueError, match="must be even"):
        ops.pack_fp4(codes[:, :3], target=target)


def test_fp4_results_for_torch_inputs_are_refused_clearly():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch has no dtype for f4e2m1"):
        ops.mx_quantize(torch.zeros(2, 64), "f4e2m1", target="cpu")


@pytest.mark.parametrize("per", [8, 16, 32])
def test_mx_quantize_kernel_every_width(target, per):
    """stdlib/mx.kc's mx_quantize with 8, 16 or 32 elements a thread (4, 2 or 1 lanes a block): the
    same bits as the reference."""
    import kcompiler as kc
    from kcompiler.frontend.program import stdlib_dir

    x = blocks_of_every_kind(19, 128).astype(ml_dtypes.bfloat16)
    codes, scales = np.zeros(x.shape, ml_dtypes.float8_e4m3fn), np.zeros((19, 4), ml_dtypes.float8_e8m0fnu)
    mod = kc.compile_file(stdlib_dir() / "mx.kc", target=target)
    mod.mx_quantize[(x.size // per + 63) // 64, 64](x.reshape(-1), codes.reshape(-1), scales.reshape(-1), x.size,
                                                   S="bf16", T="f8e4m3", EMAX=8, PER=per)
    want_c, want_s = mx.quantize(x, "f8e4m3")
    assert (codes.view(np.uint8) == want_c.view(np.uint8)).all()
    assert (scales.view(np.uint8) == want_s.view(np.uint8)).all()


@pytest.mark.parametrize("fmt", ["f6e2m3", "f6e3m2"])
def test_fp6_packing_is_an_lsb_first_bit_stream(target, fmt):
    """FP6 packed four to three bytes equals the codes' 6-bit fields laid end to end LSB first
    (built independently with numpy's little-endian unpackbits/packbits), per row; the kernels equal
    the host reference and unpack inverts pack. An MX block of 32 is 24 bytes."""
    x = (RNG.standard_normal((5, 64)) * 4).astype(np.float32)
    codes = x.astype(ml_dtypes.float6_e2m3fn if fmt == "f6e2m3" else ml_dtypes.float6_e3m2fn)
    c = codes.view(np.uint8)
    bits = np.unpackbits(c[..., None], axis=-1, bitorder="little")[..., :6].reshape(5, -1)
    want = np.packbits(bits, axis=-1, bitorder="little")
    assert want.shape == (5, 48)
    assert (mx.pack_fp6(codes) == want).all()
    packed = ops.pack_fp6(codes, target=target)
    assert packed.dtype == np.uint8 and (packed == want).all()
    back = ops.unpack_fp6(packed, fmt, target=target)
    assert back.dtype == codes.dtype and (back.view(np.uint8) == c).all()
    assert (mx.unpack_fp6(want, fmt).view(np.uint8) == c).all()
    with pytest.raises(ValueError, match="multiple of 4"):
        ops.pack_fp6(codes[:, :6], target=target)
    with pytest.raises(TypeError, match="f6e2m3 or f6e3m2"):
        ops.pack_fp6(x, target=target)
