"""The target-generic runtime without a compiler: argument checking, grid/block forms, specialisation
memoisation and the fast launch path, over a fake program and a fake device."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from kcompiler.ir.types import (BF16, BOOL, F16, F32, F64, I8, I32, I64, U8, U32, PointerType,
                                VectorType)
from kcompiler.pipeline import Source
from kcompiler.runtime import arrays
from kcompiler.runtime.arrays import ArgMismatch
from kcompiler.runtime.cache import make_key
from kcompiler.runtime.device import Artifact, Device, KernelParam
from kcompiler.runtime.module import Module, _dims


class FakeProgram:
    """What Module needs of a ProgramHandle. ``kernels``: name -> (comptime names, params), where a
    param's type may be a function of the compile-time values (for generic kernels)."""

    def __init__(self, kernels):
        self.kernels = kernels
        self.source = Source("", "<fake>")
        self.target_name, self.arch = "cpu", "fake"
        self.compiled = []
        self.inferred = []

    @property
    def kernel_names(self):
        return list(self.kernels)

    def comptime_names(self, k):
        return list(self.kernels[k][0])

    def param_names(self, k):
        return [n for n, _ in self.kernels[k][1]]

    def infer_comptime(self, k, types, given):
        self.inferred.append((k, tuple(types), dict(given)))
        values = dict(given)
        if "T" in self.kernels[k][0] and "T" not in values:
            if types and isinstance(types[0], PointerType):
                values["T"] = types[0].pointee
            else:
                raise TypeError(f"{k}: cannot infer T")
        return values

    def artifact_key(self, k, values):
        return make_key(id(self), k, values)

    def artifact(self, k, values):
        self.compiled.append((k, dict(values)))
        params = [KernelParam(n, t(values) if callable(t) else t) for n, t in self.kernels[k][1]]
        return Artifact("cpu", "fake", k, b"", "fake", params, meta={"kernel": k})


class FakeDevice(Device):
    target, arch = "cpu", "fake"

    def __init__(self, fast=False):
        self.launches = []
        self.loads = 0
        self.fast = fast
        self.made = 0

    def load(self, artifact):
        self.loads += 1
        return ("handle", artifact.symbol)

    def marshal(self, artifact, args, stream=None):
        done = []
        return list(args), [lambda: done.append(1)]

    def launch(self, handle, artifact, grid, block, args, shared=0, stream=None):
        self.launches.append(("slow", artifact.symbol, grid, block, tuple(args), shared, stream))

    def make_launcher(self, handle, artifact, args):
        if not self.fast:
            return None
        self.made += 1
        types = tuple(type(a) for a in args)

        def fast(grid, block, a, shared, stream):
            if tuple(type(x) for x in a) != types:
                raise ArgMismatch
            self.launches.append(("fast", artifact.symbol, grid, block, tuple(a), shared, stream))
        return fast


VADD = ([], [("a", PointerType(F32)), ("b", PointerType(F32)), ("out", PointerType(F32)), ("n", I32)])
SCALE = (["T"], [("x", lambda v: PointerType(v["T"])), ("alpha", F32), ("n", I64)])
MIXED = ([], [("b", BOOL), ("i8", I8), ("u8", U8), ("u32", U32), ("h", F16), ("bf", BF16),
              ("d", F64), ("v", PointerType(VectorType(F16, 8)))])


def make(fast=False, **kernels):
    kernels = kernels or {"vadd": VADD}
    dev = FakeDevice(fast)
    return Module(FakeProgram(kernels), dev), dev


def arrs(n=8, dtype=np.float32):
    return [np.zeros(n, dtype) for _ in range(3)]


# --- modules and kernels ----------------------------------------------------------------------

