"""Launch cost of a 4-argument kernel from Python on one CUDA GPU, against the peers in the same
process (issue 23's launch goal: ≤ CuPy's RawKernel).

Each row launches the same kernel (examples/vadd.kc: 3 device pointers and an i32, 1 block of 256
threads) back to back: 2000 launches a round (fewer than the driver's launch queue holds, so the
host's cost is measured, not the GPU's throughput), median of 15 rounds, best of two passes.

- kcompiler ``launch = mod.vadd[1, 256]; launch(a, b, out, n)`` with torch tensors, and with CuPy
  arrays; ``mod.vadd[1, 256](...)`` looked up each call;
- cuda-python ``cuLaunchKernel`` with its arguments as a (values, types) tuple (converted at each call,
  the figure issue 23 quotes) and with a prepared ``void**`` (an int);
- CuPy ``RawModule``'s function of the same cubin with CuPy arrays (if CuPy is importable);
- a ``kc.graph()`` of 10 launches replayed, per launch.

    PYTHONPATH=$PWD python benchmarks/bench_launch.py

Prints µs per launch and each row's ratio to CuPy (else to cuda-python's tuple call); writes
$OUT/bench_launch.json when OUT is set. The host side alone, without a GPU:
benchmarks/bench_launch_host.py.
"""
from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
VADD = os.path.join(ROOT, "examples", "vadd.kc")


def median_us(fn, sync, reps: int = 15, inner: int = 2000) -> float:
    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / inner * 1e6)
    return statistics.median(times)


def main() -> None:
    import torch
    from cuda.bindings import driver as cu

    import kcompiler as kc
    from kcompiler.runtime.cuda import CudaDevice
    from kcompiler.runtime.launchcall import trampolines_enabled

    dev = CudaDevice.get(0)
    n = 256
    a, b, out = (torch.randn(n, device="cuda") for _ in range(3))
    mod = kc.compile_file(VADD, target="cuda")
    launch = mod.vadd[1, 256]
    launch(a, b, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, a + b)
    spec = next(iter(mod.vadd._specs.values()))
    fn = spec.handle(dev).function
    stream = cu.CUstream(0)
    params = ((a.data_ptr(), b.data_ptr(), out.data_ptr(), n),
              (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32))
    vals = [ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
            ctypes.c_void_p(out.data_ptr()), ctypes.c_int32(n)]
    pp = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
    pp_int = ctypes.addressof(pp)

    rows: dict[str, object] = {
        "kcompiler launch(a, b, out, n), torch": lambda: launch(a, b, out, n),
        "kcompiler vadd[1, 256](a, b, out, n), torch": lambda: mod.vadd[1, 256](a, b, out, n),
        "cuda-python cuLaunchKernel, (values, types) tuple": lambda: cu.cuLaunchKernel(
            fn, 1, 1, 1, 256, 1, 1, 0, stream, params, 0),
        "cuda-python cuLaunchKernel, prepared void** (int)": lambda: cu.cuLaunchKernel(
            fn, 1, 1, 1, 256, 1, 1, 0, stream, pp_int, 0),
    }
    peer = "cuda-python cuLaunchKernel, (values, types) tuple"
    try:
        import cupy as cp
    except ImportError:
        cp = None
    if cp is not None:
        ca, cb, cout = (cp.asarray(x) for x in (a, b, out))
        art = spec.artifact
        with tempfile.NamedTemporaryFile(suffix="." + art.binary_kind, delete=False) as f:
            f.write(bytes(art.binary))
        cfn = cp.RawModule(path=f.name).get_function(art.symbol)
        import numpy as np

        n32 = np.int32(n)
        cfn((1,), (256,), (ca, cb, cout, n32))
        launch(ca, cb, cout, n)
        rows["CuPy RawModule function, CuPy arrays"] = lambda: cfn((1,), (256,), (ca, cb, cout, n32))
        rows["kcompiler launch(a, b, out, n), CuPy arrays"] = lambda: launch(ca, cb, cout, n)
        peer = "CuPy RawModule function, CuPy arrays"
    with kc.graph(mod) as g:
        for _ in range(10):
            launch(a, b, out, n)
    rows["kc.graph of 10 launches, replay() / 10"] = None
    sync = torch.cuda.synchronize
    for f in rows.values():
        if f is not None:
            median_us(f, sync, 3, 200)
    result: dict[str, float] = {}
    for _ in range(2):
        for name, f in rows.items():
            us = median_us(g.replay, sync, 15, 200) / 10 if f is None else median_us(f, sync)
            result[name] = min(result.get(name, float("inf")), us)
    print(f"{torch.cuda.get_device_name()}, trampoline: {trampolines_enabled() or 'on'}")
    print(f"{'µs/launch':>10}  {'× ' + peer.split(',')[0]:>16}  what")
    for name, us in result.items():
        print(f"{us:10.2f}  {us / result[peer]:16.2f}  {name}")
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "bench_launch.json"), "w") as fh:
            json.dump({"device": torch.cuda.get_device_name(), "peer": peer, "us": result}, fh, indent=1)


if __name__ == "__main__":
    main()
