"""std.matmul_sm90's TMA store epilogue (EPI_TMA, kernel matmul_sm90_tma; configurations "tma128x256"
and "tma128x256h" of kcompiler.ops.matmul_sm90): each consumer's D fragment written into a swizzled
shared-memory C buffer and stored by TMA (tma_store, tests/backends/nvptx/test_tma_store.py).

On every machine (CI): the kernel assembling for sm_90a with no spills and no serialised wgmma, its
shared memory within a block's, the host's choice of it (and fall-back to the register store), and the
whole kernel on the CPU target's emulation of wgmma / TMA against numpy in float64 at odd sizes (M, N
not multiples of the tile, several tiles a block: the C buffer reused). On an H100 (marked gpu): the
same against torch in float64."""
from __future__ import annotations

import re

import pytest

from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit_file

from ..ptxas_util import needs_ptxas, ptxas
from .matmul_sm90_util import _check64, _emulated, _reference_check, _sm90
from ..draws import fresh_rng


@needs_ptxas
@pytest.mark.parametrize("params, boxes", [(dict(T="bf16", OUT="bf16", STAGES=3, EPI_TMA=256), 4),
                                           (dict(T="f8e4m3", OUT="f16", BK=128, SCALE=2, STAGES=4, EPI_TMA=128), 4),
                                           (dict(T="bf16", OUT="bf16", BN=224, STAGES=4, EPI_TMA=128), 7),
                                           (dict(T="f8e4m3", OUT="bf16", BK=128, BN=224, SCALE=1, STAGES=4,
                                                 EPI_TMA=128), 7)],
                         ids=["bf16-full", "fp8-half", "bf16-224", "fp8-224"])
def test_tma_epilogue_assembles(params, boxes):
    """A TMA store a box of the consumer's buffer (64 columns; 32 for BN 224: 128 + 96 columns in 4 + 3
    boxes), no spills, no serialised wgmma."""
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_tma",
                    comptime=params)
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group") == boxes
    assert "cp.async.bulk.wait_group.read 0" in ptx and "cp.async.bulk.commit_group" in ptx
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


@needs_ptxas
def test_tma_epilogue_named_barriers_ptx():
    """EPI_BAR: each consumer's two meetings a copy are bar.sync on its own named barrier (its warpgroup
    number, in a register) of 128 threads, where the default waits on its store mbarrier."""
    params = dict(T="bf16", OUT="bf16", STAGES=4, EPI_TMA=128)
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_tma",
                    comptime=dict(params, EPI_BAR=True))
    base = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel="matmul_sm90_tma",
                     comptime=params)
    assert len(re.findall(r"barrier\.sync\.aligned %r\d+, 128;", ptx)) >= 2
    assert "\tbarrier.sync.aligned" not in base
    assert ptx.count("mbarrier.try_wait") < base.count("mbarrier.try_wait")
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


def test_refused_where_it_does_not_apply():
    """EPI_TMA with an f32 C, or not a multiple of the box (64 columns; 32 where BN is not a multiple of
    64), or past BN: a located error (the kernel's rule)."""
    from kcompiler.backends import get_target
    from kcompiler.diagnostics import CompileError
    for params in (dict(T="bf16", OUT="f32", EPI_TMA=256), dict(T="bf16", OUT="bf16", EPI_TMA=96),
                   dict(T="bf16", OUT="bf16", BN=224, EPI_TMA=48), dict(T="bf16", OUT="bf16", BN=224, EPI_TMA=256)):
        with pytest.raises(CompileError, match="EPI_TMA") as ei:
            emit_file(stdlib_dir() / "matmul_sm90.kc", "llvm", get_target("cpu", emulate_wgmma=True),
                      kernel="matmul_sm90_tma", comptime=params)
        assert "matmul_sm90.kc:" in str(ei.value)


