"""Device arrays (runtime/device_array.py, DLPack capsules runtime/dlpack.py) on the CPU target, on
HIP through a fake hip-python, and the argument rules of issue 24's interop details (big-endian,
unaligned, 0-d and empty arrays, ml_dtypes arrays, a tensor on another device). GPU tests are in
test_device_array_gpu.py."""
from __future__ import annotations

import ctypes
import gc
import sys
import weakref

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.runtime import dlpack
from kcompiler.runtime import device_array as da
from kcompiler.runtime.device import Artifact, KernelParam
from kcompiler.ir.types import I32, PointerType

from ..paths import EXAMPLES

ML_DTYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz",
             "float8_e8m0fnu", "float6_e2m3fn", "float6_e3m2fn", "float4_e2m1fn"]


@pytest.fixture(scope="module")
def vadd():
    return kc.compile_file(EXAMPLES / "vadd.kc", target="cpu")


SRC = """
kernel fill(p: ptr<f32>, v: f32, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { p[i] = v; }
}
kernel first_plus_one(p: ptr<f32>) {
    if thread_id.x == 0 { p[0] = p[0] + 1.0; }
}
kernel touch_nothing(p: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { p[i] = 1.0; }
}
kernel widen[T: type](x: ptr<T>, y: ptr<f32>, n: i32) {
    let i = block_id.x * block_dim.x + thread_id.x;
    if i < n { y[i] = f32(x[i]); }
}
"""


@pytest.fixture(scope="module")
def mod():
    return kc.compile(SRC, target="cpu")


# --- arrays ---------------------------------------------------------------------------------------

def test_to_device_and_back_and_attributes():
    h = np.arange(24, dtype=np.int16).reshape(4, 6)
    x = kc.to_device(h, device="cpu")
    assert isinstance(x, kc.DeviceArray)
    assert (x.shape, x.strides, x.dtype, x.size, x.nbytes, x.ndim) == ((4, 6), (12, 2), np.int16, 24, 48, 2)
    assert x.device is kc.runtime.cpu.CpuDevice.get()
    assert x.ptr % da.HOST_ALIGN == 0  # aligned as a GPU allocation is
    assert x.ptr != h.ctypes.data  # a copy, not the host array
    got = x.copy_to_host()
    assert got.dtype == h.dtype and (got == h).all()
    assert (np.asarray(x) == h).all() and np.asarray(x).ctypes.data != x.ptr  # __array__ copies
    with pytest.raises(ValueError, match="only as a copy"):
        np.asarray(x, copy=False)
    filled = np.empty((4, 6), np.int16)
    assert x.copy_to_host(filled) is filled and (filled == h).all()


def test_device_array_and_copy_from_host():
    x = kc.device_array((3, 5), np.float64, device="cpu")
    assert x.shape == (3, 5) and x.strides == (40, 8)
    h = np.random.default_rng(1).standard_normal((3, 5))
    x.copy_from_host(h)
    assert (x.copy_to_host() == h).all()
    with pytest.raises(ValueError, match="the array given is"):
        x.copy_from_host(np.zeros((5, 3)))
    y = x.copy()
    assert y.ptr != x.ptr and (y.copy_to_host() == h).all()


@pytest.mark.parametrize("key", [
    np.s_[1], np.s_[1:3], np.s_[::2], np.s_[::-1], np.s_[1, 2], np.s_[:, 1], np.s_[..., 3],
    np.s_[None, 2:, ::-2], np.s_[-1, -2], np.s_[2:2]])
def test_views_are_numpys_basic_indexing(key):
    h = np.arange(4 * 7, dtype=np.float32).reshape(4, 7)
    x = kc.to_device(h, device="cpu")
    v = x[key]
    want = h[key]
    assert v.shape == want.shape and v.strides == want.strides
    assert (v.copy_to_host() == want).all()
    assert v.is_c_contiguous == want.flags.c_contiguous or want.size <= 1
    keys = key if isinstance(key, tuple) else (key,)
    view = h[keys if any(k is Ellipsis for k in keys) else keys + (...,)]  # a view even when 0-d
    if want.size:
        assert v.ptr - x.ptr == view.__array_interface__["data"][0] - h.__array_interface__["data"][0]


def test_views_share_memory_and_refuse_fancy_indexing(mod):
    x = kc.to_device(np.zeros(10, np.float32), device="cpu")
    v = x[4:8]
    mod.fill[1, 32](v, 2.5, 4)  # a contiguous view launches, in place
    assert (x.copy_to_host() == np.r_[[0] * 4, [2.5] * 4, [0] * 2]).all()
    with pytest.raises(TypeError, match="basic indexing only"):
        x[np.array([1, 2])]
    with pytest.raises(IndexError):
        x[10]


