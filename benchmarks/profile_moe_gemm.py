"""One launch each of std.moe_gemm's MXFP4 gate/up (moe_gemm1) and down (moe_gemm2) kernels at a decode
batch of gpt-oss's shape (E 32, top_k 4, H = I = 2880), for Nsight Compute (ncu's Duration is the
kernel's device time alone):

    ncu --clock-control none -k regex:moe_gemm --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats python3 benchmarks/profile_moe_gemm.py [T ...]

Default: T 1 and 64. Each launch is checked against the torch reference of benchmarks/bench_moe_gemm.py
first (ops.moe_gemm_swiglu / moe_gemm_down, their default decode and tiling)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench_moe_gemm import SHAPES, routing, torch_swiglu, weights  # noqa: E402
from kcompiler import ops  # noqa: E402

tokens = [int(t) for t in sys.argv[1:]] or [1, 64]
E, top_k, Hd, I = (SHAPES["gpt-oss"][k] for k in ("E", "top_k", "H", "I"))
g = torch.Generator(device="cuda").manual_seed(0)
rng = np.random.default_rng(0)
w13, d13, _ = weights(E, 2 * I, Hd, "mxfp4", g)
w2, d2, _ = weights(E, Hd, I, "mxfp4", g)
for T in tokens:
    ids = np.stack([rng.choice(E, top_k, replace=False) for _ in range(T)])
    r = routing(ids, rng.random((T, top_k)) + 0.1, E, ops.moe_block_m(T, top_k, E, "mxfp4"))
    flat = r.topk_ids.reshape(-1)
    groups = [(int(e), torch.nonzero(flat == e).reshape(-1)) for e in torch.unique(flat).tolist()]
    x = torch.randn(T, Hd, device="cuda").bfloat16()
    ht = torch_swiglu(x, d13, groups, top_k, I, torch.empty(T * top_k, I, device="cuda", dtype=torch.bfloat16))
    h = ops.moe_gemm_swiglu(x, w13, r)
    torch.testing.assert_close(h.float(), ht.float(), rtol=3e-2, atol=3e-2 * ht.float().abs().max().item())
    y = ops.moe_gemm_down(ht, w2, r, reduce="separate")
    yt = torch.empty_like(y)
    for e, a in groups:
        yt[a] = (ht[a] @ d2[e].T).float() * r.topk_weights.reshape(-1)[a, None]
    torch.testing.assert_close(y, yt, rtol=3e-2, atol=3e-2 * yt.abs().max().item())
    torch.cuda.synchronize()
    print(f"T {T}: block_m {r.block_m}, {len(groups)} experts hit, checked", flush=True)
