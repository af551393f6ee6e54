"""Whether the Hopper prefill loses its last wave: ops.attention (bf16, D 128, S 4096, B 4, its default
tiles: blocks of 128 query rows, one a multiprocessor) against cuDNN SDPA at head counts whose grids end
in a nearly empty wave (H 32: 4,096 blocks = 31.03 waves of 132) or a full one (H 33: 4,224 = 32.00).

    python benchmarks/bench_attention_waves.py [--heads 31,32,33] [--causal]

Prints TFLOP/s of both (triton's do_bench, medians) and ours over cuDNN a row, and the waves of ours. If
the ratio at H 32 is below H 33's by about the empty part of the last wave (1 - 31.03 / 32 = 3 %), the
quantisation of the grid is what separates the two at issue 23's cuDNN shape.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from kcompiler import ops  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--heads", default="31,32,33")
    p.add_argument("--causal", action="store_true")
    a = p.parse_args()
    B, S, D = 4, 4096, 128
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for H in (int(h) for h in a.heads.split(",")):
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * B * H * S * S * D / (2 if a.causal else 1)
        ours = do_bench(lambda: ops.attention(q, k, v, causal=a.causal, layout="bhsd"), warmup=25, rep=200)
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            ref = do_bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=a.causal),
                           warmup=25, rep=200)
        blocks = B * H * (S // 128)
        print(f"B{B} H{H} S{S} D{D}{' causal' if a.causal else ''}: ours {flops / ours / 1e9:.0f} TFLOP/s, "
              f"cuDNN {flops / ref / 1e9:.0f}, x{ref / ours:.3f}; {blocks} blocks = {blocks / sms:.2f} waves",
              flush=True)


if __name__ == "__main__":
    main()
