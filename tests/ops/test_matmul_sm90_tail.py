"""std.matmul_sm90's tail split (TAIL_SPLIT; the kernel header's "the tail split", configurations
"t2tma128x256h", "t4tma128x256h", "t2x128x256" of kcompiler.ops.matmul_sm90): the partial last wave's
tiles cut along K into shares that run at once on blocks of their own, their f32 partials reduced
through split-K's workspace by fixup_tile.

On every machine (CI): the host's schedule arithmetic (tail_shares) against an independent count of
each block's work, the kernels assembling for sm_90a with no spills and no serialised wgmma, the
refusals (a located CompileError, a ValueError on the host), and the whole kernel on the CPU target's
emulation against numpy in float64 at odd sizes, with grids passed small so that a partial last wave
exists (odd share counts, an empty share, the TMA store for whole tiles beside the register store for
the tail's, an epilogue), the workspace's counts left zero and two launches bit-identical. On an H100
(marked gpu): the same against torch in float64 at 1024 x 14336 x K-like shapes (448 tiles over 132
SMs: a tail of 52 in 2 shares) and FP8.
"""
from __future__ import annotations

import pytest

from kcompiler.frontend.program import stdlib_dir
from kcompiler.pipeline import emit_file

from ..ptxas_util import needs_ptxas, ptxas
from .matmul_sm90_util import _check64, _emulated, _reference_check, _sm90
from ..draws import fresh_rng


def _busiest(tiles: int, grid: int, tail: int, shares: int) -> float:
    """Tiles' worth of mainloop the busiest block runs: every unit counted block by block (unit u to
    block u % grid), whole tiles as 1, shares as 1 / shares: an independent count of the schedule."""
    work = [0.0] * grid
    whole = tiles - tail
    for u in range(whole + tail * shares):
        work[u % grid] += 1.0 if u < whole else 1.0 / shares
    return max(work)


def test_tail_shares_arithmetic():
    """The host's (tail, shares) (kcompiler.ops.matmul_sm90.tail_shares, the kernel's fn schedule): the
    partial last wave split where its shares fit one round, never where nothing would be gained; the
    busiest block's work against the unsplit schedule's."""
    from kcompiler.ops.matmul_sm90 import tail_shares
    # 1024 x 14336 with 128 x 256 tiles on 132 SMs: 448 tiles, tail 52 in 2 shares (4 shares do not fit)
    assert tail_shares(448, 132, 2) == (52, 2) and tail_shares(448, 132, 4) == (52, 2)
    assert _busiest(448, 132, 52, 2) == 3.5 and _busiest(448, 132, 0, 1) == 4
    # 8192 x 14336: 3584 tiles, tail 20: 28 -> 27.5 (2 shares) or 27.25 (4)
    assert tail_shares(3584, 132, 2) == (20, 2) and tail_shares(3584, 132, 4) == (20, 4)
    assert _busiest(3584, 132, 20, 4) == 27.25
    # 4096 x 14336 (1792 tiles, tail 76) and 4096^3 (512, tail 116): more than half a wave, not split
    assert tail_shares(1792, 132, 4) == (0, 1) and tail_shares(512, 132, 2) == (0, 1)
    # whole waves, or fewer tiles than blocks (split-K's case): nothing
    assert tail_shares(396, 132, 2) == (0, 1) and tail_shares(100, 132, 4) == (0, 1)
    for tiles in range(1, 400):
        for grid in (3, 7, 132):
            tail, shares = tail_shares(tiles, grid, 4)
            assert tail * shares <= grid  # every share on a block of its own, in the last round
            assert _busiest(tiles, grid, tail, shares) <= _busiest(tiles, grid, 0, 1)


TAIL_KERNELS = [
    ("matmul_sm90_tma", dict(T="bf16", OUT="bf16", STAGES=4, EPI_TMA=128, TAIL_SPLIT=2)),
    ("matmul_sm90_tma", dict(T="f8e4m3", OUT="bf16", BK=128, STAGES=4, EPI_TMA=128, SCALE=1, TAIL_SPLIT=4)),
    ("matmul_sm90", dict(T="bf16", OUT="bf16", STAGES=4, TAIL_SPLIT=2)),
]


@needs_ptxas
@pytest.mark.parametrize("kernel, params", TAIL_KERNELS, ids=["tma-bf16-tail2", "tma-fp8-tail4", "regs-bf16-tail2"])
def test_tail_split_assembles(kernel, params):
    """The tail split's kernels assemble for sm_90a with no spills and no serialised wgmma (ptxas -v;
    setmaxnreg honoured); the fix-up's count is an acq_rel atomic, which the kernel without the tail
    split (the TMA store's) does not have."""
    ptx = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel=kernel, comptime=params)
    assert "atom.acq_rel.gpu" in ptx
    if kernel == "matmul_sm90_tma":
        base = emit_file(stdlib_dir() / "matmul_sm90.kc", "asm", "nvptx", "sm_90a", kernel=kernel,
                         comptime={k: v for k, v in params.items() if k != "TAIL_SPLIT"})
        assert "atom." not in base
    log = ptxas(ptx, verbose=True)
    assert " 0 bytes spill stores" in log and "C75" not in log, log


