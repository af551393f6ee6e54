"""Issue 23's matmul variants (kcompiler.ops.matmul_sm90.CONFIGS "c2tma128x256h" and "128x112", split-K
with 128-row tiles, the raster's GROUP_M) and the launch arithmetic of kcompiler.ops.matmul_sm90_traffic.

On every machine (CI): the TMA store epilogue in 2-block clusters assembling for sm_90a (multicast B
loads, TMA stores, the cluster's size, no spills) and refused on the CPU target; the host taking the
TMA store for it; 128 x 112 tiles and 128-row split-K on the CPU target's emulation against numpy in
float64; the traffic model against arithmetic written out by hand. On an H100 (marked gpu): each
variant against torch in float64 on odd shapes, C poisoned first."""
from __future__ import annotations

import pytest

from kcompiler.diagnostics import CompileError
from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit_file

from ..ptxas_util import needs_ptxas, ptxas
from .matmul_sm90_util import _check64, _emulated, _fp8_gpu_case, _fp8_operands, _reference_check, _sm90
from ..draws import fresh_rng


@needs_ptxas
@pytest.mark.parametrize("t", ["bf16", "f8e4m3"])
def test_cluster_tma_store_assembles(t):
    """matmul_sm90_tma with CLUSTER_M 2: clusters of 2, B loaded by multicast, C stored by TMA (4 boxes
    a tile), no spills, no serialised wgmma (before issue 23's change: a compile_error)."""
    params = dict(T=t, OUT="bf16", STAGES=4, EPI_TMA=128, CLUSTER_M=2)
    if t == "f8e4m3":
        params.update(BK=128, SCALE=1)
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_tma",
                    comptime=params)
    assert ".reqnctapercluster 2, 1, 1" in ptx
    assert "multicast::cluster" in ptx
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == 4
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


def test_cluster_tma_store_refused_on_the_cpu_target():
    """The CPU target has no clusters: a located error, as for the register store."""
    from kcompiler.backends import get_target
    with pytest.raises(CompileError) as ei:
        emit_file(stdlib_dir() / "matmul_sm90.kc", "llvm", get_target("cpu", emulate_wgmma=True),
                  kernel="matmul_sm90_tma", comptime=dict(T="bf16", OUT="bf16", STAGES=4, EPI_TMA=128, CLUSTER_M=2))
    assert "matmul_sm90.kc:" in str(ei.value)


def test_host_takes_the_cluster_tma_store():
    """tma_store_applies now admits clusters; the new configurations fit a block's shared memory."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90 as m
    out = np.zeros((100, 136), ml_dtypes.bfloat16)
    assert m.tma_store_applies(m.CONFIGS["c2tma128x256h"], out, 1, None, None)
    assert not m.tma_store_applies(m.CONFIGS["c2x128x256"], out, 1, None, None)  # no EPI_TMA: register store
    for name, t in (("c2tma128x256h", "bf16"), ("128x112", "bf16"), ("128x112", "f8e4m3")):
        assert m.shared_bytes(m.CONFIGS[name], t) <= 227 * 1024
    assert m.shared_bytes(m.CONFIGS["128x112"], "bf16") == 7 * (128 + 112) * 128 + 16 * 7


@needs_ptxas
@pytest.mark.parametrize("t", ["bf16", "f8e4m3"])
def test_128x112_assembles(t):
    """wgmma m64n112 (56 accumulators a thread), 7 stages: no spills."""
    params = dict(T=t, OUT="bf16", BN=112, STAGES=7)
    if t == "f8e4m3":
        params.update(BK=128, SCALE=1)
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90", comptime=params)
    assert "n112k" in ptx
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


EMU_CASES = [  # (M, N, K), T, config, split-K, blocks
    ((130, 250, 136), "bf16", "128x112", 1, 2),  # 2 x 3 tiles of 112 columns over 2 blocks, edges zero-filled
    ((100, 136, 520), "bf16", "128x128", 2, 3),  # 128-row tiles, 2 shares of the K loop (the fix-up)
    ((100, 136, 520), "bf16", "128x128", 4, 3),  # 4 shares of 2-3 k-steps
]


@pytest.mark.parametrize("shape, t, config, split_k, sms", EMU_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-{c[2]}-s{c[3]}" for c in EMU_CASES])
def test_emulated_small_m_variants(shape, t, config, split_k, sms):
    """The small-M variants on the CPU target's emulation, C poisoned with NaN, against numpy in float64."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = shape
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    out = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    matmul_sm90.run(_emulated(), a, b, out, config=matmul_sm90.CONFIGS[config], sms=sms, split_k=split_k)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, a64 @ b64, K, np.abs(a64) @ np.abs(b64))


def test_emulated_128x112_fp8_scaled():
    """FP8 e4m3 through 128 x 112 tiles, per-row / per-column scales (SCALE 2), f32 C."""
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = 70, 230, 272
    a, b, sa, sb = _fp8_operands(fresh_rng(), "float8_e4m3fn", M, N, K, True)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, b, out, scale_a=sa, scale_b=sb, scale=2, config=matmul_sm90.CONFIGS["128x112"],
                    sms=2, split_k=1)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    scale = (sa[:, None] * sb[None, :]).astype(np.float64)
    _check64(out, (a64 @ b64) * scale, K, (np.abs(a64) @ np.abs(b64)) * scale, fp8=True)