def test_unknown_kernel_lists_the_kernels():
    m, _ = make(vadd=VADD, scale=SCALE)
    with pytest.raises(AttributeError, match="no kernel 'vdd'.*scale.*vadd|no kernel 'vdd'.*vadd.*scale"):
        m.vdd
    assert sorted(m.kernels) == ["scale", "vadd"]
    assert m.vadd is m.vadd and m["vadd"] is m.vadd
    with pytest.raises(KeyError):
        m["nope"]
    assert "vadd" in dir(m)


def test_launch_reaches_the_device():
    m, dev = make()
    a, b, c = arrs()
    m.vadd[2, 4](a, b, c, 8)
    assert dev.launches == [("slow", "vadd", (2, 1, 1), (4, 1, 1), (a, b, c, 8), 0, None)]
    m.vadd.launch((1, 2), (3, 4, 5), a, b, c, 8, shared=16, stream=7)
    assert dev.launches[-1][2:4] == ((1, 2, 1), (3, 4, 5))
    assert dev.launches[-1][5:] == (16, 7)


@pytest.mark.parametrize("given, want", [
    (5, (5, 1, 1)), ((5,), (5, 1, 1)), ((5, 6), (5, 6, 1)), ((5, 6, 7), (5, 6, 7)),
    ([5, 6], (5, 6, 1)), (np.int64(3), (3, 1, 1)), ((np.int32(2), 3), (2, 3, 1)),
])
def test_grid_block_forms(given, want):
    assert _dims("k", "grid", given) == want
    m, dev = make()
    m.vadd[given, given](*arrs(), 8)
    assert dev.launches[-1][2] == want and dev.launches[-1][3] == want


@pytest.mark.parametrize("bad, err", [
    (0, ValueError), ((1, 0), ValueError), (-1, ValueError), ((1, 2, 3, 4), TypeError), ((), TypeError),
    ("8", TypeError), (1.5, TypeError), ((1, 2.0), TypeError), (2**32, ValueError),
])
def test_bad_grid_block(bad, err):
    m, _ = make()
    with pytest.raises(err, match="vadd: grid"):
        m.vadd[bad, 32]
    with pytest.raises(err, match="vadd: block"):
        m.vadd[32, bad]


def test_launch_needs_grid_and_block():
    m, _ = make()
    with pytest.raises(TypeError, match=r"kernel\[grid, block\]"):
        m.vadd[32]
    with pytest.raises(TypeError, match=r"kernel\[grid, block\]"):
        m.vadd[1, 2, 3]


def test_shared_must_be_a_non_negative_int():
    m, dev = make()
    with pytest.raises(ValueError, match="vadd: shared must be >= 0"):
        m.vadd[1, 1](*arrs(), 8, shared=-1)
    with pytest.raises(TypeError, match="vadd: shared must be an int"):
        m.vadd[1, 1](*arrs(), 8, shared=1.5)
    m.vadd[1, 1](*arrs(), 8, shared=np.int64(64))
    assert dev.launches[-1][5] == 64


# --- argument checking ----------------------------------------------------------------------

def test_wrong_count():
    m, _ = make()
    a, b, c = arrs()
    with pytest.raises(TypeError, match=r"vadd\(\) takes 4 arguments \(a: ptr<f32>, b: ptr<f32>, "
                                        r"out: ptr<f32>, n: i32\), 3 given"):
        m.vadd[1, 8](a, b, c)
    with pytest.raises(TypeError, match="5 given"):
        m.vadd[1, 8](a, b, c, 8, 9)


def test_wrong_dtype_names_kernel_param_expected_and_given():
    m, _ = make()
    a, b, c = arrs()
    with pytest.raises(TypeError, match=r"vadd: parameter 'b' expects ptr<f32> \(an array of f32\), "
                                        r"got numpy array of float64"):
        m.vadd[1, 8](a, b.astype(np.float64), c, 8)


