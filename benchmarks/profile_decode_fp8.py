"""One launch of the paged decode's SIMT kernel on an FP8 (E4M3) cache and one on a bf16 cache of the
same shape (bench_attention.py's: B 32, H = HKV = 32, 8192 keys, D 128, pages of 16), for Nsight Compute:

    ncu --clock-control none -k regex:paged_decode --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section ComputeWorkloadAnalysis python3 benchmarks/profile_decode_fp8.py

ncu's Duration is the kernel's device time alone."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kcompiler import ops  # noqa: E402

B, H, S, D, page = 32, 32, 8192, 128, 16
g = torch.Generator().manual_seed(0)
table = torch.randperm(B * S // page, generator=g).view(B, S // page).int().cuda()
lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
q = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
kc = torch.randn(B * S // page, page, H, D, device="cuda").to(torch.float8_e4m3fn)
vc = torch.randn(B * S // page, page, H, D, device="cuda").to(torch.float8_e4m3fn)
ks = torch.full((H,), 0.5, device="cuda")
ops.paged_decode(q, kc, vc, table, lens, k_scale=ks, v_scale=ks, max_seq_len=S)
del kc, vc
kc = torch.randn(B * S // page, page, H, D, device="cuda", dtype=torch.bfloat16)
vc = torch.randn_like(kc)
ops.paged_decode(q, kc, vc, table, lens, max_seq_len=S)
torch.cuda.synchronize()
print("ran", flush=True)