def test_host_choice():
    """The shared memory fits a block (227 KiB); the TMA store only for a 16-bit C of rows TMA can
    describe, unsplit, without block or fused epilogues; the plain configurations never take it."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90 as m
    for name in ("tma128x256", "tma128x256h", "tma128x224h"):
        assert m.shared_bytes(m.CONFIGS[name], "bf16") <= 227 * 1024
    assert m.epi_box(m.CONFIGS["tma128x256h"]) == 64 and m.epi_box(m.CONFIGS["tma128x224h"]) == 32
    cfg = m.CONFIGS["tma128x256"]
    out = np.zeros((100, 136), ml_dtypes.bfloat16)
    assert m.tma_store_applies(cfg, out, 1, None, None)
    assert not m.tma_store_applies(cfg, out, 2, None, None)
    assert not m.tma_store_applies(cfg, np.zeros((100, 136), np.float32), 1, None, None)
    assert not m.tma_store_applies(cfg, np.zeros((100, 132), ml_dtypes.bfloat16), 1, None, None)  # rows of 264 B
    assert not m.tma_store_applies(m.CONFIGS["128x256"], out, 1, None, None)


EMU_CASES = [  # (M, N, K), config, blocks, epilogue
    ((200, 328, 136), "tma128x256", 2, None),  # 2 x 2 tiles over 2 blocks: the buffer reused; edges clipped
    ((70, 264, 72), "tma128x256h", 1, None),  # two copies a tile (half buffers), 2 tiles in one block
    ((70, 264, 72), "tma128x256hn", 1, None),  # the same, the consumers meeting on named barriers (EPI_BAR)
    ((130, 136, 72), "tma128x256", 1, "bias_relu"),  # EPI reads x only inside C
    ((70, 456, 72), "tma128x224h", 2, None),  # boxes of 32 columns (64-byte swizzle), parts of 128 + 96; N 8 past 448
    ((130, 200, 72), "tma128x224h", 1, "bias_relu"),  # one column of tiles, clipped inside its second part
]


@pytest.mark.slow(sample=3)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("shape, config, sms, epi", EMU_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-{c[1]}-{c[3] or 'plain'}" for c in EMU_CASES])
def test_emulated_tma_epilogue(shape, config, sms, epi):
    """The kernel with its TMA store on the CPU target's emulation, bf16 C poisoned with NaN first (an
    element the store misses stays NaN; one it writes past C would land outside the array, which the
    emulation clips), against numpy in float64."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = shape
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    out = np.full((M, N), np.nan, ml_dtypes.bfloat16)
    assert matmul_sm90.tma_store_applies(matmul_sm90.CONFIGS[config], out, 1, None, None)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    ref, absprod = a64 @ b64, np.abs(a64) @ np.abs(b64)
    epilogue = None
    if epi:
        bias = rng.standard_normal(N).astype(np.float32)
        epilogue = ("epilogue.bias_relu", bias, out.reshape(-1), 1.0)
        ref, absprod = np.maximum(ref + bias, 0), absprod + np.abs(bias)
    matmul_sm90.run(_emulated(), a, b, out, config=matmul_sm90.CONFIGS[config], sms=sms, split_k=1,
                    epilogue=epilogue)
    _check64(out, ref, K, absprod)


def test_emulated_tma_epilogue_fp8_scaled():
    """FP8 with per-row / per-column scales (SCALE 2) through the TMA store, f16 C."""
    import numpy as np

    from kcompiler.ops import matmul_sm90
    from .matmul_sm90_util import _fp8_operands
    M, N, K = 77, 136, 144
    a, b, sa, sb = _fp8_operands(fresh_rng(), "float8_e4m3fn", M, N, K, True)
    out = np.full((M, N), np.nan, np.float16)
    matmul_sm90.run(_emulated(), a, b, out, scale_a=sa, scale_b=sb, scale=2, config=matmul_sm90.CONFIGS["tma128x256h"],
                    sms=1, split_k=1)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    scale = (sa[:, None] * sb[None, :]).astype(np.float64)
    _check64(out, (a64 @ b64) * scale, K, (np.abs(a64) @ np.abs(b64)) * scale, fp8=True)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["tma128x256", "tma128x256h", "tma128x256hn", "tma128x224h"])
@pytest.mark.parametrize("shape", [(333, 1000, 520), (1024, 14336, 512), (4096, 4096, 256)],
                         ids=lambda s: "x".join(map(str, s)))
def test_tma_epilogue_on_gpu(config, shape):
    """The TMA store on the H100 (many tiles a block, odd edges), bf16 C poisoned first, against torch in
    float64; with an epilogue (bias) on the odd shape."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert matmul_sm90.tma_store_applies(matmul_sm90.CONFIGS[config], out, 1, None, None)
    mod = stdlib_module("matmul_sm90", "cuda")
    matmul_sm90.run(mod, a, b, out, config=matmul_sm90.CONFIGS[config], split_k=1)
    torch.cuda.synchronize()
    _reference_check(out, a, b.T)
    if M == 333:
        bias = torch.randn(N, device="cuda")
        out2 = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_sm90.run(mod, a, b, out2, config=matmul_sm90.CONFIGS[config], split_k=1,
                        epilogue=("epilogue.bias", bias, out2.reshape(-1), 1.0))
        torch.cuda.synchronize()
        want = (a.double() @ b.double().T + bias.double()).to(torch.bfloat16)
        assert torch.isfinite(out2).all()
        torch.testing.assert_close(out2.float(), want.float(), rtol=2e-2, atol=2e-2)
