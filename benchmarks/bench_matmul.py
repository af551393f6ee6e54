"""std.matmul on a CUDA GPU against cuBLAS (torch.matmul; torch._scaled_mm for FP8) and Triton, all
measured in the same run. On an sm_90 GPU ops.matmul takes the Hopper path (stdlib/matmul_sm90.kc:
TMA, wgmma, warp specialisation, persistent tiles); elsewhere the Ampere one (cp.async, ldmatrix,
mma.sync).

    python benchmarks/bench_matmul.py [--quick | --small | --only MxNxK,...] [--rounds R] [--json OUT.json] [--sass]
                                      [--configs] [--mx] [--graphs]
                                      [--variants [NAME,NAME] [--in-process] [--shapes large|small|m8192]]

Each case is checked first (relative Frobenius error against torch's result, which must be under 1e-2
for bf16 and 3e-2 for FP8), then timed: the median of triton.testing.do_bench (CUDA events, warm-up
first), on fresh random normal inputs (never zeros). TFLOP/s count 2 M N K. B is K-major (an (N, K)
weight, as Linear layers hold it and as wgmma reads FP8); the bf16 cases also time a row-major B.
FP8 is e4m3 with per-tensor scales and a bf16 result, as torch._scaled_mm computes it. ``--rounds R``
times ours and cuBLAS R times each, alternating which goes first, and prints the median of the rounds'
ratios with their spread: a single back-to-back pair moves by up to 10 % on the H200 as its clock follows
its power (1.55 GHz under these kernels in ncu, against 1.98 GHz idle).

The Triton kernel is the standard tiled matmul of Triton's tutorial (grouped tile order, a K loop of
tl.dot, f32 accumulation), with one fixed configuration per dtype (no autotuning): 128 x 256 x 64
tiles, 3 stages, 8 warps for bf16; 128 x 256 x 128, 3 stages, 8 warps for FP8. On Hopper Triton lowers
tl.dot to wgmma with TMA-free pipelined loads.

``--sass`` disassembles the Hopper kernel's cubin (cuobjdump) and counts its HGMMA / QGMMA
instructions. ``--configs`` times each tile configuration of the Hopper path (kcompiler.ops.matmul_sm90.CONFIGS)
on a few sizes, to check its choice. ``--mx`` times the MXFP8 cast fused into the product
(``ops.matmul(..., epilogue="to_mxfp8_e4m3")``: codes and E8M0 scales from the kernel's store) against
the product alone (bf16 result) and the product followed by ops.mx_quantize, after checking the fused
codes and scales bit for bit against ops.mx_quantize of the same kernel's f32 result. ``--graphs`` times
the small-M products twice, as the main table does (launch by launch: the host's work per call counts
where it exceeds the kernel's) and replayed from a CUDA graph (triton.testing.do_bench_cudagraph: the
device's time alone), ours through kcompiler.ops.matmul_sm90.run with its default choices.
``--variants`` times the Hopper kernel's compile-time variants (VARIANTS: stages, BN, ping-pong, clusters) on
the LLM shapes of issue 23 (VARIANT_SHAPES) beside cuBLAS, each checked against torch first (and its
largest difference from the first variant's result of its process shown as "d"), each variant in a
process of its own where several are named (a crash is reported as FAILED and the run goes on; its
name is printed before it runs, with its arithmetic: kcompiler.ops.matmul_sm90_traffic; ``--in-process``:
all in one); ``--shapes small`` / ``m8192`` runs them on the LLM table's M 16 and 128 / its 8192-row
shapes instead (VARIANT_SHAPE_SETS). Ours is timed there as a prepared launch (matmul_sm90.prepare once).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from kcompiler import ops  # noqa: E402

SQUARE = [(4096, 4096, 4096), (8192, 8192, 8192)]
LLM = [(m, n, k) for m in (16, 128, 1024, 8192) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))]
QUICK = [(8192, 8192, 8192), (4096, 4096, 4096), (128, 4096, 4096), (8192, 14336, 4096)]


@triton.jit
def _triton_matmul(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn, scale,
                   BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BM)
    tiles_n = tl.cdiv(N, BN)
    per_group = GROUP_M * tiles_n
    first_m = pid // per_group * GROUP_M
    rows = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows
    pid_n = (pid % per_group) // rows
    rm = (pid_m * BM + tl.arange(0, BM)) % M
    rn = (pid_n * BN + tl.arange(0, BN)) % N
    rk = tl.arange(0, BK)
    a = a_ptr + rm[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rn[None, :] * sbn
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        x = tl.load(a, mask=rk[None, :] < K - k * BK, other=0.0)
        y = tl.load(b, mask=rk[:, None] < K - k * BK, other=0.0)
        acc = tl.dot(x, y, acc)
        a += BK * sak
        b += BK * sbk
    acc = acc * scale
    cm = pid_m * BM + tl.arange(0, BM)
    cn = pid_n * BN + tl.arange(0, BN)
    c = c_ptr + cm[:, None] * scm + cn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(cm[:, None] < M) & (cn[None, :] < N))


def triton_matmul(a: torch.Tensor, b: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """C = scale * (a @ b) in bf16 by the tutorial kernel (one configuration per dtype)."""
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    fp8 = a.dtype.itemsize == 1
    BM, BN, BK = 128, 256, (128 if fp8 else 64)
    grid = (triton.cdiv(M, BM) * triton.cdiv(N, BN),)
    _triton_matmul[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                         c.stride(1), scale, BM=BM, BN=BN, BK=BK, GROUP_M=8, num_stages=3, num_warps=8)
    return c


def tflops(m: int, n: int, k: int, ms: float) -> float:
    return 2 * m * n * k / ms / 1e9


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got.float() - want.float()).norm() / want.float().norm()).item()


def bench(fn) -> float:
    return do_bench(fn, warmup=25, rep=100, return_mode="median")


#: --rounds: how many times each case times ours and cuBLAS, alternating which goes first (1: once each)
ROUNDS = 1


def bench_pair(ours, cublas) -> tuple[float, float, list[float]]:
    """Milliseconds of ``ours`` and ``cublas`` (medians over :data:`ROUNDS` rounds of do_bench, 40 ms a
    round where there are several, the order alternating round by round so that neither always runs on
    the hotter GPU) and the rounds' ratios of cuBLAS's time to ours (above 1: ours faster)."""
    if ROUNDS == 1:
        t, tc = bench(ours), bench(cublas)
        return t, tc, [tc / t]
    ts, tcs = [], []
    for r in range(ROUNDS):
        pair = (ours, cublas) if r % 2 == 0 else (cublas, ours)
        got = [do_bench(fn, warmup=10, rep=40, return_mode="median") for fn in pair]
        t, tc = got if r % 2 == 0 else got[::-1]
        ts.append(t)
        tcs.append(tc)
    return statistics.median(ts), statistics.median(tcs), [tc / t for t, tc in zip(ts, tcs)]


def case_bf16(m: int, n: int, k: int, layout: str) -> dict:
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16).T if layout == "nk" else \
        torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    want = torch.matmul(a, b)
    err = rel_err(ops.matmul(a, b), want)
    err_triton = rel_err(triton_matmul(a, b), want)
    assert err < 1e-2 and err_triton < 1e-2, (err, err_triton)
    t, t_cublas, ratios = bench_pair(lambda: ops.matmul(a, b), lambda: torch.matmul(a, b))
    t_triton = bench(lambda: triton_matmul(a, b))
    return dict(dtype="bf16", M=m, N=n, K=k, B=layout, ours=tflops(m, n, k, t), cublas=tflops(m, n, k, t_cublas),
                triton=tflops(m, n, k, t_triton), err=err, ratios=ratios)


def case_fp8(m: int, n: int, k: int) -> dict:
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn).T  # K-major, as _scaled_mm requires
    sa = torch.tensor(0.75, device="cuda")
    sb = torch.tensor(1.25, device="cuda")
    want = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    err = rel_err(ops.scaled_matmul(a, b, sa, sb), want)
    err_triton = rel_err(triton_matmul(a, b, 0.75 * 1.25), want)
    assert err < 3e-2 and err_triton < 3e-2, (err, err_triton)
    t, t_cublas, ratios = bench_pair(lambda: ops.scaled_matmul(a, b, sa, sb),
                                     lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16))
    t_triton = bench(lambda: triton_matmul(a, b, 0.75 * 1.25))
    return dict(dtype="f8e4m3", M=m, N=n, K=k, B="nk", ours=tflops(m, n, k, t), cublas=tflops(m, n, k, t_cublas),
                triton=tflops(m, n, k, t_triton), err=err, ratios=ratios)


def sass_counts() -> dict:
    """HGMMA / QGMMA instructions in the Hopper kernel's cubin (bf16 and FP8), by cuobjdump."""
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file

    out = {}
    if shutil.which("cuobjdump") is None:
        return {"cuobjdump": "not found"}
    for t, bk, op in (("bf16", 64, "HGMMA"), ("f8e4m3", 128, "QGMMA")):
        cubin = emit_file(stdlib_dir() / "matmul_sm90.kc", "obj", "nvptx", "sm_90a", kernel="matmul_sm90",
                          comptime=dict(T=t, BK=bk, SCALE=1 if bk == 128 else 0))
        with tempfile.NamedTemporaryFile(suffix=".cubin", delete=False) as f:
            f.write(cubin)
        sass = subprocess.run(["cuobjdump", "-sass", f.name], capture_output=True, text=True).stdout
        out[t] = {op: sass.count(op), "HMMA": sass.count(" HMMA"), "lines": len(sass.splitlines()),
                  "sample": [ln.strip() for ln in sass.splitlines() if op in ln][:2]}
    return out


