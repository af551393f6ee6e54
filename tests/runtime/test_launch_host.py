"""The CUDA launch path's host side without a GPU: the driver is a stub library built here with the
C compiler (skipped without one) that records what each cuLaunchKernelEx / cuLaunchKernel call
received, and the arrays are stand-ins for torch CUDA tensors (benchmarks/bench_launch_host.py's).

Checked: the prepared zero-argument call (runtime/launchcall.py) passes its four arguments, with the
machine-code trampoline and without it; the generated launcher packs the launch configuration and
the parameters (repacking the configuration when grid, block, shared memory or stream change), sends
a tensor of another device or dtype to the general path (which refuses the device), and reads the
capture stream for stream=None."""
from __future__ import annotations

import ctypes
import shutil
import struct
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_bench():
    """benchmarks/bench_launch_host.py (a script of the checkout, not an installed module), by path."""
    spec = importlib.util.spec_from_file_location("bench_launch_host", ROOT / "benchmarks" / "bench_launch_host.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


bench = _load_bench()

STUB = r"""
#include <string.h>
unsigned long long last_args[4];
unsigned char last_config[56];
unsigned long long last_params[4];
int calls;
int rc;
int cuLaunchKernelEx(void *cfg, void *f, void **params, void **extra) {
    last_args[0] = (unsigned long long)cfg; last_args[1] = (unsigned long long)f;
    last_args[2] = (unsigned long long)params; last_args[3] = (unsigned long long)extra;
    if (cfg) memcpy(last_config, cfg, 56);
    if (params) for (int i = 0; i < 4; i++) memcpy(&last_params[i], params[i], 8);
    calls++;
    return rc;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
    unsigned cfg[7] = {gx, gy, gz, bx, by, bz, shared};
    memcpy(last_config, cfg, 28);
    memcpy(last_config + 32, &stream, 8);
    memset(last_config + 40, 0, 16);   /* no launch attributes: none left from an earlier Ex call */
    last_args[1] = (unsigned long long)f;
    for (int i = 0; i < 4; i++) memcpy(&last_params[i], params[i], 8);
    calls++;
    return rc;
}
"""


@pytest.fixture(scope="module")
def stub(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler to build the stub driver")
    d = tmp_path_factory.mktemp("stub")
    (d / "stub.c").write_text(STUB)
    subprocess.run([cc, "-O1", "-shared", "-fPIC", str(d / "stub.c"), "-o", str(d / "libstub.so")],
                   check=True)
    return ctypes.CDLL(str(d / "libstub.so"))


def _calls(lib) -> int:
    return ctypes.c_int.in_dll(lib, "calls").value


def _config(lib) -> tuple:
    raw = bytes((ctypes.c_ubyte * 56).in_dll(lib, "last_config"))
    return struct.unpack_from("=7I4xQ", raw)


def _params(lib) -> list[int]:
    return list((ctypes.c_ulonglong * 4).in_dll(lib, "last_params"))


@pytest.mark.parametrize("trampoline", [True, False])
def test_bound_call_passes_its_four_arguments(stub, monkeypatch, trampoline):
    from kcompiler.runtime import launchcall

    if not trampoline:
        monkeypatch.setattr(launchcall, "_disabled", "test: no trampoline")
    else:
        monkeypatch.setenv("KC_LAUNCH_TRAMPOLINE", "1")
        monkeypatch.setattr(launchcall, "_disabled", None)  # decided again, with the variable set
        if launchcall.trampolines_enabled():
            pytest.skip(f"no trampoline here: {launchcall.trampolines_enabled()}")
    f = stub.cuLaunchKernelEx
    f.restype = ctypes.c_int
    cfg = ctypes.create_string_buffer(56)
    struct.pack_into("=7I", cfg, 0, 3, 2, 1, 128, 1, 1, 4096)
    vals = (ctypes.c_ulonglong * 4)(11, 22, 33, 2**63 + 5)
    ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(vals) + 8 * i for i in range(4)])
    ctypes.c_int.in_dll(stub, "rc").value = 7
    try:
        call = launchcall.bound_call(f, ctypes.addressof(cfg), 0xDEADBEEF000, ctypes.addressof(ptrs), 0)
        before = _calls(stub)
        assert call() == 7
        assert call() == 7
    finally:
        ctypes.c_int.in_dll(stub, "rc").value = 0
    assert _calls(stub) == before + 2
    assert list((ctypes.c_ulonglong * 4).in_dll(stub, "last_args")) == [
        ctypes.addressof(cfg), 0xDEADBEEF000, ctypes.addressof(ptrs), 0]
    assert _config(stub)[:7] == (3, 2, 1, 128, 1, 1, 4096)
    assert _params(stub) == [11, 22, 33, 2**63 + 5]


@pytest.fixture
def setup(stub, monkeypatch):
    torch = bench.fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    mod = bench.make_module(stub)
    yield mod, torch
    from kcompiler.runtime import cuda_driver

    monkeypatch.setattr(cuda_driver, "_libcuda", None)
    monkeypatch.setattr(cuda_driver, "_launch_ex", None)


