"""How many exponentials a clock one multiprocessor's MUFU gives: the rate the FP8 attention's softmax
needs (stdlib/attention_sm90.kc's header counts a tile's exponentials against its products).

    python benchmarks/bench_mufu.py [--one-warp]

Kernels of 132 x 8 blocks of 512 threads, each thread U independent chains of ITERS steps:
``fma`` (x = fma(x, a, b): one FFMA a step, at 128 lanes a clock a multiprocessor: its time gives the
clock under load), ``ex2`` (x = fast_exp2(x) - c: one MUFU.EX2 and one FADD a step; the FADD on the FMA
pipe), ``f2fp`` (a pair of chains rounded to E4M3 a step, as the FP8 attention rounds P: one
``F2FP.SATFINITE.E4M3.F32.PACK_AB`` a pair, its 16 bits XORed into an accumulator, each chain + c by
FADD), ``mix`` (ex2's steps and f2fp's conversions in one loop: two MUFU.EX2 and one F2FP a pair).
Prints each kernel's time and lanes a nanosecond a multiprocessor (f2fp: pairs), the clock the fma
kernel implies, and the rates a clock a multiprocessor: the CUDA C Programming Guide's throughput table
gives 16 for exp2 on compute capability 9.0 (4 a sub-partition: a warp's MUFU.EX2 every 8 clocks) and
16 for conversions to narrower types. Whether the F2FP shares the MUFU's pipe reads from ``mix``: if it
does, mix's exponentials run at 2/3 of ex2's rate (three instructions of that pipe a pair, not two).

``--one-warp`` then times ``ex2`` with one warp a multiprocessor (132 blocks of 32 threads) and U = 1, 2,
4, 8, 16 independent chains: clocks a step at the clock the fma kernel implied (a lower bound: one warp
an SM draws little power, so the GPU may run it at a higher clock than the full-load fma). One chain gives the
latency of a MUFU.EX2 and its FADD; the U at which a step reaches 8 U clocks (the MUFU's rate for one
warp) is how many exponentials a warp must have in flight to keep its sub-partition's MUFU busy, which
the FP8 attention's softmax (one consumer warp a sub-partition in its turn) must meet.
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

kernel f2fp_rate[U: i32, ITERS: i32](out: ptr<f32>, c: f32) {
    var x = vec<f32, U>(f32(thread_id.x % 64) * 1.0e-3);
    for u in comptime range(0, U) {
        x[u] += f32(u) * 1.0e-3;
    }
    var acc = vec<u32, (U / 2)>(0);
    for i in range(0, ITERS) {
        for u in comptime range(0, U / 2) {
            let p = convert[vec<f8e4m3, 2>](abs(vec<f32, 2>(x[2 * u], x[2 * u + 1])), saturate = true);
            acc[u] = acc[u] ^ u32(bitcast[u16](p));
            x[2 * u] += c;
            x[2 * u + 1] += c;
        }
    }
    var s: u32 = 0;
    for u in comptime range(0, U / 2) {
        s = s ^ acc[u];
    }
    out[block_id.x * block_dim.x + thread_id.x] = f32(s);
}

kernel mix_rate[U: i32, ITERS: i32](out: ptr<f32>, c: f32) {
    var x = vec<f32, U>(f32(thread_id.x % 64) * -1.0e-3);
    for u in comptime range(0, U) {
        x[u] -= f32(u) * 1.0e-3;
    }
    var acc = vec<u32, (U / 2)>(0);
    for i in range(0, ITERS) {
        for u in comptime range(0, U) {
            x[u] = fast_exp2(x[u]) - c;
        }
        for u in comptime range(0, U / 2) {
            let p = convert[vec<f8e4m3, 2>](abs(vec<f32, 2>(x[2 * u], x[2 * u + 1])), saturate = true);
            acc[u] = acc[u] ^ u32(bitcast[u16](p));
        }
    }
    var s: u32 = 0;
    for u in comptime range(0, U / 2) {
        s = s ^ acc[u];
    }
    out[block_id.x * block_dim.x + thread_id.x] = f32(s) + x[0];
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
                       ("ex2", lambda: mod.ex2_rate[grid, BLOCK](out, 1.0, U=U, ITERS=ITERS)),
                       ("f2fp", lambda: mod.f2fp_rate[grid, BLOCK](out, 1.0e-3, U=U, ITERS=ITERS)),
                       ("mix", lambda: mod.mix_rate[grid, BLOCK](out, 1.0, U=U, ITERS=ITERS))):
        call()
        torch.cuda.synchronize()
        ms = best_device_ms(call, reps=10, warm=3)
        per = lanes // 2 if name == "f2fp" else lanes  # f2fp: pairs (F2FP instructions' lanes)
        rates[name] = per / (ms * 1e6) / sms  # lanes a nanosecond a multiprocessor
        print(f"{name}: {ms:.3f} ms, {rates[name]:.1f} {'pairs' if name == 'f2fp' else 'lanes'}/ns an SM", flush=True)
    ghz = rates["fma"] / 128
    print(f"clock implied by FFMA at 128 lanes/clock: {ghz:.3f} GHz")
    print(f"MUFU.EX2: {rates['ex2'] / ghz:.1f} lanes a clock a multiprocessor (CUDA's table: 16 on sm_90)")
    print(f"F2FP (E4M3 pairs): {rates['f2fp'] / ghz:.1f} lanes a clock a multiprocessor")
    print(f"MUFU.EX2 beside F2FP (one a pair): {rates['mix'] / ghz:.1f} lanes a clock a multiprocessor; "
          f"{rates['mix'] / rates['ex2']:.2f}x ex2 alone (2/3 if they share a pipe, 1 if not)")
    if "--one-warp" in sys.argv:
        iters = 16384
        for u in (1, 2, 4, 8, 16):
            one = torch.empty(sms * 32, device="cuda", dtype=torch.float32)
            call = lambda u=u: mod.ex2_rate[sms, 32](one, 1.0, U=u, ITERS=iters)  # noqa: E731
            call()
            torch.cuda.synchronize()
            ms = best_device_ms(call, reps=10, warm=3)
            clocks = ms * 1e6 * ghz / iters
            print(f"one warp an SM, {u:>2} chains: {clocks:6.1f} clocks a step of {u} MUFU.EX2 + FADD, "
                  f"{clocks / u:5.1f} a MUFU.EX2 (8.0 at the MUFU's rate)", flush=True)


if __name__ == "__main__":
    main()