def test_a_strided_view_is_refused_at_launch(mod):
    x = kc.to_device(np.zeros(10, np.float32), device="cpu")
    with pytest.raises(ValueError, match=r"fill: parameter 'p' .* not contiguous"):
        mod.fill[1, 32](x[::2], 1.0, 5)


def test_reshape_and_view():
    x = kc.to_device(np.arange(12, dtype=np.uint8), device="cpu")
    assert (x.reshape(3, -1).copy_to_host() == np.arange(12).reshape(3, 4)).all()
    with pytest.raises(ValueError, match="cannot reshape"):
        x.reshape(5, 3)
    with pytest.raises(ValueError, match="non-contiguous"):
        x[::2].reshape(6)
    f4 = x.view(ml_dtypes.float4_e2m1fn)
    assert f4.dtype == ml_dtypes.float4_e2m1fn and f4.ptr == x.ptr
    with pytest.raises(ValueError, match="itemsize"):
        x.view(np.float32)


def test_kernels_take_device_arrays_with_no_copy(vadd):
    n = 1000
    a, b = np.arange(n, dtype=np.float32), np.full(n, 2, np.float32)
    da_, db = kc.to_device(a, device=vadd.device), kc.to_device(b, device=vadd)
    out = kc.device_array(n, np.float32, device="cpu")
    for _ in range(3):  # the general path, then the launcher the first launch made
        vadd.vadd[4, 256](da_, db, out, n)
    assert (out.copy_to_host() == a + b).all()
    vadd.vadd[4, 256](out, db, out, n)  # reads what the last launch left on the "device"
    assert (out.copy_to_host() == a + 2 * b).all()


@pytest.mark.parametrize("name", ML_DTYPES)
def test_every_ml_dtype_round_trips(name):
    dt = np.dtype(getattr(ml_dtypes, name))
    h = np.linspace(-3, 3, 37).astype(np.float32).astype(dt)
    x = kc.to_device(h, device="cpu")
    got = x.copy_to_host()
    assert got.dtype == dt and got.tobytes() == h.tobytes()
    # through DLPack and back: same memory, same dtype
    y = kc.from_dlpack(x)
    assert y.ptr == x.ptr and y.dtype == dt and y.copy_to_host().tobytes() == h.tobytes()
    # the legacy (unversioned) capsule has no flag for padded FP6/FP4: they travel as bytes
    z = kc.from_dlpack(x.__dlpack__())
    assert z.ptr == x.ptr
    assert z.dtype == (np.dtype(np.uint8) if name[:6] in ("float6", "float4") else dt)


def test_freed_when_the_last_view_dies():
    x = kc.device_array(1000, np.float32, device="cpu")
    mem = weakref.ref(x._mem)
    v = x[10:20]
    del x
    gc.collect()
    assert mem() is not None  # the view keeps the allocation
    del v
    gc.collect()
    assert mem() is None


# --- DLPack -----------------------------------------------------------------------------------------

def test_numpy_from_dlpack_views_the_memory():
    x = kc.to_device(np.arange(20, dtype=np.float64).reshape(4, 5), device="cpu")
    assert x.__dlpack_device__() == (1, 0)
    for view in (x, x[1:3], x[:, ::2], x[::-1, 1]):
        n = np.from_dlpack(view)
        assert n.ctypes.data == view.ptr and n.strides == view.strides
        assert (n == view.copy_to_host()).all()
    n = np.from_dlpack(x)
    del x
    gc.collect()
    n[0, 0] = 42  # the capsule's holder keeps the memory alive
    assert n[0, 0] == 42 and n[3, 4] == 19


def test_capsules_call_the_deleter_exactly_once():
    x = kc.to_device(np.arange(4, dtype=np.int32), device="cpu")
    before = len(dlpack._EXPORTS)
    cap = x.__dlpack__(max_version=(1, 0))
    assert len(dlpack._EXPORTS) == before + 1
    del cap  # never consumed: the capsule's destructor calls the deleter
    gc.collect()
    assert len(dlpack._EXPORTS) == before
    cap = x.__dlpack__()
    y = kc.from_dlpack(cap)  # consumed: renamed, its deleter runs when y's memory dies
    with pytest.raises(BufferError, match="already consumed"):
        kc.from_dlpack(cap)
    assert len(dlpack._EXPORTS) == before + 1
    del y, cap
    gc.collect()
    assert len(dlpack._EXPORTS) == before


