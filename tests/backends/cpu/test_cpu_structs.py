"""Structs running: kernels with struct parameters by value, arrays of structs in local and shared
memory, a generic struct, a struct returned from a fn and ``ptr<S>`` over a numpy structured array,
compared with numpy. The same kernels run on the CPU target and (marked gpu) on an NVIDIA GPU."""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime.structs import struct_dtype

SRC = """
struct Pair { lo: f32, hi: f32 }
struct Acc[T: type] { sum: T, n: i32 }
struct Mixed { flag: bool, k: i8, x: f64, h: f16 }

fn ordered(a: f32, b: f32) -> Pair {
    if a <= b { return Pair { lo: a, hi: b }; }
    return Pair { lo: b, hi: a };
}

fn add[T: type](acc: Acc[T], x: T) -> Acc[T] {
    return Acc[T] { sum: acc.sum + x, n: acc.n + 1 };
}

// ptr<Pair> over a numpy structured array; a struct parameter by value; a local array of structs
kernel minmax(xs: ptr<Pair>, out: ptr<Pair>, bias: Pair, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n {
        var loc: [Pair; 2];
        loc[0] = ordered(xs[i].lo, xs[i].hi);
        loc[1] = bias;
        var r = loc[0];
        r.lo = r.lo + loc[1].lo;
        r.hi += loc[1].hi;
        out[i] = r;
        xs[i].hi = f32(i);
    }
}

// a shared-memory array of structs, a generic struct through a generic fn
kernel block_sum(x: ptr<f32>, sums: ptr<Acc[f32]>) {
    shared part: [Acc[f32]; 64];
    let t = thread_id.x;
    var acc = Acc[f32] { sum: 0.0, n: 0 };
    acc = add(acc, x[block_id.x * 64 + t]);
    part[t] = acc;
    barrier();
    if t == 0 {
        var total = Acc[f32] { sum: 0.0, n: 0 };
        for j in range(64) {
            total.sum += part[j].sum;
            total.n += part[j].n;
        }
        sums[block_id.x] = total;
    }
}

// C layout with padding: bool @0, i8 @1, f64 @8, f16 @16 (24 bytes)
kernel mixed(m: Mixed, out: ptr<Mixed>, o: ptr<f64>) {
    if thread_id.x == 0 {
        o[0] = m.x + f64(m.k) + f64(m.h);
        out[0] = Mixed { flag: !m.flag, k: m.k + 1i8, x: m.x * 2.0, h: m.h };
    }
}
"""

PAIR = np.dtype([("lo", np.float32), ("hi", np.float32)], align=True)
MIXED = np.dtype([("flag", np.bool_), ("k", np.int8), ("x", np.float64), ("h", np.float16)], align=True)


def _mod(target):
    return kc.compile(SRC, target=target, path="structs.kc")


def run_minmax(target, bias):
    rng = np.random.default_rng(1)
    n = 300
    xs = np.zeros(n, PAIR)
    xs["lo"], xs["hi"] = rng.standard_normal(n), rng.standard_normal(n)
    before = xs.copy()
    out = np.zeros(n, PAIR)
    _mod(target).minmax[(n + 127) // 128, 128](xs, out, bias, n)
    b = bias if isinstance(bias, tuple) else (bias["lo"], bias["hi"])
    want_lo = np.minimum(before["lo"], before["hi"]) + np.float32(b[0])
    want_hi = np.maximum(before["lo"], before["hi"]) + np.float32(b[1])
    np.testing.assert_array_equal(out["lo"], want_lo)
    np.testing.assert_array_equal(out["hi"], want_hi)
    np.testing.assert_array_equal(xs["hi"], np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(xs["lo"], before["lo"])


def run_block_sum(target):
    x = np.random.default_rng(2).standard_normal(64 * 5).astype(np.float32)
    st = _mod(target).block_sum.specialize().params[1].type.pointee
    sums = np.zeros(5, struct_dtype(st))
    _mod(target).block_sum[5, 64](x, sums)
    want = np.zeros(5, np.float32)
    for b in range(5):  # the kernel's order: thread 0 adds the 64 partial sums one after another
        for j in range(64):
            want[b] = np.float32(want[b] + x[b * 64 + j])
    np.testing.assert_array_equal(sums["sum"], want)
    np.testing.assert_array_equal(sums["n"], np.full(5, 64))


def run_mixed(target):
    m = np.zeros((), MIXED)
    m[()] = (True, -3, 2.5, 0.5)
    out = np.zeros(1, MIXED)
    o = np.zeros(1, np.float64)
    _mod(target).mixed[1, 32](m[()], out, o)
    assert o[0] == 2.5 - 3 + 0.5
    assert out[0].tolist() == (False, -2, 5.0, np.float16(0.5))


def test_dtype_with_align_true_is_the_compiled_layout():
    st = _mod("cpu").mixed.specialize().params[0].type
    assert struct_dtype(st) == MIXED and MIXED.itemsize == 24
    assert [MIXED.fields[n][1] for n in MIXED.names] == list(st.offsets)


@pytest.mark.parametrize("bias", [(0.5, -1.0), {"lo": 0.5, "hi": -1.0}, np.array((0.5, -1.0), PAIR)[()]])
def test_cpu_struct_param_ptr_and_local_array(bias):
    run_minmax("cpu", bias)


def test_cpu_shared_array_of_generic_struct():
    run_block_sum("cpu")


def test_cpu_padded_struct_with_bool_and_f16():
    run_mixed("cpu")


@pytest.mark.parametrize("bad, message", [
    ({"lo": 1.0}, "missing field hi"),
    ({"lo": 1.0, "hi": 2.0, "mid": 3.0}, "unknown field mid"),
    ((1.0,), "2 values"),
    (1.0, "a numpy structured scalar, a dict or a tuple"),
    (np.zeros((), [("a", "f4"), ("b", "f4")])[()], "the numpy value has fields a, b"),
])
def test_cpu_bad_struct_argument(bad, message):
    xs = np.zeros(4, PAIR)
    with pytest.raises(TypeError, match=message):
        _mod("cpu").minmax[1, 32](xs, xs.copy(), bad, 4)


def test_cpu_ptr_struct_refuses_a_dtype_of_another_layout():
    packed = np.dtype([("lo", np.float32), ("hi", np.float64)])
    with pytest.raises(TypeError, match="expects ptr<Pair>"):
        _mod("cpu").minmax[1, 32](np.zeros(4, packed), np.zeros(4, PAIR), (0, 0), 4)


@pytest.mark.gpu
@pytest.mark.parametrize("bias", [(0.5, -1.0), {"lo": 0.5, "hi": -1.0}])
def test_gpu_struct_param_ptr_and_local_array(bias):
    run_minmax("cuda", bias)


@pytest.mark.gpu
def test_gpu_shared_array_of_generic_struct():
    run_block_sum("cuda")


@pytest.mark.gpu
def test_gpu_padded_struct_with_bool_and_f16():
    run_mixed("cuda")


def test_struct_parameters_survive_the_cache_record():
    from kcompiler.runtime.cache import dump_artifact, load_artifact

    art = _mod("cpu").mixed.specialize()
    back = load_artifact(dump_artifact(art))
    assert [p.type for p in back.params] == [p.type for p in art.params]
    assert back.params[0].type.offsets == (0, 1, 8, 16)
