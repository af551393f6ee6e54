"""The SM clock and board power while our FP8 and bf16 prefill run back to back (is the FP8 kernel held
by the power limit?): B4 H32 S4096 D128 (``--shape B,H,S,D``), full and causal, each form looped for
``--seconds`` while nvidia-smi samples clocks.sm and power.draw every 50 ms; prints each phase's median
clock, median power and TFLOP/s from the loop's own timing.

    python benchmarks/bench_attention_clocks.py [--seconds 3] [--shape 4,32,4096,128]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import torch

from kcompiler import ops


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--shape", default="4,32,4096,128")
    args = ap.parse_args()
    B, H, S, D = (int(v) for v in args.shape.split(","))
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", generator=g).bfloat16() for _ in range(3))
    q8, k8, v8 = (x.to(torch.float8_e4m3fn) for x in (q, k, v))
    forms = []
    for causal in (False, True):
        forms.append((f"bf16 {'causal' if causal else 'full'}", lambda c=causal: ops.attention(q, k, v, causal=c, layout="bhsd")))
        forms.append((f"FP8 {'causal' if causal else 'full'}",
                      lambda c=causal: ops.attention(q8, k8, v8, causal=c, layout="bhsd")))
    for _, f in forms:
        f()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw", "--format=csv,noheader,nounits",
                            "-lms", "50"], stdout=subprocess.PIPE, text=True)
    spans = []
    for name, f in forms:
        time.sleep(0.5)
        t0, n = time.time(), 0
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        while time.time() - t0 < args.seconds:
            for _ in range(10):
                f()
            n += 10
            torch.cuda.synchronize()
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / n
        spans.append((name, t0 + 0.5, time.time(), ms))
    time.sleep(0.3)
    smi.terminate()
    rows = []
    for line in smi.communicate()[0].splitlines():
        ts, clk, pw = (x.strip() for x in line.split(","))
        t = time.mktime(time.strptime(ts.split(".")[0], "%Y/%m/%d %H:%M:%S")) + float("0." + ts.split(".")[1])
        rows.append((t, float(clk), float(pw)))
    for name, a, b, ms in spans:
        sel = [r for r in rows if a <= r[0] <= b]
        flops = 4 * B * H * S * S * D / (2 if "causal" in name else 1)
        clk = statistics.median(r[1] for r in sel) if sel else float("nan")
        pw = statistics.median(r[2] for r in sel) if sel else float("nan")
        print(f"{name:>12}: {flops / ms / 1e9:6.0f} TFLOP/s, SM clock {clk:5.0f} MHz, power {pw:5.0f} W "
              f"({len(sel)} samples)", flush=True)


if __name__ == "__main__":
    main()
