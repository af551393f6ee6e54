"""Constant folding against numpy / ml_dtypes (hypothesis): every integer width and signedness with
wrap-around, shifts, C division; IEEE float ops of f16/bf16/f32/f64; casts and bitcasts."""
from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

from kcompiler.ir.passes.util import wrap_int
from hypothesis import HealthCheck, given, settings, strategies as st

from kcompiler.ir import Builder, Function, Module
from kcompiler.ir.passes import fold_constants
from kcompiler.ir.types import BOOL, SCALARS, F16, F32, F64, BF16, I32, ScalarType, VectorType
from kcompiler.ir.verifier import verify

from ..ir_interp import round_fraction

INTS = [t for t in SCALARS.values() if t.is_int]
FLOATS = [F16, BF16, F32, F64]
NP = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8, "u16": np.uint16,
      "u32": np.uint32, "u64": np.uint64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
      "f32": np.float32, "f64": np.float64, "bool": np.bool_}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def fold(name, operands, result_type, **attrs):
    """Build ``name(consts...)`` returning ``result_type``, fold, verify; the folded value or None."""
    fn = Function("f", [], result_type, "device")
    b = Builder(fn.body)
    vals = [b.const(v, t) for v, t in operands]
    r = b.value(name, vals, result_type, **attrs)
    b.ret(r)
    m = Module("m", [fn])
    verify(m)
    fold_constants(m)
    verify(m)
    ret = fn.body.ops[-1].operands[0]
    if ret.owner is not None and ret.owner.name == "const":
        return ret.owner.attrs["value"]
    assert ret.owner.name == name  # not folded: left as it was
    return None


def ints(t: ScalarType):
    lo = -(1 << (t.bits - 1)) if t.is_signed else 0
    hi = (1 << (t.bits - 1)) - 1 if t.is_signed else (1 << t.bits) - 1
    edges = st.sampled_from([lo, hi, 0, 1, -1 if t.is_signed else hi - 1, lo + 1])
    return st.one_of(edges, st.integers(lo, hi))


def floats(t: ScalarType):
    w = {"f16": 16, "bf16": 32, "f32": 32, "f64": 64}[t.name]
    raw = st.floats(width=w, allow_nan=True, allow_infinity=True)
    return raw.map(lambda x: float(NP[t.name](x)))  # a value of the type


def np_int(v, t):
    return np.array(v, NP[t.name])


def same_float(got, want, t):
    want = float(NP[t.name](want))
    if math.isnan(want):
        return got is not None and math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


# --- integers ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", INTS, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "and", "or", "xor", "min", "max"])
@SETTINGS
@given(data=st.data())
def test_int_binary_wraps_like_numpy(t, op, data):
    a, b = data.draw(ints(t)), data.draw(ints(t))
    x, y = np_int(a, t), np_int(b, t)
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
         "or": np.bitwise_or, "xor": np.bitwise_xor, "min": np.minimum, "max": np.maximum}[op]
    with np.errstate(all="ignore"):
        want = int(f(x.reshape(1), y.reshape(1))[0])
    assert fold(op, [(a, t), (b, t)], t) == want


@pytest.mark.parametrize("t", INTS, ids=str)
@SETTINGS
@given(data=st.data())
def test_int_division_truncates_toward_zero(t, data):
    a, b = data.draw(ints(t)), data.draw(ints(t))
    q, r = fold("div", [(a, t), (b, t)], t), fold("rem", [(a, t), (b, t)], t)
    if b == 0:  # defined by kcompiler: all ones, and the dividend
        assert (q, r) == (wrap_int(-1, t), a)
        return
    if t.is_signed and a == -(1 << (t.bits - 1)) and b == -1:  # wraps
        assert (q, r) == (a, 0)
        return
    x, y = np_int(a, t).reshape(1), np_int(b, t).reshape(1)
    want_r = np.fmod(x, y)  # C's remainder: the sign of the dividend
    want_q = (x - want_r) // y
    assert (q, r) == (int(want_q[0]), int(want_r[0]))
    assert int(Fraction(a, b)) == q  # and the quotient is the truncated one


