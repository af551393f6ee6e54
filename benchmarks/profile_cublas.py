"""One torch.matmul (cuBLAS) launch for each small-M shape of bench_matmul.py's LLM table (bf16, and FP8
through torch._scaled_mm), for Nsight Compute: which kernels cuBLAS picks (their names carry the tile
and whether K is split), their grids and device time, beside ours in the same process:

    ncu --clock-control none --section SpeedOfLight --section LaunchStats python3 benchmarks/profile_cublas.py

``--ours`` adds our default launch (ops.matmul) after each. ``--shape MxNxK`` (repeatable) profiles those
shapes instead of the small-M ones, ``--dtype bf16`` or ``fp8`` only one of the two; e.g. the large row
below 1.0x cuBLAS: ``--shape 8192x14336x4096 --dtype bf16 --ours``."""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kcompiler import ops  # noqa: E402

p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
p.add_argument("--ours", action="store_true", help="our default launch after each cuBLAS one")
p.add_argument("--shape", action="append", default=[], help="MxNxK (repeatable); default the small-M shapes")
p.add_argument("--dtype", choices=("bf16", "fp8"), action="append", help="default both")
args = p.parse_args()
shapes = [tuple(int(v) for v in s.split("x")) for s in args.shape] or \
    [(m, n, k) for m in (16, 128) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))]
one = torch.ones((), device="cuda")
for dt in args.dtype or ("bf16", "fp8"):
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        if dt == "fp8":
            a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
            torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            if args.ours:
                ops.scaled_matmul(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            torch.matmul(a, w.T)
            if args.ours:
                ops.matmul(a, w.T)
        torch.cuda.synchronize()
        print(f"{dt} {m}x{n}x{k} done", flush=True)
