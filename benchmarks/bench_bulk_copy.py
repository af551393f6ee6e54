"""How fast bulk copies (``bulk_load``: cp.async.bulk global -> shared memory on an mbarrier) stream
HBM into shared memory, by the size of one copy, against this repository's register read kernel
(bench_moe_gemm.py's READ_KC: 16-byte loads, 4 in flight a lane) and the copy anchor, in one run.

    python benchmarks/bench_bulk_copy.py [--mb 512]

Why: std.moe_gemm's decode GEMMs load their weights straight into registers. A variant that brought each
block's weight rows into shared memory by one bulk copy a row and phase (row segments of 480-512 bytes;
branch moe-bulk, benchmarks/RESULTS.md 2026-11-29) ran at 0.54-0.83x the default. This table says what
bulk copies of that size can stream at all, and from what size on they reach the copy anchor.

STREAM_BULK: blocks of one warp walk the buffer in units of LN copies of CH bytes (LN = min(32, 32 KiB /
CH), one a lane), through a ring of ST = 4 stages of shared memory, each completing on its own mbarrier
(lane 0's arrive_expect_tx of the unit's bytes); a stage is reissued once its previous phase completed
(each lane reads a byte of what landed, so the copies cannot be elided). As many blocks a multiprocessor
as 200 KiB of shared memory holds. GB/s are bytes read over time (the anchor counts read + written).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import harness  # noqa: E402
from bench_moe_gemm import READ_KC  # noqa: E402

STREAM_BULK = """
kernel stream_bulk[CH: i32, LN: i32, ST: i32](x: ptr<u8>, n: i64, out: ptr<i32>) {
    let sm = dynamic_shared[u8]();
    let bars = bitcast[ptr<u64, shared>](sm);
    let buf = sm + 128;
    let lane = i32(thread_id.x);
    if lane == 0 {
        for s in comptime range(0, ST) {
            mbarrier_init(bars + s, 1u32);
        }
        fence_proxy_async();
    }
    warp_sync();
    let unit = i64(LN * CH);
    let nu = n / unit;
    var i = 0;
    var acc = 0u32;
    for u in range(i64(block_id.x), nu, i64(grid_dim.x)) {
        let s = i % ST;
        if i >= ST {
            mbarrier_wait(bars + s, u32((i / ST - 1) & 1));
            if lane < LN {
                acc = acc ^ u32(buf[s * LN * CH + lane * CH]);
            }
        }
        warp_sync();
        if lane == 0 {
            mbarrier_arrive_expect_tx(bars + s, u32(LN * CH));
        }
        if lane < LN {
            bulk_load(buf + (s * LN * CH + lane * CH), x + (u * unit + i64(lane * CH)), u32(CH), bars + s);
        }
        i += 1;
    }
    for j in range(max(0, i - ST), i) {
        mbarrier_wait(bars + j % ST, u32((j / ST) & 1));
        if lane < LN {
            acc = acc ^ u32(buf[j % ST * LN * CH + lane * CH]);
        }
    }
    if acc == 0x7a5c3e1fu32 {
        out[0] = 1;
    }
}
"""


def time_ms(fn, reps=20):
    return harness.best_device_ms(fn, reps, warm=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=512, help="bytes streamed a launch (MB)")
    args = ap.parse_args()
    import kcompiler as kc
    copy = harness.device_copy_gbs()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    n = args.mb * 1 << 20
    x = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    stream = torch.cuda.current_stream().cuda_stream
    print(f"{torch.cuda.get_device_name()}; copy anchor {copy:.0f} GB/s (read + written); {args.mb} MB read a launch")
    print(f"{'mover':>28} {'ms':>8} {'GB/s':>7} {'%copy':>6}")
    rd = kc.compile(READ_KC, target="cuda", path="<stream_read>")
    t = time_ms(lambda: rd.stream_read[(4 * sms,), 512](x.view(torch.int32), n // 4, out, U=4, stream=stream))
    name = "registers, 16 B x 4 a lane"
    print(f"{name:>28} {t:>8.4f} {n / t / 1e6:>7.0f} {100 * n / t / 1e6 / copy:>5.0f}%", flush=True)
    bk = kc.compile(STREAM_BULK, target="cuda", path="<stream_bulk>")
    ST = 4
    for ch in (256, 512, 1024, 2048, 4096, 8192, 16384):
        ln = min(32, 32768 // ch)
        shared = 128 + ST * ln * ch
        bps = max(1, (200 * 1024) // shared)
        t = time_ms(lambda: bk.stream_bulk[(bps * sms,), 32](x, n, out, CH=ch, LN=ln, ST=ST, shared=shared,
                                                               stream=stream))
        name = f"bulk {ch} B x {ln}, {bps} blk/SM"
        print(f"{name:>28} {t:>8.4f} {n / t / 1e6:>7.0f} {100 * n / t / 1e6 / copy:>5.0f}%", flush=True)


if __name__ == "__main__":
    main()