def time_configs() -> None:
    """Each Hopper configuration on the smaller sizes (bf16 and FP8 e4m3, B K-major, bf16 results),
    TFLOP/s, and split-K factors (the kernel's own fix-up of the shares included); '*' marks what
    matmul_sm90.run chooses by default (choose, choose_split)."""
    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module

    mod = stdlib_module("matmul_sm90", "cuda")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for dt, m, n, k in (("bf16", 1024, 4096, 4096), ("bf16", 128, 4096, 4096), ("bf16", 16, 4096, 4096),
                        ("bf16", 16, 14336, 4096), ("bf16", 16, 4096, 14336), ("f8e4m3", 16, 4096, 4096),
                        ("f8e4m3", 128, 4096, 4096)):
        fp8 = dt == "f8e4m3"
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn if fp8 else torch.bfloat16)
        b = torch.randn(n, k, device="cuda").to(a.dtype)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        chosen = matmul_sm90.choose(m, n, k)
        split = matmul_sm90.choose_split(m, n, k, chosen, 128 if fp8 else 64, sms)
        line = []
        for name, cfg in matmul_sm90.CONFIGS.items():
            t = bench(lambda: matmul_sm90.run(mod, a, b, out, config=cfg, split_k=1))
            line.append(f"{name}{'*' if cfg == chosen and split == 1 else ''} {tflops(m, n, k, t):.0f}")
        if m <= 1024:  # split-K, for products with few tiles
            for cname, splits in (("64x128", (2, 3, 4, 6, 8)), ("64x64", (2, 4))):
                for sk in splits:
                    t = bench(lambda: matmul_sm90.run(mod, a, b, out, config=matmul_sm90.CONFIGS[cname], split_k=sk))
                    star = "*" if matmul_sm90.CONFIGS[cname] == chosen and sk == split else ""
                    line.append(f"{cname}/split{sk}{star} {tflops(m, n, k, t):.0f}")
        print(f"configs {dt} {m}x{n}x{k}: " + ", ".join(line), flush=True)


