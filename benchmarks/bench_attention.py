"""std.attention on a CUDA GPU against torch's SDPA (its FlashAttention-2 and cuDNN backends) and the
device's copy bandwidth, all measured in this run. Each measured call is first checked against torch
(relative Frobenius error), then timed (triton's do_bench, median of repeats after warm-up).

    python benchmarks/bench_attention.py [--quick] [--json OUT.json] [--only prefill|decode|mla|decode+mla]
    python benchmarks/bench_attention.py --only decode+mla --per-call --json per_call.json
    python benchmarks/bench_attention.py --fp8 [--quick]   (FP8 prefill: bench_attention_fp8.py)

- prefill: B 4, H 32, S 4096, D 128, bf16, causal and not; TFLOP/s with 4 B H S^2 D operations (half
  that when causal), the usual count. Both of ops.attention's NVIDIA paths: std.attention
  (FlashAttention-2 on mma.sync, path 'fa2'), every tile configuration of PREFILL_TILES, and the
  Hopper kernel (std.attention_sm90, path 'sm90'), every configuration of SM90_TILES; the best of each
  is reported against SDPA's flash and cuDNN backends (layout (B, H, S, D), the same tensors).
- decode: B 32, H 32 (KV heads 32, and 8 for GQA), 8192 keys each, D 128, one query token; a paged
  cache (pages of 16 and 64 tokens, in shuffled order), bf16 and FP8 E4M3; TB/s of K and V read (the
  cache bytes a sequence owns, read once), against the copy bandwidth (a 4 GiB device-to-device copy,
  bytes read plus written) and SDPA's flash backend over a contiguous cache.
- decode --per-call: the paged decode with ops' defaults (max_seq_len given, and not) at B 32, H 32, 8192
  keys, D 128: MHA, GQA 4:1 and 8:1 (bf16) and FP8 E4M3 MHA, pages of 16 and 64; each timed per call
  with the host's work included (back-to-back calls between two CUDA events, no graph, no
  synchronisation between calls), by do_bench, and replayed from a CUDA graph; TB/s and % of the copy
  bandwidth. MLA's defaults (pages of 64, H 16 and 128) likewise.
- mla: DeepSeek's MLA decode (latent 512 + rope 64, pages of 64), B 32, H 16 and 128, 8192 keys: the
  Hopper kernel (std.mla_sm90) beside std.mla's mma.sync one, TB/s of cache and TFLOP/s.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kcompiler import ops  # noqa: E402
from kcompiler.ops import _common  # noqa: E402

#: (BM, BN, WARPS, STAGES) candidates of the prefill at D = 128 (std.attention, FlashAttention-2)
PREFILL_TILES = [(128, 128, 8, 2), (128, 64, 4, 2), (128, 64, 8, 2), (64, 64, 4, 2)]
#: (BN, STAGES, OVERLAP, PINGPONG) candidates of the Hopper prefill (std.attention_sm90), by head
#: dimension (all of them timed, --quick or not)
SM90_TILES = {128: [(128, 2, False, False), (128, 2, True, True), (128, 3, False, False), (128, 2, True, False)],
              64: [(128, 2, False, False), (128, 2, True, True), (192, 2, True, True), (128, 3, True, True)]}
#: (page, WARPS, U, STAGES, splits) candidates of the SIMT decode by cache ("mha": bf16 Hkv 32, "gqa":
#: bf16 Hkv 8, "fp8": E4M3 Hkv 32); splits None: ops' default (decode_splits). The first is the default.
DECODE_CONFIGS = {
    "mha": [(16, 4, 4, 3, None), (16, 4, 2, 3, None), (16, 4, 4, 2, None), (16, 4, 4, 4, None), (16, 8, 4, 3, None),
            (16, 4, 8, 3, None), (64, 4, 4, 3, None), (16, 4, 4, 3, 2)],
    "gqa": [(16, 4, 4, 3, None)],
    "gqa8": [(16, 4, 4, 3, None)],
    "fp8": [(16, 8, 4, 3, None), (16, 4, 8, 3, None), (16, 4, 4, 3, None), (16, 4, 4, 4, None), (64, 8, 4, 3, None),
            (16, 4, 8, 2, None), (16, 8, 8, 3, None), (16, 8, 4, 4, None), (16, 8, 2, 3, None), (16, 8, 4, 2, None),
            (16, 8, 2, 2, None), (16, 16, 2, 2, None), (16, 16, 2, 3, None)],
}
#: the tensor-core paths (GQA; also MHA, one row of 16 used): (page, RING, WARPS, BN, STAGES, splits);
#: splits None: ops' default; RING a string: that variant of ops.DECODE_TC_VARIANTS by name ("default":
#: ops' own choice for the kind's G, ops.decode_tc_tiles; WARPS, BN and STAGES unused). The first is the
#: default.
DECODE_TC_CONFIGS = {
    "gqa": [(16, "default", 0, 0, 0, None), (16, True, 4, 32, 2, None), (16, True, 4, 32, 3, None),
            (16, True, 2, 32, 3, None),
            (16, True, 2, 64, 2, None), (16, True, 2, 32, 2, None), (16, True, 4, 32, 2, 2),
            (16, True, 8, 16, 3, None), (16, True, 4, 16, 3, None), (16, True, 4, 16, 3, 4), (16, True, 4, 16, 3, 1),
            (64, True, 4, 32, 2, None), (16, False, 1, 32, 2, None)],
    "gqa8": [(16, "default", 0, 0, 0, None), (16, True, 4, 32, 2, None), (64, "default", 0, 0, 0, None),
             (64, True, 4, 32, 2, None)],
    "mha": [(16, True, 4, 32, 2, None)],
}
#: the decode's caches: (name, KV heads of 32 query heads, FP8)
DECODE_KINDS = (("mha", 32, False), ("gqa", 8, False), ("gqa8", 4, False), ("fp8", 32, True))


def graph_ms(fn) -> float:
    """Device time alone: ``fn`` replayed from a CUDA graph (triton's do_bench_cudagraph, median); nan
    where the capture fails. A decode call is short (0.1-0.5 ms at these shapes) and its host work (ops'
    checks, the launches) is not much shorter, so launch by launch the device can wait on the host."""
    from triton.testing import do_bench_cudagraph
    try:
        return do_bench_cudagraph(fn, rep=100, return_mode="median")
    except Exception as e:  # noqa: BLE001
        print(f"  graph capture failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
        return float("nan")


def per_call_ms(fn, calls: int = 100, repeats: int = 7) -> float:
    """ms a call of ``fn`` with its host work included: ``calls`` calls back to back between two CUDA
    events (no graph, no synchronisation between calls: where the host's share of a call is longer
    than the device's, the device waits and the time shows it), the median of ``repeats``."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return sorted(times)[len(times) // 2]


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def bench(fn) -> float:
    return do_bench(fn, warmup=25, rep=200, return_mode="median")


def copy_bandwidth() -> float:
    """TB/s of a device-to-device copy of 4 GiB, bytes read plus written."""
    n = 4 << 30
    x = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    y = torch.empty_like(x)
    t = bench(lambda: y.copy_(x))
    del x, y
    return 2 * n / t / 1e9


def prefill(results: dict, quick: bool) -> None:
    B, H, S, D = 4, 32, 4096, 128
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    for causal in (False, True):
        flops = 4 * B * H * S * S * D / (2 if causal else 1)
        tf = lambda ms: flops / ms / 1e9  # noqa: E731
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
            t_flash = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                t_cudnn = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
        except RuntimeError as e:  # noqa: PERF203
            print(f"cuDNN attention unavailable: {e}")
            t_cudnn = float("nan")
        best = None
        for bm, bn, w, st in PREFILL_TILES[:1] if quick else PREFILL_TILES:
            tiles = dict(BM=bm, BN=bn, WARPS=w, STAGES=st)
            got = ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2")
            err = rel(got, want)
            t = bench(lambda: ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2"))
            print(f"  prefill {'causal' if causal else 'full'} tiles {tiles}: {tf(t):.0f} TFLOP/s ({t:.3f} ms), "
                  f"relative error vs SDPA flash {err:.1e}")
            if err < 2e-2 and (best is None or t < best[0]):
                best = (t, tiles, err)
        t, tiles, err = best
        # the same compiled without approx_ftz (ex2.approx.f32, ptxas's subnormal fix-up around MUFU.EX2)
        t_plain = err_plain = float("nan")
        default = _common.attention_module
        _common.attention_module = lambda tgt: _common.stdlib_module("attention", tgt)
        try:
            if not quick:
                err_plain = rel(ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2"), want)
                t_plain = bench(lambda: ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2"))
        finally:
            _common.attention_module = default
        if not quick:
            print(f"  prefill {'causal' if causal else 'full'} {tiles} without ex2 .ftz: {tf(t_plain):.0f} TFLOP/s, "
                  f"error {err_plain:.1e}")
        t90, tiles90, err90 = sm90(q, k, v, causal, want, tf, D, quick)
        name = f"prefill B{B} H{H} S{S} D{D} bf16 {'causal' if causal else 'non-causal'}"
        results[name] = dict(tflops=tf(t), ms=t, tiles=tiles, rel_err=err, tflops_without_ftz=tf(t_plain),
                             sdpa_flash_tflops=tf(t_flash),
                             sdpa_cudnn_tflops=tf(t_cudnn), vs_flash=t_flash / t, vs_cudnn=t_cudnn / t,
                             sm90_tflops=tf(t90), sm90_ms=t90, sm90_tiles=tiles90, sm90_rel_err=err90,
                             sm90_vs_flash=t_flash / t90, sm90_vs_cudnn=t_cudnn / t90)
        print(f"{name}: FA2 path {tf(t):.0f} TFLOP/s {tiles} (x{t_flash / t:.2f} of SDPA flash); Hopper path "
              f"{tf(t90):.0f} {tiles90} (x{t_flash / t90:.2f} of flash, x{t_cudnn / t90:.2f} of cuDNN); "
              f"SDPA flash {tf(t_flash):.0f}, cuDNN {tf(t_cudnn):.0f}")
    del q, k, v


def sm90(q, k, v, causal: bool, want, tf, D: int, quick: bool):
    """The Hopper path's candidates (SM90_TILES[D]) checked against ``want`` and timed; (ms, tiles,
    error) of the fastest correct one (inf where none ran)."""
    best = (float("inf"), None, float("nan"))
    for bn, st, ov, pp in SM90_TILES[D]:
        tiles = dict(BN=bn, STAGES=st, OVERLAP=ov, PINGPONG=pp)
        try:
            err = rel(ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="sm90"), want)
        except Exception as e:  # noqa: BLE001 - reported, the others still timed
            print(f"  Hopper path {tiles}: failed: {str(e)[:300]}")
            continue
        t = bench(lambda: ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="sm90"))
        print(f"  prefill D{D} {'causal' if causal else 'full'} Hopper path {tiles}: {tf(t):.0f} TFLOP/s "
              f"({t:.3f} ms), relative error vs SDPA flash {err:.1e}")
        if err < 2e-2 and t < best[0]:
            best = (t, tiles, err)
    return best


#: (D, [(BM, BN, WARPS, STAGES), ...]): candidates timed by --dims at the other head dimensions
DIM_TILES = [(64, [(128, 64, 4, 2), (128, 128, 8, 2), (64, 64, 4, 2), (128, 64, 8, 2)]),
             (256, [(64, 32, 4, 2), (64, 64, 4, 2), (128, 32, 8, 2), (128, 64, 8, 2)])]


def prefill_dims(results: dict, quick: bool = False) -> None:
    """Prefill at D = 64 and 256 (B 4, H 32, S 4096, bf16), causal and not, each tile candidate (quick:
    D 64 only, the first FA2 candidate and every Hopper one)."""
    B, H, S = 4, 32, 4096
    for D, cands in DIM_TILES[:1] if quick else DIM_TILES:
        cands = cands[:1] if quick else cands
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        for causal in (False, True):
            flops = 4 * B * H * S * S * D / (2 if causal else 1)
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
                t_flash = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal))
            best = None
            for bm, bn, w, st in cands:
                tiles = dict(BM=bm, BN=bn, WARPS=w, STAGES=st)
                err = rel(ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2"), want)
                t = bench(lambda: ops.attention(q, k, v, causal=causal, layout="bhsd", tiles=tiles, path="fa2"))
                print(f"  prefill D{D} {'causal' if causal else 'full'} {tiles}: {flops / t / 1e9:.0f} TFLOP/s, "
                      f"error {err:.1e}")
                if err < 2e-2 and (best is None or t < best[0]):
                    best = (t, tiles)
            name = f"prefill B{B} H{H} S{S} D{D} bf16 {'causal' if causal else 'non-causal'}"
            results[name] = dict(tflops=flops / best[0] / 1e9, tiles=best[1], sdpa_flash_tflops=flops / t_flash / 1e9,
                                 vs_flash=t_flash / best[0])
            line = ""
            if D in SM90_TILES:
                t90, tiles90, err90 = sm90(q, k, v, causal, want, lambda ms: flops / ms / 1e9, D, False)  # noqa: B023
                results[name].update(sm90_tflops=flops / t90 / 1e9, sm90_tiles=tiles90, sm90_vs_flash=t_flash / t90)
                line = f"; Hopper path {flops / t90 / 1e9:.0f} {tiles90} (x{t_flash / t90:.2f})"
            print(f"{name}: FA2 path {flops / best[0] / 1e9:.0f} TFLOP/s {best[1]}{line}; SDPA flash "
                  f"{flops / t_flash / 1e9:.0f} (x{t_flash / best[0]:.2f})")
        del q, k, v


def paged(k: torch.Tensor, v: torch.Tensor, page: int, gen: torch.Generator):
    """(B, HK, S, D) K and V as a paged cache (pages, page, HK, D) in shuffled page order."""
    B, HK, S, D = k.shape
    per = S // page
    order = torch.randperm(B * per, generator=gen).to(k.device)
    kc = torch.empty(B * per, page, HK, D, device=k.device, dtype=k.dtype)
    vc = torch.empty_like(kc)
    kc[order] = k.permute(0, 2, 1, 3).reshape(B * per, page, HK, D)
    vc[order] = v.permute(0, 2, 1, 3).reshape(B * per, page, HK, D)
    return kc, vc, order.view(B, per).int()


def decode_inputs(B: int, H: int, HK: int, S: int, D: int, fp8: bool):
    """(q, k, v, k_scale, v_scale, kd, vd, want): random (B, HK, S, D) K and V (FP8 E4M3 with per-head
    scales, kd / vd their bf16 dequantisation; else kd, vd = k, v), q (B, H, D) bf16, and the decode's
    result by SDPA in float32."""
    k, v = (torch.randn(B, HK, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
    ks = vs = None
    if fp8:
        ks = (k.float().abs().amax(dim=(0, 2, 3)) / 448).contiguous()
        vs = (v.float().abs().amax(dim=(0, 2, 3)) / 448).contiguous()
        k = (k.float() / ks[None, :, None, None]).to(torch.float8_e4m3fn)
        v = (v.float() / vs[None, :, None, None]).to(torch.float8_e4m3fn)
        kd = (k.float() * ks[None, :, None, None]).bfloat16()
        vd = (v.float() * vs[None, :, None, None]).bfloat16()
    else:
        kd, vd = k, v
    want = torch.cat([torch.nn.functional.scaled_dot_product_attention(
        q[b0:b0 + 8, :, None].float(), kd[b0:b0 + 8].float().repeat_interleave(H // HK, 1),
        vd[b0:b0 + 8].float().repeat_interleave(H // HK, 1))[:, :, 0] for b0 in range(0, B, 8)])
    return q, k, v, ks, vs, kd, vd, want


def decode(results: dict, bw: float, quick: bool, kinds: str = "mha,gqa,fp8", first: int | None = None) -> None:
    B, H, S, D = 32, 32, 8192, 128
    gen = torch.Generator().manual_seed(0)
    for kind, HK, fp8 in DECODE_KINDS:
        if kind not in kinds.split(","):
            continue
        q, k, v, ks, vs, kd, vd, want = decode_inputs(B, H, HK, S, D, fp8)
        qq = q[:, :, None]
        try:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                t_flash = bench(lambda: torch.nn.functional.scaled_dot_product_attention(qq, kd, vd,
                                                                                         enable_gqa=HK != H))
        except RuntimeError as e:
            print(f"  SDPA flash refused the decode: {str(e)[:120]}")
            t_flash = float("nan")
        if fp8:
            del kd, vd
        kv_bytes = 2 * k.numel() * k.element_size()
        lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
        best = None
        configs = [(p, w, u, st, sp, None) for p, w, u, st, sp in DECODE_CONFIGS[kind][:1 if quick else first]]
        configs += [(p, w, bn, st, sp, ring if isinstance(ring, str) else dict(RING=ring, WARPS=w, BN=bn, STAGES=st))
                    for p, ring, w, bn, st, sp in DECODE_TC_CONFIGS.get(kind, [])[:1 if quick else None]]
        caches = {}
        for page, w, u, st, splits, tc in configs:
            if page not in caches:
                caches = {page: paged(k, v, page, gen)}
            kc, vc, table = caches[page]
            if isinstance(tc, str):
                opts = dict(tensor_cores=True, **({} if tc == "default" else dict(tc_tiles=tc)))
                what = f"mma.sync {'ops default' if tc == 'default' else tc}"
            elif tc:
                opts = dict(tensor_cores=True, tc_tiles=tc)
                what = f"mma.sync {'ring' if tc['RING'] else 'single warp'} warps {w} BN {u} STAGES {st}"
            else:
                opts = dict(tensor_cores=False, warps=w, unroll=u, stages=st)
                what = f"warps {w} U {u} STAGES {st}"
            def call(kc=kc, vc=vc, table=table, splits=splits, opts=opts):  # bound now: `best` keeps it
                return ops.paged_decode(q, kc, vc, table, lens, k_scale=ks, v_scale=vs, num_splits=splits,
                                        max_seq_len=S, **opts)
            try:
                err = rel(call(), want)
                t = bench(call)
                tp = per_call_ms(call)  # back to back, host work included: issue 23's measure
            except Exception as e:  # noqa: BLE001 - one failed configuration must not end the sweep
                print(f"  decode {kind} page {page} {what}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            print(f"  decode {kind} page {page} {what} splits {splits or 'default'}: {kv_bytes / t / 1e9:.2f} TB/s "
                  f"= {kv_bytes / t / 1e9 / bw:.0%} of copy ({t:.3f} ms; per call {kv_bytes / tp / 1e9 / bw:.0%}), "
                  f"relative error vs SDPA {err:.1e}", flush=True)
            if err < 2e-2 and (best is None or t < best[0]):
                best = (t, dict(page=page, splits=splits or "default", path="tc" if tc else "simt", **opts), err, call)
        caches.clear()
        if best is None:
            continue
        t, cfg, err, call = best
        t2 = bench(call)  # the best again: the spread between two timings of one kernel
        tg = graph_ms(call)
        name = f"decode B{B} H{H} HKV{HK} KV{S} D{D} {'fp8 e4m3' if fp8 else 'bf16'}"
        tbs = kv_bytes / t / 1e9
        results[name] = dict(tbps=tbs, ms=t, ms_again=t2, config=cfg, rel_err=err, of_copy_bandwidth=tbs / bw,
                             graph_ms=tg, graph_tbps=kv_bytes / tg / 1e9,
                             graph_of_copy_bandwidth=kv_bytes / tg / 1e9 / bw,
                             sdpa_flash_tbps=kv_bytes / t_flash / 1e9 if not fp8 else None,
                             vs_flash=t_flash / t)
        print(f"{name}: kcompiler {tbs:.2f} TB/s = {tbs / bw:.0%} of copy bandwidth {bw:.2f} TB/s (again "
              f"{kv_bytes / t2 / 1e9 / bw:.0%}; from a CUDA graph {kv_bytes / tg / 1e9:.2f} TB/s = "
              f"{kv_bytes / tg / 1e9 / bw:.0%}, {tg:.3f} ms) {cfg}; SDPA flash "
              f"(contiguous{' bf16 cache' if fp8 else ''}) {t_flash:.3f} ms (x{t_flash / t:.2f})", flush=True)
        del k, v


def decode_per_call(results: dict, bw: float, kinds: str = "mha,gqa,gqa8,fp8", mla_too: bool = True) -> None:
    """The decode goal of issue 23: ops.paged_decode with its defaults at B 32, H 32, 8192 keys, D 128,
    pages of 16 and 64, for each cache of ``kinds`` (mha: 32 KV heads; gqa: 8, 4:1; gqa8: 4, 8:1; fp8:
    E4M3, 32 KV heads), with max_seq_len given and not (then the splits are planned for the block
    table's capacity, here the same 8192): ms per call with the host's work included
    (:func:`per_call_ms`), by do_bench (its cache flush between calls hides some of the host's share)
    and from a CUDA graph (the device alone), as TB/s of K and V and % of the copy bandwidth ``bw``.
    With ``mla_too`` also ops.mla_decode's defaults (pages of 64, H 16 and 128)."""
    B, H, S, D = 32, 32, 8192, 128
    gen = torch.Generator().manual_seed(0)
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")

    def report(name, kv_bytes, calls, err, extra):
        row = dict(rel_err=err, **extra)
        line = []
        for how, call in calls.items():
            for mode, timer in (("per call", per_call_ms), ("do_bench", bench), ("graph", graph_ms)):
                t = timer(call)
                tbs = kv_bytes / t / 1e9
                row[f"{how} {mode} ms"] = t
                row[f"{how} {mode} of_copy"] = tbs / bw
                line.append(f"{how} {mode} {tbs:.2f} TB/s = {tbs / bw:.0%}")
        results[name] = row
        print(f"{name} (error {err:.1e}): " + "; ".join(line), flush=True)

    for kind, HK, fp8 in DECODE_KINDS:
        if kind not in kinds.split(","):
            continue
        q, k, v, ks, vs, kd, vd, want = decode_inputs(B, H, HK, S, D, fp8)
        del kd, vd
        kv_bytes = 2 * k.numel() * k.element_size()
        for page in (16, 64):
            kc, vc, table = paged(k, v, page, gen)
            calls = {"max_seq_len": lambda: ops.paged_decode(q, kc, vc, table, lens, k_scale=ks, v_scale=vs,  # noqa: B023
                                                             max_seq_len=S),
                     "no max_seq_len": lambda: ops.paged_decode(q, kc, vc, table, lens, k_scale=ks,  # noqa: B023
                                                                v_scale=vs)}
            err = max(rel(c(), want) for c in calls.values())
            report(f"decode per call {kind} B{B} H{H} HKV{HK} KV{S} D{D} page {page} "
                   f"{'fp8 e4m3' if fp8 else 'bf16'}", kv_bytes, calls, err, dict(copy_tbps=bw))
            del kc, vc, table
        del q, k, v, want
    if not mla_too:
        return
    Dl, DR, page = 512, 64, 64
    ckv = torch.randn(B * S // page, page, Dl, device="cuda", dtype=torch.bfloat16)
    kpe = torch.randn(B * S // page, page, DR, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(B * S // page, generator=gen).view(B, S // page).int().cuda()
    cache_bytes = (ckv.numel() + kpe.numel()) * 2
    for Hm in (16, 128):
        qn = torch.randn(B, Hm, Dl, device="cuda", dtype=torch.bfloat16)
        qp = torch.randn(B, Hm, DR, device="cuda", dtype=torch.bfloat16)
        c = ckv[table[0].long()].reshape(-1, Dl).float()
        kp = kpe[table[0].long()].reshape(-1, DR).float()
        ref = torch.softmax((qn[0].float() @ c.T + qp[0].float() @ kp.T) * 0.07, -1) @ c
        calls = {"max_seq_len": lambda: ops.mla_decode(qn, qp, ckv, kpe, table, lens, scale=0.07,  # noqa: B023
                                                       max_seq_len=S),
                 "no max_seq_len": lambda: ops.mla_decode(qn, qp, ckv, kpe, table, lens, scale=0.07)}  # noqa: B023
        err = max(rel(f()[0], ref) for f in calls.values())
        report(f"mla decode per call B{B} H{Hm} KV{S} latent {Dl}+{DR} page {page} bf16", cache_bytes, calls, err,
               dict(copy_tbps=bw))


def mla_reference(ckv, kpe, table, q_nope, q_pe, S: int, scale: float = 0.07, n: int = 2) -> torch.Tensor:
    """MLA decode's output for the first ``n`` sequences of S keys, in float32 through torch: the
    paged latent cache ckv (pages, page, D) and rope keys kpe (pages, page, DR) gathered by the block
    table, softmax(scale (q_nope c^T + q_pe k_pe^T)) c; (n, H, D)."""
    D, DR = ckv.shape[-1], kpe.shape[-1]
    ref = []
    for b in range(n):
        c = ckv[table[b].long()].reshape(-1, D)[:S].float()
        kp = kpe[table[b].long()].reshape(-1, DR)[:S].float()
        sc = (q_nope[b].float() @ c.T + q_pe[b].float() @ kp.T) * scale
        ref.append(torch.softmax(sc, -1) @ c)
    return torch.stack(ref)


def mla(results: dict, bw: float, quick: bool = False, first: int | None = None) -> None:
    """MLA decode (DeepSeek: latent 512 + rope 64, pages of 64), B 32, H 16 and 128, 8192 tokens each:
    TB/s of the latent cache read once (the kernel reads it once per group of heads_per_block heads,
    the later groups mostly from L2) and TFLOP/s counting 2 (D + DR) + 2 D operations a key and head
    (q . [c, k_pe] and p c), the measure of a compute-bound kernel at many heads. The Hopper kernel
    (std.mla_sm90, path 'sm90', the default on an H100) beside std.mla's mma.sync kernel (path
    'generic', the default before it), then other tiles and splits of each; the SIMT one at 16 heads.
    --quick: the two defaults."""
    B, S, D, DR, page = 32, 8192, 512, 64, 64
    gen = torch.Generator().manual_seed(1)
    ckv = torch.randn(B * S // page, page, D, device="cuda", dtype=torch.bfloat16)
    kpe = torch.randn(B * S // page, page, DR, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(B * S // page, generator=gen).view(B, S // page).int().cuda()
    lens = torch.full((B,), S, dtype=torch.int32, device="cuda")
    cache_bytes = (ckv.numel() + kpe.numel()) * 2
    for H in (16, 128):
        q_nope = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
        q_pe = torch.randn(B, H, DR, device="cuda", dtype=torch.bfloat16)
        flops = B * H * S * (2 * (D + DR) + 2 * D)
        ref = mla_reference(ckv, kpe, table, q_nope, q_pe, S)
        configs = [dict(path="sm90"), dict(path="generic"), dict(path="sm90", sm90_tiles=dict(OVERLAP=True)),
                   dict(path="sm90", sm90_tiles=dict(BN=32, STAGES=3)),
                   dict(path="sm90", sm90_tiles=dict(BN=32, STAGES=3, OVERLAP=True)),
                   dict(path="sm90", num_splits=4), dict(path="sm90", num_splits=1),
                   dict(path="generic", stages=2), dict(path="generic", stages=4),
                   dict(path="generic", heads_per_block=8)]
        if H == 16:
            configs.append(dict(path="generic", tensor_cores=False, heads_per_block=2))
        times = {}
        for opts in configs[:2 if quick else first]:
            call = lambda: ops.mla_decode(q_nope, q_pe, ckv, kpe, table, lens, scale=0.07, max_seq_len=S,  # noqa: E731
                                          **opts)  # noqa: B023
            try:
                err = rel(call()[:2], ref)
                t = bench(call)
            except Exception as e:  # noqa: BLE001
                print(f"  mla H{H} {opts}: FAILED {type(e).__name__}: {str(e)[:300]}")
                continue
            name = f"mla decode B{B} H{H} KV{S} latent {D}+{DR} bf16 {opts}"
            tg = graph_ms(call) if set(opts) == {"path"} else float("nan")
            times[opts["path"]] = min(times.get(opts["path"], float("inf")), t)
            results[name] = dict(ms=t, tbps=cache_bytes / t / 1e9, of_copy_bandwidth=cache_bytes / t / 1e9 / bw,
                                 tflops=flops / t / 1e9, rel_err=err, graph_ms=tg, graph_tflops=flops / tg / 1e9,
                                 graph_of_copy_bandwidth=cache_bytes / tg / 1e9 / bw)
            print(f"{name}: {t:.3f} ms, {cache_bytes / t / 1e9:.2f} TB/s of cache = "
                  f"{cache_bytes / t / 1e9 / bw:.0%} of copy bandwidth, {flops / t / 1e9:.1f} TFLOP/s, "
                  f"error {err:.1e}; "
                  f"from a CUDA graph {tg:.3f} ms = {cache_bytes / tg / 1e9 / bw:.0%}, {flops / tg / 1e9:.1f} TFLOP/s",
                  flush=True)
        if len(times) == 2:
            print(f"mla decode H{H}: best sm90 {times['sm90']:.3f} ms against best generic (mma.sync) "
                  f"{times['generic']:.3f} ms: x{times['generic'] / times['sm90']:.2f}", flush=True)
            results[f"mla decode H{H} sm90 speed-up over generic"] = times["generic"] / times["sm90"]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="one configuration of each (prefill: every Hopper one)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--only", choices=["prefill", "decode", "mla", "decode+mla"])
    p.add_argument("--dims", action="store_true", help="also the prefill at D = 64 and 256")
    p.add_argument("--kinds", help="the decode's caches (comma-separated: mha, gqa, gqa8, fp8; default: all but "
                   "gqa8 in the sweep, all with --per-call)")
    p.add_argument("--per-call", action="store_true",
                   help="decode (and with --only decode+mla, MLA): ops' defaults per call, host time included, "
                        "beside do_bench and a CUDA graph, pages of 16 and 64 (decode_per_call)")
    p.add_argument("--first", type=int, help="only the first N SIMT decode and MLA configurations")
    p.add_argument("--no-copy", action="store_true", help="skip the copy-bandwidth measurement (prefill only)")
    p.add_argument("--fp8", action="store_true", help="only the FP8 prefill rows (bench_attention_fp8.py): ours "
                   "FP8 beside our bf16 and cuDNN")
    args = p.parse_args()
    if args.fp8:
        from bench_attention_fp8 import prefill_fp8
        results = {"device": torch.cuda.get_device_name()}
        prefill_fp8(results, args.quick)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        return
    dev = torch.cuda.get_device_name()
    results: dict = {"device": dev}
    bw = float("nan") if args.no_copy else copy_bandwidth()
    results["copy_tbps"] = bw
    print(f"{dev}: device-to-device copy {bw:.2f} TB/s (read + write)")
    if args.only in (None, "prefill") and not args.per_call:
        prefill(results, args.quick)
    if args.per_call:
        decode_per_call(results, bw, args.kinds or "mha,gqa,gqa8,fp8", mla_too=args.only in (None, "decode+mla"))
    elif args.only in (None, "decode", "decode+mla"):
        decode(results, bw, args.quick, args.kinds or "mha,gqa,fp8", args.first)
    if args.only in (None, "mla", "decode+mla") and not args.per_call:
        mla(results, bw, args.quick, args.first)
    if args.dims:
        prefill_dims(results, args.quick)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