@pytest.mark.parametrize("params", [dict(TAIL_SPLIT=1), dict(TAIL_SPLIT=2, SPLIT_K=2),
                                    dict(TAIL_SPLIT=2, PINGPONG=True, BN=128)],
                         ids=["one-share", "split-k", "pingpong"])
def test_tail_split_refused(params):
    """TAIL_SPLIT below 2, with split-K or ping-pong: a located error (the kernel's rule)."""
    from kcompiler.backends import get_target
    from kcompiler.diagnostics import CompileError
    with pytest.raises(CompileError, match="TAIL_SPLIT") as ei:
        emit_file(stdlib_dir() / "matmul_sm90.kc", "llvm", get_target("cpu", emulate_wgmma=True),
                  kernel="matmul_sm90", comptime=dict(T="bf16", OUT="f32", **params))
    assert "matmul_sm90.kc:" in str(ei.value)


def test_host_refuses():
    """The host refuses what the kernel does not take (split-K asked for, clusters) with a ValueError,
    before compiling anything; an unknown configuration name too."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    a = np.zeros((70, 72), ml_dtypes.bfloat16)
    b = np.zeros((136, 72), ml_dtypes.bfloat16)
    out = np.zeros((70, 136), np.float32)
    with pytest.raises(ValueError, match="TAIL_SPLIT"):
        matmul_sm90.run(_emulated(), a, b, out, config="t2x128x256", sms=3, split_k=2)
    with pytest.raises(ValueError, match="TAIL_SPLIT"):
        matmul_sm90.run(_emulated(), a, b, out, config=dict(matmul_sm90.CONFIGS["c2x128x256"], TAIL_SPLIT=2), sms=4)
    with pytest.raises(ValueError, match="no configuration"):
        matmul_sm90.run(_emulated(), a, b, out, config="t3x128x256", sms=3)


EMU_CASES = [  # (M, N, K), config (a name, or a base name and TAIL_SPLIT), blocks, OUT, (tail, shares)
    ((200, 264, 200), ("64x128", 2), 5, "f32", (2, 2)),  # 12 tiles: 10 whole, 2 in halves of 2 k-steps
    ((200, 264, 200), ("64x128", 4), 9, "bf16", (3, 3)),  # 3 shares (odd) of 1, 1 and 2 k-steps
    ((200, 264, 72), ("64x128", 4), 9, "f32", (3, 3)),  # 2 k-steps in 3 shares: one empty
    ((131, 264, 200), "t2x128x256", 3, "bf16", (1, 2)),  # 128 x 256 tiles, M odd, register stores
    ((200, 328, 136), "t2tma128x256h", 3, "bf16", (1, 2)),  # whole tiles by TMA, the tail's from registers
    ((333, 520, 264), "t4tma128x256h", 8, "bf16", (1, 4)),  # 9 tiles: 8 whole, 1 in quarters (1, 1, 1, 2 k-steps)
    ((200, 264, 200), ("64x128", 2), 4, "f32", (0, 1)),  # 12 tiles over 4 blocks: whole waves, nothing split
]


def _config(c):
    from kcompiler.ops import matmul_sm90
    return matmul_sm90.CONFIGS[c] if isinstance(c, str) else dict(matmul_sm90.CONFIGS[c[0]], TAIL_SPLIT=c[1])


@pytest.mark.slow(sample=3)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("shape, config, sms, out_t, expect", EMU_CASES,
                         ids=[f"{'x'.join(map(str, c[0]))}-{c[1] if isinstance(c[1], str) else '%s-t%d' % c[1]}-"
                              f"{c[2]}blocks" for c in EMU_CASES])
def test_emulated_tail_split(shape, config, sms, out_t, expect, monkeypatch):
    """The tail split on the CPU target's emulation, C poisoned with NaN, against numpy in float64; the
    workspace (NaN-filled) sized for the tail's shares and its counts zero after each launch; a second
    launch bit-identical to the first (the shares' sum in share order, whichever thread completes it)."""
    import ml_dtypes
    import numpy as np

    from kcompiler.ops import matmul_sm90
    M, N, K = shape
    cfg = _config(config)
    taken = []
    real = matmul_sm90._split_workspace

    def workspace(like, slots, per_slot):
        ws, counts = real(like, slots, per_slot)
        ws[:] = np.nan  # every partial read is written first in the same launch
        taken.append((slots, per_slot, ws, counts))
        return ws, counts
    monkeypatch.setattr(matmul_sm90, "_split_workspace", workspace)
    rng = fresh_rng()
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    ot = {"f32": np.float32, "bf16": ml_dtypes.bfloat16}[out_t]
    outs = []
    for _ in range(2):
        out = np.full((M, N), np.nan, ot)
        go = matmul_sm90.prepare(_emulated(), a, b, out, config=cfg, sms=sms)
        go(out)
        outs.append(out)
    tail, shares = expect
    bm = matmul_sm90.tile_m(cfg)
    if shares > 1:
        assert [t[:2] for t in taken] == [(tail * 2 * bm, shares * cfg["BN"] // 2)] * 2
        for _, _, ws, counts in taken:
            assert not counts.any()  # every slot's count back to zero
            assert np.isfinite(ws).any()  # the partials went through the workspace
    else:
        assert taken == []
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(outs[0], a64 @ b64, K, np.abs(a64) @ np.abs(b64))
    assert outs[0].tobytes() == outs[1].tobytes()


def test_emulated_tail_split_epilogue_and_scales():
    """The tail's fix-up applies the epilogue (bias_relu, through matmul_sm90_epilogue) and FP8's
    per-row / per-column scales (SCALE 2, through the TMA store kernel's) as whole tiles do."""
    import numpy as np

    from kcompiler.ops import matmul_sm90
    from .matmul_sm90_util import _fp8_operands
    rng = fresh_rng()
    M, N, K = 77, 264, 200  # 64 x 128 tiles: 2 x 3 = 6 over 4 blocks: tail 2 in 2 shares
    import ml_dtypes
    a = rng.standard_normal((M, K)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((N, K)).astype(ml_dtypes.bfloat16)
    bias = rng.standard_normal(N).astype(np.float32)
    out = np.full((M, N), np.nan, np.float32)
    matmul_sm90.run(_emulated(), a, b, out, config=dict(matmul_sm90.CONFIGS["64x128"], TAIL_SPLIT=2), sms=4,
                    epilogue=("epilogue.bias_relu", bias, out.reshape(-1), 1.0))
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    _check64(out, np.maximum(a64 @ b64 + bias, 0), K, np.abs(a64) @ np.abs(b64) + np.abs(bias))
    M, N, K = 77, 520, 256  # 128 x 256 tiles: 1 x 3 over 2 blocks: tail 1 in 2 shares
    a, b, sa, sb = _fp8_operands(rng, "float8_e4m3fn", M, N, K, True)
    out = np.full((M, N), np.nan, np.float16)
    matmul_sm90.run(_emulated(), a, b, out, scale_a=sa, scale_b=sb, scale=2, config="t2tma128x256h", sms=2)
    a64, b64 = a.astype(np.float64), b.astype(np.float64).T
    scale = (sa[:, None] * sb[None, :]).astype(np.float64)
    _check64(out, (a64 @ b64) * scale, K, (np.abs(a64) @ np.abs(b64)) * scale, fp8=True)


@pytest.mark.gpu
@pytest.mark.parametrize("config", ["t2tma128x256h", "t4tma128x256h", "t2x128x256"])
@pytest.mark.parametrize("shape, sms", [((1024, 14336, 512), None), ((1000, 14336, 520), None),
                                        ((333, 1000, 520), 7), ((8192, 14336, 256), None)],
                         ids=["1024x14336x512", "1000x14336x520", "333x1000x520-7blocks", "8192x14336x256"])
def test_tail_split_on_gpu(config, shape, sms):
    """The tail split on the H100 against torch in float64, C poisoned first: 1024 x 14336 (448 tiles
    over 132 SMs: 52 in 2 shares), odd M and K, a small grid (7 blocks over 12 tiles: 5 in shares), 8192
    rows (3584 tiles: 20 in 2 or 4 shares); twice, bit-identical (the counts reset by the kernel)."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = shape
    a = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    b = torch.randn(N, K, device="cuda").to(torch.bfloat16)
    mod = stdlib_module("matmul_sm90", "cuda")
    outs = []
    for _ in range(2):
        out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul_sm90.run(mod, a, b, out, config=config, sms=sms)
        torch.cuda.synchronize()
        outs.append(out)
    _reference_check(outs[0], a, b.T)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.gpu
def test_tail_split_fp8_on_gpu():
    """FP8 (per-tensor scales) through t2tma128x256h at 1024 x 14336 x 512 against torch in float64."""
    import torch

    from kcompiler.ops import matmul_sm90
    from kcompiler.ops._common import stdlib_module
    _sm90(torch)
    M, N, K = 1024, 14336, 512
    a = torch.randn(M, K, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, K, device="cuda").to(torch.float8_e4m3fn)
    half = torch.full((1,), 0.5, device="cuda")
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul_sm90.run(stdlib_module("matmul_sm90", "cuda"), a, b, out, scale_a=half, scale_b=half, scale=1,
                    config="t2tma128x256h")
    torch.cuda.synchronize()
    _reference_check(out, a, b.T, fp8=True, scale=torch.tensor(0.25, dtype=torch.float64, device="cuda"))