def test_from_dlpack_of_numpy_is_a_view():
    h = np.arange(12, dtype=np.int64).reshape(3, 4)
    x = kc.from_dlpack(h[:, 1:3])
    assert x.ptr == h[:, 1:].ctypes.data and x.shape == (3, 2) and x.strides == (32, 8)
    assert not x.is_c_contiguous
    h[0, 1] = 99
    assert x.copy_to_host()[0, 0] == 99


def test_dlpack_dtype_codes_follow_dlpack_h():
    """dlpack.h 1.1's DLDataTypeCode: kDLBfloat 4, the FP8 formats 7..14, FP6 15/16, FP4 17."""
    assert dlpack.dl_dtype(np.dtype(ml_dtypes.bfloat16), True) == (4, 16, False)
    assert dlpack.dl_dtype(np.dtype(ml_dtypes.float8_e4m3fn), True) == (10, 8, False)
    assert dlpack.dl_dtype(np.dtype(ml_dtypes.float8_e5m2), False) == (12, 8, False)
    assert dlpack.dl_dtype(np.dtype(ml_dtypes.float4_e2m1fn), True) == (17, 4, True)
    assert dlpack.dl_dtype(np.dtype(ml_dtypes.float4_e2m1fn), False) == (1, 8, False)
    assert dlpack.dl_dtype(np.dtype(np.bool_), True) == (6, 8, False)
    with pytest.raises(BufferError, match="native byte order"):
        dlpack.dl_dtype(np.dtype(">f4"), True)
    with pytest.raises(BufferError, match="packed float4_e2m1fn"):
        dlpack.numpy_dtype_of(17, 4, 1, padded=False)
    assert ctypes.sizeof(dlpack.DLTensor) == 48 and ctypes.sizeof(dlpack.DLManagedTensorVersioned) == 80


def test_dlpack_refusals():
    x = kc.to_device(np.zeros(3, np.float32), device="cpu")
    with pytest.raises(BufferError, match="never a copy"):
        x.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="not"):
        x.__dlpack__(dl_device=(2, 0))
    assert not hasattr(x, "__cuda_array_interface__")  # host memory has no CUDA interface


# --- interop details: what kernels take -------------------------------------------------------------

def test_big_endian_numpy_arrays_are_refused(mod):
    x = np.zeros(4, ">f4")
    with pytest.raises(ValueError, match=r"fill: parameter 'p' .*big-endian \(>f4\)"):
        mod.fill[1, 32](x, 1.0, 4)


def test_unaligned_numpy_arrays_are_refused(mod):
    x = np.zeros(17, np.uint8)[1:].view(np.float32)
    assert not x.flags.aligned
    with pytest.raises(ValueError, match=r"fill: parameter 'p' .*not aligned.*4-byte elements"):
        mod.fill[1, 32](x, 1.0, 4)


def test_zero_d_arrays_are_one_element_buffers(mod):
    x = np.array(41.0, np.float32)
    for _ in range(2):
        mod.first_plus_one[1, 32](x)
    assert x == 43.0
    d = kc.to_device(np.array(1.0, np.float32), device="cpu")
    assert d.shape == () and d.size == 1
    mod.first_plus_one[1, 32](d)
    assert d.copy_to_host() == 2.0 and d[...].shape == ()


def test_empty_arrays_launch(mod):
    x = np.zeros(0, np.float32)
    mod.touch_nothing[1, 32](x, 0)
    d = kc.device_array(0, np.float32, device="cpu")
    mod.touch_nothing[1, 32](d, 0)
    assert d.copy_to_host().shape == (0,)
    assert np.from_dlpack(d).shape == (0,)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_ml_dtypes_numpy_arrays_are_kernel_arguments(mod, name):
    dt = getattr(ml_dtypes, name)
    h = np.linspace(-2, 2, 50).astype(dt)
    y = np.zeros(50, np.float32)
    mod.widen[1, 64](h, y, 50)
    assert (y == h.astype(np.float32)).all()
    d = kc.to_device(h, device="cpu")
    y2 = kc.device_array(50, np.float32, device="cpu")
    mod.widen[1, 64](d, y2, 50)
    assert (y2.copy_to_host() == y).all()


class _FakeTorchTensor:
    """What the launch path reads of a torch CUDA tensor, for a tensor on cuda:1."""

    dtype = "torch.float32"
    is_cuda = True

    def __init__(self):
        from types import SimpleNamespace

        self.device = SimpleNamespace(type="cuda", index=1)

    def __str__(self):
        return "tensor"


_FakeTorchTensor.__name__ = "Tensor"
_FakeTorchTensor.__module__ = "torch.fake"


