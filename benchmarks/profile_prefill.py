"""One launch each of the Hopper prefill (std.attention_sm90, its defaults) at issue 23's cuDNN shape, B4
H32 S4096 D128 bf16, without and with the causal mask, for Nsight Compute:

    ncu --clock-control none -k regex:attention_prefill_sm90 --section SpeedOfLight \\
        --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \\
        python3 benchmarks/profile_prefill.py [--cudnn] [--fp8]

``--cudnn``: then one launch of torch's cuDNN SDPA on the same bf16 inputs, full then causal (its
kernels' names vary by cuDNN version: widen -k, e.g. ``-k regex:'attention_prefill_sm90|sdpa|fmha|cudnn'``).
``--fp8`` (``--fp8-variants=NAME,...``: bench_attention_fp8.py's names, default ``default``): then the
FP8 (E4M3) forms too, the same shape quantised per tensor, after the bf16 launches
(attention_vt_fp8's V^T before each; ncu lists the launches in this order: bf16 full, causal, FP8
full, causal).

What to read (benchmarks/RESULTS.md quotes it): the tensor pipe's share of the kernel's cycles
(ComputeWorkloadAnalysis), the issue slots used (SchedulerStats), and where warps wait
(WarpStateStats' stall reasons: a consumer waiting on its own wgmma is 'wait'/'math pipe throttle', on
the producer's loads 'long scoreboard' or barrier)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from kcompiler import ops  # noqa: E402

B, H, S, D = 4, 32, 4096, 128
torch.manual_seed(0)
q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
for causal in (False, True):
    ops.attention(q, k, v, causal=causal, layout="bhsd")
if "--cudnn" in sys.argv[1:]:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for causal in (False, True):
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
if "--fp8" in sys.argv[1:]:
    from bench_attention_fp8 import quantise, variant  # per tensor, as the benchmark does
    (q8, dq), (k8, dk), (v8, dv) = (quantise(x) for x in (q, k, v))
    # --fp8-variants default,default-fa3-named-bn224: those FP8 forms (bench_attention_fp8's names), each
    # full then causal, in this order
    names = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--fp8-variants=")), "default")
    for name in names.split(","):
        for causal in (False, True):
            ops.attention(q8, k8, v8, causal=causal, layout="bhsd", descale_q=dq, descale_k=dk, descale_v=dv,
                          tiles=variant(name) or None)
torch.cuda.synchronize()
