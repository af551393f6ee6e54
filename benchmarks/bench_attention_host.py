"""Host time of ops.attention calls on the Hopper path, and what it costs at short sequences: bf16 and
FP8 (E4M3) prepared calls (ops.attention.PLANS; FP8 with number descales), FP8 unprepared (descales
given as arrays: no plan), each timed three ways in one process on one GPU:

- host: Python time a call, 200 calls back to back without synchronising (us);
- eager: triton.testing.do_bench of the call (the GPU's time, or the host's where it is longer);
- graph: do_bench of one replay of a CUDA graph holding the call (the GPU's time alone).

    python benchmarks/bench_attention_host.py [--shapes 32,16,512;16,16,1024;4,32,4096]

Shapes B,H,S (D 128, layout bhsd), causal and not.
"""
from __future__ import annotations

import argparse
import time

import torch
from triton.testing import do_bench

from kcompiler import ops


def timings(f) -> tuple[float, float, float]:
    """(host us a call, eager us, graph us) of ``f``."""
    f()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(200):
        f()
    host = (time.perf_counter() - t0) / 200 * 1e6
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the capture (allocations, plans)
        f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        f()
    graph = do_bench(g.replay, warmup=25, rep=200, return_mode="median") * 1e3
    eager = do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3
    return host, eager, graph


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="32,16,512;16,16,1024;4,32,4096", help="B,H,S;... (D 128)")
    args = p.parse_args()
    torch.manual_seed(0)
    print(f"{torch.cuda.get_device_name()}: host / eager / graph, us a call")
    for spec in args.shapes.split(";"):
        B, H, S = (int(x) for x in spec.split(","))
        D = 128
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
        arr = torch.full((B, H), 0.5, device="cuda")
        for causal in (False, True):
            forms = {
                "bf16": lambda: ops.attention(q, k, v, causal=causal, layout="bhsd", path="sm90"),
                "fp8": lambda: ops.attention(q8, k8, v8, causal=causal, layout="bhsd", descale_q=0.5,
                                             descale_k=0.5, descale_v=0.5),
                "fp8 unprepared": lambda: ops.attention(q8, k8, v8, causal=causal, layout="bhsd", descale_q=arr,
                                                        descale_k=arr, descale_v=arr),
            }
            row = " | ".join(f"{n} {h:.0f} / {e:.0f} / {g:.0f}" for n, (h, e, g) in
                             ((n, timings(f)) for n, f in forms.items()))
            print(f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}: {row}", flush=True)


if __name__ == "__main__":
    main()