def test_scalar_where_array_expected_and_back():
    m, _ = make()
    a, b, c = arrs()
    with pytest.raises(TypeError, match="parameter 'out' expects ptr<f32>.*got float 1.0"):
        m.vadd[1, 8](a, b, 1.0, 8)
    with pytest.raises(TypeError, match="parameter 'n' expects i32, got numpy array of float32"):
        m.vadd[1, 8](a, b, c, a)
    with pytest.raises(TypeError, match="parameter 'a' expects ptr<f32>.*got list"):
        m.vadd[1, 8]([1.0, 2.0], b, c, 8)


@pytest.mark.parametrize("n", [2**31, -2**31 - 1, 10**30])
def test_scalar_out_of_range(n):
    m, _ = make()
    with pytest.raises(ValueError, match=rf"vadd: parameter 'n' expects i32, but {n} is out of its "
                                         r"range \[-2147483648, 2147483647\]"):
        m.vadd[1, 8](*arrs(), n)


def test_scalar_kinds():
    m, _ = make()
    with pytest.raises(TypeError, match="parameter 'n' expects i32 \\(an integer\\), got float 8.0"):
        m.vadd[1, 8](*arrs(), 8.0)
    with pytest.raises(TypeError, match="parameter 'n' expects i32 \\(an integer\\), got bool True"):
        m.vadd[1, 8](*arrs(), True)
    m.vadd[1, 8](*arrs(), np.int64(8))  # numpy integers in range are fine


def test_non_contiguous_array():
    m, _ = make()
    a, b, c = arrs(16)
    with pytest.raises(ValueError, match="vadd: parameter 'a' .* not contiguous"):
        m.vadd[1, 8](a[::2], b[:8], c[:8], 8)
    with pytest.raises(ValueError, match="not contiguous"):
        m.vadd[1, 8](np.zeros((4, 4), np.float32).T, b, c, 8)
    m.vadd[1, 8](a[2:10], b, c, 8)  # a contiguous slice is fine


def test_mixed_scalar_types():
    m, dev = make(mixed=MIXED)
    v = np.zeros(64, np.float16)
    m.mixed[1, 1](True, -128, 255, 2**32 - 1, 65504.0, 1e38, 1e300, v)
    for i, bad in enumerate([1, 128, 256, -1, 1e5, 1e39, "x", np.zeros(64, np.float32)]):
        args = [True, -128, 255, 2**32 - 1, 65504.0, 1e38, 1e300, v]
        args[i] = bad
        with pytest.raises((TypeError, ValueError), match=f"mixed: parameter '{MIXED[1][i][0]}'"):
            m.mixed[1, 1](*args)
    m.mixed[1, 1](np.bool_(False), np.int8(1), np.uint8(2), np.uint32(3), np.float16(1),
                  ml_dtypes.bfloat16(2), np.float32(3), v)
    assert len(dev.launches) == 2


def test_ml_dtypes_and_vectors():
    assert arrays.arg_type(np.zeros(2, ml_dtypes.bfloat16)) == PointerType(BF16)
    assert arrays.arg_type(np.zeros(2, np.float16)) == PointerType(F16)
    assert arrays.arg_type(np.float32(1)) == F32
    assert arrays.arg_type(True) == BOOL
    assert arrays.arg_type(3) is None and arrays.arg_type(3.0) is None
    assert arrays.numpy_dtype(BF16) == np.dtype(ml_dtypes.bfloat16)
    assert arrays.numpy_dtype(U32) == np.dtype(np.uint32)


def test_cuda_array_interface_objects_are_arrays():
    class Fake:
        def __init__(self, typestr, shape, strides=None):
            self.__cuda_array_interface__ = {"typestr": typestr, "shape": shape, "strides": strides,
                                             "data": (4096, False), "version": 3}
    arrays.check_array("k", "p", PointerType(F32), Fake("<f4", (4, 4)))
    arrays.check_array("k", "p", PointerType(F32), Fake("<f4", (4, 4), (16, 4)))
    with pytest.raises(ValueError, match="not contiguous"):
        arrays.check_array("k", "p", PointerType(F32), Fake("<f4", (4, 4), (4, 16)))
    with pytest.raises(TypeError, match="got .*Fake of float16"):
        arrays.check_array("k", "p", PointerType(F32), Fake("<f2", (4,)))
    assert arrays.device_pointer(Fake("<f4", (4,))) == 4096


