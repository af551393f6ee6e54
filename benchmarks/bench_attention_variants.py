"""The Hopper prefill's variants (std.attention_sm90's tiles and block shapes) on the shapes of issue 23,
beside torch SDPA's flash (FlashAttention-2) and cuDNN backends, all in one process on one GPU.

    python benchmarks/bench_attention_variants.py [--json OUT.json] [--shapes 0,2|small,order] [--jobs 16]
        [--variants RE]

For each shape (SHAPES: B, H, S, D, causal; bf16, layout (B, H, S, D)) it prints TFLOP/s (4 B H S^2 D
operations, half when causal) of SDPA flash, SDPA cuDNN, ops.attention's default on the Hopper path
(kcompiler.ops.ATTENTION_SM90_TILES) and each variant of SM90_VARIANTS[D], with the ratios to flash
and cuDNN (--variants: only the variants whose name the regular expression finds; --shapes: indices
into SHAPES or names of SHAPE_SETS); every call is first checked against SDPA flash (relative Frobenius
error, < 2e-2 to count). The launch-shape variants (VARIANTS_ALL_D: ORDER, one consumer, the small-grid
rule of kcompiler.ops.attention_order) are timed at every head dimension, on top of the default tiles.
Times: medians of triton's do_bench (host work included, as a caller sees it). For the default also
the host's share: microseconds a call spends in Python before returning (the launch is asynchronous)
and the device time alone from a CUDA graph replay (do_bench_cudagraph); where the first is close to
the do_bench time, the host bounds the call, not the kernel.

At the end a compact table (a row a shape, a column a variant: time of SDPA flash / ours), then per
(D, causal) the variant with the best geometric mean over that key's shapes and the
one-line change of ATTENTION_SM90_TILES it suggests. The kernels are compiled first, in --jobs
processes (the disk cache then serves the timing process), so that one run stays within ~2.5 min.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: (B, H, S, D, causal): issue 23's prefill rows and the short and long ends of its grid
SHAPES = [(16, 16, 1024, 64, False), (8, 16, 2048, 128, True), (4, 32, 4096, 128, False),
          (4, 32, 4096, 128, True), (1, 32, 512, 128, False), (4, 16, 8192, 64, False),
          (4, 16, 4096, 256, False), (4, 16, 4096, 256, True)]
#: the small grids of issue 23 (fewer blocks of 128 query rows than an H100's 132 multiprocessors, or
#: few waves): B1 H16 S512, B1 H32 S1024, B4 H16 S512 at D 64 and 128, causal and not
SHAPES += [(B, H, S, D, c) for D in (64, 128) for c in (False, True) for B, H, S in ((1, 16, 512), (1, 32, 1024),
                                                                                  (4, 16, 512))]
#: D 256 beyond B4 H16 S4096: short and middle sequences, causal and not
SHAPES += [(4, 16, 512, 256, False), (16, 32, 512, 256, False), (1, 16, 1024, 256, False),
           (4, 32, 2048, 256, False), (16, 32, 1024, 256, True), (1, 16, 512, 256, True)]
#: named sets of SHAPES (indices) for --shapes: 'small' the grids above, 'order' the causal shapes where
#: ORDER's longest-first schedule should show (B4 H32 S4096 D128 and B8 H16 S2048 D128), 'd256' D 256's
#: sequence lengths 1024 to 8192 at D 64 and 128, causal and not, where PERSIST's gain shows (or not)
SHAPES += [(16, 16, 1024, 128, False), (16, 16, 1024, 128, True), (8, 16, 2048, 128, False), (2, 32, 8192, 128, False),
           (2, 32, 8192, 128, True), (16, 16, 1024, 64, True), (4, 16, 8192, 64, True), (8, 16, 2048, 64, False)]
SHAPE_SETS = {"small": list(range(8, 20)), "order": [3, 1], "d256": [6, 7] + list(range(20, 26)),
              "lengths": [0, 5] + list(range(26, 34)) + [1, 2, 3]}

#: (name, tiles) timed beside the default, by head dimension. CONSUMERS: consumer warpgroups of 64
#: query rows (BM = 64 * CONSUMERS; default 2); BLOCKS_PER_SM: blocks a multiprocessor holds, the
#: registers shared out for them (default 1). Registers and spills (ptxas, sm_90a, causal / not):
#: tests/ops/test_attention_sm90.py's PTX_VARIANTS.
SM90_VARIANTS = {
    # D 256, two consumers: Q 64 KiB, K and V 32 KiB a stage each at BN 64 (BN 80: 40 KiB; 227 KiB in
    # all); the default since 2026-11-27 is one consumer at BN 96 (Q 32 KiB, K and V 48 KiB a stage)
    256: [("1wg BN64 seq", dict(BN=64, STAGES=2, CONSUMERS=1)),
          ("1wg BN64 3st", dict(BN=64, STAGES=3, CONSUMERS=1)),
          ("2wg BN64 seq skip (old default)", dict(BN=64, STAGES=2, CONSUMERS=2, RESCALE_SKIP=True)),
          ("2wg BN64 seq", dict(BN=64, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=2, RESCALE_SKIP=False)),
          ("2wg BN80 seq", dict(BN=80, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=2)),
          ("2wg BN64 seq pingpong", dict(BN=64, STAGES=2, OVERLAP=False, PINGPONG=True, CONSUMERS=2))],
    64: [("2wg BN128 seq", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False)),
         ("2wg BN128 pingpong", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True)),
         ("2wg BN128 pingpong fa3", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
         ("2wg BN128 seq pingpong named", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1)),
         ("2wg BN128 chain pingpong named tree uniform", dict(BN=128, STAGES=2, CHAIN=True, PINGPONG=True, TURNS=1,
                                                              TREE=True, UNIFORM_WG=True)),
         ("3wg BN64 overlap fa3", dict(BN=64, STAGES=2, OVERLAP=True, PINGPONG=False, CONSUMERS=3, FA3_ORDER=True)),
         ("2wg BN192 seq", dict(BN=192, STAGES=2, OVERLAP=False, PINGPONG=False)),
         ("3wg BN128 seq", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=3)),
         ("3wg BN64 overlap", dict(BN=64, STAGES=2, OVERLAP=True, PINGPONG=False, CONSUMERS=3)),
         ("2wg BN64 seq x2 blocks", dict(BN=64, STAGES=2, OVERLAP=False, PINGPONG=False, BLOCKS_PER_SM=2)),
         ("1wg BN128 overlap x2 blocks", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=False, CONSUMERS=1,
                                              BLOCKS_PER_SM=2))],
    128: [("2wg BN128 seq", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False)),
          # the causal mask's select chains as before (MASK_SELECT false: ~1,000 FSEL an edge tile, not 64)
          ("2wg BN128 seq old mask", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False, MASK_SELECT=False)),
          # OVERLAP as written (ptxas moves the wait for P V up before the softmax: no overlap in SASS)
          # and in FlashAttention-3's order (the whole softmax between the waits), with and without turns
          ("2wg BN128 pingpong", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True)),
          ("2wg BN128 overlap fa3", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=False, FA3_ORDER=True)),
          ("2wg BN128 pingpong fa3", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
          ("2wg BN128 pingpong fa3 3st", dict(BN=128, STAGES=3, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
          # the sequential form with FlashAttention-3's turns (PINGPONG without OVERLAP: a turn is P V then
          # the next S, so that the two warpgroups' softmaxes alternate instead of coinciding), with O's
          # rescale skipped where no row's maximum rose (RESCALE_SKIP), 3 stages, FA3's BN 176
          ("2wg BN128 seq pingpong", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True)),
          ("2wg BN128 seq pingpong skip", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, RESCALE_SKIP=True)),
          ("2wg BN128 seq skip", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False, RESCALE_SKIP=True)),
          # the turns as FlashAttention-3's warp scheduler barrier: named barriers (bar.sync / bar.arrive,
          # TURNS 1) instead of mbarriers (a try_wait loop on a phase)
          ("2wg BN128 seq pingpong named", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1)),
          ("2wg BN128 seq pingpong named skip", dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1,
                                                     RESCALE_SKIP=True)),
          ("2wg BN128 pingpong fa3 named", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True,
                                                TURNS=1)),
          ("2wg BN128 seq pingpong 3st", dict(BN=128, STAGES=3, OVERLAP=False, PINGPONG=True)),
          ("2wg BN176 seq pingpong", dict(BN=176, STAGES=2, OVERLAP=False, PINGPONG=True)),
          # the default's form (turns on named barriers) in longer key tiles, as FP8's BN 256 (1.09x there):
          # each tile's fixed work (row maxima, O's rescale, the turns) paid less often; BN 192 fills 224 KiB
          ("2wg BN160 seq pingpong named", dict(BN=160, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1)),
          ("2wg BN176 seq pingpong named", dict(BN=176, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1)),
          ("2wg BN192 seq pingpong named", dict(BN=192, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1)),
          ("2wg BN128 pingpong fa3 skip", dict(BN=128, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True,
                                               RESCALE_SKIP=True)),
          ("3wg BN64 seq", dict(BN=64, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=3)),
          ("3wg BN64 overlap", dict(BN=64, STAGES=2, OVERLAP=True, PINGPONG=False, CONSUMERS=3)),
          ("1wg BN64 seq x2 blocks", dict(BN=64, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=1,
                                          BLOCKS_PER_SM=2)),
          ("1wg BN64 overlap x2 blocks", dict(BN=64, STAGES=2, OVERLAP=True, PINGPONG=False, CONSUMERS=1,
                                              BLOCKS_PER_SM=2)),
          # std.attention_sm90_chain's forms (per-tile SASS of BN 128, one warp: default 494 instructions):
          # CHAIN (P V and the next S issued together, one wgmma wait a tile), TREE (4-chain max / sum,
          # 490), UNIFORM_WG (Q's descriptors in uniform registers, 477), all three 478; BN 176 / 192
          # sequential (no spills: 3.4 instructions a key against 3.9 at BN 128; 3 % of S 4096 wasted)
          ("2wg BN128 chain", dict(BN=128, STAGES=2, CHAIN=True)),
          ("2wg BN128 tree", dict(BN=128, STAGES=2, TREE=True)),
          ("2wg BN128 uniform", dict(BN=128, STAGES=2, UNIFORM_WG=True)),
          ("2wg BN128 tree uniform", dict(BN=128, STAGES=2, TREE=True, UNIFORM_WG=True)),
          ("2wg BN128 chain tree uniform", dict(BN=128, STAGES=2, CHAIN=True, TREE=True, UNIFORM_WG=True)),
          ("2wg BN128 chain tree uniform skip", dict(BN=128, STAGES=2, CHAIN=True, TREE=True, UNIFORM_WG=True,
                                                     RESCALE_SKIP=True)),
          ("2wg BN128 chain pingpong named tree uniform", dict(BN=128, STAGES=2, CHAIN=True, PINGPONG=True, TURNS=1,
                                                               TREE=True, UNIFORM_WG=True)),
          # FlashAttention-3's own tile at D 128 without a mask: 128 x 176 with the intra-warpgroup overlap
          # (hopper/tile_size.h); the FA3_ORDER form at BN 160 / 176 / 192 (no spills, ptxas sm_90a)
          ("2wg BN176 pingpong fa3", dict(BN=176, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
          ("2wg BN176 pingpong fa3 named", dict(BN=176, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True,
                                                TURNS=1)),
          ("2wg BN160 pingpong fa3", dict(BN=160, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
          ("2wg BN192 pingpong fa3", dict(BN=192, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True)),
          ("2wg BN192 seq", dict(BN=192, STAGES=2)),
          ("2wg BN192 seq tree uniform", dict(BN=192, STAGES=2, TREE=True, UNIFORM_WG=True)),
          ("2wg BN176 seq tree uniform", dict(BN=176, STAGES=2, TREE=True, UNIFORM_WG=True)),
          ("2wg BN192 chain tree uniform", dict(BN=192, STAGES=2, CHAIN=True, TREE=True, UNIFORM_WG=True)),
          ("2wg BN192 seq tree uniform skip", dict(BN=192, STAGES=2, TREE=True, UNIFORM_WG=True, RESCALE_SKIP=True)),
          # LAZY_MAX (std.attention_sm90_lazy) in the default's form with longer key tiles (BN 160: no
          # spills; 176 and 192 spill), some exponentials on the FMA pipe (EXP2_POLY), 3 stages
          ("lazy BN160", dict(LAZY_MAX=True, BN=160)),
          ("lazy poly8", dict(LAZY_MAX=True, EXP2_POLY=8)),
          ("lazy poly16", dict(LAZY_MAX=True, EXP2_POLY=16)),
          ("lazy 3st", dict(LAZY_MAX=True, STAGES=3))],
}


#: (name, tiles) timed beside the default at every head dimension, on top of the default tiles: the
#: blocks' ORDER (std.attention_sm90_order: 1 every (head, batch entry)'s longest causal tile first, 2
#: the same by groups of GROUP heads), one consumer warpgroup (64 query rows a block: twice the blocks),
#: the small-grid rule (kcompiler.ops.attention_order.small_grid_consumers: one consumer where the
#: default block leaves multiprocessors idle, else the default), and PERSIST (a block a multiprocessor
#: looping over the query tiles, its producer loading the next tile's Q, K and V under the last's end), and
#: LAZY_MAX (std.attention_sm90_lazy: a tile's exponentials against the rows' bases, before their maxima).
VARIANTS_ALL_D = [("order1", dict(ORDER=1)), ("order2 g8", dict(ORDER=2, GROUP=8)),
                  ("order2 g4", dict(ORDER=2, GROUP=4)),
                  ("1wg", dict(CONSUMERS=1)), ("1wg order1", dict(CONSUMERS=1, ORDER=1)),
                  ("small-grid", dict(SMALL_GRID=True)), ("small-grid order1", dict(SMALL_GRID=True, ORDER=1)),
                  ("persist", dict(PERSIST=True)), ("lazy", dict(LAZY_MAX=True)),
                  ("lazy persist", dict(LAZY_MAX=True, PERSIST=True))]
for _d in SM90_VARIANTS:
    SM90_VARIANTS[_d] += VARIANTS_ALL_D


def _compile(job: tuple) -> str:
    """Compile one specialisation of std.attention_sm90 for the GPU (in a worker process: the disk
    cache keeps it for the timing process). Returns what failed, or ''."""
    D, causal, kw = job
    try:
        from kcompiler.ops import _common
        mod = _common.ftz_module("attention_sm90", "cuda")
        mod.attention_prefill_sm90.specialize(T="bf16", D=D, CAUSAL=causal, VARLEN=False, **kw)
        return ""
    except Exception as e:  # noqa: BLE001 - reported; the timing process reports it again
        return f"{D} {causal} {kw}: {type(e).__name__}: {str(e)[:200]}"


def precompile(shapes: list, jobs: int, sms: int) -> None:
    """Every specialisation the run will launch (the compile-time values ops.attention derives from the
    tiles for each shape: kcompiler.ops.attention_order.sm90_launch), compiled in ``jobs`` spawned
    processes."""
    from kcompiler.ops.attention import ATTENTION_SM90_TILES
    from kcompiler.ops.attention_order import sm90_launch
    todo = set()
    for B, H, S, D, c in shapes:
        for t in [{}] + [t for _, t in SM90_VARIANTS[D]]:
            kw = sm90_launch(dict(ATTENTION_SM90_TILES[(D, c)], **t), S, H, B, sms)[2]
            todo.add((D, c, tuple(sorted(kw.items()))))
    todo = sorted(todo, key=str)
    t0 = time.perf_counter()
    with multiprocessing.get_context("spawn").Pool(jobs) as pool:
        for err in pool.imap_unordered(_compile, [(D, c, dict(t)) for D, c, t in todo]):
            if err:
                print(f"  compile failed: {err}", flush=True)
    print(f"compiled {len(todo)} specialisations in {time.perf_counter() - t0:.0f} s ({jobs} processes)", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--json", help="write the results here")
    p.add_argument("--shapes", help="indices into SHAPES, comma-separated (default: all)")
    p.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1), help="compile processes")
    p.add_argument("--variants", help="a regular expression: only the variants of SM90_VARIANTS whose name it finds")
    args = p.parse_args()
    picks = [i for x in args.shapes.split(",") for i in SHAPE_SETS.get(x, [x])] if args.shapes else range(len(SHAPES))
    shapes = [SHAPES[int(i)] for i in dict.fromkeys(picks)]
    if args.variants:
        for d in SM90_VARIANTS:
            SM90_VARIANTS[d] = [(n, t) for n, t in SM90_VARIANTS[d] if re.search(args.variants, n)]
    import torch
    precompile(shapes, args.jobs, torch.cuda.get_device_properties(0).multi_processor_count)

    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench, do_bench_cudagraph

    from kcompiler import ops

    def bench(fn) -> float:
        return do_bench(fn, warmup=10, rep=100, return_mode="median")

    def rel(a, b) -> float:
        return ((a.float() - b.float()).norm() / b.float().norm()).item()

    def host_us(fn, n: int = 30) -> float:
        """Median microseconds a call takes to return (the host's work; the launch is asynchronous)."""
        torch.cuda.synchronize()
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        return sorted(ts)[n // 2] * 1e6

    dev = torch.cuda.get_device_name()
    results: dict = {"device": dev, "rows": []}
    scores: dict = {}  # (D, causal) -> name -> [flash / ours ratios]
    print(f"{dev}; TFLOP/s, x = time of the peer / ours (> 1: we are faster)", flush=True)
    for B, H, S, D, causal in shapes:
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        tf = lambda ms: flops / ms / 1e9  # noqa: E731
        sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)  # noqa: E731,B023
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            want = sdpa()
            t_flash = bench(sdpa)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                t_cudnn = bench(sdpa)
        except RuntimeError as e:
            print(f"  cuDNN attention unavailable: {str(e)[:120]}")
            t_cudnn = float("nan")
        name = f"B{B} H{H} S{S} D{D} {'causal' if causal else 'full'}"
        print(f"{name}: SDPA flash {tf(t_flash):.0f}, cuDNN {tf(t_cudnn):.0f}", flush=True)
        row = dict(shape=name, flash_tflops=tf(t_flash), cudnn_tflops=tf(t_cudnn), variants={})
        for vname, tiles in [("default", None)] + SM90_VARIANTS[D]:
            def call(tiles=tiles):
                return ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="sm90")  # noqa: B023
            try:
                err = rel(call(), want)
                t = bench(call)
            except Exception as e:  # noqa: BLE001 - one failed variant must not end the run
                print(f"  {vname:28s} FAILED {type(e).__name__}: {str(e)[:200]}", flush=True)
                continue
            extra = ""
            entry = dict(tiles=tiles, ms=t, tflops=tf(t), rel_err=err, vs_flash=t_flash / t, vs_cudnn=t_cudnn / t)
            if tiles is None:
                hu = host_us(call)
                tg = do_bench_cudagraph(call, rep=100, return_mode="median")
                entry.update(host_us=hu, graph_ms=tg, graph_tflops=tf(tg))
                extra = f"; host {hu:.0f} us a call, device alone (CUDA graph) {tf(tg):.0f} TFLOP/s ({tg * 1e3:.0f} us)"
            ok = err < 2e-2
            print(f"  {vname:28s} {tf(t):5.0f} TFLOP/s ({t * 1e3:7.1f} us) x{t_flash / t:.2f} flash "
                  f"x{t_cudnn / t:.2f} cuDNN, error {err:.1e}{'' if ok else ' WRONG'}{extra}", flush=True)
            row["variants"][vname] = entry
            if ok:
                scores.setdefault((D, causal), {}).setdefault(vname, []).append(t_flash / t)
        results["rows"].append(row)
        del q, k, v, want
        torch.cuda.empty_cache()

    print_table(results["rows"])

    print("\nBest per (D, causal), geometric mean of x flash over its shapes (variants timed on every shape):")
    best_tiles = {}
    for (D, causal), by in sorted(scores.items()):
        n = max(len(r) for r in by.values())
        full = {name: math.exp(sum(map(math.log, r)) / len(r)) for name, r in by.items() if len(r) == n}
        for name, g in sorted(full.items(), key=lambda x: -x[1]):
            print(f"  D{D} {'causal' if causal else 'full'}: {name:28s} x{g:.2f}")
        name = max(full, key=full.get)
        tiles = dict(ops.ATTENTION_SM90_TILES[(D, causal)], **({} if name == "default" else
                                                                dict(SM90_VARIANTS[D])[name]))
        best_tiles[f"{D},{causal}"] = tiles
        print(f"  -> ATTENTION_SM90_TILES[({D}, {causal})] = dict({', '.join(f'{k}={v}' for k, v in tiles.items())})"
              f"{'  (unchanged)' if name == 'default' else ''}")
    results["best_tiles"] = best_tiles
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def print_table(rows: list) -> None:
    """The run in one table: a row a shape, SDPA flash's TFLOP/s, then x flash (time of SDPA flash /
    ours; > 1: we are faster) of the default and each variant timed on it ('-': not run or failed,
    '!': beyond the error bound)."""
    names = list(dict.fromkeys(n for r in rows for n in r["variants"]))
    w = max([8] + [len(n) for n in names])
    print("\nx SDPA flash (time of flash / ours):")
    print(f"{'shape':26s} {'flash':>6s} " + " ".join(f"{n:>{w}s}" for n in names))
    for r in rows:
        cells = []
        for n in names:
            e = r["variants"].get(n)
            cells.append(f"{'-':>{w}s}" if e is None else
                         f"{e['vs_flash']:>{w - 1}.2f}{' ' if e['rel_err'] < 2e-2 else '!'}")
        print(f"{r['shape']:26s} {r['flash_tflops']:6.0f} " + " ".join(cells))


if __name__ == "__main__":
    main()