def test_traffic_arithmetic():
    """kcompiler.ops.matmul_sm90_traffic.traffic against the arithmetic written out by hand."""
    from kcompiler.ops import matmul_sm90 as m
    from kcompiler.ops.matmul_sm90_traffic import L2_PER_BLOCK, traffic

    # 8192 x 14336 x 4096 bf16, 128 x 256 tiles: 64 x 56 = 3584 tiles, 28 waves over 132 blocks, a tile
    # reads (128 + 256) x 4096 x 2 bytes = 3 MiB through L2; B from DRAM once per 8 rows of tiles
    r = traffic(8192, 14336, 4096, 2, m.CONFIGS["tma128x256h"], 1, 132)
    assert (r["tiles"], r["units"], r["blocks"], r["waves"]) == (3584, 3584, 132, 28)
    assert r["l2_block"] == 28 * 384 * 4096 * 2 and r["l2_total"] == 3584 * 384 * 4096 * 2
    assert r["dram"] == 8192 * 4096 * 2 + 8 * 14336 * 4096 * 2 + 8192 * 14336 * 2
    assert r["t_l2_block"] == pytest.approx(r["l2_block"] / L2_PER_BLOCK * 1e6)
    # clusters of 2 along M: half of B a block; B once per 16 rows of tiles
    r = traffic(8192, 14336, 4096, 2, m.CONFIGS["c2tma128x256h"], 1, 132)
    assert r["l2_block"] == 28 * 256 * 4096 * 2
    assert r["dram"] == 8192 * 4096 * 2 + 4 * 14336 * 4096 * 2 + 8192 * 14336 * 2
    # FP8 128 x 4096 x 14336, 128 x 128 tiles in 4 shares: 32 x 4 = 128 units, one wave; a unit reads
    # (128 + 128) x 3584 bytes and writes 128 x 128 f32 partials; the last share reads 3 more
    r = traffic(128, 4096, 14336, 1, m.CONFIGS["128x128"], 4, 132)
    assert (r["units"], r["blocks"], r["waves"]) == (128, 128, 1)
    assert r["l2_block"] == 256 * 3584 + 65536 + 3 * 65536
    # M = 16: TMA reads 16 rows of A, not the tile's 64
    r = traffic(16, 4096, 4096, 2, m.CONFIGS["64x64"], 1, 132)
    assert r["l2_block"] == (16 + 64) * 4096 * 2 and r["waves"] == 1 and r["blocks"] == 64
    with pytest.raises(ValueError):
        traffic(0, 1, 1, 2, m.CONFIGS["64x64"])


def test_choose_by_traffic():
    """The default where the model sees no gain of 2 %; 128-row tiles in 4 shares for FP8 128 x 4096 x
    14336 (L2 bytes a block 1.84 MB -> 1.18 MB)."""
    from kcompiler.ops import matmul_sm90 as m
    from kcompiler.ops.matmul_sm90_traffic import choose_by_traffic
    assert choose_by_traffic(8192, 14336, 4096, 2) == (m.choose(8192, 14336, 4096, 132), 1)
    assert choose_by_traffic(16, 14336, 4096, 1) == (m.CONFIGS["64x112"], 1)  # the default (choose)
    assert choose_by_traffic(128, 4096, 14336, 1) == (m.CONFIGS["128x128"], 4)


# --- on an H100 --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(333, 1000, 520), (1024, 14336, 512), (4096, 4096, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("group_m", [8, 4])
def test_cluster_tma_store_on_gpu(shape, group_m):
    """c2tma128x256h (2-block clusters sharing B, C by TMA) on the H100: 333 rows are 3 rows of tiles, so
    the second tile of a pair lies past M (its store clipped whole); bf16 C poisoned first."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    cfg = dict(matmul_sm90.CONFIGS["c2tma128x256h"], GROUP_M=group_m)
    assert matmul_sm90.tma_store_applies(cfg, out, 1, None, None)
    matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b, out, config=cfg)
    torch.cuda.synchronize()
    _reference_check(out, a, b.T)


@pytest.mark.gpu
@pytest.mark.parametrize("config, split", [("c2tma128x256h", 1), ("128x112", 1), ("128x128", 2), ("128x128", 4),
                                           ("128x256", 2)])
@pytest.mark.parametrize("per_row", [False, True])
def test_variants_fp8_on_gpu(config, split, per_row):
    """FP8 e4m3 through each variant on an odd shape, scaled per tensor or per row / column."""
    _fp8_gpu_case(config, per_row, 1040, split)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(16, 14336, 4096), (128, 4096, 14336), (128, 14336, 4096), (100, 1000, 2056)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("config, split", [("128x112", 1), ("128x128", 2), ("128x128", 4), ("128x256", 2)])
def test_small_m_variants_on_gpu(shape, config, split):
    """The small-M variants (bf16) on the LLM table's shapes and an odd one, against torch in float64."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b, out, config=matmul_sm90.CONFIGS[config],
                    split_k=split)
    torch.cuda.synchronize()
    _reference_check(out, a, b.T)