def test_fast_launcher_packs_config_and_parameters(setup, stub):
    from kcompiler.runtime import cuda

    mod, torch = setup
    a, b, out = (torch.Tensor(0x7000_0000 + 0x1000 * i, torch.float32) for i in range(3))
    mod.vadd[1, 256](a, b, out, 256)
    assert mod.vadd._fast is not None  # the general path made it; the next launches use it
    n0 = _calls(stub)
    mod.vadd[(4, 2), 128](a, b, out, 1000)
    assert _calls(stub) == n0 + 1
    assert _config(stub) == (4, 2, 1, 128, 1, 1, 0, 0)
    assert _params(stub)[:3] == [0x7000_0000, 0x7000_1000, 0x7000_2000]
    assert _params(stub)[3] & 0xFFFF_FFFF == 1000
    # a new configuration (grid, block, shared, stream) is packed again; the same one is kept
    mod.vadd[7, 64](b, a, out, -3, shared=1024, stream=0xABC)
    assert _config(stub) == (7, 1, 1, 64, 1, 1, 1024, 0xABC)
    assert _params(stub)[:3] == [0x7000_1000, 0x7000_0000, 0x7000_2000]
    assert _params(stub)[3] & 0xFFFF_FFFF == (-3) & 0xFFFF_FFFF
    mod.vadd[7, 64](b, a, out, 5)  # stream None again: the default stream, shared 0
    assert _config(stub) == (7, 1, 1, 64, 1, 1, 0, 0)
    # stream=None inside a capture goes to the capture's stream (this thread only)
    cuda.CURRENT.stream = 0x5EED
    cuda._CAPTURES[0] += 1
    try:
        mod.vadd[7, 64](b, a, out, 5)
        assert _config(stub)[7] == 0x5EED
    finally:
        cuda.CURRENT.stream = 0
        cuda._CAPTURES[0] -= 1
    mod.vadd[7, 64](b, a, out, 5)
    assert _config(stub)[7] == 0


def test_grid_dependency_wait_launches_with_programmatic_serialisation(stub, monkeypatch):
    """A kernel that calls grid_dependency_wait (Artifact.meta["pdl"]) goes through cuLaunchKernelEx with
    one CUlaunchAttribute, CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION (6) allowed (cuda.h),
    on the general path and the fast one; a kernel without it has none."""
    from kcompiler.runtime import cuda_driver

    torch = bench.fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    try:
        for pdl in (True, False):
            mod = bench.make_module(stub, pdl=pdl)
            a, b, out = (torch.Tensor(0x7000_0000 + 0x1000 * i, torch.float32) for i in range(3))
            for grid in (3, 5):  # the general path, then the fast launcher it made
                n0 = _calls(stub)
                mod.vadd[grid, 128](a, b, out, 7, stream=0x77)
                assert _calls(stub) == n0 + 1
                raw = bytes((ctypes.c_ubyte * 56).in_dll(stub, "last_config"))
                assert struct.unpack_from("=7I4xQ", raw) == (grid, 1, 1, 128, 1, 1, 0, 0x77)
                attrs, nattrs = struct.unpack_from("=QI", raw, 40)
                if not pdl:
                    assert nattrs == 0, (grid, attrs, nattrs)   # cuLaunchKernel, or Ex without attributes
                    continue
                assert nattrs == 1 and attrs
                assert struct.unpack("=I4xi", ctypes.string_at(attrs, 12)) == (6, 1)
                assert _params(stub)[:3] == [0x7000_0000, 0x7000_1000, 0x7000_2000]
            assert (mod.vadd._fast is not None)
    finally:
        monkeypatch.setattr(cuda_driver, "_libcuda", None)
        monkeypatch.setattr(cuda_driver, "_launch_ex", None)


def test_fast_launcher_refuses_a_tensor_of_another_device(setup, stub):
    """A tensor of the same type and dtype on cuda:1 must not be launched on device 0 by the fast
    path (it used to check is_cuda only); the general path names the device."""
    mod, torch = setup
    a, b, out = (torch.Tensor(0x7000_0000 + 0x1000 * i, torch.float32) for i in range(3))
    for _ in range(2):
        mod.vadd[1, 32](a, b, out, 32)
    n0 = _calls(stub)
    other = torch.Tensor(0x9000_0000, torch.float32, dev=1)
    with pytest.raises(TypeError, match=r"parameter 'b': the tensor is on .*cuda:0|index=1"):
        mod.vadd[1, 32](a, other, out, 32)
    assert _calls(stub) == n0


def test_fast_launcher_refuses_other_dtypes_and_ranges(setup, stub):
    mod, torch = setup
    a, b, out = (torch.Tensor(0x7000_0000 + 0x1000 * i, torch.float32) for i in range(3))
    mod.vadd[1, 32](a, b, out, 32)
    mod.vadd[1, 32](a, b, out, 32)
    n0 = _calls(stub)
    with pytest.raises(ValueError, match="out of its range"):
        mod.vadd[1, 32](a, b, out, 2**31)
    with pytest.raises(TypeError, match="an integer"):
        mod.vadd[1, 32](a, b, out, 3.0)
    assert _calls(stub) == n0


def test_cuda_array_interface_arrays(setup, stub):
    mod, _ = setup
    arrs = [bench.CaiArray(0x6000_0000 + 0x100 * i, 64) for i in range(3)]
    for n in (64, 65):
        mod.vadd[2, 32](*arrs, n)
    assert _params(stub)[:3] == [0x6000_0000, 0x6000_0100, 0x6000_0200]
    strided = bench.CaiArray(0x6000_0000, 64)
    strided.__cuda_array_interface__["strides"] = (8,)
    with pytest.raises(ValueError, match="not contiguous"):
        mod.vadd[2, 32](arrs[0], strided, arrs[2], 64)
