"""The SM clock and board power while kernels run back to back: is a kernel held by the board's power
limit? Each form is looped for ``--seconds`` while nvidia-smi samples clocks.sm and power.draw every 50
ms; prints each form's TFLOP/s (from the loop's own time), median clock and median power.

    python benchmarks/bench_clocks.py [--what attention,matmul] [--seconds 3] [--shape 4,32,4096,128]
        [--mnk 1024x14336x4096,8192x14336x4096]

attention: our FP8 and bf16 prefill (ops.attention's defaults, layout (B, H, S, D)), full and causal.
matmul: ops.matmul against cuBLAS (torch.matmul) in bf16 and ops.scaled_matmul against
torch._scaled_mm in FP8 (e4m3, B as an (N, K) weight), at each M x N x K. Under a power limit a kernel's
throughput follows the energy its work costs: one that reads fewer bytes through L2 and shared memory
for the same products runs at a higher clock.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import torch

from kcompiler import ops


def attention_forms(shape: str) -> list:
    B, H, S, D = (int(v) for v in shape.split(","))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).bfloat16() for _ in range(3))
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    forms = []
    for causal in (False, True):
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        mask = "causal" if causal else "full"
        forms.append((f"attention bf16 {mask}", flops, lambda c=causal: ops.attention(q, k, v, causal=c, layout="bhsd")))
        forms.append((f"attention FP8 {mask}", flops, lambda c=causal: ops.attention(q8, k8, v8, causal=c, layout="bhsd")))
    return forms


def matmul_forms(mnk: str) -> list:
    forms = []
    one = torch.tensor(1.0, device="cuda")
    for size in mnk.split(","):
        m, n, k = (int(v) for v in size.split("x"))
        a = torch.randn(m, k, device="cuda").bfloat16()
        w = torch.randn(n, k, device="cuda").bfloat16()
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        flops = 2 * m * n * k
        forms += [(f"matmul bf16 {size} ours", flops, lambda a=a, w=w: ops.matmul(a, w.T)),
                  (f"matmul bf16 {size} cuBLAS", flops, lambda a=a, w=w: torch.matmul(a, w.T)),
                  (f"matmul FP8 {size} ours", flops, lambda a=a8, w=w8: ops.scaled_matmul(a, w.T, one, one)),
                  (f"matmul FP8 {size} cuBLAS", flops,
                   lambda a=a8, w=w8: torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16))]
    return forms


def sample(forms: list, seconds: float) -> list:
    """(name, TFLOP/s, median MHz, median W, samples) of each form, looped in turn under nvidia-smi."""
    for _, _, f in forms:
        f()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    spans = []
    for name, flops, f in forms:
        time.sleep(0.5)
        t0, n = time.time(), 0
        while time.time() - t0 < seconds:
            for _ in range(10):
                f()
            n += 10
            torch.cuda.synchronize()
        t1 = time.time()
        spans.append((name, flops, t0, t1, (t1 - t0) * 1e3 / n))
    time.sleep(0.3)
    smi.terminate()
    rows = []
    for line in smi.communicate()[0].splitlines():
        ts, clk, pw = (x.strip() for x in line.split(","))
        day, frac = ts.split(".")
        rows.append((time.mktime(time.strptime(day, "%Y/%m/%d %H:%M:%S")) + float("0." + frac), float(clk), float(pw)))
    out = []
    for name, flops, a, b, ms in spans:
        sel = [r for r in rows if a + 0.2 <= r[0] <= b]  # the first 0.2 s: the clock settling
        med = (lambda i: statistics.median(r[i] for r in sel)) if sel else (lambda i: float("nan"))
        out.append((name, flops / ms / 1e9, med(1), med(2), len(sel)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", default="attention,matmul")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--shape", default="4,32,4096,128", help="attention: B,H,S,D")
    ap.add_argument("--mnk", default="1024x14336x4096,8192x14336x4096", help="matmul: MxNxK,...")
    args = ap.parse_args()
    what = args.what.split(",")
    forms = (attention_forms(args.shape) if "attention" in what else []) + \
        (matmul_forms(args.mnk) if "matmul" in what else [])
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,power.limit,clocks.max.sm", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout.strip())
    for name, tf, clk, pw, n in sample(forms, args.seconds):
        print(f"{name:>34}: {tf:6.0f} TFLOP/s, SM clock {clk:5.0f} MHz, power {pw:4.0f} W ({n} samples)", flush=True)


if __name__ == "__main__":
    main()
