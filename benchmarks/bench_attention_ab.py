"""A/B timing of the Hopper prefill's tiles against its default and cuDNN, interleaved: the H100/H200
drift by several per cent within one process (clocks, heat), more than the forms compared differ, so
each round times every candidate once, in turn, and the ratios are taken round by round.

    python benchmarks/bench_attention_ab.py [--shapes 4,32,4096,128,0;4,32,4096,128,1] [--rounds 7]
        [--variants 'lazy=LAZY_MAX:true;lazy 3st=LAZY_MAX:true,STAGES:3'] [--json OUT.json]

Shapes: B,H,S,D,causal[,HK] (bf16, layout (B, H, S, D); HK key/value heads, grouped-query attention,
default H; default issue 23's B4 H32 S4096 D128, full and causal). Variants: name=KEY:VALUE,... on top
of kcompiler.ops.ATTENTION_SM90_TILES' entry for the shape (values: ints, floats, or true / false; the
caller's tiles then keep the defaults' PERSIST and SMALL_GRID unless they name them). Each candidate is checked first against SDPA flash (relative Frobenius error < 2e-2).
Per round: triton's do_bench median (100 ms of calls, host time included); printed: the median over
rounds of TFLOP/s (4 B H S^2 D operations, half when causal), and of the per-round ratios to the
default and to cuDNN, with their spread (min-max over rounds).

``--fp8``: the candidates are FP8 forms (ops.attention on e4m3 q, k, v quantised per tensor from the
bf16 inputs, over kcompiler.ops.ATTENTION_FP8_TILES' entry), checked against SDPA flash on the
dequantised inputs (relative error < 5e-2); the anchor beside the default is then our bf16 path's
default on the bf16 inputs ("bf16", issue 23's FP8 goal: 1.6x it), not cuDNN.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kcompiler import ops  # noqa: E402
from kcompiler.ops.attention import ATTENTION_SM90_TILES  # noqa: E402
from kcompiler.ops.attention_fp8 import ATTENTION_FP8_TILES  # noqa: E402
from bench_attention_fp8 import quantise  # noqa: E402 - per tensor, as that benchmark does


def value(text: str) -> bool | int | float:
    """A tiles value: true / false as a bool, else an int, else a float (ValueError)."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    return int(low) if low.lstrip("-").isdigit() else float(low)


def parse_variants(text: str) -> list[tuple[str, dict]]:
    """``name=KEY:VALUE,...;...`` as (name, {KEY: value}) pairs (:func:`value`); ValueError for a
    malformed one."""
    out = []
    for item in filter(None, text.split(";")):
        name, _, spec = item.partition("=")
        kv = [x.split(":") for x in filter(None, spec.split(","))]
        if not name or any(len(x) != 2 for x in kv):
            raise ValueError(f"--variants: name=KEY:VALUE,... ; not {item!r}")
        out.append((name.strip(), {k.strip(): value(v) for k, v in kv}))
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="4,32,4096,128,0;4,32,4096,128,1")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--variants", default="lazy=LAZY_MAX:true")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--fp8", action="store_true", help="FP8 candidates, against our bf16 path (module docstring)")
    args = p.parse_args()
    anchor = "bf16" if args.fp8 else "cuDNN"
    variants = parse_variants(args.variants)
    results = {"device": torch.cuda.get_device_name(), "rows": []}
    for spec in filter(None, args.shapes.split(";")):
        B, H, S, D, causal, *hk = (int(x) for x in spec.split(","))
        causal = bool(causal)
        HK = hk[0] if hk else H  # grouped-query attention where given: H / HK query heads a KV head
        q = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        fp8 = {}
        if args.fp8:  # per-tensor e4m3, the reference on the dequantised values
            for name, x in (("q", q), ("k", k), ("v", v)):
                fp8[name], fp8["descale_" + name] = quantise(x)
            ref = [(fp8[n].to(torch.bfloat16) * fp8["descale_" + n]).to(torch.bfloat16) for n in "qkv"]
        qr, kr, vr = ref if args.fp8 else (q, k, v)
        kr, vr = (x.repeat_interleave(H // HK, dim=1) for x in (kr, vr))
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            want = torch.nn.functional.scaled_dot_product_attention(qr, kr, vr, is_causal=causal)
        defaults = (ATTENTION_FP8_TILES[causal] if args.fp8 else ATTENTION_SM90_TILES[(D, causal)])
        cands = {anchor: None, "default": {}}
        for name, t in variants:
            cands[name] = {**{k2: v2 for k2, v2 in defaults.items() if k2 in ("PERSIST", "SMALL_GRID")}, **t}
        fns = {}
        for name, t in cands.items():
            if t is None and args.fp8:
                def fn():
                    return ops.attention(q, k, v, causal=causal, layout="bhsd", path="sm90")
            elif t is None:
                def fn():
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                                                enable_gqa=HK != H)
            elif args.fp8:
                def fn(t=t):
                    return ops.attention(fp8["q"], fp8["k"], fp8["v"], causal=causal, layout="bhsd", tiles=t or None,
                                         descale_q=fp8["descale_q"], descale_k=fp8["descale_k"],
                                         descale_v=fp8["descale_v"])
            else:
                def fn(t=t):
                    return ops.attention(q, k, v, causal=causal, layout="bhsd", path="sm90", tiles=t or None)
            try:
                err = ((fn().float() - want.float()).norm() / want.float().norm()).item()
            except Exception as e:  # noqa: BLE001 - reported; the other candidates are still timed
                print(f"  {name}: failed: {type(e).__name__}: {str(e)[:200]}")
                continue
            if err >= (5e-2 if args.fp8 else 2e-2):
                print(f"  {name}: relative error {err:.1e} against SDPA flash: not timed")
                continue
            fns[name] = fn
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        times = {n: [] for n in fns}
        for _ in range(args.rounds):
            for n, fn in fns.items():
                times[n].append(do_bench(fn, warmup=10, rep=100, return_mode="median"))
        label = f"B{B} H{H}{f' HK{HK}' if HK != H else ''} S{S} D{D} {'causal' if causal else 'full'}"
        print(f"{label} ({args.rounds} rounds; median TFLOP/s, x default and x {anchor}: median [min-max] of the "
              "rounds' ratios)")
        row = {"shape": label, "variants": {}}
        for n, ts in times.items():
            tf = statistics.median(flops / t / 1e9 for t in ts)
            r = {"tflops": tf}
            line = f"  {n:24s} {tf:5.0f}"
            for ref in ("default", anchor):
                if ref in times and n != ref:
                    ratios = [a / b for a, b in zip(times[ref], ts)]
                    r[f"vs_{ref}"] = statistics.median(ratios)
                    line += f"   x{ref} {statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
            print(line, flush=True)
            row["variants"][n] = r
        results["rows"].append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
