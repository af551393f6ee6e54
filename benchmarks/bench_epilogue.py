"""Epilogue fusion and the autotuner of std.matmul on a CUDA GPU, measured in one run.

    python benchmarks/bench_epilogue.py [--quick] [--json OUT.json]

For bf16 products with B K-major (a Linear layer's (N, K) weight) and a bias (N,) of bf16, bf16 results:

- fused: ``ops.matmul(a, w.T, epilogue=Epilogue(EPI, x=bias))``, GEMM + epilogue in one kernel; on an
  sm_90 GPU with TMA-readable rows that is the Hopper path (stdlib/matmul_sm90.kc), and
  ``tiles=`` forces the mma.sync path (stdlib/matmul.kc) with the autotuner's tiles;
- unfused: the same product without epilogue, then torch's elementwise kernels (one more read and
  write of C);
- plain: the product alone, so that fused / plain - 1 is what the epilogue costs;
- torch: ``F.gelu(torch.addmm(bias, a, w.T))`` (cuBLAS, and a separate GELU kernel).

Each fused result is checked first against torch in float32 on the same inputs (relative Frobenius
error under 1e-2); times are the median of triton.testing.do_bench (CUDA events, warm-up first) on
fresh random normal inputs (never zeros). The autotuner part times the mma.sync path's candidates
(ops.MATMUL_TUNE_CANDIDATES) through ops.matmul_tuned_tiles on a private cache folder and reports the
choice, its time against the fixed heuristic's (ops.matmul_tiles), and the tuning's wall time.
The kernels are compiled first in parallel processes (one each) into that cache folder.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SHAPES = [(4096, 4096, 4096), (2048, 14336, 4096)]
QUICK = [(4096, 4096, 4096)]
EPILOGUES = ["bias_gelu", "bias_gelu_rp", "bias_relu"]


def _compile(kernel: str, M: int, N: int, K: int, params: dict) -> str:
    """One specialisation of std.matmul compiled into the cache folder (run in a worker process)."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops._common import stdlib_module
    mod = stdlib_module("matmul", "cuda")
    a = np.zeros((1, 1), ml_dtypes.bfloat16)
    args = [a, a, a, M, N, K, K, K, N]
    if kernel == "matmul_epilogue":
        args += [a, np.zeros(1, np.float32), np.float32(1.0)]
    t0 = time.perf_counter()
    mod[kernel].specialize(*args, **params)
    return f"{kernel} {params.get('EPI', '')} {params['BM']}x{params['BN']}x{params['BK']}/{params['STAGES']}: " \
           f"{time.perf_counter() - t0:.1f} s"


def _prewarm(jobs: list[tuple]) -> None:
    with cf.ProcessPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 4),
                                mp_context=mp.get_context("spawn")) as ex:
        for r in ex.map(_compile_star, jobs):
            print("  compiled", r, flush=True)