def time_graphs() -> list:
    """Small-M products, launch by launch and from a CUDA graph (device time alone), ours and cuBLAS."""
    from triton.testing import do_bench_cudagraph

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module

    mod = stdlib_module("matmul_sm90", "cuda")
    rows = []
    for dt, m, n, k in (("bf16", 16, 4096, 4096), ("bf16", 16, 4096, 14336), ("bf16", 128, 4096, 4096),
                        ("bf16", 16, 14336, 4096), ("f8e4m3", 16, 4096, 4096), ("f8e4m3", 128, 4096, 4096),
                        ("f8e4m3", 16, 4096, 14336)):
        fp8 = dt == "f8e4m3"
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn if fp8 else torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(a.dtype)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        one = torch.ones((), device="cuda")
        if fp8:
            def ours():
                matmul_sm90.run(mod, a, w, out, scale_a=one, scale_b=one, scale=1, stream=torch.cuda.current_stream())

            def theirs():
                torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            def ours():
                matmul_sm90.run(mod, a, w, out, stream=torch.cuda.current_stream())

            def theirs():
                torch.matmul(a, w.T)
        ours()
        torch.cuda.synchronize()
        row = dict(dtype=dt, M=m, N=n, K=k)
        for name, fn in (("ours", ours), ("cublas", theirs)):
            row[name] = tflops(m, n, k, bench(fn))
            try:
                row[name + "_graph"] = tflops(m, n, k, do_bench_cudagraph(fn, rep=100, return_mode="median"))
            except Exception as exc:  # noqa: BLE001 - reported, not fatal
                print(f"  graph capture of {name} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                row[name + "_graph"] = float("nan")
        rows.append(row)
        print(f"graphs {dt} {m}x{n}x{k}: launch by launch ours {row['ours']:.0f} cuBLAS {row['cublas']:.0f}; "
              f"from a graph ours {row['ours_graph']:.0f} cuBLAS {row['cublas_graph']:.0f} TFLOP/s "
              f"({row['ours_graph'] / row['cublas_graph']:.2f}x)", flush=True)
    return rows


def time_mx() -> list:
    """The MXFP8 cast fused into the product (bf16, B K-major), checked bit for bit, then timed."""
    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module

    rows = []
    for m, n, k in ((4096, 4096, 4096), (8192, 8192, 8192), (8192, 14336, 4096), (128, 4096, 4096)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
        for fmt in ("e4m3", "e5m2"):
            codes, scales = ops.matmul(a, w.T, epilogue=f"to_mxfp8_{fmt}")
            f32 = torch.empty(m, n, device="cuda")  # the same kernel's f32 result (unsplit, as the MX one)
            matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, w, f32, split_k=1)
            rc, rs = ops.mx_quantize(f32, f"f8{fmt}")
            torch.cuda.synchronize()
            same = bool((codes.view(torch.uint8) == rc.view(torch.uint8)).all()) and \
                bool((scales.view(torch.uint8) == rs.view(torch.uint8)).all())
            assert same, f"fused MX{fmt} differs from mx_quantize of the f32 product at {m}x{n}x{k}"
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        t_fused = bench(lambda: ops.matmul(a, w.T, epilogue="to_mxfp8_e4m3"))
        t_plain = bench(lambda: ops.matmul(a, w.T, c))
        t_unfused = bench(lambda: ops.mx_quantize(ops.matmul(a, w.T, c), "f8e4m3"))
        row = dict(M=m, N=n, K=k, fused=tflops(m, n, k, t_fused), plain_bf16=tflops(m, n, k, t_plain),
                   unfused=tflops(m, n, k, t_unfused), bit_exact=True)
        rows.append(row)
        print(f"mx {m}x{n}x{k}: fused MXFP8 {row['fused']:.0f}, bf16 alone {row['plain_bf16']:.0f}, bf16 then "
              f"mx_quantize {row['unfused']:.0f} TFLOP/s (fused / alone {t_plain / t_fused:.2f}x speed); "
              f"codes and scales bit-exact (e4m3, e5m2)", flush=True)
    return rows


#: --variants: the Hopper kernel's compile-time variants, as (a configuration of
#: kcompiler.ops.matmul_sm90.CONFIGS, overrides of its parameters[, matmul_sm90.run's keywords]);
#: None: the default choice (matmul_sm90.choose). 128x256 cannot take 5 stages (245,840 bytes of
#: shared memory > 227 KiB). "c2": clusters of 2 blocks along M sharing B by TMA multicast; "tma": C stored
#: through shared memory by TMA (kcompiler.ops.matmul_sm90.CONFIGS).
VARIANTS = {"default": None,
            "128x256/3st": ("128x256", dict(STAGES=3)),
            "128x256/4st": ("128x256", dict(STAGES=4)),
            # 128 x 224 tiles (wave quantisation): 1024 x 14336 x 4096 is 512 of them = 3.88 waves of 132,
            # against 448 of 128 x 256 = 3.39 waves (the busiest block 4 tiles either way, of 224 columns)
            "128x224/4st": ("128x256", dict(BN=224, STAGES=4)),
            "128x128/6st": ("128x128", {}),
            "pp64x256/4st": ("pp64x256", dict(STAGES=4)),
            "pp64x256/5st": ("pp64x256", dict(STAGES=5)),
            "pp128x128/5st": ("pp128x128", dict(STAGES=5)),
            "pp128x128/6st": ("pp128x128", dict(STAGES=6)),
            "c2x128x256": ("c2x128x256", {}),
            "c2x128x256/3st": ("c2x128x256", dict(STAGES=3)),
            "c2pp128x128": ("c2pp128x128", {}),
            "c2pp64x256/5st": ("pp64x256", dict(STAGES=5, CLUSTER_M=2)),
            # a grid of fewer blocks, in case not every multiprocessor takes a block of a pair
            "c2x128x256/g128": ("c2x128x256", {}, dict(sms=128)),
            # the TMA store epilogue (EPI_TMA): C through a swizzled shared-memory buffer and TMA, the
            # consumers back on the next tile's wgmmas while it drains; full 64 x 256 buffers with 3
            # stages, or half buffers (two copies a tile) with 4
            "tma128x256/3st": ("tma128x256", {}),
            "tma128x256h/4st": ("tma128x256h", {}),
            # 128 x 224 tiles with the TMA store (boxes of 32 columns): the default's choice where its waves
            # cost less (kcompiler.ops.matmul_sm90.WAVE_ALTERNATIVES)
            "tma128x224h": ("tma128x224h", {}),
            # the same, its consumers meeting on named barriers (bar.sync) instead of mbarriers
            "tma128x256hn/4st": ("tma128x256hn", {}),
            # large M (issue 23): the raster's rows of tiles a group (GROUP_M; 8 the default). Blocks running
            # together cover GROUP_M rows x 132 / GROUP_M columns of tiles: 16 gives the least L2 footprint
            # of a wave for 128 x 256 tiles (16 MiB of A + 16.5 of B at K 4096 bf16, against 8 + 33), 32
            # the least DRAM (B read once per 32 rows of tiles: 8192 x 14336 x 4096 1242 -> 537 MB), 4 is
            # the control (4 + 66 MB)
            "tma128x256h/g4": ("tma128x256h", dict(GROUP_M=4)),
            "tma128x256h/g16": ("tma128x256h", dict(GROUP_M=16)),
            "tma128x256h/g32": ("tma128x256h", dict(GROUP_M=32)),
            # the TMA store in 2-block clusters sharing B by multicast: L2 bytes a tile (128 + 128) K
            # instead of (128 + 256) K (GROUP_M counts pairs of rows: 8 = 16 rows of tiles; g4 = today's
            # footprint, to tell the multicast from the raster)
            "c2tma128x256h": ("c2tma128x256h", {}),
            "c2tma128x256h/g4": ("c2tma128x256h", dict(GROUP_M=4)),
            # small M (issue 23): tiles of 128 rows (A's rows read once a tile, not twice), split-K
            "128x128": ("128x128", {}, dict(split_k=1)),
            "128x128/s2": ("128x128", {}, dict(split_k=2)),
            "128x128/s4": ("128x128", {}, dict(split_k=4)),
            "128x112": ("128x112", {}, dict(split_k=1)),
            "128x256/s2": ("128x256", {}, dict(split_k=2)),
            "128x256/s4": ("128x256", {}, dict(split_k=4)),
            "64x128/s2": ("64x128", {}, dict(split_k=2)),
            "64x64": ("64x64", {}),  # with choose_split's shares (and small_m_rows where M <= 56)
            # a wave of 128 tiles where 64x128 / 64x64 leave multiprocessors idle or split K (M <= 64)
            "64x112": ("64x112", {}, dict(split_k=1)),
            "64x32": ("64x32", {}, dict(split_k=1)),
            # M 65-128 (two rows of 64-row tiles): stages filling 200 KiB (cuBLAS: 64 x 64 tiles, 13 stages, in
            # clusters of 2 at 128 x 4096 x 4096 on the H200, ncu), and 2-block clusters sharing B by multicast
            "64x64/12st": ("64x64", dict(STAGES=12)),
            "64x64/c2": ("64x64", dict(CLUSTER_M=2)),
            "64x64/c2/12st": ("64x64", dict(CLUSTER_M=2, STAGES=12)),
            # without AROWS (all 64 rows of A a stage, the configuration's stages: before small_m_rows)
            "64x64/a0": ("64x64", dict(AROWS=0)),
            "64x128/a0": ("64x128", dict(AROWS=0)),
            "64x64/s2": ("64x64", {}, dict(split_k=2)),
            "64x64/s4": ("64x64", {}, dict(split_k=4)),
            # one consumer on 128 / 256 columns: twice / four times 64x64's B bytes in flight a block
            # (M <= 64: memory-bound, what counts is how many bytes each block keeps requested)
            "64x128": ("64x128", {}, dict(split_k=1)),
            "64x128/s3": ("64x128", {}, dict(split_k=3)),
            "64x128/s4": ("64x128", {}, dict(split_k=4)),
            "64x256": ("64x128", dict(BN=256, STAGES=5), dict(split_k=1)),
            "64x256/s2": ("64x128", dict(BN=256, STAGES=5), dict(split_k=2)),
            "64x256/s4": ("64x128", dict(BN=256, STAGES=5), dict(split_k=4)),
            # the tail split (TAIL_SPLIT, stream-K's "data-parallel + split-K tail"): the partial last wave's
            # tiles cut along K into up to 2 / 4 shares on blocks of their own (kcompiler.ops.matmul_sm90.
            # tail_shares), whole tiles stored by TMA, or every tile from registers (128x256/tail2, against
            # 128x256/4st). 1024 x 14336 x 4096: 448 tiles = 3.39 waves, the busiest block 4 tiles -> 3.5
            # (tail 52 in 2 shares; tail4 is tail2 there: 132 / 52 = 2); 8192 x 14336 x 4096: 28 -> 27.5 / 27.25
            # (--shapes m8192); 4096 x 14336 x 4096 and 4096^3: nothing split (tail > 66). Measured slower at
            # 1024 rows (H100, 2026-11-27: bf16 0.84 / 0.86x cuBLAS against the default's 0.91x, FP8 0.82x
            # against 0.98x; RESULTS.md)
            "tma128x256h/tail2": ("tma128x256h", dict(TAIL_SPLIT=2), dict(split_k=1)),
            "tma128x256h/tail4": ("tma128x256h", dict(TAIL_SPLIT=4), dict(split_k=1)),
            "128x256/tail2": ("128x256", dict(TAIL_SPLIT=2), dict(split_k=1)),
            # the tile and split that kcompiler.ops.matmul_sm90_traffic.choose_by_traffic picks per shape
            "traffic": "traffic"}
VARIANT_SHAPES = [("bf16", 1024, 14336, 4096), ("bf16", 4096, 14336, 4096), ("bf16", 8192, 14336, 4096),
                  ("bf16", 4096, 4096, 4096), ("f8e4m3", 1024, 14336, 4096)]
#: --shapes: the sets of shapes --variants runs on ("large", the default, is VARIANT_SHAPES; "small": the
#: LLM table's M 16 and 128, bf16 and FP8; "m8192": its 8192-row bf16 shapes and FP8 8192 x 14336 x 4096).
VARIANT_SHAPE_SETS = {
    "large": VARIANT_SHAPES,
    "small": [(dt, m, n, k) for dt in ("bf16", "f8e4m3") for m in (16, 128)
              for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))],
    "m8192": [("bf16", 8192, n, k) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336), (8192, 8192))]
    + [("f8e4m3", 8192, 14336, 4096)]}


