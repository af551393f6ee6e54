"""kcompiler.ops.moe_gemm_swiglu and moe_gemm_down (std.moe_gemm) on a CUDA GPU against torch's reference
(a loop over the experts hit, torch.matmul on the dequantised bf16 weights), in one run: for each
shape, weight format and token count, the time, TFLOP/s and the weight bytes streamed per second as a %
of a device-to-device copy measured in the same run.

    python benchmarks/bench_moe_gemm.py [--quick] [--tokens 1,4,16,64,256,1024,4096]
        [--shapes gpt-oss,4096x1536] [--formats bf16,fp8,mxfp4]
    python benchmarks/bench_moe_gemm.py --variants [--tokens 1,64] [--shapes gpt-oss]
    python benchmarks/bench_moe_gemm.py --size-anchor [--tokens 1,16,64]

Shapes: 'gpt-oss' E = 32, top_k 4, H = 2880, I = 2880; '4096x1536' E = 128, top_k 4, H = 4096,
I = 1536. Weight bytes touched = experts hit x each expert's bytes (codes and scales). FLOPs: 2
T top_k 2I H (gate/up), 2 T top_k H I (down).

Timing: a CUDA graph of the calls replayed and timed with CUDA events (launch overhead out, for torch
too). So that weights do not stay in the 50 MB L2 between calls, the graph cycles over several
routings whose experts differ (up to 8, as many as cover the experts or pass 200 MB); the copy anchor is
a 1 GiB copy_ counted as bytes read + bytes written over its time (benchmarks/RESULTS.md's convention,
the HBM rate a memory-bound kernel can reach), and "%copy" is the weight bytes read a second as a % of
it. MXFP4 runs two decodes of the tensor-core path (ops.moe_gemm's default, "split", and "shift", the earliest:
rows marked "(shift)") in the same run. The weights are random codes (FP8 codes from normal values,
MXFP4 random nibbles and scales 2^-8 .. 2^-4): quantising gpt-oss-sized weights on the host would take minutes.

--variants: MXFP4 only (tokens 1 and 64 unless --tokens says otherwise): the tensor-core path's
compile-time variants (:data:`VARIANTS`: a decode of ops.MOE_MXFP4_DECODES and ops.MOE_TUNING_KEYS
overrides), each checked against the torch reference (gate/up and the separate down projection) before
it is timed, in one table with the default first; "vs default" is the default's time over the variant's.
The weights' scales are drawn as above (all <= 128: "split" takes its one-factor pass throughout);
two rows per T time "split" and the default on scales above 128 ("split"'s two-factor pass), the
last rows MXFP8 activations (gate/up): decoded in the GEMM's registers against ops.mx_dequantize to
bf16 first and the bf16 kernel (bitwise equal results, checked).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import torch  # noqa: E402

import harness  # noqa: E402
from kcompiler import ops  # noqa: E402
from kcompiler.ops.moe_types import ExpertWeights, MoERouting, MXActivations  # noqa: E402

SHAPES = {"gpt-oss": dict(E=32, top_k=4, H=2880, I=2880), "4096x1536": dict(E=128, top_k=4, H=4096, I=1536)}
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def routing(ids: np.ndarray, w: np.ndarray, E: int, bm: int) -> MoERouting:
    """vLLM's aligned layout on the host (as tests/ops/moe_util.py's make_routing builds it), moved to the GPU."""
    T, top_k = ids.shape
    numel = T * top_k
    flat = ids.reshape(-1)
    order = np.argsort(flat, kind="stable")
    counts = np.bincount(flat, minlength=E)
    sid, tiles, pos = [], [], 0
    for e in range(E):
        a = order[pos:pos + counts[e]].tolist()
        pos += counts[e]
        n = -(-len(a) // bm) * bm
        sid += a + [numel] * (n - len(a))
        tiles += [e] * (n // bm)
    P = MoERouting.padded_slots(T, top_k, E, bm)
    used = len(tiles)
    sid += [numel] * (P - len(sid))
    tiles += [-1] * (P // bm - used)
    c = lambda a, dt: torch.from_numpy(np.asarray(a, dt)).cuda()  # noqa: E731
    return MoERouting(c(ids, np.int32), c(w, np.float32), c(sid, np.int32), c(tiles, np.int32), c([used], np.int32),
                      bm, top_k, E)


def weights(E, N, K, fmt, g):
    """(ExpertWeights on the GPU, dequantised bf16 (E, N, K), bytes an expert)."""
    if fmt == "bf16":
        d = (torch.randn(E, N, K, device="cuda", generator=g) * 0.02).bfloat16()
        return ExpertWeights.bf16(d), d, N * K * 2
    if fmt == "fp8":
        d = (torch.randn(E, N, K, device="cuda", generator=g) * 64).to(torch.float8_e4m3fn)
        s = torch.rand(E, N, device="cuda", generator=g) * 1e-3 + 1e-4
        return ExpertWeights.fp8(d, s), (d.float() * s[..., None]).bfloat16(), N * K + N * 4
    p = torch.randint(0, 256, (E, N, K // 2), device="cuda", dtype=torch.uint8, generator=g)
    s = torch.randint(119, 124, (E, N, K // 32), device="cuda", dtype=torch.uint8, generator=g)
    lut = E2M1.cuda()
    vals = torch.stack([lut[(p & 15).long()], lut[(p >> 4).long()]], -1).reshape(E, N, K)
    deq = (vals.view(E, N, K // 32, 32) * torch.exp2(s.float() - 127)[..., None]).reshape(E, N, K).bfloat16()
    return ExpertWeights.mxfp4(p, s), deq, N * K // 2 + N * K // 32


#: --variants: name -> (decode, tuning) of ops.moe_gemm_swiglu / moe_gemm_down (the default first).
VARIANTS = {
    "default (split)": ("split", {}),
    "mul": ("mul", {}),
    "shift": ("shift", {}),
    "mul chk0": ("mul", dict(CHK=0)),
    "split chk0": ("split", dict(CHK=0)),
    "split chk0 pf": ("split", dict(CHK=0, PF=1)),
    "split chk0 pf U1": ("split", dict(CHK=0, PF=1, U=1)),
    "split pf U1": ("split", dict(PF=1, U=1)),
    "split chk0 U3": ("split", dict(CHK=0, U=3)),
    "split chk0 U4 KW2": ("split", dict(CHK=0, U=4, KW=2)),
    "split chk0 KW8": ("split", dict(CHK=0, KW=8)),
    "split chk0 KW8 U1": ("split", dict(CHK=0, KW=8, U=1)),
    "split chk0 MT2": ("split", dict(CHK=0, MT=2)),
    "split chk0 MT2 KW2": ("split", dict(CHK=0, MT=2, KW=2)),
    # issue 25's decode analysis (see EXTRA): the old grid (every padded tile a block), x rows per lane
    # (no barrier before the first weight loads), block_m 16 with the empty n8 tile skipped (each
    # expert's weights read once at T = 64), the down projection with more bytes in flight a warp
    "grid full (old)": ("split", dict(GRID=0)),
    "xr": ("split", dict(XR=1)),
    "xr chk0": ("split", dict(XR=1, CHK=0)),
    "bm16 ntd": ("split", dict(NTD=1)),
    "bm16 ntd xr": ("split", dict(NTD=1, XR=1)),
    "down MT2": ("split", {}),
    "down MT2 xr chk0": ("split", dict(XR=1, CHK=0)),
    "down KW8 xr": ("split", dict(XR=1)),
    "persist gy2": ("split", dict(GY=2)),
    # the tiling before ops.MOE_GEMM_FORMAT_TILES (block_m 8 up to a mean of 8 assignments an expert, no
    # NTD, the down projection at MT 1): valid for the decode batches (T <= 64) this table times
    "old tiles bm8 down MT1": ("split", dict(NTD=0)),
    "bm16 ntd down MT1": ("split", dict(NTD=1)),
    # gate/up at MT 2 too: half the blocks (gpt-oss T 1: 360, one wave of 3 an SM, where MT 1's 720 at 4
    # an SM are 1.36 waves)
    "MT2": ("split", dict(MT=2)),
    "MT2 xr": ("split", dict(MT=2, XR=1)),
    # fewer warps a block splitting K (more steps a warp, less of each block's start and end: the
    # ncu stall profile of 2026-11-28 shows 10 % of warp cycles at the end-of-block barrier at T 16)
    "KW2": ("split", dict(KW=2)),
    "KW1": ("split", dict(KW=1)),
    "KW2 chk0": ("split", dict(KW=2, CHK=0)),
    "KW1 U1": ("split", dict(KW=1, U=1)),
    # the down projection at block_m 16 uses 130 registers (3 blocks an SM); launch bounds of 4 blocks
    # cap it at 128 without spills (ptxas 13.0)
    "down LB4": ("split", {}),
    "KW2 down LB4": ("split", dict(KW=2)),
}

#: Per-variant extras: "bm" (the routing's block_m instead of ops.moe_block_m's, the same assignments),
#: "down" (tuning of the down projection over the variant's).
EXTRA = {
    "bm16 ntd": dict(bm=16), "bm16 ntd xr": dict(bm=16),
    "down MT2": dict(down=dict(MT=2)), "down MT2 xr chk0": dict(down=dict(MT=2)),
    "down KW8 xr": dict(down=dict(KW=8)),
    "old tiles bm8 down MT1": dict(bm=8, down=dict(MT=1, NTD=0)),
    "bm16 ntd down MT1": dict(bm=16, down=dict(MT=1)),
    "down LB4": dict(down=dict(LB=4)), "KW2 down LB4": dict(down=dict(KW=4, LB=4)),
}


def torch_swiglu(x, w13, groups, top_k, I, h):
    for e, a in groups:
        gu = x[a // top_k] @ w13[e].T
        h[a] = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
    return h


def torch_down(h, w2, groups, topw, top_k, out):
    out.zero_()
    for e, a in groups:
        out.index_add_(0, a // top_k, (h[a] @ w2[e].T).float() * topw[a, None])
    return out


def time_ms(fns, reps=10):
    """Milliseconds a call, the calls cycling over fns (one a routing) in a CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in fns:
            f()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    n = max(reps, len(fns))
    with torch.cuda.graph(g):
        for i in range(n):
            fns[i % len(fns)]()
    # replays for 20 ms first: after the host-side compiles a small graph's first replays run at idle
    # clocks (the first row of a table read up to 9 % slow at T 1 against the same variant timed last)
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(1000):
        g.replay()
        b.record()
        b.synchronize()
        if a.elapsed_time(b) > 20:
            break
    best = float("inf")
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        torch.cuda.synchronize()
        best = min(best, a.elapsed_time(b) / n)
    return best


