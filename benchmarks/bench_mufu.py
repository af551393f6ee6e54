"""How many exponentials a clock one multiprocessor's MUFU gives: the rate the FP8 attention's softmax
needs (stdlib/attention_sm90.kc's header counts a tile's exponentials against its products).

    python benchmarks/bench_mufu.py

Two kernels of 132 x 8 blocks of 512 threads, each thread U independent chains of ITERS steps:
``fma`` (x = fma(x, a, b): one FFMA a step, at 128 lanes a clock a multiprocessor: its time gives the
clock under load), ``ex2`` (x = fast_exp2(x) - c: one MUFU.EX2 and one FADD a step; the FADD on the FMA
pipe). Prints each kernel's time and lanes a nanosecond a multiprocessor, the clock the fma kernel
implies, and ex2's lanes a clock a multiprocessor: the CUDA C Programming Guide's throughput table gives
16 for exp2 on compute capability 9.0 (4 a sub-partition: a warp's MUFU.EX2 every 8 clocks).
"""
from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kcompiler as kc  # noqa: E402
from harness import best_device_ms  # noqa: E402

SRC = """
kernel fma_rate[U: i32, ITERS: i32](out: ptr<f32>, a: f32, b: f32) {
    var x = vec<f32, U>(f32(thread_id.x) * 1.0e-3);
    for u in comptime range(0, U) {
        x[u] += f32(u) * 1.0e-4;
    }
    for i in range(0, ITERS) {
        for u in comptime range(0, U) {
            x[u] = fma(x[u], a, b);
        }
    }
    var s = 0.0;
    for u in comptime range(0, U) {
        s += x[u];
    }
    out[block_id.x * block_dim.x + thread_id.x] = s;
}

kernel ex2_rate[U: i32, ITERS: i32](out: ptr<f32>, c: f32) {
    var x = vec<f32, U>(f32(thread_id.x % 64) * -1.0e-3);
    for u in comptime range(0, U) {
        x[u] -= f32(u) * 1.0e-3;
    }
    for i in range(0, ITERS) {
        for u in comptime range(0, U) {
            x[u] = fast_exp2(x[u]) - c;  // x in (-1, 0]: 2^x in (0.5, 1], minus c = 1
        }
    }
    var s = 0.0;
    for u in comptime range(0, U) {
        s += x[u];
    }
    out[block_id.x * block_dim.x + thread_id.x] = s;
}
"""

U, ITERS, BLOCK = 8, 4096, 512


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    grid = sms * 8
    out = torch.empty(grid * BLOCK, device="cuda", dtype=torch.float32)
    mod = kc.compile(SRC, target="cuda", path="mufu.kc")
    lanes = grid * BLOCK * U * ITERS
    rates = {}
    for name, call in (("fma", lambda: mod.fma_rate[grid, BLOCK](out, 0.999, 1e-4, U=U, ITERS=ITERS)),
                       ("ex2", lambda: mod.ex2_rate[grid, BLOCK](out, 1.0, U=U, ITERS=ITERS))):
        call()
        torch.cuda.synchronize()
        ms = best_device_ms(call, reps=10, warm=3)
        rates[name] = lanes / (ms * 1e6) / sms  # lanes a nanosecond a multiprocessor
        print(f"{name}: {ms:.3f} ms, {rates[name]:.1f} lanes/ns an SM", flush=True)
    ghz = rates["fma"] / 128
    print(f"clock implied by FFMA at 128 lanes/clock: {ghz:.3f} GHz")
    print(f"MUFU.EX2: {rates['ex2'] / ghz:.1f} lanes a clock a multiprocessor (CUDA's table: 16 on sm_90)")


if __name__ == "__main__":
    main()
