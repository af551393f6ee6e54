"""Host time of one ops.moe call with the kernel launches stubbed: no GPU needed.

What it times is the Python side of a mixture-of-experts layer call (the checks, the routing's and the
GEMMs' tile choices, the scratch arrays, building the launch arguments) at bench_moe.py's gpt-oss shape
(E 32, top_k 4, H = I = 2880, bf16 activations, bf16 and MXFP4 weights) for T 1, 4, 16, 64, with
``Launch.__call__`` (kcompiler.runtime.module) replaced by a no-op, so neither the kernels nor the
driver run: each launch's own host cost (benchmarks/bench_launch_host.py, ~2-4 µs of driver on an H100
host) comes on top, as many a call as the last column says. The target is the CPU target with
``emulate_mma`` (so that ops.moe takes the tensor-core path it takes on an H100); the arrays are numpy
ones and, where torch is installed, torch CPU tensors (torch's allocations instead of numpy's). The
weights are left unwritten (np.empty / torch.empty: no memory is touched).

    PYTHONPATH=$PWD python benchmarks/bench_moe_host.py [--rounds 20] [--inner 100] [--tokens 1,4,16,64]

Prints µs per call (the best of ``rounds`` rounds of ``inner`` calls) and the launches a call.
"""
from __future__ import annotations

import argparse
import functools
import os
import sys

import numpy as np

from harness import print_host_times, stub_launches

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(ROOT)  # after PYTHONPATH: another checkout given there is measured

import ml_dtypes  # noqa: E402

from kcompiler import compile_file, ops  # noqa: E402
from kcompiler.frontend.program import stdlib_dir  # noqa: E402
from kcompiler.ops import _common  # noqa: E402
from kcompiler.ops.moe_types import ExpertWeights  # noqa: E402

E, K, H, I = 32, 4, 2880, 2880


def weights(lib: str, fmt: str, n: int, k: int) -> ExpertWeights:
    """Unwritten (E, n, k) weights in ``fmt`` of ``lib``'s kind."""
    if lib == "numpy":
        if fmt == "mxfp4":
            return ExpertWeights.mxfp4(np.empty((E, n, k // 2), np.uint8), np.empty((E, n, k // 32), np.uint8))
        return ExpertWeights.bf16(np.empty((E, n, k), ml_dtypes.bfloat16))
    import torch
    if fmt == "mxfp4":
        return ExpertWeights.mxfp4(torch.empty((E, n, k // 2), dtype=torch.uint8),
                                   torch.empty((E, n, k // 32), dtype=torch.uint8))
    return ExpertWeights.bf16(torch.empty((E, n, k), dtype=torch.bfloat16))


def cases(lib: str, tokens: list[int]):
    rng = np.random.default_rng(0)
    out = []
    for fmt in ("bf16", "mxfp4"):
        wg, wd = weights(lib, fmt, 2 * I, H), weights(lib, fmt, H, I)
        for t in tokens:
            x = rng.standard_normal((t, H)).astype(ml_dtypes.bfloat16)
            lg = rng.standard_normal((t, E)).astype(np.float32)
            if lib == "torch":
                import torch
                x = torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16)
                lg = torch.from_numpy(lg)
            out.append((f"{fmt} T {t}", lambda x=x, lg=lg, wg=wg, wd=wd:
                        ops.moe(x, lg, wg, wd, K, mode="topk_softmax", target="cpu")))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--inner", type=int, default=100)
    p.add_argument("--tokens", default="1,4,16,64")
    args = p.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]
    mma = functools.lru_cache(None)(lambda name, target: compile_file(
        stdlib_dir() / f"{name}.kc", target="cpu", target_options={"emulate_mma": True}))
    _common.stdlib_module = mma  # the tensor-core path, as on an H100
    launches = stub_launches()
    libs = ["numpy"]
    try:
        import torch
        torch.set_num_threads(1)  # torch's CPU zero fills (the earlier path) spread over threads otherwise
        libs.append("torch")
    except ImportError:
        pass
    for lib in libs:
        print(f"{lib} arrays, CPU target (emulate_mma), launches stubbed: µs a call (launches a call)")
        print_host_times(cases(lib, tokens), launches, args.rounds, args.inner, 14)


if __name__ == "__main__":
    main()