def test_a_tensor_on_another_gpu_is_refused_by_name():
    from kcompiler.runtime.marshal import device_pointer, HostCopy

    t = _FakeTorchTensor()
    with pytest.raises(TypeError, match=r"k: parameter 'p': the tensor is on .*runs on cuda:0"):
        device_pointer("k", "p", t, [], HostCopy, 0, "CUDA")


def test_device_arrays_of_another_device_are_refused_by_name(fake_hip, mod):
    x = kc.to_device(np.zeros(4, np.float32), device="hip")
    with pytest.raises(TypeError, match=r"fill: parameter 'p': kcompiler DeviceArray .* on hip:0"):
        mod.fill[1, 32](x, 1.0, 4)  # a cpu-target kernel
    from kcompiler.runtime.marshal import device_pointer, HostCopy

    with pytest.raises(TypeError, match=r"k: parameter 'p': the array is on hip:0, the kernel runs on cuda:0"):
        device_pointer("k", "p", x, [], HostCopy, 0, "CUDA")
    assert device_pointer("k", "p", x, [], HostCopy, 0, "HIP") == x.ptr  # no copy on its own device


def test_device_names():
    assert da.resolve_device("cpu") is da.resolve_device(None) or kc.resolve_target_name("auto") != "cpu"
    with pytest.raises(ValueError):
        da.resolve_device("cpu:x")
    with pytest.raises(TypeError, match="device must be"):
        da.resolve_device(1.5)


# --- HIP, through a fake hip-python -------------------------------------------------------------

@pytest.fixture
def fake_hip(monkeypatch):
    from kcompiler.runtime import device as device_module
    from kcompiler.runtime import hip as hip_rt

    from .hip_fakes import FakeHip

    class FakeHipAsync(FakeHip):
        """With the stream-ordered copies, stream synchronisation and events device arrays use."""

        def __init__(self):
            super().__init__()
            self.calls: list[tuple] = []

        def hipMemcpyHtoDAsync(self, dst, src, n, stream):
            self.calls.append(("HtoD", n, stream))
            return self.hipMemcpyHtoD(dst, src, n)

        def hipMemcpyDtoHAsync(self, dst, src, n, stream):
            self.calls.append(("DtoH", n, stream))
            return self.hipMemcpyDtoH(dst, src, n)

        def hipMemcpyDtoDAsync(self, dst, src, n, stream):
            self.calls.append(("DtoD", n, stream))
            ctypes.memmove(dst, src, n)
            return (0,)

        def hipStreamSynchronize(self, stream):
            self.calls.append(("sync", stream))
            return (0,)

        def hipEventCreate(self):
            return 0, 77

        def hipEventRecord(self, ev, stream):
            self.calls.append(("record", ev, stream))
            return (0,)

        def hipStreamWaitEvent(self, stream, ev, flags):
            self.calls.append(("wait", stream, ev))
            return (0,)

        def hipEventDestroy(self, ev):
            return (0,)

    fake = FakeHipAsync()
    monkeypatch.setattr(hip_rt, "_hip", fake)
    monkeypatch.setattr(hip_rt, "_probe", (1, None))
    monkeypatch.setattr(hip_rt, "_runtime_version", None)
    monkeypatch.setattr(device_module, "_INSTANCES", {})
    monkeypatch.setattr(da, "_OPS", weakref.WeakKeyDictionary())
    yield fake
    gc.collect()


def test_hip_arrays_allocate_copy_and_free(fake_hip):
    h = np.arange(8, dtype=np.float32)
    x = kc.to_device(h, device="hip:0", stream=5)
    assert x.device.target == "amdgcn" and x.ptr in fake_hip.memory and x.stream == 5
    assert x.__dlpack_device__() == (10, 0)
    assert not hasattr(x, "__cuda_array_interface__")
    assert (x.copy_to_host() == h).all()
    assert fake_hip.calls == [("HtoD", 32, 5), ("DtoH", 32, 5), ("sync", 5)]
    y = x[2:6].copy(stream=9)
    assert (y.copy_to_host() == h[2:6]).all() and ("DtoD", 16, 9) in fake_hip.calls
    fake_hip.calls.clear()
    x.__dlpack__(stream=3)  # the consumer's stream waits for the array's
    assert fake_hip.calls == [("record", 77, 5), ("wait", 3, 77)]
    del x, y
    gc.collect()
    assert fake_hip.memory == {}  # both allocations freed, once each


def test_hip_empty_arrays_allocate_nothing(fake_hip):
    x = kc.device_array((0, 4), np.float32, device="hip")
    assert x.ptr == 0 and fake_hip.memory == {} and x.copy_to_host().shape == (0, 4)
