"""Device arrays on a CUDA GPU (runtime/device_array.py): copies, launches with no copy, the CUDA array
interface's stream both ways, DLPack into torch and CuPy with the pointer unchanged, a tensor on
another GPU. All marked gpu (skipped without one)."""
from __future__ import annotations

import gc

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc

from ..paths import EXAMPLES

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def vadd():
    return kc.compile_file(EXAMPLES / "vadd.kc", target="cuda")


def test_to_device_copy_to_host_and_launch(vadd):
    n = 10_000
    a = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x = kc.to_device(a, device="cuda")
    out = kc.device_array(n, np.float32, device=vadd.device)
    assert x.__cuda_array_interface__["data"][0] == x.ptr and x.__dlpack_device__() == (2, 0)
    for _ in range(3):  # the general path, then the fast launcher
        vadd.vadd[(n + 255) // 256, 256](x, x, out, n)
    assert (out.copy_to_host() == 2 * a).all() and (np.asarray(out[5:9]) == 2 * a[5:9]).all()
    assert (out[::3].copy_to_host() == 2 * a[::3]).all()
    with pytest.raises(ValueError, match="not contiguous"):
        vadd.vadd[1, 256](x[::2], x[::2], out[::2], 10)


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn"])
def test_ml_dtypes_round_trip_on_the_gpu(name):
    h = np.linspace(-3, 3, 101).astype(getattr(ml_dtypes, name))
    got = kc.to_device(h, device="cuda").copy_to_host()
    assert got.dtype == h.dtype and got.tobytes() == h.tobytes()


def test_memory_is_freed(monkeypatch):
    """Each allocation is freed (cuMemFree of its pointer, which succeeds) once the last array viewing it
    is collected, not before. What the driver frees is watched, not the device's free memory: that is
    the whole GPU's, which other processes (pytest-xdist's workers) allocate from at the same time."""
    from cuda.bindings import driver as drv

    from kcompiler.runtime import cuda
    freed = {}
    real = cuda._drv.cuMemFree

    def watched(ptr):
        r = real(ptr)
        freed[int(ptr)] = r[0]
        return r
    monkeypatch.setattr(cuda._drv, "cuMemFree", watched)
    xs = [kc.device_array(64 << 20, np.uint8, device="cuda") for _ in range(4)]
    ptrs = {x.ptr for x in xs}
    views = [x[1:] for x in xs]
    del xs
    gc.collect()
    assert not ptrs & freed.keys()  # the views keep their memory
    del views
    gc.collect()
    assert ptrs <= freed.keys() and all(freed[p] == drv.CUresult.CUDA_SUCCESS for p in ptrs)


def test_torch_from_dlpack_shares_the_memory():
    torch = pytest.importorskip("torch")
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = kc.to_device(h, device="cuda")
    for view in (x, x[1:], x[:, ::2]):
        t = torch.from_dlpack(view)
        assert t.data_ptr() == view.ptr and t.is_cuda
        assert (t.cpu().numpy() == view.copy_to_host()).all()
    t = torch.from_dlpack(kc.to_device(h.astype(ml_dtypes.bfloat16), device="cuda"))
    assert t.dtype == torch.bfloat16
    back = kc.from_dlpack(torch.arange(6, device="cuda", dtype=torch.int32))
    assert back.copy_to_host().tolist() == list(range(6))


def test_cupy_from_dlpack_shares_the_memory():
    cupy = pytest.importorskip("cupy")
    x = kc.to_device(np.arange(10, dtype=np.float32), device="cuda")
    c = cupy.from_dlpack(x)
    assert c.data.ptr == x.ptr and (cupy.asnumpy(c) == np.arange(10)).all()
    c2 = cupy.asarray(x)  # through __cuda_array_interface__
    assert c2.data.ptr == x.ptr


def test_cuda_array_interface_stream_both_ways(vadd):
    """The array exports its stream; a consumer's launch synchronises another library's exported
    stream before reading (here: the data a torch side stream writes, read on the default stream)."""
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    x = kc.to_device(np.ones(4, np.float32), device="cuda", stream=s)
    assert x.__cuda_array_interface__["stream"] == s.cuda_stream
    assert kc.to_device(np.ones(4, np.float32), device="cuda").__cuda_array_interface__["stream"] is None

    class Exported:  # another library's array, written on stream s, exporting it
        def __init__(self, t, stream):
            self.t, self.stream = t, stream

        @property
        def __cuda_array_interface__(self):
            d = dict(self.t.__cuda_array_interface__)
            d["stream"] = self.stream.cuda_stream
            return d

    n = 1 << 24
    big = torch.zeros(n, device="cuda")
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep s busy, then write
        big.fill_(3.0)
    out = kc.device_array(n, np.float32, device="cuda")
    src = Exported(big, s)
    vadd.vadd[(n + 255) // 256, 256](src, src, out, n)
    assert (out.copy_to_host() == 6.0).all()


def test_a_tensor_on_another_gpu_is_refused():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    m = kc.compile_file(EXAMPLES / "vadd.kc", target="cuda")
    t = torch.ones(4, device="cuda:1")
    with pytest.raises(TypeError, match=r"vadd: parameter 'a': the tensor is on cuda:1, the kernel runs on cuda:0"):
        m.vadd[1, 32](t, t, t, 4)


def test_zero_d_and_empty_on_the_gpu():
    m = kc.compile("kernel inc(p: ptr<f32>) { if thread_id.x == 0 { p[0] = p[0] + 1.0; } }\n"
                   "kernel none(p: ptr<f32>, n: i32) { if i32(thread_id.x) < n { p[thread_id.x] = 1.0; } }",
                   target="cuda")
    x = np.array(1.0, np.float32)
    m.inc[1, 32](x)
    assert x == 2.0
    d = kc.to_device(np.array(5.0, np.float32), device="cuda")
    m.inc[1, 32](d)
    assert d.copy_to_host() == 6.0
    m.none[1, 32](np.zeros(0, np.float32), 0)
    m.none[1, 32](kc.device_array(0, np.float32, device="cuda"), 0)
