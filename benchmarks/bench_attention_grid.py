"""ops.attention's prefill over issue 23's whole grid against torch SDPA's FlashAttention-2 backend, in
one run on a CUDA GPU: B in {1, 4, 16}, S in {512, 1024, 2048, 4096, 8192}, D in {64, 128, 256}, H in
{16, 32}, causal and not (180 shapes), grouped-query attention 4:1 (32 query heads, 8 KV heads) at B 4,
and variable lengths. Each of our results is checked against SDPA's first (relative Frobenius error
below 2e-2), then both are timed by triton's do_bench (median); the ratio is SDPA's time over ours
(> 1: we are faster). The summary gives the lowest ratio and every shape below 1.

    python benchmarks/bench_attention_grid.py [--sample N] [--json OUT.json] [--jobs 16]

ops.attention runs with its defaults (path 'auto': the Hopper kernel for D 64 and 128, std.attention's
FlashAttention-2 form for D 256), layout (B, H, S, D), bf16. Variable lengths: B sequences of lengths
drawn in [S / 2, S] (fixed seed), packed (total, H, D) with cu_seqlens; SDPA has no packed form, so its
time is that of the same sequences padded to the longest (what a torch user without a varlen kernel
runs) — say so when quoting those rows. FLOPs: 4 B H S^2 D (half causal; varlen: the sum over the
sequences). ``--sample N`` times N shapes of the grid drawn at a fixed seed (all by default); ``--rounds R``
(default 3) times each side R times in turn and takes the medians; ``--only 'TEXT;...'`` times the rows whose
name contains one of the texts.
"""
import argparse
import itertools
import json
import math
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from harness import compile_in_parallel  # noqa: E402

BS, SS, DS, HS = (1, 4, 16), (512, 1024, 2048, 4096, 8192), (64, 128, 256), (16, 32)


def grid() -> list[tuple]:
    """(kind, B, H, HKV, S, D, causal) of every row: the dense grid, GQA 4:1 and varlen."""
    rows = [("dense", b, h, h, s, d, c) for b in BS for s in SS for d in DS for h in HS for c in (False, True)]
    rows += [("gqa", 4, 32, 8, s, d, c) for s in SS for d in (64, 128) for c in (False, True)]
    rows += [("varlen", b, 32, 32, s, 128, c) for b, s in ((8, 1024), (4, 4096), (16, 2048)) for c in (False, True)]
    return rows


