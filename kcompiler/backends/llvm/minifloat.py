"""Software conversions between f32 and the 8-bit float formats, as LLVM IR integer code.

This is the reference path: the CPU target uses it, and GPU targets use it where the chip has no
convert instruction. Hardware paths (``Target.minifloat_encode`` / ``minifloat_decode`` overrides) must give
the same bits. The formats and the rules are in :mod:`kcompiler.numerics.formats`; results equal
ml_dtypes' casts bit for bit (tests/backends/test_float8.py checks every f16 and bf16 input and 2^24 f32).

Encoding f32 → format, round to nearest even: the f32 significand (with its implicit bit) is shifted
right so that its last kept bit is the format's last mantissa bit (further right for the format's
subnormals), the dropped bits decide the rounding, and the biased exponent is added as
``(e - 1) << M`` so that a carry out of the mantissa moves into the exponent, as in the classic
integer formulation (e.g. Giesen, "float->half variations", 2016; ml_dtypes' ``ConvertImpl``).
"""
from __future__ import annotations

from llvmlite import ir as ll

from ...numerics.formats import Float8Format

I1, I8, I32 = ll.IntType(1), ll.IntType(8), ll.IntType(32)
F32 = ll.FloatType()


def _c(v: int) -> ll.Constant:
    return ll.Constant(I32, v & 0xFFFF_FFFF)


def encode(b: ll.IRBuilder, x: ll.Value, fmt: Float8Format, saturate: bool) -> ll.Value:
    """The i8 code of f32 ``x`` in ``fmt`` (in the low ``fmt.bits`` bits): round to nearest even; an
    overflow or an infinity gives the largest finite value under ``saturate`` (always for FP6/FP4,
    which have neither), else the format's infinity (E5M2) or NaN; NaN gives the format's NaN with
    the input's sign where the format has one (FP6/FP4: a zero of the opposite sign, as ml_dtypes)."""
    u = b.bitcast(x, I32)
    sign = b.lshr(u, _c(31))
    a = b.and_(u, _c(0x7FFF_FFFF))
    isnan = b.icmp_unsigned(">", a, _c(0x7F80_0000))
    isinf = b.icmp_unsigned("==", a, _c(0x7F80_0000))
    e32 = b.lshr(a, _c(23))
    m32 = b.and_(a, _c(0x7F_FFFF))
    if fmt.kind == "e8m0":
        return _encode_e8m0(b, u, a, e32, m32, isnan, isinf, saturate)

    M = fmt.mbits
    sub32 = b.icmp_unsigned("==", e32, _c(0))
    e_eff = b.select(sub32, _c(1), e32)
    sig = b.or_(m32, b.select(sub32, _c(0), _c(0x80_0000)))
    et = b.add(e_eff, _c(fmt.bias - 127))                      # the format's biased exponent
    normal = b.icmp_signed(">=", et, _c(1))
    under = b.select(normal, _c(0), b.sub(_c(1), et))           # extra right shift of a subnormal
    shift = b.add(_c(23 - M), under)
    shift = b.select(b.icmp_unsigned(">", shift, _c(25)), _c(25), shift)  # sig < 2^24: 25 rounds to 0
    base = b.select(normal, b.shl(b.sub(et, _c(1)), _c(M)), _c(0))
    code = b.add(base, b.lshr(sig, shift))
    rest = b.and_(sig, b.sub(b.shl(_c(1), shift), _c(1)))
    half = b.shl(_c(1), b.sub(shift, _c(1)))
    odd = b.trunc(code, I1)
    up = b.or_(b.icmp_unsigned(">", rest, half), b.and_(b.icmp_unsigned("==", rest, half), odd))
    code = b.add(code, b.zext(up, I32))

    top = fmt.bits - 1  # the sign bit's position
    nan_mag = _nan_magnitude(fmt)
    big = fmt.max_code if saturate or fmt.kind == "finite" else \
        ((fmt.max_code + 1) if fmt.kind == "ieee" else nan_mag)
    overflow = b.or_(b.icmp_unsigned(">", code, _c(fmt.max_code)), isinf)
    mag = b.select(overflow, _c(big), code)
    mag = b.select(isnan, _c(nan_mag), mag)
    if fmt.kind == "fnuz":  # no -0 and a single NaN: the sign goes only on nonzero finite values
        signed = b.and_(b.icmp_unsigned("!=", mag, _c(0)), b.icmp_unsigned("!=", mag, _c(0x80)))
        out = b.or_(mag, b.shl(b.select(signed, sign, _c(0)), _c(7)))
    elif fmt.kind == "finite":  # no NaN: ml_dtypes gives a signed zero, the sign inverted (+NaN -> -0)
        out = b.select(isnan, b.shl(b.xor(sign, _c(1)), _c(top)), b.or_(mag, b.shl(sign, _c(top))))
    else:
        out = b.or_(mag, b.shl(sign, _c(top)))
    return b.trunc(out, I8)


