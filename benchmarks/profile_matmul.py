"""One launch of std.matmul_sm90 for each of a few tile / split-K choices of a small-M product, for
Nsight Compute (ncu's Duration is the kernel's device time alone):

    ncu --clock-control none -k regex:matmul_sm90 --section SpeedOfLight --section MemoryWorkloadAnalysis \\
        --section WarpStateStats python3 benchmarks/profile_matmul.py [M N K [CONFIG/SPLIT ...]]

Default: 128 x 4096 x 4096 bf16 (B an (N, K) weight) with 64x64 (unsplit: matmul_sm90.choose's tile),
64x128 in 2 shares, 128x128 in 2 and 4 shares (kcompiler.ops.matmul_sm90.CONFIGS), in that order.
Each launch is checked against torch first (relative Frobenius error under 1e-2)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kcompiler.ops import matmul_sm90  # noqa: E402
from kcompiler.ops._common import stdlib_module  # noqa: E402

args = sys.argv[1:]
M, N, K = (int(x) for x in args[:3]) if len(args) >= 3 else (128, 4096, 4096)
choices = args[3:] or ["64x64/1", "64x128/2", "128x128/2", "128x128/4"]
mod = stdlib_module("matmul_sm90", "cuda")
a = torch.randn(M, K, device="cuda").bfloat16()
w = torch.randn(N, K, device="cuda").bfloat16()
want = (a.float() @ w.float().T)
for c in choices:
    name, split = c.split("/")
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    matmul_sm90.run(mod, a, w, out, config=name, split_k=int(split))
    torch.cuda.synchronize()
    err = float((out.float() - want).norm() / want.norm())
    print(f"{c}: relative error {err:.1e}", flush=True)
    assert err < 1e-2, c
