"""The CUDA runtime on a real GPU: loading, launching through the general and the fast path, every
scalar type, numpy copies, torch / CuPy arrays without copies, streams, dynamic shared memory above
48 KB, errors naming the CUDA error, and the launch overhead against raw cuda-python.

Kernels are built as IR directly (tests/runtime_fakes.py), so these tests need no frontend."""
from __future__ import annotations

import ctypes
import time

import ml_dtypes
import numpy as np
import pytest

from kcompiler.ir.types import (BF16, BOOL, F16, F32, F64, I8, I32, I64, U64, PointerType)
from kcompiler.runtime.device import LaunchConfigError
from kcompiler.runtime.module import Module

from ..runtime_fakes import IrProgram, global_index, ir_kernel
from ..paths import EXAMPLES

pytestmark = pytest.mark.gpu


def _vadd(b, a, bb, out, n):
    i = global_index(b)
    then, _ = b.if_(b.cmp("lt", i, n))
    with b.at(then):
        b.store(b.elemptr(out, i), b.add(b.load(b.elemptr(a, i)), b.load(b.elemptr(bb, i))))


def _scalars(b, out, x16, xbf, x64, x8, xu64, flag, x32):
    vals = [b.cast(x16, F32), b.cast(xbf, F32), b.cast(x64, F32), b.cast(x8, F32), b.cast(xu64, F32),
            b.select(flag, b.const(1.0, F32), b.const(-1.0, F32)), b.cast(x32, F32)]
    for k, v in enumerate(vals):
        b.store(b.elemptr(out, b.const(k, I32)), v)


def _dyn(b, out, n):
    # Write thread_id into dynamic shared memory at a stride that reaches its far end, read it back.
    tid = b.special("thread_id")
    sh = b.dyn_shared(F32)
    idx = b.add(b.mul(tid, b.const(64, I32)), b.const(63, I32))
    b.store(b.elemptr(sh, idx), b.cast(tid, F32))
    b.barrier()
    b.store(b.elemptr(out, tid), b.load(b.elemptr(sh, idx)))


@pytest.fixture(scope="module")
def dev():
    from kcompiler.runtime.cuda import CudaDevice

    return CudaDevice.get(0)


@pytest.fixture(scope="module")
def mod(dev):
    from kcompiler.backends import get_target

    tgt = get_target("nvptx", dev.arch)
    P = PointerType(F32)
    kernels = {
        "vadd": ir_kernel("vadd", [("a", P), ("b", P), ("out", P), ("n", I32)], _vadd),
        "scalars": ir_kernel("scalars", [("out", P), ("x16", F16), ("xbf", BF16), ("x64", F64),
                                         ("x8", I8), ("xu64", U64), ("flag", BOOL), ("x32", F32)],
                             _scalars),
        "dyn": ir_kernel("dyn", [("out", P), ("n", I32)], _dyn),
    }
    return Module(IrProgram(tgt, kernels), dev)


def test_arch_detection(dev):
    from kcompiler.runtime.cuda import arch_of
    import kcompiler as kc

    assert dev.arch == arch_of(dev.compute_capability)
    if dev.compute_capability == (9, 0):
        assert dev.arch == "sm_90a"
    assert kc.resolve_target_name("auto") == "nvptx"
    assert any(d.target == "nvptx" for d in kc.devices())


