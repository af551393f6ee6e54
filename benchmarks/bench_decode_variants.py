"""The paged decode's tensor-core variants (kcompiler.ops.decode.DECODE_TC_VARIANTS) beside ops' default, at
bench_attention.py's decode shapes, in one run on a CUDA GPU: the numbers ops.decode.DECODE_TC_DEFAULT's
one-line choice is made from.

    python benchmarks/bench_decode_variants.py [--kinds gqa8,gqa4,mha] [--pages 16,64]
        [--variants ring,eager,...|gqa8|bases] [--splits 1,2,4] [--workers 8] [--sorted-pages] [--json OUT.json]

``--variants gqa8`` (:data:`PRESETS`) times the GQA 8:1 candidates of issue 23 beside the current
choice: ``--kinds gqa8 --variants gqa8 --splits ''`` is the quick run for DECODE_TC_DEFAULT[8].
``--variants bases`` times the BASES forms (one 64-bit offset a page a step) beside their twins.

B 32, H 32, 8192 keys, D 128, bf16, one query token, a paged cache in shuffled page order (pages of 16
and of 64). Kinds: gqa8 (4 KV heads, 8:1), gqa4 (8 KV heads, 4:1) and mha (32 KV heads: ops' default
only, the control). Rows of a GQA kind: ops' default (``default``), each variant by name (tensor_cores
True, ``tc_tiles=name``; its split count by ops' choice), the default tiles with each ``--splits``
count (``splits=N``), and the default again at the end (``default again``: the spread between two
timings of one kernel in this run). Each row is first checked against torch's SDPA in float32
(relative Frobenius error), then timed per call (host work included: 100 calls back to back between
two CUDA events, the median of 7; bench_attention.per_call_ms) and replayed from a CUDA graph
(triton's do_bench_cudagraph, the device alone); TB/s of K and V read once and % of a 4 GiB
device-to-device copy measured at the start of the same run. ``splits`` is the split count the row
ran with (1: no merge_states pass).

The kernels are compiled first by ``--workers`` processes in parallel (tiny calls of each variant,
which fill kcompiler's disk cache; 0: compile in this process as the rows come), so that the run stays
within about two minutes.
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

B, H, S, D = 32, 32, 8192, 128
#: kind: KV heads of the 32 query heads
KINDS = {"gqa8": 4, "gqa4": 8, "mha": 32}
#: named lists of variants for ``--variants``: gqa8, the candidates for GQA 8:1 on pages of 16 (one
#: unsplit wave of 128 blocks; GATHER's pages read a step ahead, more bytes in flight an SM) beside
#: ring_1wave, the choice they would replace (ops.decode.DECODE_TC_VARIANTS says what each is)
PRESETS = {"gqa8": ["ring_1wave", "eager_1wave", "ring_gather", "eager_gather", "s3_gather", "w8_1wave",
                    "w8_s3_1wave", "w2_bn64"],
           # BASES (the copies' addresses from one offset a page a step) beside the kernels it changes
           "bases": ["ring_gather", "ring_gather_bases", "eager_gather", "eager_gather_bases", "w8_1wave",
                     "w8_bases_1wave", "ring", "ring_bases"]}


def _warm(job: tuple) -> str:
    """Compile (into the disk cache) what a row of ``job`` = (KV heads, page, tc_tiles or None,
    num_splits or None) launches, by one small call with one split and one with two."""
    import torch
    from kcompiler import ops

    hk, page, tiles, _ = job
    g = torch.Generator(device="cuda").manual_seed(0)
    kc = torch.randn(4, page, hk, D, device="cuda", dtype=torch.bfloat16, generator=g)
    table = torch.arange(4, device="cuda", dtype=torch.int32).view(1, 4)
    lens = torch.full((1,), 3 * page, device="cuda", dtype=torch.int32)
    q = torch.randn(1, H, D, device="cuda", dtype=torch.bfloat16, generator=g)
    opts = {} if tiles is None else dict(tensor_cores=True, tc_tiles=tiles)
    for n in (1, 2):
        ops.paged_decode(q, kc, kc, table, lens, num_splits=n, **opts)
    torch.cuda.synchronize()
    return f"{hk} {page} {tiles}"


def rows_of(kind: str, variants: list[str], splits: list[int]) -> list[tuple[str, object, int | None]]:
    """(row name, tc_tiles or None for ops' default, num_splits or None) of a kind."""
    if kind == "mha":
        return [("default", None, None)]
    return ([("default", None, None)] + [(v, v, None) for v in variants]
            + [(f"splits={n}", "default", n) for n in splits] + [("default again", None, None)])


def main() -> None:
    from kcompiler.ops import decode as dec

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default="gqa8,gqa4,mha")
    p.add_argument("--pages", default="16,64")
    p.add_argument("--variants", default=",".join(dec.DECODE_TC_VARIANTS),
                   help="names of ops.decode.DECODE_TC_VARIANTS (default: all), or one of PRESETS")
    p.add_argument("--splits", default="1,2,4", help="fixed split counts with the default tiles ('' for none)")
    p.add_argument("--workers", type=int, default=8, help="processes compiling the kernels first (0: none)")
    p.add_argument("--sorted-pages", action="store_true",
                   help="diagnostic: the pages of each sequence in order (one contiguous run of the cache), not "
                        "shuffled; set beside a shuffled run, it separates what pages of 16 cost as scattered 16 KB "
                        "reads (DRAM, TLB) from what they cost in the kernel (table reads, addresses)")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    pages = [int(x) for x in args.pages.split(",") if x]
    variants = PRESETS.get(args.variants) or [v for v in args.variants.split(",") if v]
    splits = [int(x) for x in args.splits.split(",") if x]
    unknown = [v for v in variants if v not in dec.DECODE_TC_VARIANTS] + [k for k in kinds if k not in KINDS]
    if unknown:
        p.error(f"unknown kinds or variants {unknown}; variants: {sorted(dec.DECODE_TC_VARIANTS)}")

    t0 = time.time()
    if args.workers > 0:
        jobs = sorted({(KINDS[k], pg, None if t == "default" else t, None) for k in kinds for pg in pages
                       for _, t, _ in rows_of(k, variants, splits)}, key=str)
        compile_in_parallel(_warm, jobs, args.workers, "row kinds")

    import torch
    from bench_attention import copy_bandwidth, decode_inputs, graph_ms, paged, per_call_ms, rel
    from kcompiler import ops

    dev = torch.cuda.get_device_name()
    bw = copy_bandwidth()
    results: dict = {"device": dev, "copy_tbps": bw, "default_by_G": dict(dec.DECODE_TC_DEFAULT), "rows": [],
                     "sorted_pages": args.sorted_pages}
    print(f"{dev}: device-to-device copy {bw:.2f} TB/s (read + write); ops.decode.DECODE_TC_DEFAULT "
          f"{dec.DECODE_TC_DEFAULT}", flush=True)
    gen = torch.Generator().manual_seed(0)
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
    table_rows = []
    for kind in kinds:
        HK = KINDS[kind]
        G = H // HK
        q, k, v, _, _, kd, vd, want = decode_inputs(B, H, HK, S, D, False)
        del kd, vd
        kv_bytes = 2 * k.numel() * k.element_size()
        for page in pages:
            if args.sorted_pages:  # each sequence's pages one after another, in order: no page is a jump
                per = S // page
                kc = k.permute(0, 2, 1, 3).reshape(B * per, page, HK, D).contiguous()
                vc = v.permute(0, 2, 1, 3).reshape(B * per, page, HK, D).contiguous()
                table = torch.arange(B * per, device="cuda", dtype=torch.int32).view(B, per)
            else:
                kc, vc, table = paged(k, v, page, gen)
            for name, tiles, n in rows_of(kind, variants, splits):
                opts = {} if tiles is None else dict(tensor_cores=True,
                                                     tc_tiles=None if tiles == "default" else tiles)

                def call(kc=kc, vc=vc, table=table, n=n, opts=opts):
                    return ops.paged_decode(q, kc, vc, table, lens, num_splits=n, max_seq_len=S, **opts)
                dec.PLANS.clear()
                try:
                    err = rel(call(), want)
                    plan = next(iter(dec.PLANS.values()), None)
                    used = (plan.fixed or dec.split_count(B * HK, S, plan.slots, min_waves=plan.waves)) \
                        if plan is not None else "?"
                    t_call = per_call_ms(call)
                    t_graph = graph_ms(call)
                except Exception as e:  # noqa: BLE001 - one failed row must not end the run
                    print(f"  {kind} page {page} {name}: FAILED {type(e).__name__}: {str(e)[:300]}", flush=True)
                    continue
                tiles_used = dec.decode_tc_tiles(G, None if tiles in (None, "default") else tiles) \
                    if tiles is not None or G >= 4 else "SIMT"
                row = dict(kind=kind, G=G, page=page, row=name, splits=used, tiles=tiles_used, rel_err=err,
                           per_call_ms=t_call, graph_ms=t_graph, per_call_of_copy=kv_bytes / t_call / 1e9 / bw,
                           graph_of_copy=kv_bytes / t_graph / 1e9 / bw)
                results["rows"].append(row)
                table_rows.append(row)
                print(f"  {kind} page {page:2d} {name:14s} splits {used}: per call {t_call * 1e3:7.1f} us = "
                      f"{row['per_call_of_copy']:.1%}, graph {t_graph * 1e3:7.1f} us = {row['graph_of_copy']:.1%} "
                      f"of copy (error {err:.1e}) {tiles_used}", flush=True)
            del kc, vc, table
        del q, k, v, want
        torch.cuda.empty_cache()
    print(f"\n{dev}, copy {bw:.2f} TB/s; {'sorted' if args.sorted_pages else 'shuffled'} pages; % of copy per call / "
          f"from a CUDA graph (splits):")
    print("| kind | row | page 16 | page 64 |\n|---|---|---|---|")
    for kind in kinds:
        for name, _, _ in rows_of(kind, variants, splits):
            cells = []
            for page in (16, 64):
                r = next((r for r in table_rows if (r["kind"], r["row"], r["page"]) == (kind, name, page)), None)
                cells.append("—" if r is None else
                             f"{r['per_call_of_copy']:.1%} / {r['graph_of_copy']:.1%} ({r['splits']})")
            print(f"| {kind} | {name} | {cells[0]} | {cells[1]} |")
    print(f"total {time.time() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)


if __name__ == "__main__":
    main()