def _warm(job: tuple) -> None:
    """Compile the kernel a row kind launches (in a spawned worker; the disk cache keeps it)."""
    import torch

    from kcompiler import ops
    kind, d, causal = job
    if kind == "varlen":
        q = torch.randn(200, 2, d, device="cuda", dtype=torch.bfloat16)
        cu = torch.tensor([0, 77, 200], device="cuda", dtype=torch.int32)
        ops.attention(q, q, q, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=123)
    else:
        hkv = 1 if kind == "gqa" else 4
        q = torch.randn(1, 4, 256, d, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(1, hkv, 256, d, device="cuda", dtype=torch.bfloat16)
        ops.attention(q, k, k, causal=causal, layout="bhsd")
    torch.cuda.synchronize()


def interleaved(peer, ours, bench, rounds: int) -> tuple[float, float]:
    """The median times of ``peer`` (under SDPA's flash backend) and ``ours`` over ``rounds`` rounds, each
    timing both in turn: the smallest rows are host-bound (10-30 us a call, both sides), and a single
    pair of timings moved their ratio by +-40 % between runs while repeated pairs in one process agree
    within a few per cent (benchmarks/RESULTS.md, 2026-11-29, twenty-second session)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tp, to = [], []
    for _ in range(rounds):
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            tp.append(bench(peer))
        to.append(bench(ours))
    return statistics.median(tp), statistics.median(to)


def row_name(kind: str, B: int, H: int, HKV: int, S: int, D: int, causal: bool) -> str:
    """A row's printed name, e.g. ``dense B1 H32/32 S512 D64 full``."""
    return f"{kind} B{B} H{H}/{HKV} S{S} D{D} {'causal' if causal else 'full'}"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sample", type=int, help="time this many rows of the grid (fixed seed); default all")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    p.add_argument("--rounds", type=int, default=3, help="timings of each side a row, taken in turn (median)")
    p.add_argument("--only", help="only the rows whose name contains one of these ';'-separated texts "
                                  "(e.g. 'B1 H32/32 S512 D64')")
    args = p.parse_args()
    rows = grid()
    if args.only:
        keep = [x for x in args.only.split(";") if x]
        rows = [r for r in rows if any(x in row_name(*r) for x in keep)]
    if args.sample:
        rows = sorted(random.Random(23).sample(rows, min(args.sample, len(rows))), key=str)

    compile_in_parallel(_warm, sorted({(k, d, c) for k, _, _, _, _, d, c in rows}), args.jobs, "attention kernels")

    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from kcompiler import ops

    def bench(fn) -> float:
        return do_bench(fn, warmup=5, rep=40, return_mode="median")

    def rel(a, b) -> float:
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    dev = torch.cuda.get_device_name()
    print(f"{dev}, torch {torch.__version__}; TFLOP/s; x = SDPA flash's time / ours", flush=True)
    # the GPU idled through the compiles: half a second of matmuls first, so that the first rows are not
    # timed at idle clocks (the smallest rows are host-bound on both sides: interleaved)
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    t_spin = time.time()
    while time.time() - t_spin < 0.5:
        a @ a
        torch.cuda.synchronize()
    del a
    out, t0 = [], time.time()
    for kind, B, H, HKV, S, D, causal in rows:
        name = row_name(kind, B, H, HKV, S, D, causal)
        g = torch.Generator(device="cuda").manual_seed(hash(name) % (1 << 31))
        rnd = lambda *shape: torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=g)  # noqa: E731,B023
        try:
            if kind == "varlen":
                lens = [random.Random(S * B).randint(S // 2, S) for _ in range(B)]
                total, longest = sum(lens), max(lens)
                q, k, v = (rnd(total, H, D) for _ in range(3))
                cu = torch.tensor([0] + list(itertools.accumulate(lens)), device="cuda", dtype=torch.int32)
                flops = sum(4 * H * n * n * D / (2 if causal else 1) for n in lens)
                pad = [torch.zeros(B, H, longest, D, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
                for i, n in enumerate(lens):
                    for t, src in zip(pad, (q, k, v)):
                        t[i, :, :n] = src[cu[i]:cu[i] + n].transpose(0, 1)
                ours = lambda: ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu, cu_seqlens_k=cu,  # noqa: E731,B023
                                             max_seqlen_q=longest)
                peer = lambda: torch.nn.functional.scaled_dot_product_attention(*pad, is_causal=causal)  # noqa: E731,B023
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    want = peer()
                got = ours()
                err = max(rel(got[cu[i]:cu[i] + n].transpose(0, 1), want[i, :, :n]) for i, n in enumerate(lens))
            else:
                q, k, v = rnd(B, H, S, D), rnd(B, HKV, S, D), rnd(B, HKV, S, D)
                flops = 4 * B * H * S * S * D / (2 if causal else 1)
                ours = lambda: ops.attention(q, k, v, causal=causal, layout="bhsd")  # noqa: E731,B023
                peer = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731,B023
                    q, k, v, is_causal=causal, enable_gqa=HKV != H)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    want = peer()
                err = rel(ours(), want)
            t_peer, t = interleaved(peer, ours, bench, args.rounds)
        except Exception as e:  # noqa: BLE001 - one failed row must not end the run
            print(f"{name}: FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
            out.append(dict(row=name, failed=f"{type(e).__name__}: {str(e)[:200]}"))
            continue
        ok = err < 2e-2
        x = t_peer / t
        print(f"{name:40s} ours {flops / t / 1e9:5.0f}  flash {flops / t_peer / 1e9:5.0f}  x{x:.2f}  "
              f"error {err:.1e}{'' if ok else ' WRONG'}", flush=True)
        out.append(dict(row=name, kind=kind, B=B, H=H, HKV=HKV, S=S, D=D, causal=causal, ms=t, flash_ms=t_peer,
                        ratio=x, rel_err=err, ok=ok))
        del q, k, v, want
        torch.cuda.empty_cache()

    timed = [r for r in out if "ratio" in r and r["ok"]]
    print(f"\n{len(timed)} rows timed of {len(rows)} ({time.time() - t0:.0f} s)")
    if timed:
        gm = math.exp(sum(math.log(r["ratio"]) for r in timed) / len(timed))
        low = min(timed, key=lambda r: r["ratio"])
        print(f"x SDPA flash: geometric mean {gm:.2f}, lowest {low['ratio']:.2f} ({low['row']})")
        below = [r for r in timed if r["ratio"] < 1.0]
        print(f"rows below 1.0x: {len(below)}")
        for r in sorted(below, key=lambda r: r["ratio"]):
            print(f"  {r['row']}: x{r['ratio']:.2f}")
    bad = [r["row"] for r in out if not r.get("ok", False)]
    if bad:
        print(f"failed or wrong: {len(bad)}: {', '.join(bad[:20])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, rows=out), f, indent=1)


if __name__ == "__main__":
    main()
