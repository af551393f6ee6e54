"""The Hopper MLA decode's variants (std.mla_sm90 through ops.mla_decode's ``sm90_tiles`` and
``num_splits``) beside ops' default, in one run on an H100: the numbers issue 23's MLA goal (>= 470
TFLOP/s at 128 heads, >= 2.4 TB/s at 16 heads) is chased with.

    python benchmarks/bench_mla_variants.py [--heads 16,128] [--pages 64] [--variants default,bn32x4,...]
        [--workers 8] [--json OUT.json]

DeepSeek's shape: B 32, 8192 keys each, latent 512 + rope 64, bf16, pages of 64 (FlashMLA's) in
shuffled order. Rows (``VARIANTS``): ops' default, other tiles (BN keys a step x STAGES in the ring,
OVERLAP, SEESAW: FlashMLA's later schedule, BN 64 x 2 as FlashMLA's and 32 x 2 / 3; at 16 heads QROWS 0, Q's
rows compact, and ST, S transposed), split counts, the two timing probes (PROBE 1: the ring streams the cache with nothing
computed, the bandwidth ceiling of those tiles; PROBE 2: S and the softmax without P V; PROBE 3: a
form's compute without the loads, the ring filled once and reused; PROBE 4: S alone), SACC (S's k
steps over 2 or 4 independent accumulator chains), PSS (warpgroup 1's P V with P from shared memory),
SSPLIT (S's k steps over both consumer warpgroups) and the default again (the run's spread). Each row is first checked: against float32 torch on 2 sequences (relative
Frobenius error) and against the default's output and LSE on all 32 (max |difference|); PROBE 2 by its
LSE only, PROBE 1, 3 and 4 not at all (their results mean nothing). Then timed from a CUDA graph (the device alone) and
per call (host work included); TB/s of the latent cache read once (302 MB), % of a device-to-device
copy measured at the start of the same run, TFLOP/s counting 2 (D + DR) + 2 D operations a key and
head. ``--workers`` processes compile the variants first (tiny calls fill kcompiler's disk cache).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from harness import compile_in_parallel

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

B, S, D, DR = 32, 8192, 512, 64
#: row name: (sm90_tiles, num_splits or None for ops' choice). Probes are timing diagnostics.
VARIANTS = {
    "default": ({}, None),
    "overlap": (dict(OVERLAP=True), None),
    "bn32x2": (dict(BN=32, STAGES=2), None),
    "bn64x2": (dict(BN=64, STAGES=2), None),
    "bn32x3": (dict(BN=32, STAGES=3), None),
    "bn32x3-overlap": (dict(BN=32, STAGES=3, OVERLAP=True), None),
    "bn32x4": (dict(BN=32, STAGES=4), None),
    "bn32x4-overlap": (dict(BN=32, STAGES=4, OVERLAP=True), None),
    "bn16x8": (dict(BN=16, STAGES=8), None),
    "seesaw bn64x2": (dict(BN=64, STAGES=2, SEESAW=True), None),
    "seesaw bn32x2": (dict(BN=32, STAGES=2, SEESAW=True), None),
    "seesaw bn32x3": (dict(BN=32, STAGES=3, SEESAW=True), None),
    "seesaw bn64x2 splits=4": (dict(BN=64, STAGES=2, SEESAW=True), 4),
    "splits=1": ({}, 1),
    "splits=2": ({}, 2),
    "splits=4": ({}, 4),
    "splits=8": ({}, 8),
    "bn32x4 splits=8": (dict(BN=32, STAGES=4), 8),
    "probe loads": (dict(PROBE=1), None),
    "probe loads bn32x4": (dict(BN=32, STAGES=4, PROBE=1), None),
    "probe no-PV": (dict(PROBE=2), None),
    "probe no-PV bn32x4": (dict(BN=32, STAGES=4, PROBE=2), None),
    # 16 heads: Q's rows compact (QROWS 0: 16 rows, 18 KB instead of 72; at 128 heads the same as 64),
    # the ring the freed shared memory; ST: S transposed (K Q^T, 64 keys as M, 16 heads as N; refused
    # at 128 heads)
    "q16 bn32x2": (dict(BN=32, STAGES=2, QROWS=0), None),
    "q16 bn32x4": (dict(BN=32, STAGES=4, QROWS=0), None),
    "q16 bn32x5": (dict(BN=32, STAGES=5, QROWS=0), None),
    "q16 bn64x2": (dict(BN=64, STAGES=2, QROWS=0), None),
    "q16 bn16x8": (dict(BN=16, STAGES=8, QROWS=0), None),
    "q16 seesaw bn64x2": (dict(BN=64, STAGES=2, QROWS=0, SEESAW=True), None),
    "q16 seesaw bn32x4": (dict(BN=32, STAGES=4, QROWS=0, SEESAW=True), None),
    "st": (dict(BN=64, STAGES=2, QROWS=0, ST=True), None),
    "st splits=8": (dict(BN=64, STAGES=2, QROWS=0, ST=True), 8),
    "probe loads q16 bn32x4": (dict(BN=32, STAGES=4, QROWS=0, PROBE=1), None),
    # where a 128-head tile's time goes (issue 23): S alone (PROBE 4), each form's compute without the
    # loads (PROBE 3: the ring filled once and reused), and S over 2 / 4 independent accumulator chains
    # (SACC) in the kernel and in the probes
    "sacc2": (dict(BN=32, STAGES=2, SACC=2), None),
    "sacc2 bn32x3": (dict(BN=32, STAGES=3, SACC=2), None),
    "sacc4 bn16x4": (dict(BN=16, STAGES=4, SACC=4), None),
    "sacc4 bn16x8": (dict(BN=16, STAGES=8, SACC=4), None),
    # PSS: warpgroup 1's P V with P from shared memory too (A from shared memory, as in the ST form)
    "pss": (dict(BN=32, STAGES=2, PSS=True), None),
    "pss sacc2": (dict(BN=32, STAGES=2, SACC=2, PSS=True), None),
    "pss bn64x2": (dict(BN=64, STAGES=2, PSS=True), None),
    "probe no-loads pss sacc2": (dict(BN=32, STAGES=2, SACC=2, PSS=True, PROBE=3), None),
    # SSPLIT: S's k steps split over both consumer warpgroups (warpgroup 2 idles during S otherwise)
    "ssplit": (dict(BN=32, STAGES=2, SSPLIT=True), None),
    "ssplit bn32x3": (dict(BN=32, STAGES=3, SSPLIT=True), None),
    "ssplit sacc2": (dict(BN=32, STAGES=2, SSPLIT=True, SACC=2), None),
    "ssplit pss": (dict(BN=32, STAGES=2, SSPLIT=True, PSS=True), None),
    "ssplit sacc4 bn16x4": (dict(BN=16, STAGES=4, SSPLIT=True, SACC=4), None),
    "probe no-loads ssplit": (dict(BN=32, STAGES=2, SSPLIT=True, PROBE=3), None),
    "probe S-only": (dict(PROBE=4), None),
    "probe S-only sacc2": (dict(BN=32, STAGES=2, SACC=2, PROBE=4), None),
    "probe S-only bn64x2": (dict(BN=64, STAGES=2, PROBE=4), None),
    "probe no-PV sacc2": (dict(BN=32, STAGES=2, SACC=2, PROBE=2), None),
    "probe no-loads": (dict(PROBE=3), None),
    "probe no-loads sacc2": (dict(BN=32, STAGES=2, SACC=2, PROBE=3), None),
    "probe no-loads bn32x4": (dict(BN=32, STAGES=4, PROBE=3), None),
    "probe no-loads bn64x2": (dict(BN=64, STAGES=2, PROBE=3), None),
    "probe no-loads overlap": (dict(OVERLAP=True, PROBE=3), None),
    "probe no-loads seesaw bn32x3": (dict(BN=32, STAGES=3, SEESAW=True, PROBE=3), None),
    "probe no-PV q16 bn32x4": (dict(BN=32, STAGES=4, QROWS=0, PROBE=2), None),
    "default again": ({}, None),
}


def _warm(job: tuple) -> str:
    """Compile (into the disk cache) what rows with ``job`` = (page, sorted tiles items) launch: one
    tiny call with one split (OUT = T) and one with two (OUT f32 and merge_states)."""
    import torch
    from kcompiler import ops

    page, tiles = job
    g = torch.Generator(device="cuda").manual_seed(0)
    ckv = torch.randn(4, page, D, device="cuda", dtype=torch.bfloat16, generator=g)
    kpe = torch.randn(4, page, DR, device="cuda", dtype=torch.bfloat16, generator=g)
    table = torch.arange(4, device="cuda", dtype=torch.int32).view(1, 4)
    lens = torch.full((1,), 3 * page, device="cuda", dtype=torch.int32)
    qn = torch.randn(1, 64, D, device="cuda", dtype=torch.bfloat16, generator=g)
    qp = torch.randn(1, 64, DR, device="cuda", dtype=torch.bfloat16, generator=g)
    for n in (1, 2):
        ops.mla_decode(qn, qp, ckv, kpe, table, lens, scale=0.07, num_splits=n, path="sm90", sm90_tiles=dict(tiles))
    torch.cuda.synchronize()
    return f"{page} {tiles}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--heads", default="16,128")
    p.add_argument("--pages", default="64", help="page sizes (FlashMLA's is 64; 16 also runs)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="names of VARIANTS (default: all)")
    p.add_argument("--workers", type=int, default=8, help="processes compiling the kernels first (0: none)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    heads = [int(x) for x in args.heads.split(",") if x]
    pages = [int(x) for x in args.pages.split(",") if x]
    names = [v for v in args.variants.split(",") if v]
    if [v for v in names if v not in VARIANTS]:
        p.error(f"unknown variants {[v for v in names if v not in VARIANTS]}; known: {list(VARIANTS)}")
    if "default" not in names:
        names.insert(0, "default")

    t0 = time.time()
    if args.workers > 0:
        jobs = sorted({(pg, tuple(sorted(VARIANTS[v][0].items()))) for v in names for pg in pages}, key=str)
        compile_in_parallel(_warm, jobs, args.workers, "variants")

    import torch
    from bench_attention import copy_bandwidth, graph_ms, mla_reference, per_call_ms, rel
    from kcompiler import ops
    from kcompiler.ops import decode as dec
    from kcompiler.ops import mla as ops_mla

    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results: dict = {"device": dev, "copy_tbps": bw, "default_tiles": dict(ops_mla.MLA_SM90_TILES), "rows": []}
    print(f"{dev}: device-to-device copy {bw:.2f} TB/s (read + write); {sms} SMs; ops.MLA_SM90_TILES "
          f"{ops_mla.MLA_SM90_TILES}", flush=True)
    gen = torch.Generator().manual_seed(1)
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
    for page in pages:
        ckv = torch.randn(B * S // page, page, D, device="cuda", dtype=torch.bfloat16)
        kpe = torch.randn(B * S // page, page, DR, device="cuda", dtype=torch.bfloat16)
        table = torch.randperm(B * S // page, generator=gen).view(B, S // page).int().cuda()
        cache_bytes = (ckv.numel() + kpe.numel()) * 2
        for H in heads:
            q_nope = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
            q_pe = torch.randn(B, H, DR, device="cuda", dtype=torch.bfloat16)
            flops = B * H * S * (2 * (D + DR) + 2 * D)
            ref = mla_reference(ckv, kpe, table, q_nope, q_pe, S)
            base = None
            for name in names:
                tiles, n = VARIANTS[name]
                probe = tiles.get("PROBE", 0)

                def call(tiles=tiles, n=n):
                    return ops.mla_decode(q_nope, q_pe, ckv, kpe, table, lens, scale=0.07, max_seq_len=S,
                                          num_splits=n, return_lse=True, path="sm90", sm90_tiles=tiles)
                dec.PLANS.clear()
                try:
                    out, lse = call()
                    if base is None:
                        base = (out.float(), lse)
                    fin = torch.isfinite(base[1])
                    d_lse = float((lse[fin] - base[1][fin]).abs().max())
                    if probe == 0:
                        err = rel(out[:2], ref)
                        d_out = float((out.float() - base[0]).abs().max())
                        check = f"error {err:.1e}, vs default |dO| {d_out:.1e} |dLSE| {d_lse:.1e}"
                        ok = err < 2e-2 and d_lse < 1e-2
                    elif probe == 2:
                        err, check, ok = float("nan"), f"probe: |dLSE| {d_lse:.1e} (O not computed)", d_lse < 1e-2
                    else:  # 1: computes nothing; 3: computes on reused tiles; 4: S alone
                        err, check, ok = float("nan"), f"probe {probe}: unchecked (its result means nothing)", True
                    if not ok:
                        print(f"  H{H} page {page} {name}: WRONG ({check}); not timed", flush=True)
                        continue
                    t_graph = graph_ms(call)
                    t_call = per_call_ms(call)
                except Exception as e:  # noqa: BLE001 - one failed row must not end the run
                    print(f"  H{H} page {page} {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                bn = int(tiles.get("BN", ops_mla.MLA_SM90_TILES["BN"]))
                used = n or ops_mla.mla_sm90_splits(B * -(-H // 64), S, sms, bn)
                row = dict(H=H, page=page, row=name, tiles=tiles, splits=used, blocks=B * -(-H // 64) * used,
                           rel_err=err, graph_ms=t_graph, per_call_ms=t_call,
                           graph_tbps=cache_bytes / t_graph / 1e9, graph_of_copy=cache_bytes / t_graph / 1e9 / bw,
                           graph_tflops=flops / t_graph / 1e9, per_call_tflops=flops / t_call / 1e9,
                           per_call_of_copy=cache_bytes / t_call / 1e9 / bw)
                results["rows"].append(row)
                print(f"  H{H:3d} page {page} {name:20s} splits {used} ({row['blocks']} blocks): graph "
                      f"{t_graph * 1e3:6.1f} us = {row['graph_tbps']:.2f} TB/s = {row['graph_of_copy']:.0%} of copy, "
                      f"{row['graph_tflops']:.0f} TFLOP/s; per call {t_call * 1e3:6.1f} us "
                      f"({row['per_call_tflops']:.0f} TFLOP/s, {row['per_call_of_copy']:.0%}); {check}", flush=True)
            del q_nope, q_pe, ref, base
        del ckv, kpe, table
        torch.cuda.empty_cache()
    print(f"\n{dev}, copy {bw:.2f} TB/s; from a CUDA graph (per call):")
    print("| H | page | row | splits | us | TB/s | % of copy | TFLOP/s |\n|---|---|---|---|---|---|---|---|")
    for r in results["rows"]:
        print(f"| {r['H']} | {r['page']} | {r['row']} | {r['splits']} | {r['graph_ms'] * 1e3:.1f} "
              f"({r['per_call_ms'] * 1e3:.1f}) | {r['graph_tbps']:.2f} | {r['graph_of_copy']:.0%} "
              f"({r['per_call_of_copy']:.0%}) | {r['graph_tflops']:.0f} ({r['per_call_tflops']:.0f}) |")
    print(f"total {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