def _nan_magnitude(fmt: Float8Format) -> int:
    """The magnitude bits of the format's NaN (FNUZ: its whole code, 0x80; FP6/FP4: none, 0)."""
    if fmt.kind == "fnuz":
        return 0x80
    if fmt.kind == "finite":
        return 0
    return fmt.nan_code & (fmt.sign_bit - 1)


def _encode_e8m0(b: ll.IRBuilder, u, a, e32, m32, isnan, isinf, saturate: bool) -> ll.Value:
    """E8M0 (MX scale, 2^(c-127)): nearest power of two, ties up (ml_dtypes' rule, from OCP MX's
    round-up of scales); inputs below 2^-127 give code 0 (there is no zero), an f32 subnormal above
    2^-127 gives 2^-126; zero, negative values and NaN give NaN (0xFF); overflow and +inf give NaN,
    or 2^127 under ``saturate``."""
    normal = b.add(e32, b.zext(b.icmp_unsigned(">=", m32, _c(0x40_0000)), I32))
    sub = b.zext(b.icmp_unsigned(">", m32, _c(0x40_0000)), I32)
    code = b.select(b.icmp_unsigned("==", e32, _c(0)), sub, normal)
    over = b.or_(b.icmp_unsigned(">", code, _c(0xFE)), isinf)
    code = b.select(over, _c(0xFE if saturate else 0xFF), code)
    bad = b.or_(b.or_(isnan, b.icmp_unsigned("==", a, _c(0))), b.icmp_unsigned("!=", b.lshr(u, _c(31)), _c(0)))
    code = b.select(bad, _c(0xFF), code)
    return b.trunc(code, I8)


def decode(b: ll.IRBuilder, code: ll.Value, fmt: Float8Format) -> ll.Value:
    """The f32 value of the i8 ``code`` in ``fmt`` (exact). NaNs decode to the quiet NaN with the
    code's sign (FNUZ's NaN to -NaN, as ml_dtypes)."""
    c = b.zext(code, I32)
    if fmt.kind == "e8m0":
        bits = b.select(b.icmp_unsigned("==", c, _c(0)), _c(0x40_0000), b.shl(c, _c(23)))
        bits = b.select(b.icmp_unsigned("==", c, _c(0xFF)), _c(0x7FC0_0000), bits)
        return b.bitcast(bits, F32)
    M = fmt.mbits
    sign = b.shl(b.lshr(c, _c(fmt.bits - 1)), _c(31))
    mag = b.and_(c, _c(fmt.sign_bit - 1))
    e = b.lshr(mag, _c(M))
    m = b.and_(mag, _c((1 << M) - 1))
    normal = b.or_(b.shl(b.add(e, _c(127 - fmt.bias)), _c(23)), b.shl(m, _c(23 - M)))
    # subnormals (and zero): m * 2^(1 - bias - M), exact in f32
    sub = b.bitcast(b.fmul(b.uitofp(m, F32), ll.Constant(F32, 2.0 ** (1 - fmt.bias - M))), I32)
    bits = b.select(b.icmp_unsigned("==", e, _c(0)), sub, normal)
    if fmt.kind == "fn":
        bits = b.select(b.icmp_unsigned("==", mag, _c(0x7F)), _c(0x7FC0_0000), bits)
    elif fmt.kind == "ieee":
        top = b.icmp_unsigned("==", e, _c((1 << fmt.ebits) - 1))
        special = b.select(b.icmp_unsigned("==", m, _c(0)), _c(0x7F80_0000), _c(0x7FC0_0000))
        bits = b.select(top, special, bits)
    bits = b.or_(bits, sign)
    if fmt.kind == "fnuz":
        bits = b.select(b.icmp_unsigned("==", c, _c(0x80)), _c(0xFFC0_0000), bits)
    return b.bitcast(bits, F32)


# --- hardware converts -----------------------------------------------------------------------------
# A chip's convert instruction rounds in-range values to nearest even, as the software path does, but
# its NaN encoding, sign of NaN, overflow and infinity rules differ by vendor and mode (NVIDIA's cvt
# to e4m3x2/e5m2x2 exists only with .satfinite). The targets use the instruction for the rounding
# and these fixups for the rest, so that both paths give the same bits.

def encode_pairs(b: ll.IRBuilder, xs: list[ll.Value], fmt: Float8Format, saturate: bool,
                 convert_pair) -> list[ll.Value]:
    """The codes of ``xs`` through a two-at-a-time convert instruction: ``convert_pair(first,
    second)`` returns the two i8 codes (an odd count is padded with 0.0), each then repaired by
    :func:`fix_encoded`."""
    out = []
    for k in range(0, len(xs), 2):
        pair = xs[k:k + 2]
        second = pair[1] if len(pair) == 2 else ll.Constant(F32, 0.0)
        codes = convert_pair(pair[0], second)
        out += [fix_encoded(b, x, c, fmt, saturate) for x, c in zip(pair, codes)]
    return out