def time_variants_isolated(names: list[str] | None = None, shapes: str = "large") -> list:
    """:func:`time_variants` of each of :data:`VARIANTS` (or those of ``names``) in a process of its own
    (this script with ``--variants NAME --in-process``), one after the other: a variant that crashes
    (a CUDA fault poisons its process's context) or computes a wrong result is reported as FAILED with
    its exit status, and the others still run. Returns the rows of those that ran, and a row
    ``dict(variant=NAME, failed=STATUS)`` for each that did not; the children print as they go."""
    rows = []
    for name in names or VARIANTS:
        print(f"variant {name}: starting (own process)", flush=True)
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rows.json")
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--variants", name, "--in-process",
                                "--shapes", shapes, "--json", path])
            if r.returncode != 0 or not os.path.exists(path):
                print(f"variant {name}: FAILED (exit status {r.returncode}; its output is above)", flush=True)
                rows.append(dict(variant=name, failed=r.returncode))
                continue
            with open(path) as f:
                rows += json.load(f)["variants"]
    return rows


def time_variants(names: list[str] | None = None, shapes: str = "large") -> list:
    """Each of :data:`VARIANTS` (or those of ``names``) on the shapes of :data:`VARIANT_SHAPE_SETS`
    [``shapes``] (B K-major, bf16 results; FP8 with per-tensor scales), beside cuBLAS (torch.matmul,
    torch._scaled_mm) in this process, TFLOP/s and ratios; each variant's name is printed (flushed)
    before it runs, so that a crash names it, with its arithmetic (kcompiler.ops.matmul_sm90_traffic:
    units, waves, bytes through L2 and from DRAM, the model's bound). Every variant's result is checked
    before it is timed: relative Frobenius error against torch's under 1e-2 (bf16) or 3e-2 (FP8), and
    its largest difference from the first variant's result of the run (the default's where it is first)
    printed; a mismatch stops the run (SystemExit). Ours is timed as a prepared launch
    (matmul_sm90.prepare once, then its launch alone, as ops.matmul's kept plans run), so that the
    host's preparation does not count at small M. :func:`time_variants_isolated` runs each in a process
    of its own."""
    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    from kcompiler.ops.matmul_sm90_traffic import choose_by_traffic, describe, traffic

    mod = stdlib_module("matmul_sm90", "cuda")
    unknown = [n for n in names or () if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; VARIANTS: {', '.join(VARIANTS)}")
    variants = {n: VARIANTS[n] for n in (names or VARIANTS)}
    rows = []
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for dt, m, n, k in VARIANT_SHAPE_SETS[shapes]:
        fp8 = dt == "f8e4m3"
        a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn if fp8 else torch.bfloat16)
        w = torch.randn(n, k, device="cuda").to(a.dtype)
        one = torch.ones((), device="cuda")
        if fp8:
            def theirs():
                return torch._scaled_mm(a, w.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            def theirs():
                return torch.matmul(a, w.T)
        want = theirs()
        t_cublas = bench(theirs)
        e = 1 if fp8 else 2
        default_cfg = matmul_sm90.choose(m, n, k)
        ref = None
        line = [f"cuBLAS {tflops(m, n, k, t_cublas):.0f}"]
        for name, v in variants.items():
            extra = dict(scale_a=one, scale_b=one, scale=1) if fp8 else {}
            if v == "traffic":
                cfg, split = choose_by_traffic(m, n, k, e, sms)
                extra["split_k"] = split
            else:
                cfg = default_cfg if v is None else {**matmul_sm90.CONFIGS[v[0]], **v[1]}
                if v is not None and len(v) > 2:
                    extra.update(v[2])
            split = 1 if cfg.get("CLUSTER_M", 1) > 1 else \
                extra.get("split_k") or matmul_sm90.choose_split(m, n, k, cfg, 128 // e, sms)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            if cfg.get("EPI_TMA") and split == 1 and not matmul_sm90.tma_store_applies(cfg, out, 1, None, None):
                raise SystemExit(f"variant {name}: the TMA store does not apply to {m}x{n}x{k}")
            print(f"variant {name} {dt} {m}x{n}x{k} ({cfg}, split {split}) ...", flush=True)
            print(f"  arithmetic: {describe(traffic(m, n, k, e, cfg, split, sms))}", flush=True)
            go = matmul_sm90.prepare(mod, a, w, out, config=cfg, stream=torch.cuda.current_stream(), **extra)

            def ours():
                return go(out)
            ours()
            torch.cuda.synchronize()
            err = rel_err(out, want)
            if ref is None:
                ref = out.clone()
            diff = (out.float() - ref.float()).abs().max().item()
            if not err < (3e-2 if fp8 else 1e-2) or not torch.isfinite(out).all():
                raise SystemExit(f"variant {name} ({cfg}) is WRONG at {dt} {m}x{n}x{k}: relative error {err:.2e} "
                                 f"against torch, max |difference| from the default {diff:.3g}")
            t = bench(ours)
            rows.append(dict(dtype=dt, M=m, N=n, K=k, variant=name, config=cfg, split_k=split, ours=tflops(m, n, k, t),
                             cublas=tflops(m, n, k, t_cublas), err=err, diff_default=diff))
            line.append(f"{name} {tflops(m, n, k, t):.0f} ({t_cublas / t:.2f}x, d {diff:.1g})")
        print(f"variants {dt} {m}x{n}x{k}: " + ", ".join(line), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true", help="a few sizes only")
    p.add_argument("--small", action="store_true", help="the LLM shapes with M <= 128 and the row-major B cases")
    p.add_argument("--json", help="write the rows here")
    p.add_argument("--sass", action="store_true", help="count HGMMA/QGMMA in the Hopper kernel's SASS")
    p.add_argument("--configs", action="store_true", help="time each Hopper tile configuration, then stop")
    p.add_argument("--mx", action="store_true", help="time the fused MXFP8 cast, then stop")
    p.add_argument("--graphs", action="store_true", help="time small M from CUDA graphs too, then stop")
    p.add_argument("--variants", nargs="?", const="", metavar="NAME,NAME",
                   help="time the Hopper kernel's variants (VARIANTS; all, or those named) beside cuBLAS, then stop; "
                        "each in a process of its own where there are several")
    p.add_argument("--in-process", action="store_true", help="--variants: all in this process")
    p.add_argument("--shapes", default="large", choices=sorted(VARIANT_SHAPE_SETS),
                   help="--variants: the set of shapes (VARIANT_SHAPE_SETS)")
    p.add_argument("--rounds", type=int, default=1,
                   help="the table: time ours and cuBLAS this many times each, interleaved (the median; "
                        "the spread of the rounds' ratios is printed)")
    p.add_argument("--only", help="the table: only sizes MxNxK[,MxNxK...]")
    args = p.parse_args()
    global ROUNDS
    ROUNDS = max(1, args.rounds)
    if args.variants is not None:
        names = [x for x in args.variants.split(",") if x] or None
        several = names is None or len(names) > 1
        timer = time_variants_isolated if several and not args.in_process else time_variants
        write_json(args.json, {"device": torch.cuda.get_device_name(), "variants": timer(names, args.shapes)})
        return
    if args.configs:
        time_configs()
        return
    for flag, key, timer in ((args.graphs, "graphs", time_graphs), (args.mx, "mx", time_mx)):
        if flag:
            write_json(args.json, {"device": torch.cuda.get_device_name(), key: timer()})
            return
    dev = torch.cuda.get_device_name()
    sizes = QUICK if args.quick else [s for s in LLM if s[0] <= 128] if args.small else SQUARE + LLM
    if args.only:
        sizes = [tuple(int(v) for v in s.split("x")) for s in args.only.split(",")]
    rows = []
    for m, n, k in sizes:
        for row in (case_bf16(m, n, k, "nk"), case_fp8(m, n, k)):
            rows.append(row)
            r = row["ratios"]
            spread = f" [rounds {min(r):.2f}-{max(r):.2f}]" if len(r) > 1 else ""
            print(f"{row['dtype']:6s} {m:5d} x {n:5d} x {k:5d} B {row['B']}: ours {row['ours']:6.0f}  cuBLAS "
                  f"{row['cublas']:6.0f} ({statistics.median(r):.2f}x{spread})  Triton {row['triton']:6.0f} "
                  f"({row['ours'] / row['triton']:.2f}x) TFLOP/s  err {row['err']:.1e}", flush=True)
    for m, n, k in SQUARE if not args.only else []:
        row = case_bf16(m, n, k, "kn")
        rows.append(row)
        print(f"bf16   {m:5d} x {n:5d} x {k:5d} B kn: ours {row['ours']:6.0f}  cuBLAS {row['cublas']:6.0f} "
              f"({row['ours'] / row['cublas']:.2f}x)  Triton {row['triton']:6.0f} TFLOP/s", flush=True)
    result = {"device": dev, "rows": rows}
    if args.sass:
        result["sass"] = sass_counts()
        print("SASS:", json.dumps(result["sass"]))
    write_json(args.json, result)


def write_json(path: str | None, result: dict) -> None:
    """``result`` as JSON at ``path`` (nothing where None)."""
    if path:
        with open(path, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