@pytest.mark.parametrize("t", INTS, ids=str)
@SETTINGS
@given(data=st.data())
def test_shifts(t, data):
    a = data.draw(ints(t))
    s = data.draw(st.integers(-2, t.bits + 2))
    s_val = s if t.is_signed else s % (1 << t.bits)  # a negative amount as unsigned: too large
    got_l = fold("shl", [(a, t), (s_val, t)], t)
    got_r = fold("shr", [(a, t), (s_val, t)], t)
    if not 0 <= s < t.bits:
        assert got_l is None and got_r is None
        return
    x = np_int(a, t).reshape(1)
    assert got_l == int(np.left_shift(x, np.array([s], x.dtype))[0])
    assert got_r == int(np.right_shift(x, np.array([s], x.dtype))[0])  # arithmetic iff signed


@pytest.mark.parametrize("t", INTS, ids=str)
@SETTINGS
@given(data=st.data())
def test_int_unary_and_compare(t, data):
    a, b = data.draw(ints(t)), data.draw(ints(t))
    x, y = np_int(a, t).reshape(1), np_int(b, t).reshape(1)
    with np.errstate(all="ignore"):
        assert fold("neg", [(a, t)], t) == int(np.negative(x)[0])
    assert fold("not", [(a, t)], t) == int(np.invert(x)[0])
    for pred, f in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                    ("gt", np.greater), ("ge", np.greater_equal)]:
        assert fold("cmp", [(a, t), (b, t)], BOOL, pred=pred) == bool(f(x, y)[0])


@pytest.mark.parametrize("s", INTS, ids=str)
@pytest.mark.parametrize("d", INTS, ids=str)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_int_casts(s, d, data):
    a = data.draw(ints(s))
    assert fold("cast", [(a, s)], d) == int(np_int(a, s).astype(NP[d.name]))
    if s.bits == d.bits:
        assert fold("bitcast", [(a, s)], d) == int(np_int(a, s).view(NP[d.name]))


def test_out_of_range_const_attribute_wraps():
    # The lowering masks a const's value to the width: -1 as u8 is 255.
    assert fold("add", [(-1, SCALARS["u8"]), (1, SCALARS["u8"])], SCALARS["u8"]) == 0


def test_bool_ops():
    for a in (False, True):
        assert fold("not", [(a, BOOL)], BOOL) == (not a)
        for b in (False, True):
            assert fold("and", [(a, BOOL), (b, BOOL)], BOOL) == (a and b)
            assert fold("or", [(a, BOOL), (b, BOOL)], BOOL) == (a or b)
            assert fold("xor", [(a, BOOL), (b, BOOL)], BOOL) == (a != b)
            assert fold("cmp", [(a, BOOL), (b, BOOL)], BOOL, pred="eq") == (a == b)
        assert fold("cast", [(a, BOOL)], I32) == int(a)
        assert fold("cast", [(a, BOOL)], F32) == float(a)


# --- floats -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", FLOATS, ids=str)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "rem"])
@SETTINGS
@given(data=st.data())
def test_float_binary_ieee(t, op, data):
    a, b = data.draw(floats(t)), data.draw(floats(t))
    dt = NP[t.name]
    f = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "rem": np.fmod}[op]
    with np.errstate(all="ignore"):
        want = f(np.array([a], dt), np.array([b], dt))[0]
    got = fold(op, [(a, t), (b, t)], t)
    assert same_float(got, float(want), t), (a, b, got, want)
    if op in ("add", "sub", "mul", "div") and all(map(math.isfinite, (a, b))) and (op != "div" or b):
        # and numpy agrees with the exact result rounded once (IEEE 754 4.3)
        xa, xb = Fraction(a), Fraction(b)
        exact = {"add": xa + xb, "sub": xa - xb, "mul": xa * xb, "div": xa / xb if b else 0}[op]
        if exact != 0:
            assert got == round_fraction(exact, t.name)