def or_signs(b: ll.IRBuilder, two: ll.Value, first: ll.Value, second: ll.Value) -> ll.Value:
    """The i16 ``two`` (two E4M3 codes of ``first``, low byte, and ``second``, high byte, f32 or f16,
    from a saturating convert such as NVIDIA's ``cvt.rn.satfinite.e4m3x2.f32`` or ``.f16x2``) with each
    value's sign bit ORed into its code. Such a convert gives the software path's saturating code
    (sign-preserved largest finite value for an overflow or an infinity, signed zeros) but for a NaN,
    which it gives as 0x7F whatever its sign: the OR sets that sign and changes nothing else (every
    other code's sign is its value's). A shift and a logical op a pair, where :func:`fix_encoded`
    compares and selects."""
    i16 = ll.IntType(16)

    def sign(x: ll.Value, bit: int) -> ll.Value:  # x's sign (an f32 or an f16) at bit `bit` of an i16
        w = 16 if isinstance(x.type, ll.HalfType) else 32
        u = b.lshr(b.bitcast(x, ll.IntType(w)), ll.Constant(ll.IntType(w), w - 1 - bit))
        return b.and_(u if w == 16 else b.trunc(u, i16), ll.Constant(i16, 1 << bit))
    return b.or_(two, b.or_(sign(first, 7), sign(second, 15)))


def overflows(b: ll.IRBuilder, x: ll.Value, fmt: Float8Format) -> ll.Value:
    """i1: |x| rounds past the largest finite value (or is infinite); false for NaN. The tie between
    the largest value and the next step goes up when the largest value's mantissa is odd (E5M2)."""
    top = fmt.max_value
    step = 2.0 ** (((fmt.max_code >> fmt.mbits) - fmt.bias) - fmt.mbits)
    a = b.call(_fabs(b), [x])
    odd = fmt.max_code & 1
    return b.fcmp_ordered(">=" if odd else ">", a, ll.Constant(F32, top + step / 2))


def fix_encoded(b: ll.IRBuilder, x: ll.Value, code: ll.Value, fmt: Float8Format, saturate: bool) -> ll.Value:
    """The software path's code for f32 ``x``, given the i8 ``code`` a convert instruction gave for
    it: NaN, overflow and infinity are set by the format's rules, FNUZ zeros lose their sign."""
    u = b.bitcast(x, I32)
    sign = b.trunc(b.shl(b.lshr(u, _c(31)), _c(7)), I8)
    isnan = b.fcmp_unordered("uno", x, x)
    nan_mag = fmt.nan_code & 0x7F if fmt.kind != "fnuz" else 0x80
    big = fmt.max_code if saturate else ((fmt.max_code + 1) if fmt.kind == "ieee" else nan_mag)
    c8 = lambda v: ll.Constant(I8, v)  # noqa: E731
    if fmt.kind == "fnuz":
        over = b.or_(c8(big), sign) if saturate else c8(0x80)
        code = b.select(b.icmp_unsigned("==", b.and_(code, c8(0x7F)), c8(0)), c8(0), code)
        code = b.select(overflows(b, x, fmt), over, code)
        return b.select(isnan, c8(0x80), code)
    code = b.select(overflows(b, x, fmt), b.or_(c8(big), sign), code)
    return b.select(isnan, b.or_(c8(nan_mag), sign), code)


def fix_decoded(b: ll.IRBuilder, code: ll.Value, value: ll.Value, fmt: Float8Format) -> ll.Value:
    """The software path's f32 for ``code`` given the f32 ``value`` a convert instruction gave:
    NaNs become the quiet NaN with the code's sign (-NaN for FNUZ), the one ml_dtypes gives."""
    c = b.zext(code, I32)
    mag = b.and_(c, _c(0x7F))
    if fmt.kind == "fnuz":
        return b.select(b.icmp_unsigned("==", c, _c(0x80)), b.bitcast(_c(0xFFC0_0000), F32), value)
    nan_from = (0x7F if fmt.kind == "fn" else (((1 << fmt.ebits) - 1) << fmt.mbits) + 1)
    isnan = b.icmp_unsigned(">=", mag, _c(nan_from))
    nan = b.bitcast(b.or_(_c(0x7FC0_0000), b.shl(b.lshr(c, _c(7)), _c(31))), F32)
    return b.select(isnan, nan, value)


def _fabs(b: ll.IRBuilder) -> ll.Function:
    m = b.module
    fn = m.globals.get("llvm.fabs.f32")
    if fn is None:
        fn = ll.Function(m, ll.FunctionType(F32, [F32]), "llvm.fabs.f32")
    return fn
