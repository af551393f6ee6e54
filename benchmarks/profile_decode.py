"""One launch each of the decode kernels (std.decode, std.mla) at bench_attention.py's shapes, for Nsight Compute:
the GQA 4:1 tensor-core ring (two tile choices), the MHA SIMT ring, and MLA at 16 and 128 heads (the
Hopper kernel mla_decode_sm90, then std.mla's mma.sync one).

    ncu --clock-control none -k regex:"paged_decode|mla_decode" --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --section LaunchStats python3 benchmarks/profile_decode.py

ncu's Duration is the kernel's device time alone (the bench's do_bench times a call through ops, host
work included; benchmarks/RESULTS.md compares the two)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402

from kcompiler import ops  # noqa: E402

B, H, HK, S, D, page = 32, 32, 8, 8192, 128, 16
g = torch.Generator().manual_seed(0)
kc = torch.randn(B * S // page, page, HK, D, device="cuda", dtype=torch.bfloat16)
vc = torch.randn_like(kc)
table = torch.randperm(B * S // page, generator=g).view(B, S // page).int().cuda()
lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
q = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
for tiles in (dict(RING=True, WARPS=4, BN=32, STAGES=2), dict(RING=True, WARPS=4, BN=16, STAGES=3)):
    ops.paged_decode(q, kc, vc, table, lens, max_seq_len=S, tensor_cores=True, tc_tiles=tiles)
kc2 = torch.randn(B * S // page, page, 32, D, device="cuda", dtype=torch.bfloat16)
vc2 = torch.randn_like(kc2)
ops.paged_decode(q, kc2, vc2, table, lens, max_seq_len=S)  # MHA SIMT, for comparison
del kc, vc, kc2, vc2
Dl, DR, pg = 512, 64, 64
ckv = torch.randn(B * S // pg, pg, Dl, device="cuda", dtype=torch.bfloat16)
kpe = torch.randn(B * S // pg, pg, DR, device="cuda", dtype=torch.bfloat16)
t2 = torch.randperm(B * S // pg, generator=g).view(B, S // pg).int().cuda()
for Hm in (16, 128):  # MLA: the Hopper kernel (mla_decode_sm90, the default on sm_90), then mma.sync
    qn = torch.randn(B, Hm, Dl, device="cuda", dtype=torch.bfloat16)
    qp = torch.randn(B, Hm, DR, device="cuda", dtype=torch.bfloat16)
    ops.mla_decode(qn, qp, ckv, kpe, t2, lens, scale=0.07, max_seq_len=S, path="sm90")
    ops.mla_decode(qn, qp, ckv, kpe, t2, lens, scale=0.07, max_seq_len=S, path="generic")
torch.cuda.synchronize()
print("done")
