"""kcompiler.ops.moe on a CUDA GPU against torch's reference mixture of experts (a loop over the experts
with torch.matmul on bf16 weights) and, where it imports, Triton's triton_kernels (matmul_ogs), in one
run: milliseconds, TFLOP/s, and the rate at which the experts' weights are read as a % of a
device-to-device copy measured in the same run.

    python benchmarks/bench_moe.py [--quick] [--tokens 1,16,64,512,4096] [--formats bf16,fp8,mxfp4]
        [--configs 32x2880x2880,128x4096x1536] [--top-k 4] [--reduce atomic|separate] [--gemm auto|simt|mma|sm90]
    python benchmarks/bench_moe.py --sm90 [--tokens 1024,4096] [--formats bf16,fp8,mxfp4]
        [--gemm-variants default,bn192]

--sm90: the Hopper path (ops.moe(gemm="sm90"): std.matmul_sm90's grouped GEMMs, TMA + wgmma) against
the mma.sync path (gemm="mma", "auto"'s choice below ops.MOE_SM90_MIN_ROWS_PER_EXPERT, and for FP8
weights) and torch at prefill sizes, on gpt-oss's shape (E 32, top_k 4, H = I = 2880) and a
Mixtral-like one (E 8, top_k 2, H 4096, I 14336): the layer's ms and TFLOP/s for each, and the sm90
path's two grouped GEMMs alone (TFLOP/s of the rows computed: T top_k of them, not the padding),
tokens 1024 and 4096 unless --tokens says otherwise, bf16 weights unless --formats says otherwise
(bf16 and fp8: FP8's GEMMs are E4M3 x E4M3, x and h quantised per row; its "quant ms" column is the
two per-row quantisations, moe_sm90_quant, together; its results are checked by the relative error
norm, within 2^-3: the activations' quantisation alone is about 2^-4.5; mxfp4: std.moe_sm90_mx's grouped
GEMMs, the codes decoded exactly to bf16 in shared memory, beside the mma.sync decode and torch on the
decoded weights). The two GEMMs alone (bf16, MXFP4) are timed for each of --gemm-variants, named in
GEMM_VARIANTS, each checked against the first variant's result, within 1 % of its largest element.

--small: the decode rows instead (gpt-oss's E 32, top_k 4, H = I = 2880; T 1, 4, 16, 64; bf16 and MXFP4):
routing + alignment (ops.moe_route_align), the two GEMMs alone (ops.moe_gemm_swiglu + moe_gemm_down on a
ready routing), the whole layer (ops.moe, host time included) and torch's loop reference, ms each.

Configs are E x H x I (experts, hidden, intermediate): gpt-oss's 32 x 2880 x 2880 and a 128-expert
4096 / 1536 layer. --quick: tokens 1, 64, 512 on the first config, formats bf16 and mxfp4 (about a
minute). Activations bf16, routing softmax then top-k renormalised (the torch reference's).

FLOPs: 6 T top_k H I (the gate/up GEMM 2 T k H 2I, the down GEMM 2 T k I H). Weight bytes: those of the
experts the routing touches (gate/up and down, scales included), read once; "% copy" compares their
rate with a torch copy_ of 1 GiB (bytes read + written / time), the HBM rate a memory-bound kernel can
reach. Timing: CUDA events around 10 calls after 3 warm-up calls, best of 3 (the torch reference
synchronises with the host inside, so no CUDA graph for any of them). kcompiler's result is checked
against the torch reference on the same (dequantised) weights first.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import harness  # noqa: E402
from kcompiler import ops  # noqa: E402
from kcompiler.ops.moe_types import ExpertWeights  # noqa: E402

#: E2M1 values of the 16 codes (OCP MX v1.0 §5.3.3).
E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def make_weights(e, n, k, fmt):
    """(ExpertWeights on the GPU, the same values as bf16 (E, N, K) for the torch reference, bytes)."""
    if fmt == "mxfp4":
        packed = torch.randint(0, 256, (e, n, k // 2), dtype=torch.uint8, device="cuda")
        scales = torch.randint(119, 123, (e, n, k // 32), dtype=torch.uint8, device="cuda")
        lut = torch.tensor(E2M1, device="cuda")
        vals = torch.empty(e, n, k, device="cuda", dtype=torch.bfloat16)
        for i in range(e):  # an expert at a time: the int64 codes of all would be 8 bytes a weight
            codes = torch.stack((packed[i] & 15, packed[i] >> 4), -1).reshape(n, k).long()
            vals[i] = lut[codes] * torch.exp2(scales[i].float() - 127).repeat_interleave(32, -1)
        return ExpertWeights.mxfp4(packed, scales), vals, packed.numel() + scales.numel()
    w = torch.randn(e, n, k, device="cuda", dtype=torch.bfloat16) * 0.03
    if fmt == "bf16":
        return ExpertWeights.bf16(w), w, w.numel() * 2
    s = (w.float().abs().amax(-1) / 448.0).clamp_min(1e-12)
    codes = (w.float() / s[..., None]).to(torch.float8_e4m3fn)
    deq = (codes.float() * s[..., None]).to(torch.bfloat16)
    return ExpertWeights.fp8(codes, s), deq, codes.numel() + s.numel() * 4


def torch_moe(x, logits, wg, wd, top_k):
    """The reference: softmax, top-k, renormalise; per expert gather, matmul, SwiGLU, matmul, index_add."""
    t, h = x.shape
    inter = wg.shape[1] // 2
    p = torch.softmax(logits.float(), -1)
    w, ids = torch.topk(p, top_k, -1)
    w = w / w.sum(-1, keepdim=True)
    out = torch.zeros(t, h, dtype=torch.float32, device=x.device)
    for e in range(wg.shape[0]):
        tok, j = torch.where(ids == e)
        if tok.numel() == 0:
            continue
        gu = x[tok] @ wg[e].T
        a = F.silu(gu[:, :inter]) * gu[:, inter:]
        out.index_add_(0, tok, (a @ wd[e].T).float() * w[tok, j, None])
    return out.to(x.dtype)


def triton_kernels_fn(x, logits, wg, wd, top_k):
    """Triton's triton_kernels MoE (routing + two matmul_ogs, its own fused SwiGLU) on bf16 weights, or
    the reason it cannot run here."""
    try:
        from triton_kernels.matmul_ogs import FnSpecs, FusedActivation, PrecisionConfig, matmul_ogs
        from triton_kernels.routing import routing
        from triton_kernels.swiglu import swiglu_fn
    except ImportError:
        return None, "not installed"
    try:
        w1 = wg.transpose(1, 2).contiguous()   # (E, H, 2 I): its K-major layout
        w2 = wd.transpose(1, 2).contiguous()
        act = FusedActivation(FnSpecs("swiglu", swiglu_fn, ("alpha", "limit")), (1.0, None), 2)
        pc = PrecisionConfig()

        def run():
            rd, gi, si = routing(logits, top_k, sm_first=False)
            h = matmul_ogs(x, w1, None, rd, gather_indx=gi, precision_config=pc, fused_activation=act)
            return matmul_ogs(h, w2, None, rd, scatter_indx=si, precision_config=pc, gammas=rd.gate_scal)
        run()
        return run, None
    except Exception as err:  # noqa: BLE001 - its API moves between versions: report, go on
        return None, f"failed: {type(err).__name__}: {err}"[:120]


def time_ms(fn, reps=10):
    """harness.best_device_ms: the best of 3 rounds of back-to-back calls."""
    return harness.best_device_ms(fn, reps)


def copy_gbs():
    """The house copy anchor (harness.device_copy_gbs: 4 GiB, bytes read + written)."""
    return harness.device_copy_gbs()


def small_rows(top_k=4):
    """The decode rows of --small (module docstring)."""
    e, hid, inter = 32, 2880, 2880
    print(f"{torch.cuda.get_device_name()}: E {e}, H {hid}, I {inter}, top_k {top_k}, ms a call")
    print(f"{'T':>4} {'format':>6} {'route+align':>12} {'GEMMs':>8} {'layer':>8} {'torch':>8}")
    for fmt in ("bf16", "mxfp4"):
        wg, wg_ref, _ = make_weights(e, 2 * inter, hid, fmt)
        wd, wd_ref, _ = make_weights(e, hid, inter, fmt)
        for t in (1, 4, 16, 64):
            x = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
            logits = torch.randn(t, e, device="cuda", dtype=torch.float32)
            bm = ops.moe_block_m(t, top_k, e)
            ra = time_ms(lambda: ops.moe_route_align(logits, top_k, bm))
            r = ops.moe_route_align(logits, top_k, bm)
            gm = time_ms(lambda: ops.moe_gemm_down(ops.moe_gemm_swiglu(x, wg, r), wd, r))
            layer = time_ms(lambda: ops.moe(x, logits, wg, wd, top_k))
            ref = time_ms(lambda: torch_moe(x, logits, wg_ref, wd_ref, top_k))
            print(f"{t:>4} {fmt:>6} {ra:>12.4f} {gm:>8.4f} {layer:>8.4f} {ref:>8.4f}", flush=True)
        del wg, wd, wg_ref, wd_ref
        torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tokens", default="1,16,64,512,4096")
    ap.add_argument("--formats", default=None, help="bf16,fp8,mxfp4 (--sm90: bf16 unless given)")
    ap.add_argument("--configs", default="32x2880x2880,128x4096x1536")
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--reduce", default="atomic", choices=["atomic", "separate"])
    ap.add_argument("--gemm", default="auto", choices=["auto", "simt", "mma", "sm90"])
    ap.add_argument("--sm90", action="store_true")
    ap.add_argument("--gemm-variants", "--mx-variants", default="default")
    args = ap.parse_args()
    if args.small:
        return small_rows(args.top_k)
    if args.sm90:
        given = args.tokens != ap.get_default("tokens")
        formats = (args.formats or "bf16").split(",")
        bad = [f for f in formats if f not in ("bf16", "fp8", "mxfp4")]
        if bad:
            ap.error(f"--sm90 takes --formats bf16, fp8 and mxfp4, not {','.join(bad)}")
        variants = args.gemm_variants.split(",")
        if any(v not in GEMM_VARIANTS for v in variants):
            ap.error(f"--gemm-variants: names of {sorted(GEMM_VARIANTS)}")
        sm90_table([int(t) for t in (args.tokens if given else "1024,4096").split(",")], formats, variants)
        return
    args.formats = args.formats or "bf16,fp8,mxfp4"
    if args.quick:
        args.tokens, args.formats, args.configs = "1,64,512", "bf16,mxfp4", args.configs.split(",")[0]
    k = args.top_k
    torch.manual_seed(0)
    copy = copy_gbs()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, top_k {k}, reduce {args.reduce}, "
          f"gemm {args.gemm}; copy {copy:.0f} GB/s (read + write)")
    for cfg in args.configs.split(","):
        e, hid, inter = (int(v) for v in cfg.split("x"))
        print(f"\nE {e}, H {hid}, I {inter}: ms, TFLOP/s, weight GB/s (% of copy)")
        print(f"{'T':>5} {'format':>6} {'kc ms':>8} {'TFLOP/s':>8} {'GB/s':>7} {'%copy':>6} {'torch ms':>9} "
              f"{'x torch':>8} {'triton_kernels ms':>18}")
        weights = {}
        for fmt in args.formats.split(","):
            wg, wg_ref, bg = make_weights(e, 2 * inter, hid, fmt)
            wd, wd_ref, bd = make_weights(e, hid, inter, fmt)
            weights[fmt] = (wg, wd, wg_ref, wd_ref, (bg + bd) / e)
        for t in map(int, args.tokens.split(",")):
            x = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
            logits = torch.randn(t, e, device="cuda", dtype=torch.float32)
            touched = torch.unique(torch.topk(logits, k, -1).indices).numel()
            flops = 6 * t * k * hid * inter
            ref_ms = tk = None
            for fmt in args.formats.split(","):
                wg, wd, wg_ref, wd_ref, per_expert = weights[fmt]
                kc = lambda: ops.moe(x, logits, wg, wd, k, reduce=args.reduce, gemm=args.gemm)  # noqa: E731
                ref = torch_moe(x, logits, wg_ref, wd_ref, k).float()
                got = kc().float()
                err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                if err > 3e-2:
                    print(f"{t:>5} {fmt:>6} WRONG: max error {err:.3g} of the largest |output|")
                    continue
                ms = time_ms(kc)
                if ref_ms is None:  # the reference's time is the same for every format (bf16 weights)
                    ref_ms = time_ms(lambda: torch_moe(x, logits, wg_ref, wd_ref, k))
                    fn, why = triton_kernels_fn(x, logits, weights[fmt][2], weights[fmt][3], k) \
                        if fmt == "bf16" else (None, "bf16 only")
                    tk = f"{time_ms(fn):.3f}" if fn else why
                gbs = touched * per_expert / ms / 1e6
                print(f"{t:>5} {fmt:>6} {ms:>8.3f} {flops / ms / 1e9:>8.1f} {gbs:>7.0f} {100 * gbs / copy:>5.0f}% "
                      f"{ref_ms:>9.3f} {ref_ms / ms:>7.2f}x {tk if fmt == 'bf16' else '':>18}", flush=True)
            del x, logits
        del weights
        torch.cuda.empty_cache()


#: Named compile-time variants of the grouped GEMMs for --sm90's "GEMMs alone" columns (--gemm-variants):
#: overrides of std.moe_sm90_mx's kernel parameters (MXFP4) or of kcompiler.ops.moe_sm90.CONFIG's
#: (bf16, FP8 aside); "default" is none (BN 256, not kcompiler.ops.moe_sm90.choose_bn's width).
GEMM_VARIANTS = {"default": {}, "s3": {"STAGES": 3}, "s2": {"STAGES": 2}, "g4": {"GROUP_M": 4}, "g16": {"GROUP_M": 16},
                 "bn128": {"BN": 128}, "bn192": {"BN": 192}}


def grouped_config():
    """kcompiler.ops.moe_sm90's tile configuration of the bf16 / FP8 grouped GEMMs, as a new dict."""
    from kcompiler.ops import matmul_sm90, moe_sm90
    return dict(matmul_sm90.CONFIGS[moe_sm90.CONFIG])