@pytest.mark.parametrize("t", FLOATS, ids=str)
@SETTINGS
@given(data=st.data())
def test_float_min_max_compare_neg(t, data):
    a, b = data.draw(floats(t)), data.draw(floats(t))
    dt = NP[t.name]
    x, y = np.array([a], dt), np.array([b], dt)
    for op, f in [("min", np.fmin), ("max", np.fmax)]:  # llvm.minnum/maxnum: NaN loses
        got = fold(op, [(a, t), (b, t)], t)
        if a == 0 and b == 0 and math.copysign(1, a) != math.copysign(1, b):
            assert got is None
        else:
            with np.errstate(all="ignore"):
                assert same_float(got, float(f(x, y)[0]), t)
    for pred, f in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                    ("gt", np.greater), ("ge", np.greater_equal)]:
        with np.errstate(all="ignore"):
            want = bool(f(x, y)[0])
        assert fold("cmp", [(a, t), (b, t)], BOOL, pred=pred) == want
    assert same_float(fold("neg", [(a, t)], t), float(-x[0]), t)


@pytest.mark.parametrize("s", FLOATS, ids=str)
@pytest.mark.parametrize("d", FLOATS, ids=str)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_float_to_float_casts(s, d, data):
    a = data.draw(floats(s))
    got = fold("cast", [(a, s)], d)
    if math.isnan(a) or math.isinf(a):
        want = a
    else:
        want = round_fraction(Fraction(a), d.name)  # one rounding of the exact value
        if want == 0:
            want = math.copysign(0.0, a)
    if got is None:
        with np.errstate(all="ignore"):
            assert (s, d) == (F64, BF16) and float(np.float32(a)) != a  # would round twice
    else:
        assert same_float(got, want, d)
        if (s, d) != (F64, BF16):
            with np.errstate(all="ignore"):
                assert same_float(got, float(np.array([a], NP[s.name]).astype(NP[d.name])[0]), d)


@pytest.mark.parametrize("s", INTS, ids=str)
@pytest.mark.parametrize("d", FLOATS, ids=str)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_int_to_float_rounds_once(s, d, data):
    a = data.draw(ints(s))
    got = fold("cast", [(a, s)], d)
    assert same_float(got, round_fraction(Fraction(a), d.name), d)
    if d != BF16:  # ml_dtypes rounds through f32
        with np.errstate(all="ignore"):
            assert same_float(got, float(np_int(a, s).reshape(1).astype(NP[d.name])[0]), d)


@pytest.mark.parametrize("s", FLOATS, ids=str)
@pytest.mark.parametrize("d", INTS + [BOOL], ids=str)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_float_to_int_saturates(s, d, data):
    a = data.draw(floats(s))
    got = fold("cast", [(a, s)], d)
    if d == BOOL:
        assert got == (a != 0)
        return
    if math.isnan(a):
        want = 0
    else:
        info = np.iinfo(NP[d.name])
        if math.isfinite(a):
            want = max(min(math.trunc(a), int(info.max)), int(info.min))
        else:
            want = int(info.max) if a > 0 else int(info.min)
    assert got == want


@pytest.mark.parametrize("t", FLOATS, ids=str)
@SETTINGS
@given(data=st.data())
def test_float_bitcasts(t, data):
    a = data.draw(floats(t))
    it = {16: SCALARS["u16"], 32: SCALARS["i32"], 64: SCALARS["i64"]}[t.bits]
    got = fold("bitcast", [(a, t)], it)
    if math.isnan(a):
        assert got is None
        return
    want = int(np.array([a], NP[t.name]).view(NP[it.name])[0])
    assert got == want
    back = fold("bitcast", [(want, it)], t)
    assert same_float(back, a, t)


def test_nan_bit_patterns_are_not_folded():
    assert fold("bitcast", [(0x7FC00001, SCALARS["u32"])], F32) is None


def test_vector_splats_fold_lanewise():
    v4 = VectorType(I32, 4)
    assert fold("add", [(5, v4), (7, v4)], v4) == 12
    assert fold("cmp", [(5, v4), (7, v4)], VectorType(BOOL, 4), pred="lt") is True


def test_select_and_identity_cast():
    fn = Function("f", [], I32, "device")
    b = Builder(fn.body)
    x = b.value("special", [], I32, reg="thread_id", dim="x")
    y = b.const(3, I32)
    s = b.select(b.const(True, BOOL), x, y)
    c = b.value("cast", [s], I32)
    b.ret(c)
    m = Module("m", [fn])
    fold_constants(m)
    verify(m)
    assert fn.body.ops[-1].operands[0] is x