def copy_gbs():
    """The house copy anchor (harness.device_copy_gbs: 4 GiB, bytes read + written)."""
    return harness.device_copy_gbs()


def make_routings(rng, T, E, top_k, bm, b13):
    """Routings whose experts differ (see the module docstring), their groups for torch, experts hit."""
    numel = T * top_k
    hit_one = min(E, numel)
    nr = max(1, min(8, E // max(hit_one, 1), int(200e6 // max(hit_one * b13, 1))))
    perm = [rng.permutation(E) for _ in range(nr)]
    rs = []
    for i in range(nr):
        pool = perm[i][: max(top_k, min(E, hit_one))] if numel < E else perm[i]
        ids = np.stack([rng.choice(pool, top_k, replace=False) for _ in range(T)])
        rs.append(routing(ids, rng.random((T, top_k)) + 0.1, E, bm))
    hit = float(np.mean([len(np.unique(r.topk_ids.cpu().numpy())) for r in rs]))
    groups = []
    for r in rs:
        flat = r.topk_ids.reshape(-1)
        groups.append([(int(e), torch.nonzero(flat == e).reshape(-1)) for e in torch.unique(flat).tolist()])
    return rs, groups, hit


def run_variants(args, copy, g, rng):
    """The --variants table (MXFP4, gate/up + SwiGLU and the separate down projection)."""
    tokens = [int(t) for t in args.tokens.split(",")] if args.tokens_given else [1, 64]
    shapes = args.shapes.split(",") if args.shapes_given else ["gpt-oss"]
    for shape in shapes:
        E, top_k, Hd, I = (SHAPES[shape][k] for k in ("E", "top_k", "H", "I"))
        w13, d13, b13 = weights(E, 2 * I, Hd, "mxfp4", g)
        w2, d2, b2 = weights(E, Hd, I, "mxfp4", g)
        big13 = ExpertWeights.mxfp4(w13.data, w13.scales + 8)  # scales 127 .. 131: "split"'s second pass
        big2 = ExpertWeights.mxfp4(w2.data, w2.scales + 8)
        print(f"\n{shape} (E={E}, top_k={top_k}, H={Hd}, I={I}) mxfp4 variants: ms, weight GB/s (% of copy)")
        print(f"{'T':>5} {'variant':>34} {'gate/up ms':>10} {'GB/s':>6} {'%copy':>6} {'vs def':>6} "
              f"{'down ms':>8} {'GB/s':>6} {'%copy':>6} {'vs def':>6}")
        for T in tokens:
            bm = ops.moe_block_m(T, top_k, E, "mxfp4")
            numel = T * top_k
            rs, groups, hit = make_routings(rng, T, E, top_k, bm, b13)
            x = torch.randn(T, Hd, device="cuda").bfloat16()
            hs = [torch.empty(numel, I, device="cuda", dtype=torch.bfloat16) for _ in rs]
            ys = [torch.empty(numel, Hd, device="cuda") for _ in rs]
            ht = torch_swiglu(x, d13, groups[0], top_k, I, torch.empty_like(hs[0]))
            yt = torch.empty(numel, Hd, device="cuda")
            for e, a in groups[0]:
                yt[a] = (ht[a] @ d2[e].T).float() * rs[0].topk_weights.reshape(-1)[a, None]
            base = None
            names = args.names.split(",") if args.names else list(VARIANTS)
            rows = [(n, *VARIANTS[n], w13, w2) for n in names] + [
                ("split, scales > 128", "split", dict(CHK=0), big13, big2),
                ("mul, scales > 128", "mul", {}, big13, big2)]
            by_bm = {bm: rs}
            for name, dec, tun, wa, wb in rows:
                ex = EXTRA.get(name, {})
                vbm = ex.get("bm", bm)
                if vbm not in by_bm:  # the same assignments in tiles of vbm slots
                    by_bm[vbm] = [routing(r.topk_ids.cpu().numpy(), r.topk_weights.cpu().numpy(), E, vbm) for r in rs]
                vrs = by_bm[vbm]
                kw = dict(decode=dec, tuning=tun)
                kw2 = dict(decode=dec, tuning={**tun, **ex.get("down", {})})
                if wa is w13:  # correctness first (the bf16 reference's rounding differs: loose bounds)
                    h = ops.moe_gemm_swiglu(x, wa, vrs[0], out=hs[0], **kw)
                    torch.testing.assert_close(h.float(), ht.float(), rtol=3e-2,
                                               atol=3e-2 * ht.float().abs().max().item())
                    y = ops.moe_gemm_down(ht, wb, vrs[0], reduce="separate", out=ys[0], **kw2)
                    torch.testing.assert_close(y, yt, rtol=3e-2, atol=3e-2 * yt.abs().max().item())
                ms1 = time_ms([lambda i=i: ops.moe_gemm_swiglu(x, wa, vrs[i], out=hs[i], **kw) for i in range(len(vrs))])
                ms2 = time_ms([lambda i=i: ops.moe_gemm_down(hs[i], wb, vrs[i], reduce="separate", out=ys[i], **kw2)
                               for i in range(len(vrs))])
                base = base or (ms1, ms2)
                g1, g2 = hit * b13 / ms1 / 1e6, hit * b2 / ms2 / 1e6
                print(f"{T:>5} {name:>34} {ms1:>10.4f} {g1:>6.0f} {100 * g1 / copy:>5.0f}% {base[0] / ms1:>6.2f} "
                      f"{ms2:>8.4f} {g2:>6.0f} {100 * g2 / copy:>5.0f}% {base[1] / ms2:>6.2f}", flush=True)
            # MXFP8 activations (gate/up only): decoded in the GEMM's registers, or dequantised to bf16 by a
            # separate launch first; both give the bits of the bf16 values
            codes, scales = ops.mx_quantize(x.float(), "f8e4m3")
            xq = MXActivations.mxfp8(codes, scales)
            xb = ops.mx_dequantize(codes, scales, "bf16")
            want = ops.moe_gemm_swiglu(xb, w13, rs[0])
            assert torch.equal(ops.moe_gemm_swiglu(xq, w13, rs[0]).view(torch.int16), want.view(torch.int16))
            for name, dec, tun in (("mul", "mul", {}), ("split chk0", "split", dict(CHK=0))):
                mx_reg = [lambda i=i: ops.moe_gemm_swiglu(xq, w13, rs[i], out=hs[i], decode=dec, tuning=tun)
                          for i in range(len(rs))]
                mx_pre = [lambda i=i: ops.moe_gemm_swiglu(ops.mx_dequantize(codes, scales, "bf16"), w13, rs[i],
                                                          out=hs[i], decode=dec, tuning=tun) for i in range(len(rs))]
                for how, fns in (("registers", mx_reg), ("dequant first", mx_pre)):
                    # ops.moe_gemm_swiglu's own choice for MXFP8 x is MOE_MXFP8_X_IN_REGISTERS: set it for the row
                    ops.moe_gemm.MOE_MXFP8_X_IN_REGISTERS = how == "registers"
                    ms1 = time_ms(fns)
                    ops.moe_gemm.MOE_MXFP8_X_IN_REGISTERS = False
                    g1 = hit * b13 / ms1 / 1e6
                    print(f"{T:>5} {'MXFP8 x ' + name + ', ' + how:>34} {ms1:>10.4f} {g1:>6.0f} "
                          f"{100 * g1 / copy:>5.0f}% {base[0] / ms1:>6.2f}", flush=True)
        del w13, d13, w2, d2, big13, big2
        torch.cuda.empty_cache()


#: A read-only streaming kernel (the --size-anchor's own): U independent 16-byte loads a lane in flight,
#: a grid-stride walk over n words, their XOR kept alive by a store that never happens in practice.
#: PDL (programmatic dependent launch): 0 none; 1 every block lets the next launch start and waits for
#: the one before it first, before any load (as a kernel reading that launch's output must); 2 the same
#: wait after its loads, before its store (loads of data no earlier launch writes, e.g. weights, then
#: overlap the launch before).
READ_KC = """
kernel stream_read[U: i32, PDL: i32 = 0](x: ptr<i32>, n: i64, out: ptr<i32>) {
    comptime if PDL > 0 {
        launch_dependents();
    }
    comptime if PDL == 1 {
        grid_dependency_wait();
    }
    let step = i64(grid_dim.x) * i64(block_dim.x) * 4;
    var i = (i64(block_id.x) * i64(block_dim.x) + i64(thread_id.x)) * 4;
    var acc = vec<i32, 4>(0);
    while i + i64(U - 1) * step + 3 < n {
        for u in comptime range(0, U) {
            acc = acc ^ load[vec<i32, 4>](x + (i + i64(u) * step));
        }
        i += i64(U) * step;
    }
    while i + 3 < n {
        acc = acc ^ load[vec<i32, 4>](x + i);
        i += step;
    }
    comptime if PDL == 2 {
        grid_dependency_wait();
    }
    if (acc[0] ^ acc[1] ^ acc[2] ^ acc[3]) == 0x7a5c3e1f {
        out[0] = 1;
    }
}
"""


def run_size_anchor(args, copy, g, rng):
    """The --size-anchor table: what one launch streaming b bytes reaches at all, for the byte counts of
    a decode step's MXFP4 launches (gpt-oss: experts hit x an expert's bytes at T 1, 16, 64, or --tokens)
    and powers of two around them. Two movers, timed as the GEMMs are (a CUDA graph cycling over buffers
    of 400 MB in all, so that L2 holds none), GB/s as a % of the copy anchor: torch's device copy of b / 2 bytes (b
    read + written) and READ_KC (read only, 4 blocks of 512 threads a multiprocessor), plain and with
    programmatic dependent launch (its PDL 1: waiting before its loads; 2: after them). A line fitted to
    each READ_KC form's times gives a launch's fixed cost t0 and the rate once it is paid:
    b / (t0 + b / rate) is then the most a launch of b bytes reaches."""
    import kcompiler as kc
    mod = kc.compile(READ_KC, target="cuda", path="<stream_read>")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    E, top_k, Hd, I = (SHAPES["gpt-oss"][k] for k in ("E", "top_k", "H", "I"))
    b13 = 2 * I * Hd // 2 + 2 * I * Hd // 32
    b2 = Hd * I // 2 + Hd * I // 32
    sizes = []
    for T in ([int(t) for t in args.tokens.split(",")] if args.tokens_given else (1, 16, 64)):
        hit = float(np.mean([len(np.unique(np.stack([rng.choice(E, top_k, replace=False) for _ in range(T)])))
                             for _ in range(8)]))
        sizes += [(f"T {T} gate/up", hit * b13), (f"T {T} down", hit * b2)]
    sizes += [(f"{m} MB", m * 1e6) for m in (8, 16, 32, 64, 128, 256, 512)]
    print("\nOne launch moving b bytes (gpt-oss MXFP4 launches, then powers of two): ms, GB/s, % of copy")
    print(f"{'launch':>15} {'MB':>7} {'copy ms':>8} {'%copy':>6} {'kc ms':>8} {'%copy':>6} "
          f"{'PDL ms':>8} {'%copy':>6} {'PDL late':>8} {'%copy':>6}")
    fit, fit_pdl, fit_nw = [], [], []
    out = torch.zeros(1, dtype=torch.int32, device="cuda")
    for name, b in sizes:
        n = int(b) // 1024 * 1024
        nbuf = max(2, int(400e6 // n))
        src = [torch.empty(n, dtype=torch.uint8, device="cuda").random_() for _ in range(nbuf)]
        half = [(s[: n // 2], torch.empty(n // 2, dtype=torch.uint8, device="cuda")) for s in src]
        words = [s.view(torch.int32) for s in src]
        t_copy = time_ms([lambda i=i: half[i][1].copy_(half[i][0]) for i in range(nbuf)])
        t_kc, t_pdl, t_nw = (time_ms([lambda i=i: mod.stream_read[(4 * sms,), 512](
            words[i], n // 4, out, U=4, PDL=pdl, stream=torch.cuda.current_stream().cuda_stream) for i in range(nbuf)])
            for pdl in (0, 1, 2))
        fit.append((n, t_kc))
        fit_pdl.append((n, t_pdl))
        fit_nw.append((n, t_nw))
        row = [f"{name:>15} {n / 1e6:>7.1f}"]
        for t in (t_copy, t_kc, t_pdl, t_nw):
            row.append(f"{t:>8.4f} {100 * n / t / 1e6 / copy:>5.0f}%")
        print(" ".join(row), flush=True)
        for bufs in (src, half, words):
            bufs.clear()
        torch.cuda.empty_cache()
    for what, pts in (("kc read", fit), ("kc read, PDL", fit_pdl), ("kc read, PDL, wait after the loads", fit_nw)):
        nb, tb = np.array([f[0] for f in pts], float), np.array([f[1] for f in pts], float)
        slope, t0 = np.polyfit(nb, tb, 1)
        need = 0.85 * copy * 1e6 * t0 / (1 - 0.85 * copy * 1e6 * slope) / 1e6
        print(f"{what}, fitted: a launch's fixed cost t0 = {1e3 * t0:.2f} us, then {1 / slope / 1e6:.0f} GB/s "
              f"({100 / slope / 1e6 / copy:.0f}% of copy); 85% of copy needs "
              + (f"b >= {need:.0f} MB a launch" if slope * copy * 1e6 < 1 / 0.85 else "more than it reaches"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tokens 1, 64, 1024 on gpt-oss only")
    ap.add_argument("--tokens", default="1,4,16,64,256,1024,4096")
    ap.add_argument("--shapes", default="gpt-oss,4096x1536")
    ap.add_argument("--formats", default="bf16,fp8,mxfp4")
    ap.add_argument("--variants", action="store_true", help="the MXFP4 tensor-core variants' table (see above)")
    ap.add_argument("--size-anchor", action="store_true",
                    help="a copy moving each launch's weight bytes (what one launch of that size reaches)")
    ap.add_argument("--names", default="", help="--variants: only these rows of VARIANTS (comma-separated)")
    args = ap.parse_args()
    args.tokens_given = "--tokens" in sys.argv
    args.shapes_given = "--shapes" in sys.argv
    tokens = [1, 64, 1024] if args.quick else [int(t) for t in args.tokens.split(",")]
    shapes = ["gpt-oss"] if args.quick else args.shapes.split(",")
    copy = copy_gbs()
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; device copy {copy:.0f} GB/s "
          f"(bytes read + written)")
    g = torch.Generator(device="cuda").manual_seed(0)
    rng = np.random.default_rng(0)
    if args.size_anchor:
        run_size_anchor(args, copy, g, rng)
    if args.variants:
        run_variants(args, copy, g, rng)
    if args.variants or args.size_anchor:
        return
    for shape in shapes:
        E, top_k, Hd, I = (SHAPES[shape][k] for k in ("E", "top_k", "H", "I"))
        for fmt in args.formats.split(","):
            w13, d13, b13 = weights(E, 2 * I, Hd, fmt, g)
            w2, d2, b2 = weights(E, Hd, I, fmt, g)
            print(f"\n{shape} (E={E}, top_k={top_k}, H={Hd}, I={I}) {fmt}: ms, TFLOP/s, weight GB/s (% of copy)")
            print(f"{'T':>5} {'op':>20} {'kc ms':>8} {'TFLOP/s':>8} {'GB/s':>7} {'%copy':>6} {'torch ms':>9} {'torch/kc':>8}")
            for T in tokens:
                bm = ops.moe_block_m(T, top_k, E, fmt)
                numel = T * top_k
                rs, groups, hit = make_routings(rng, T, E, top_k, bm, b13)
                nr = len(rs)
                x = torch.randn(T, Hd, device="cuda").bfloat16()
                hs = [torch.empty(numel, I, device="cuda", dtype=torch.bfloat16) for _ in rs]
                outs = [torch.zeros(T, Hd, device="cuda") for _ in rs]
                ys = [torch.empty(numel, Hd, device="cuda") for _ in rs]
                # correctness first (the bf16 reference's rounding differs: loose bounds)
                h = ops.moe_gemm_swiglu(x, w13, rs[0], out=hs[0])
                ht = torch_swiglu(x, d13, groups[0], top_k, I, torch.empty_like(h))
                torch.testing.assert_close(h.float(), ht.float(), rtol=3e-2, atol=3e-2 * ht.float().abs().max().item())
                o = ops.moe_gemm_down(h, w2, rs[0], out=outs[0].zero_())
                ot = torch_down(h, d2, groups[0], rs[0].topk_weights.reshape(-1), top_k, torch.empty_like(o))
                torch.testing.assert_close(o, ot, rtol=3e-2, atol=3e-2 * ot.abs().max().item())
                runs = {
                    "swiglu": ([lambda i=i: ops.moe_gemm_swiglu(x, w13, rs[i], out=hs[i]) for i in range(nr)],
                               [lambda i=i: torch_swiglu(x, d13, groups[i], top_k, I, hs[i]) for i in range(nr)],
                               2 * numel * 2 * I * Hd, hit * b13),
                    "down atomic": ([lambda i=i: ops.moe_gemm_down(hs[i], w2, rs[i], out=outs[i].zero_())
                                     for i in range(nr)],
                                    [lambda i=i: torch_down(hs[i], d2, groups[i], rs[i].topk_weights.reshape(-1), top_k,
                                                            outs[i]) for i in range(nr)],
                                    2 * numel * Hd * I, hit * b2),
                    "down separate": ([lambda i=i: ops.moe_gemm_down(hs[i], w2, rs[i], reduce="separate", out=ys[i])
                                       for i in range(nr)], None, 2 * numel * Hd * I, hit * b2),
                }
                if fmt == "mxfp4":  # the earlier decode, same run
                    runs["swiglu (shift)"] = (
                        [lambda i=i: ops.moe_gemm_swiglu(x, w13, rs[i], out=hs[i], decode="shift") for i in range(nr)],
                        None, 2 * numel * 2 * I * Hd, hit * b13)
                    runs["down atomic (shift)"] = (
                        [lambda i=i: ops.moe_gemm_down(hs[i], w2, rs[i], out=outs[i].zero_(), decode="shift")
                         for i in range(nr)], None, 2 * numel * Hd * I, hit * b2)
                for name, (kc, tr, flops, nbytes) in runs.items():
                    ms = time_ms(kc)
                    tms = time_ms(tr) if tr is not None else float("nan")
                    gbs = nbytes / ms / 1e6
                    print(f"{T:>5} {name:>20} {ms:>8.4f} {flops / ms / 1e9:>8.1f} {gbs:>7.0f} {100 * gbs / copy:>5.0f}% "
                          f"{tms:>9.4f} {tms / ms:>8.2f}", flush=True)
            del w13, d13, w2, d2
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