def time_gemm_variants(variants, routing, tkhi, run1, run2):
    """The two grouped GEMMs (``run1(tiles)``: gate/up, ``run2(tiles)``: down) timed for each of
    ``variants`` (names of GEMM_VARIANTS; tkhi: T top_k H I), each checked against the first's result
    over the routing's used rows (within 1 % of the largest element); a line of TFLOP/s for every variant
    but the last, whose (ms, ms, row note) are returned."""
    used = int(routing.num_tiles[0]) * routing.block_m
    first, note = None, ""
    for v in variants:
        tiles = GEMM_VARIANTS[v]
        got = (run1(tiles)[:used].float().clone(), run2(tiles)[:used].float().clone())
        first = first or got
        same = all(float((a - b).abs().max()) <= 1e-2 * float(b.abs().max()) for a, b in zip(got, first))
        g1, g2 = time_ms(lambda: run1(tiles)), time_ms(lambda: run2(tiles))
        if v != variants[-1]:
            print(f"      GEMMs alone, variant {v}: {4 * tkhi / g1 / 1e9:.1f} / {2 * tkhi / g2 / 1e9:.1f} "
                  "TFLOP/s" + ("" if same else " WRONG (differs from the first variant)"), flush=True)
        elif not same:
            note += " WRONG"
    if len(variants) > 1:
        note += f" [{variants[-1]}]"
    return g1, g2, note


