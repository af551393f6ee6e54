"""std.matmul on a CUDA GPU (the tensor-core path: cp.async, ldmatrix, mma.sync) against torch.matmul
(cuBLAS) measured in the same run: each size is checked against torch first (relative Frobenius
error of the bf16/f16 result), then timed. Prints one line per measure.

    python benchmarks/bench_matmul.py [--tiles BM,BN,BK,WM,WN,STAGES]

FLOP count 2 M N K. Row-major A and B (and B given as a transposed (N, K) weight, B_KMAJOR).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kcompiler import ops  # noqa: E402

SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (4096, 4096, 1024), (1024, 1024, 1024), (4095, 4097, 4093)]


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / ms / 1e9


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--tiles", help="BM,BN,BK,WM,WN,STAGES instead of ops.matmul_tiles' choice")
    args = p.parse_args()
    tiles = None
    if args.tiles:
        tiles = dict(zip(("BM", "BN", "BK", "WM", "WN", "STAGES"), map(int, args.tiles.split(","))))
    dev = torch.cuda.get_device_name()
    for dtype in (torch.bfloat16, torch.float16):
        for m, n, k in SIZES:
            a = torch.randn(m, k, device="cuda", dtype=dtype)
            for layout in ("kn", "nk"):
                b = torch.randn(k, n, device="cuda", dtype=dtype) if layout == "kn" else \
                    torch.randn(n, k, device="cuda", dtype=dtype).T
                want = torch.matmul(a, b)
                got = ops.matmul(a, b, tiles=tiles)
                err = ((got.float() - want.float()).norm() / want.float().norm()).item()
                t = do_bench(lambda: ops.matmul(a, b, tiles=tiles))
                t_torch = do_bench(lambda: torch.matmul(a, b))
                print(f"{dev}: {str(dtype)[6:]} {m}x{n}x{k} B {layout}: {tflops(m, n, k, t):.0f} TFLOP/s, "
                      f"torch {tflops(m, n, k, t_torch):.0f} TFLOP/s, ratio {t_torch / t:.2f}, "
                      f"relative error vs torch {err:.1e}")


if __name__ == "__main__":
    main()