# --- specialisation -------------------------------------------------------------------------

def test_generic_kernel_infers_and_memoises():
    m, dev = make(scale=SCALE)
    x16, x32 = np.zeros(8, np.float16), np.zeros(8, np.float32)
    m.scale[1, 8](x16, 2.0, 8)
    m.scale[1, 8](x16, 3.0, 9)
    m.scale[1, 8](x32, 2.0, 8)
    assert [v["T"] for _, v in m._program.compiled] == [F16, F32]
    assert len(m._program.inferred) == 2  # the second f16 launch reused the first inference
    assert dev.loads == 2
    with pytest.raises(TypeError, match="scale: parameter 'x' expects ptr<f16>"):
        m.scale[1, 8](x32, 1.0, 8, T=F16)


def test_module_default_params():
    m = Module(FakeProgram({"scale": SCALE}), FakeDevice(), comptime={"T": F32})
    m.scale[1, 8](np.zeros(8, np.float32), 1.0, 8)
    assert m._program.compiled[-1][1] == {"T": F32}
    with pytest.raises(TypeError, match="no kernel has a compile-time parameter named 'Q'"):
        Module(FakeProgram({"scale": SCALE}), FakeDevice(), comptime={"Q": 1})
    with pytest.raises(TypeError, match="no kernel named 'other'"):
        Module(FakeProgram({"scale": SCALE}), FakeDevice(), comptime={"other": {"T": F32}})


def test_fast_path_is_taken_and_falls_back_on_other_types():
    m, dev = make(fast=True)
    a, b, c = arrs()
    m.vadd[1, 8](a, b, c, 8)
    m.vadd[1, 8](a, b, c, 8)
    assert [l[0] for l in dev.launches] == ["fast", "fast"]
    assert dev.made == 1 and m.vadd._fast is not None
    m.vadd[1, 8](a, b, c, np.int32(8))  # other types: a second launcher, still checked
    assert dev.made == 2
    with pytest.raises(TypeError, match="parameter 'a'"):
        m.vadd[1, 8](a.astype(np.float64), b, c, 8)
    assert len(dev.launches) == 3


def test_bound_launch_goes_to_the_prepared_launcher():
    m, dev = make(fast=True, scale=SCALE)
    x = np.zeros(8, np.float32)
    bound = m.scale[1, 8].bind(shared=0, T=F32)
    assert bound._fast is None
    bound(x, 1.0, 8)  # the general path: checks, compiles, makes the launcher
    bound(x, 2.0, 8)
    assert [l[0] for l in dev.launches] == ["fast", "fast"] and dev.made == 1
    assert bound._fast is not None and dev.launches[-1][4] == (x, 2.0, 8)
    bound(x, 1.0, np.int64(8))  # the launcher refuses another type: the general path (a second one)
    assert dev.made == 2 and len(dev.launches) == 3
    with pytest.raises(TypeError, match="parameter 'x' expects ptr<f32>"):
        bound(x.astype(np.float64), 1.0, 8)
    assert len(dev.launches) == 3


def test_fast_path_with_compile_time_keywords():
    m, dev = make(fast=True, scale=SCALE)
    x = np.zeros(8, np.float32)
    m.scale[1, 8](x, 1.0, 8, T=F32)
    m.scale[1, 8](x, 1.0, 8, T=F32)
    assert [l[0] for l in dev.launches] == ["fast", "fast"] and dev.made == 1
    assert m.scale._fast is None and len(m.scale._fast_kw) == 1
    with pytest.raises(TypeError, match="parameter 'x' expects ptr<f16>"):
        m.scale[1, 8](x, 1.0, 8, T=F16)