def sm90_table(tokens, formats=("bf16",), variants=("default",)):
    """The --sm90 table (the module docstring)."""
    from kcompiler.ops import moe_sm90
    from kcompiler.ops._common import stdlib_module
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}: ops.moe gemm='sm90' against gemm='mma' "
          f"and torch, weights {', '.join(formats)}; ms and TFLOP/s (6 T top_k H I FLOPs)")
    gmod = stdlib_module("matmul_sm90", "cuda")
    qmod = stdlib_module("moe_sm90", "cuda")
    xmod = stdlib_module("moe_sm90_mx", "cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, e, k, hid, inter in (("gpt-oss", 32, 4, 2880, 2880), ("mixtral", 8, 2, 4096, 14336)):
        for fmt in formats:
            wg, wg_ref, _ = make_weights(e, 2 * inter, hid, fmt)
            wd, wd_ref, _ = make_weights(e, hid, inter, fmt)
            print(f"\n{name}: E {e}, top_k {k}, H {hid}, I {inter}, {fmt} weights")
            print(f"{'T':>5} {'sm90 ms':>8} {'TFLOP/s':>8} {'mma ms':>8} {'TFLOP/s':>8} {'torch ms':>9} "
                  f"{'TFLOP/s':>8} {'GEMM1 TFLOP/s':>14} {'GEMM2 TFLOP/s':>14}" + (f" {'quant ms':>9}" if fmt == "fp8"
                                                                                   else ""))
            for t in tokens:
                x = torch.randn(t, hid, device="cuda", dtype=torch.bfloat16)
                logits = torch.randn(t, e, device="cuda", dtype=torch.float32)
                flops = 6 * t * k * hid * inter
                ref = torch_moe(x, logits, wg_ref, wd_ref, k).float()
                runs = {g: (lambda g=g: ops.moe(x, logits, wg, wd, k, gemm=g)) for g in ("sm90", "mma")}
                row = f"{t:>5}"
                for g, fn in runs.items():
                    got = fn().float()
                    if fmt == "fp8" and g == "sm90":  # activations quantised: a norm-wise check
                        err = float((got - ref).norm() / ref.norm().clamp_min(1e-30))
                        wrong = err > 2.0 ** -3
                    else:
                        err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
                        wrong = err > 3e-2
                    if wrong:
                        row += f" {'WRONG':>8} {err:>8.2g}"
                        continue
                    ms = time_ms(fn)
                    row += f" {ms:>8.3f} {flops / ms / 1e9:>8.1f}"
                ms = time_ms(lambda: torch_moe(x, logits, wg_ref, wd_ref, k))
                row += f" {ms:>9.3f} {flops / ms / 1e9:>8.1f}"
                # the grouped GEMMs alone, on the routing and operands of one call
                ids, w = ops.moe_route(logits, k)
                routing = ops.moe_align(ids, w, e, moe_sm90.BLOCK_M)
                P = routing.sorted_ids.shape[0]
                h = torch.empty(P, inter, device="cuda", dtype=torch.bfloat16)
                y = torch.empty(P, hid, device="cuda", dtype=torch.bfloat16)
                if fmt == "fp8":
                    xp = torch.randn(P, hid, device="cuda").to(torch.float8_e4m3fn)
                    hq = torch.randn(P, inter, device="cuda").to(torch.float8_e4m3fn)
                    sx = torch.full((P,), 1 / 64, device="cuda")
                    g1 = time_ms(lambda: moe_sm90.grouped_gemm(gmod, xp, wg.data, routing, h, gated=True, sms=sms,
                                                               scale_a=sx, scale_w=wg.scales))
                    g2 = time_ms(lambda: moe_sm90.grouped_gemm(gmod, hq, wd.data, routing, y, gated=False, sms=sms,
                                                               scale_a=sx, scale_w=wd.scales))
                    inv = torch.empty(t * k, device="cuda", dtype=torch.int32)
                    sq = torch.empty(P, device="cuda")
                    qx = torch.empty(P, hid, device="cuda", dtype=torch.float8_e4m3fn)
                    qh = torch.empty(P, inter, device="cuda", dtype=torch.float8_e4m3fn)
                    qt = time_ms(lambda: (moe_sm90.quantize_rows(qmod, x, routing, qx, sq, inv),
                                          moe_sm90.quantize_rows(qmod, h, routing, qh, sq)))
                elif fmt == "mxfp4":
                    xp = torch.randn(P, hid, device="cuda", dtype=torch.bfloat16)
                    hp = torch.randn(P, inter, device="cuda", dtype=torch.bfloat16)
                    g1, g2, note = time_gemm_variants(
                        variants, routing, t * k * hid * inter,
                        lambda tiles: moe_sm90.grouped_gemm_mxfp4(xmod, xp, wg, routing, h, gated=True, sms=sms,
                                                                  **tiles),
                        lambda tiles: moe_sm90.grouped_gemm_mxfp4(xmod, hp, wd, routing, y, gated=False, sms=sms,
                                                                  **tiles))
                    row += note
                else:
                    xp = torch.randn(P, hid, device="cuda", dtype=torch.bfloat16)
                    base = grouped_config()
                    g1, g2, note = time_gemm_variants(
                        variants, routing, t * k * hid * inter,
                        lambda tiles: moe_sm90.grouped_gemm(gmod, xp, wg.data, routing, h, gated=True, sms=sms,
                                                            config={**base, **tiles}),
                        lambda tiles: moe_sm90.grouped_gemm(gmod, h, wd.data, routing, y, gated=False, sms=sms,
                                                            config={**base, **tiles}))
                    row += note
                row += f" {4 * t * k * hid * inter / g1 / 1e9:>14.1f} {2 * t * k * hid * inter / g2 / 1e9:>14.1f}"
                if fmt == "fp8":
                    row += f" {qt:>9.3f}"
                print(row, flush=True)
            del wg, wd, wg_ref, wd_ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
