"""Host cost of a kcompiler CUDA launch with the driver stubbed: no GPU needed.

What it times is the Python side of ``launch(a, b, out, n)`` for a 4-parameter kernel
(3 ``ptr<f32>``, one ``i32``): ``Launch.__call__``, the generated launcher's checks, the packing of
the parameter buffer and one ctypes call into a stub ``libcuda`` whose ``cuLaunchKernelEx`` /
``cuLaunchKernel`` return 0 at once (built with the C compiler found here; the real driver's own
time, ~2-4 µs on an H100 host, comes on top and is what benchmarks/bench_launch.py measures).

Arguments are stand-ins for torch CUDA tensors (a fake ``torch`` module with a ``Tensor`` class
whose ``dtype``/``is_cuda`` are plain attributes and ``data_ptr``/``is_contiguous``/``get_device``
Python methods, so each costs somewhat more than torch's C getters), objects with
``__cuda_array_interface__`` (Numba / CuPy style) and Python ints.

    PYTHONPATH=$PWD python benchmarks/bench_launch_host.py [--rounds 200] [--inner 2000]

Prints µs per launch (the best of many short rounds) for each argument kind. Exits with a message when no C
compiler (``cc``) is found.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after PYTHONPATH: another checkout given there is measured

STUB_C = r"""
int cuLaunchKernelEx(void *cfg, void *f, void **params, void **extra) { return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void *stream, void **params, void **extra) { return 0; }
"""


def build_stub(folder: str) -> ctypes.CDLL:
    """A shared library with no-op cuLaunchKernelEx / cuLaunchKernel (raises RuntimeError without cc)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc) to build the stub driver")
    src, lib = os.path.join(folder, "stub.c"), os.path.join(folder, "libcudastub.so")
    with open(src, "w") as f:
        f.write(STUB_C)
    subprocess.run([cc, "-O2", "-shared", "-fPIC", src, "-o", lib], check=True)
    return ctypes.CDLL(lib)


def fake_torch() -> types.ModuleType:
    """A module named ``torch`` with a Tensor class: enough of torch for the launch path."""
    torch = types.ModuleType("torch")

    class dtype:  # noqa: N801 - torch's spelling
        __module__ = "torch"

        def __init__(self, name):
            self.name = name

        def __str__(self):
            return f"torch.{self.name}"

    class Tensor:
        __module__ = "torch"
        __slots__ = ("dtype", "is_cuda", "_ptr", "_dev")

        def __init__(self, ptr, dt, dev=0):
            self._ptr, self.dtype, self.is_cuda, self._dev = ptr, dt, True, dev

        def data_ptr(self):
            return self._ptr

        def is_contiguous(self):
            return True

        def get_device(self):
            return self._dev

        @property
        def device(self):
            return types.SimpleNamespace(type="cuda", index=self._dev)

    torch.Tensor, torch.float32 = Tensor, dtype("float32")
    return torch


class CaiArray:
    """A device array through ``__cuda_array_interface__`` (version 3), as Numba's are."""

    def __init__(self, ptr, n):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False),
                                         "version": 3, "strides": None}


def make_module(stub: ctypes.CDLL, pdl: bool = False):
    """A Module of one 4-parameter kernel 'vadd' on a CudaDevice whose driver calls go to ``stub``
    (``pdl``: as a kernel that calls grid_dependency_wait, launched with programmatic serialisation)."""
    from kcompiler.ir.types import F32, I32, PointerType
    from kcompiler.runtime import cuda
    from kcompiler.runtime.device import Artifact, KernelParam
    from kcompiler.runtime.module import Module

    P = PointerType(F32)
    art = Artifact("nvptx", "sm_90a", "vadd", b"", "cubin",
                   [KernelParam("a", P), KernelParam("b", P), KernelParam("out", P),
                    KernelParam("n", I32)], meta={"pdl": pdl})
    try:
        from kcompiler.runtime.cuda_driver import use_driver_library
        use_driver_library(stub)
    except ImportError:  # an older checkout, for a before/after comparison
        cuda._launch_ex = stub.cuLaunchKernelEx
        cuda._launch_ex.restype = ctypes.c_int

    class StubDevice(cuda.CudaDevice):
        def __init__(self):  # no driver: only what the launch path reads
            self.ordinal = 0
            self.name = "stub"
            self.arch = "sm_90a"

        def make_current(self):
            pass

        def load(self, artifact):
            return cuda.CudaKernelHandle(None, None, 0x1000, artifact.symbol, 0, 48 * 1024,
                                         pdl=bool(artifact.meta.get("pdl")))

    class Program:
        target_name, arch, kernel_names = "nvptx", "sm_90a", ["vadd"]

        def comptime_names(self, k):
            return []

        def param_names(self, k):
            return [p.name for p in art.params]

        def infer_comptime(self, k, types, given):
            return dict(given)

        def artifact_key(self, k, values):
            return "vadd"

        def artifact(self, k, values):
            return art

    return Module(Program(), StubDevice())


def per_call_us(fn, rounds: int, inner: int) -> float:
    """The best of ``rounds`` rounds of ``inner`` calls, µs per call: on a shared machine the best
    round is the one the other processes disturbed least."""
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / inner * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--inner", type=int, default=2000)
    opts = ap.parse_args()
    sys.modules.setdefault("torch", fake_torch())
    torch = sys.modules["torch"]
    with tempfile.TemporaryDirectory() as tmp:
        try:
            stub = build_stub(tmp)
        except (RuntimeError, subprocess.CalledProcessError) as e:
            sys.exit(f"bench_launch_host: {e}")
        mod = make_module(stub)
        n = 256
        t = [torch.Tensor(0x10000 * (i + 1), torch.float32) for i in range(3)]
        c = [CaiArray(0x10000 * (i + 1), n) for i in range(3)]
        launch = mod.vadd[1, 256]
        rows = []
        for what, args in (("torch-like tensors", t), ("__cuda_array_interface__ arrays", c)):
            a, b, out = args
            launch(a, b, out, n)
            launch(a, b, out, n)
            rows.append((f"launch(a, b, out, n), {what}",
                         per_call_us(lambda: launch(a, b, out, n), opts.rounds, opts.inner)))
            rows.append((f"vadd[1, 256](a, b, out, n), {what}",
                         per_call_us(lambda: mod.vadd[1, 256](a, b, out, n), opts.rounds, opts.inner)))
        f = stub.cuLaunchKernelEx
        f.restype = ctypes.c_int
        p = [ctypes.c_void_p(0x1000)] * 3
        rows.append(("ctypes call of the stub alone (4 c_void_p)",
                     per_call_us(lambda: f(p[0], p[1], p[2], None), opts.rounds, opts.inner)))
    print(f"host cost per launch, driver stubbed ({sys.implementation.name} "
          f"{sys.version.split()[0]}), best of {opts.rounds} rounds of {opts.inner}:")
    for what, us in rows:
        print(f"  {us:6.3f} µs  {what}")


if __name__ == "__main__":
    main()