def _compile_star(job: tuple) -> str:
    return _compile(*job)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json")
    args = p.parse_args()
    os.environ.setdefault("KC_CACHE_DIR", tempfile.mkdtemp(prefix="kc-bench-epilogue-"))

    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench

    from kcompiler import ops

    shapes = QUICK if args.quick else SHAPES
    base = dict(T="bf16", OUT="bf16", B_KMAJOR=True, ALIGNED=True)
    t0 = time.perf_counter()
    _prewarm([("matmul", M, N, K, dict(base, **t)) for (M, N, K) in shapes for t in ops.MATMUL_TUNE_CANDIDATES])
    print(f"compiled the tuning candidates in {time.perf_counter() - t0:.1f} s", flush=True)

    dev = torch.cuda.get_device_name()
    rows, results = [], {"device": dev, "shapes": []}
    torch.manual_seed(0)
    chosen = {}
    for (M, N, K) in shapes:
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        problem = dict(op="bench_epilogue", M=M, N=N, K=K, device=dev)
        t1 = time.perf_counter()
        choice = ops.matmul_tuned_tiles(problem, lambda t: ops.matmul(a, w.T, out=c, tiles=t),
                                        ops.matmul_tiles(M, N, K, True), tune=True,
                                        synchronize=torch.cuda.synchronize)
        tuning_s = time.perf_counter() - t1
        heur = ops.matmul_tiles(M, N, K, True)
        ms_choice = do_bench(lambda: ops.matmul(a, w.T, out=c, tiles=choice), return_mode="median")
        ms_heur = do_bench(lambda: ops.matmul(a, w.T, out=c, tiles=heur), return_mode="median")
        chosen[(M, N, K)] = choice
        results["shapes"].append(dict(M=M, N=N, K=K, tuned=choice, tuned_ms=ms_choice, heuristic=heur,
                                      heuristic_ms=ms_heur, tuning_s=tuning_s))
        print(f"{M}x{N}x{K}: tuned {choice} {ms_choice:.3f} ms vs heuristic {heur} {ms_heur:.3f} ms "
              f"(tuning {tuning_s:.1f} s)", flush=True)

    t0 = time.perf_counter()
    # x: the bf16 bias; y, not read: ops passes a one-element f32 array
    _prewarm([("matmul_epilogue", M, N, K, dict(base, X="bf16", Y="f32", EPI=f"epilogue.{e}", **chosen[(M, N, K)]))
              for (M, N, K) in shapes for e in EPILOGUES])
    print(f"compiled the fused kernels in {time.perf_counter() - t0:.1f} s", flush=True)

    ref_fns = {"bias_gelu": lambda y: F.gelu(y), "bias_gelu_rp": lambda y: F.gelu(y, approximate="tanh"),
               "bias_relu": lambda y: torch.relu(y)}
    for (M, N, K) in shapes:
        flop = 2 * M * N * K
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(N, K, device="cuda", dtype=torch.bfloat16) / K ** 0.5
        bias = torch.randn(N, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
        tiles = chosen[(M, N, K)]
        for e in EPILOGUES:
            act = ref_fns[e]
            ref = act(a.float() @ w.float().T + bias.float())
            ep = ops.Epilogue(e, x=bias)
            cases = {
                "hopper fused": lambda: ops.matmul(a, w.T, c, ep),
                "hopper unfused": lambda: act(ops.matmul(a, w.T, c) + bias),
                "hopper plain": lambda: ops.matmul(a, w.T, c),
                "mma.sync fused": lambda: ops.matmul(a, w.T, c, ep, tiles=tiles),
                "mma.sync unfused": lambda: act(ops.matmul(a, w.T, c, tiles=tiles) + bias),
                "mma.sync plain": lambda: ops.matmul(a, w.T, c, tiles=tiles),
                "torch": lambda: act(torch.addmm(bias, a, w.T)),
            }
            line = {}
            for name, fn in cases.items():
                try:
                    got = fn()
                    torch.cuda.synchronize()
                    if "plain" not in name:
                        err = float((got.float() - ref).norm() / ref.norm())
                        assert err < 1e-2, f"{name}: relative error {err:.3g}"
                    ms = do_bench(fn, return_mode="median")
                except Exception as exc:  # noqa: BLE001 - a path that cannot run here is reported, not fatal
                    print(f"  {M}x{N}x{K} {e} {name}: FAILED {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                    continue
                line[name] = ms
            rows.append(((M, N, K), e, line))
            results["shapes"].append(dict(M=M, N=N, K=K, epilogue=e, ms=line))
            print(f"{M}x{N}x{K} {e}: " + ", ".join(f"{k} {v:.3f} ms ({flop / v / 1e9:.0f} TFLOP/s)"
                                                  for k, v in line.items()), flush=True)

    print(f"\n{dev}, bf16, B K-major, bf16 bias and result; TFLOP/s (2MNK / median time); overhead = fused / plain - 1")
    print(f"{'shape':>18} {'epilogue':>10} | {'path':>9} {'fused':>6} {'unfused':>8} {'plain':>6} {'overhead':>9} | "
          f"{'torch':>6}")
    for (M, N, K), e, line in rows:
        flop = 2 * M * N * K
        for path in ("hopper", "mma.sync"):
            f, u, pl = (line.get(f"{path} {k}") for k in ("fused", "unfused", "plain"))
            tf = lambda ms: f"{flop / ms / 1e9:6.0f}" if ms else "     -"  # noqa: E731
            ovh = f"{(f / pl - 1) * 100:8.1f}%" if f and pl else "        -"
            print(f"{f'{M}x{N}x{K}':>18} {e:>10} | {path:>9} {tf(f)} {tf(u):>8} {tf(pl)} {ovh} | {tf(line.get('torch'))}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