def test_vadd_numpy_copies_in_and_out(mod):
    n = 1000 + 3
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    mod.vadd[(n + 127) // 128, 128](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)
    # a read-only input is fine (nothing is copied back into it)
    a.flags.writeable = False
    out[:] = 0
    mod.vadd[(n + 127) // 128, 128](a, b, out, n)
    np.testing.assert_array_equal(out, a + b)


@pytest.mark.parametrize("fast", [False, True])
def test_every_scalar_type(mod, fast):
    torch = pytest.importorskip("torch")
    out = torch.zeros(7, dtype=torch.float32, device="cuda")
    args = (out, 1.5, 2.5, 3.25, -4, 2**40, True, 7.0)
    k = mod.scalars
    k._fast = None
    k[1, 1](*args)
    if fast:
        assert k._fast is not None
        out.zero_()
        k[1, 1](*args)  # the generated launcher this time
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [1.5, 2.5, 3.25, -4.0, float(2**40), 1.0, 7.0]
    # numpy scalars of the exact types take the general path
    o = np.zeros(7, np.float32)
    k[1, 1](o, np.float16(1.5), ml_dtypes.bfloat16(2.5), np.float64(3.25), np.int8(-4), np.uint64(2**40),
            np.bool_(False), np.float32(7))
    assert o.tolist() == [1.5, 2.5, 3.25, -4.0, float(2**40), -1.0, 7.0]


def test_torch_tensors_pass_without_copy(mod):
    torch = pytest.importorskip("torch")
    n = 4097
    a = torch.randn(n, device="cuda")
    b = torch.randn(n, device="cuda")
    out = torch.empty(n, device="cuda")
    for _ in range(3):
        mod.vadd[(n + 255) // 256, 256](a, b, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b)
    assert mod.vadd._fast is not None
    with pytest.raises(TypeError, match="vadd: parameter 'b' expects ptr<f32>.*torch.float16"):
        mod.vadd[1, 256](a, b.half(), out, n)
    with pytest.raises(ValueError, match="vadd: parameter 'a'.*not contiguous"):
        mod.vadd[1, 256](a[::2], b[: n // 2], out[: n // 2], n // 2)


def test_torch_stream(mod):
    torch = pytest.importorskip("torch")
    n = 1 << 16
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    s = torch.cuda.Stream()
    # a, b and out were written on the default stream; a launch on s orders only against s (as
    # CUDA's do), so s waits for the default stream first and the read of out waits for s.
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        mod.vadd[n // 256, 256](a, b, out, n, stream=s)
        mod.vadd[n // 256, 256](a, b, out, n, stream=s.cuda_stream)
    torch.cuda.current_stream().wait_stream(s)
    s.synchronize()
    assert torch.equal(out, a + b)


def test_cupy_arrays(mod):
    cp = pytest.importorskip("cupy")
    n = 3000
    a, b = cp.random.standard_normal(n, dtype=cp.float32), cp.random.standard_normal(n, dtype=cp.float32)
    out = cp.zeros(n, cp.float32)
    for _ in range(2):
        mod.vadd[(n + 255) // 256, 256](a, b, out, n, stream=cp.cuda.get_current_stream())
    cp.cuda.runtime.deviceSynchronize()
    assert bool(cp.all(out == a + b))


def test_dynamic_shared_above_48k(mod, dev):
    torch = pytest.importorskip("torch")
    threads = 512
    nbytes = threads * 64 * 4  # 128 KiB
    assert nbytes > 48 * 1024
    out = torch.full((threads,), -1.0, device="cuda")
    mod.dyn[1, threads](out, threads, shared=nbytes)
    mod.dyn[1, threads](out, threads, shared=nbytes)
    torch.cuda.synchronize()
    assert out.cpu().tolist() == [float(i) for i in range(threads)]
    with pytest.raises(LaunchConfigError, match="dyn.*exceed"):  # a LaunchError and a ValueError
        mod.dyn[1, threads](out, threads, shared=dev.max_shared_optin + 1024)


def test_launch_error_names_the_cuda_error_and_kernel(mod):
    torch = pytest.importorskip("torch")
    a = torch.zeros(4, device="cuda")
    with pytest.raises(LaunchConfigError, match=r"vadd.*CUDA_ERROR_INVALID_VALUE"):  # 2048 threads: a ValueError too
        mod.vadd[1, 2048](a, a, a, 4)
    with pytest.raises(LaunchConfigError, match=r"vadd.*CUDA_ERROR_INVALID_VALUE"):
        mod.vadd[1, (32, 32, 2)](np.zeros(4, np.float32), np.zeros(4, np.float32),
                                 np.zeros(4, np.float32), 4)


def test_launch_overhead_against_raw_cuda_python(mod, dev):
    """Report (and loosely bound) the per-launch cost of kernel[grid, block](...) against
    cuda-python's cuLaunchKernel with prepared arguments, for a 4-argument kernel."""
    torch = pytest.importorskip("torch")
    from cuda.bindings import driver as drv

    n = 256
    a, b, out = (torch.zeros(n, device="cuda") for _ in range(3))
    launch = mod.vadd[1, 256]
    launch(a, b, out, n)
    handle = mod.vadd._specs[next(iter(mod.vadd._specs))].handle(dev)
    f = handle.function
    params = ((a.data_ptr(), b.data_ptr(), out.data_ptr(), n),
              (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int))
    stream = drv.CUstream(0)

    def ours():
        launch(a, b, out, n)

    def raw():
        drv.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, stream, params, 0)

    def per_call(fn, reps=500):
        # Fewer launches than the launch queue holds, so that the host's cost is measured, not the
        # GPU's launch throughput.
        best = float("inf")
        for _ in range(40):
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(reps):
                fn()
            best = min(best, (time.perf_counter() - t) / reps)
        torch.cuda.synchronize()
        return best

    t_raw, t_ours = per_call(raw), per_call(ours)
    ratio = t_ours / t_raw
    print(f"\nlaunch overhead: kcompiler {t_ours * 1e6:.2f} us, raw cuda-python {t_raw * 1e6:.2f} us, "
          f"ratio {ratio:.2f}")
    assert ratio < 2.0


def test_ptx_binary_is_assembled_by_the_driver(dev, monkeypatch):
    """Where there is no ptxas, the artifact holds PTX and the driver assembles it."""
    from kcompiler.backends import get_target
    from kcompiler.backends.nvptx import cubin
    from kcompiler.pipeline import artifact_of_ir

    def unavailable(ptx, arch):
        raise cubin.CubinUnavailable("no assembler in this test")
    monkeypatch.setattr(cubin, "assemble", unavailable)
    P = PointerType(F32)
    art = artifact_of_ir(ir_kernel("vadd", [("a", P), ("b", P), ("out", P), ("n", I32)], _vadd), "vadd",
                         get_target("nvptx", dev.arch))
    assert art.binary_kind == "ptx" and b".entry vadd" in art.binary
    from ..runtime_fakes import IrProgram as _P

    class Fixed(_P):
        def artifact(self, k, values):
            return art
    m = Module(Fixed(get_target("nvptx", dev.arch), {"vadd": None}), dev)
    a = np.arange(10, dtype=np.float32)
    out = np.zeros(10, np.float32)
    m.vadd[1, 32](a, a, out, 10)
    np.testing.assert_array_equal(out, 2 * a)


def test_launch_from_another_thread(mod):
    import threading

    torch = pytest.importorskip("torch")
    n = 1000
    a, b = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
    out = torch.zeros(n, device="cuda")
    mod.vadd[4, 256](a, b, out, n)  # a fast launcher owned by this thread
    errors = []

    def work():
        try:
            for _ in range(3):
                mod.vadd[4, 256](a, b, out, n)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            errors.append(e)
    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors
    assert torch.equal(out, a + b)


def test_host_torch_tensors_are_copied(mod):
    torch = pytest.importorskip("torch")
    n = 300
    a, b = torch.randn(n), torch.randn(n)
    out = torch.zeros(n)
    mod.vadd[2, 256](a, b, out, n)
    assert torch.equal(out, a + b)


def test_compile_time_keywords_take_the_fast_path():
    torch = pytest.importorskip("torch")
    from pathlib import Path

    import kcompiler as kc
    m = kc.compile_file(EXAMPLES / "saxpy.kc", target="cuda")
    n = 4096
    x, y = torch.randn(n, device="cuda"), torch.zeros(n, device="cuda")
    for _ in range(3):
        m.saxpy[n // 512, 128](x, y, 1.0, n, VEC=4)
    torch.cuda.synchronize()
    assert len(m.saxpy._fast_kw) == 1
    torch.testing.assert_close(y, 3 * x)
