"""One torch.matmul (cuBLAS) launch for each small-M shape of bench_matmul.py's LLM table (bf16, and FP8
through torch._scaled_mm), for Nsight Compute: which kernels cuBLAS picks (their names carry the tile
and whether K is split), their grids and device time, beside ours in the same process:

    ncu --clock-control none --section SpeedOfLight --section LaunchStats python3 benchmarks/profile_cublas.py

``--ours`` adds our default launch (ops.matmul) after each."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kcompiler import ops  # noqa: E402

ours = "--ours" in sys.argv
one = torch.ones((), device="cuda")
for dt in ("bf16", "fp8"):
    for m in (16, 128):
        for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192)):
            a = torch.randn(m, k, device="cuda").bfloat16()
            w = torch.randn(n, k, device="cuda").bfloat16()
            if dt == "fp8":
                a, w = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
                torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
                if ours:
                    ops.scaled_matmul(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            else:
                torch.matmul(a, w.T)
                if ours:
                    ops.matmul(a, w.T)
            torch.cuda.synchronize()
            print(f"{dt} {m}x{n}x{k} done", flush=True)
