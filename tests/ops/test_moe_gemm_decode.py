"""std.moe_gemm's decode-batch launch and variants (issue 25): the grid's y bounded by
ops.moe_grid_tiles (no block for tiles that only pad), and the tensor-core path's XR (x rows per lane
from sorted_ids), NTD (empty n8 tiles skipped, block_m 16), TL / GY (a block loops over tiles) on the
CPU target (emulate_mma, every access bounds-checked) against the float64 references of
moe_util.py; GPU tests (marked ``gpu``) at gpt-oss's sizes against the default's bits."""
from __future__ import annotations

import numpy as np
import pytest

from kcompiler import ops
from kcompiler.ops import moe_gemm as moe_gemm_mod
from kcompiler.ops.moe_types import MoERouting

from ..ptxas_util import needs_ptxas, ptxas
from .moe_util import (_module, _mxfp4_variant_case, bf16, check, make_routing, random_routing, ref_down,
                       ref_swiglu)


@pytest.mark.parametrize("T, top_k, E, bm", [(1, 4, 32, 8), (1, 4, 128, 8), (16, 4, 32, 8), (16, 4, 128, 8),
                                              (64, 4, 32, 8), (64, 4, 32, 16), (3, 2, 6, 8), (300, 4, 32, 32)])
def test_grid_tiles_bound(T, top_k, E, bm):
    """The routing's tiles in use never exceed ops.moe_grid_tiles (random routings, and the worst case:
    every assignment to its own expert, as many experts as possible), which equals them where each
    of T * top_k <= E assignments has an expert of its own, and is below P / block_m at T = 1."""
    rng = np.random.default_rng(T * 1000 + E)
    bound = ops.moe_grid_tiles(T, top_k, E, bm)
    P = MoERouting.padded_slots(T, top_k, E, bm)
    assert bound <= P // bm
    for _ in range(20):
        r = random_routing(rng, T, top_k, E, bm)
        assert int(r.num_tiles[0]) <= bound
    n = T * top_k
    ids = (np.arange(n) % E).reshape(T, top_k).astype(np.int32)   # distinct experts within a token where n <= E
    r = make_routing(ids, np.ones((T, top_k), np.float32), E, bm)
    assert int(r.num_tiles[0]) <= bound
    if n <= E:
        assert int(r.num_tiles[0]) == bound
    if T == 1:
        assert bound == top_k < P // bm


class _Recorder:
    """A module whose kernels record their launch grids, then launch on the wrapped module."""

    def __init__(self, mod):
        self.mod, self.grids = mod, []

    def target_has(self, what):
        return self.mod.target_has(what)

    def __getattr__(self, name):
        kern = getattr(self.mod, name)
        rec = self

        class _K:
            def __getitem__(self, cfg):
                rec.grids.append((name, cfg[0]))
                return kern[cfg]
        return _K()


@pytest.mark.parametrize("tuning, want_y", [({}, "bound"), *(pytest.param(*c, marks=pytest.mark.slow(sample=0))
                                                              for c in ((dict(GRID=0), "padded"), (dict(GY=1), 1)))])
def test_launch_grid(tuning, want_y, monkeypatch):
    """The launches' grid y: ops.moe_grid_tiles by default (4 tiles at T = 1, top_k 4, not the 29 of
    P / block_m at E = 32), every padded tile with GRID = 0, GY's cap (the tile loop) with GY; the
    results match the float64 references either way."""
    rec = _Recorder(_module(True))
    monkeypatch.setattr(moe_gemm_mod._common, "stdlib_module", lambda name, target: rec)
    T, top_k, E, Hd, I, bm = 1, 4, 32, 64, 24, 8
    rng = np.random.default_rng(5)
    x = bf16(rng.standard_normal((T, Hd)))
    w1 = _mxfp4_variant_case(rng, E, 2 * I, Hd)
    w2 = _mxfp4_variant_case(rng, E, Hd, I + 8)
    r = random_routing(rng, T, top_k, E, bm)
    H = ops.moe_gemm_swiglu(x, w1, r, target="cpu", tuning=tuning)
    want, bound = ref_swiglu(x, w1, r)
    check(H, want, bound, f"swiglu {tuning}")
    h = bf16(rng.standard_normal((T * top_k, I + 8)))
    Y, bY, out, bout = ref_down(h, w2, r)
    check(ops.moe_gemm_down(h, w2, r, target="cpu", tuning=tuning), out, bout, f"down {tuning}")
    y = {"bound": top_k, "padded": MoERouting.padded_slots(T, top_k, E, bm) // bm}.get(want_y, want_y)
    assert [g[1] for _, g in rec.grids] == [y, y], rec.grids


#: (name, tuning, block_m): the decode variants on routings where tiles hold 1-8 and 9-16 assignments
#: (ntd, MXFP4's default at block_m 16, in every run; the opt-in others with -m slow).
VARIANTS = [("xr", dict(XR=1), 8), ("xr chk0", dict(XR=1, CHK=0), 8), ("ntd", dict(NTD=1), 16),
            ("ntd xr", dict(NTD=1, XR=1), 16), ("ntd xr bm32", dict(NTD=1, XR=1), 32),
            ("tl gy2", dict(GY=2), 8), ("tl gy1 xr", dict(GY=1, XR=1), 16), ("lb4", dict(LB=4), 8)]


@pytest.mark.parametrize("name, tuning, bm", [v if v[0] == "ntd" else pytest.param(*v, marks=pytest.mark.slow(sample=0))
                                              for v in VARIANTS], ids=[v[0] for v in VARIANTS])
def test_decode_variants(name, tuning, bm, monkeypatch):
    """Each variant, both GEMMs (gate/up + SwiGLU, the down projection separate and atomic), on the
    tensor-core path against the float64 references: T = 11, top_k 4 over 5 of 8 experts (8.8
    assignments an expert: block_m 16 and 32 tiles with more than 8 assignments and with fewer,
    experts with none), K = 96 (a partial chunk), I = 40 (a partial 16-row tile), MXFP4 scales above 128
    and NaN (DEC 2's two passes)."""
    monkeypatch.setattr(moe_gemm_mod._common, "stdlib_module", lambda name, target: _module(True))
    T, top_k, E, used, Hd, I = 11, 4, 8, 5, 96, 40
    rng = np.random.default_rng(77)
    x = bf16(rng.standard_normal((T, Hd)))
    w1 = _mxfp4_variant_case(rng, E, 2 * I, Hd)
    r = random_routing(np.random.default_rng(77 + bm), T, top_k, E, bm, used)
    sid = np.asarray(r.sorted_ids).reshape(-1, bm)[: int(r.num_tiles[0])]
    full = (sid < T * top_k).sum(1)
    if bm > 8:   # both of NTD's paths run
        assert (full > 8).any() and (full <= 8).any(), full
    H = ops.moe_gemm_swiglu(x, w1, r, target="cpu", tuning=tuning)
    want, bound = ref_swiglu(x, w1, r)
    check(H, want, bound, f"{name} swiglu")
    K2 = 32 * (I // 32 + 1)
    h = bf16(rng.standard_normal((T * top_k, K2)))
    w2 = _mxfp4_variant_case(rng, E, Hd, K2)
    Y, bY, out, bout = ref_down(h, w2, r)
    check(ops.moe_gemm_down(h, w2, r, reduce="separate", target="cpu", tuning=tuning), Y, bY, f"{name} down")
    check(ops.moe_gemm_down(h, w2, r, target="cpu", tuning=tuning), out, bout, f"{name} down atomic")


@needs_ptxas
@pytest.mark.parametrize("kernel, extra, max_regs", [
    ("moe_gemm1", {}, 128), ("moe_gemm2", {}, 96), ("moe_gemm1", dict(XR=1), 128), ("moe_gemm2", dict(XR=1), 96),
    pytest.param("moe_gemm1", dict(BM=16, NTD=1, XR=1), 128, marks=pytest.mark.slow(sample=0)),
    pytest.param("moe_gemm2", dict(BM=16, NTD=1, XR=1), 96, marks=pytest.mark.slow(sample=0))],
    ids=["gemm1", "gemm2", "gemm1-xr", "gemm2-xr", "gemm1-bm16-ntd-xr", "gemm2-bm16-ntd-xr"])
def test_decode_ptx_registers(kernel, extra, max_regs):
    """sm_90a MXFP4 kernels at the decode tiling (block_m 8: MT 1, KW 4, U 2; DEC 2) assemble without
    spills within the registers that keep their blocks a multiprocessor (128: 4 blocks of 128 threads;
    96: 5), ptxas 13.0's counts when written."""
    import re

    from kcompiler import pipeline
    from kcompiler.frontend.program import stdlib_dir

    ct = dict(W="u8", WS="u8", MMA=True, DEC=2, **ops.moe_gemm_tiles(8))
    ct.update(extra)
    ptx = pipeline.emit_file(stdlib_dir() / "moe_gemm.kc", "asm", target="nvptx", arch="sm_90a", kernel=kernel,
                             comptime=ct)
    log = ptxas(ptx, verbose=True)
    assert "0 bytes spill stores" in log, log
    regs = int(re.search(r"Used (\d+) registers", log).group(1))
    assert regs <= max_regs, log


# --- on the GPU (the lead's H100) --------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("T", [1, 16, 64])
def test_gpu_decode_variants(T):
    """gpt-oss's H = 2880 (I = 1440), E 32, top_k 4, MXFP4 weights (scales 118..131: both of DEC 2's
    passes) on CUDA tensors: every variant of benchmarks/bench_moe_gemm.py's issue-25 rows gives the
    default's bits (the same order of the f32 sums: the variants change loads, launches and the
    routing's block_m, not the sums), and the default matches the float64 reference."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kcompiler.ops.moe_types import ExpertWeights

    from .moe_util import gemm_weights as weights
    E, top_k, Hd, I = 32, 4, 2880, 1440
    rng = np.random.default_rng(90 + T)
    bm = ops.moe_block_m(T, top_k, E)
    r = random_routing(rng, T, top_k, E, bm)

    def dev(r):
        return MoERouting(*(torch.from_numpy(np.asarray(a)).cuda() for a in (r.topk_ids, r.topk_weights, r.sorted_ids,
                                                                              r.tile_expert, r.num_tiles)),
                          r.block_m, r.top_k, r.num_experts)

    def mx(w):
        s = rng.integers(118, 132, size=np.asarray(w.scales).shape).astype(np.uint8)
        return ExpertWeights.mxfp4(torch.from_numpy(np.asarray(w.data)).cuda(), torch.from_numpy(s).cuda())

    w1 = mx(weights(rng, E, 2 * I, Hd, "mxfp4", 0.05))
    w2 = mx(weights(rng, E, Hd, I, "mxfp4", 0.05))
    xh = bf16(rng.standard_normal((T, Hd)))
    x = torch.from_numpy(xh.view(np.int16)).cuda().view(torch.bfloat16)
    dr = dev(r)
    H = ops.moe_gemm_swiglu(x, w1, dr)
    Y = ops.moe_gemm_down(H, w2, dr, reduce="separate")
    host = lambda w: ExpertWeights.mxfp4(w.data.cpu().numpy(), w.scales.cpu().numpy())  # noqa: E731
    want, bound = ref_swiglu(xh, host(w1), r)
    import ml_dtypes
    Hh = H.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    check(Hh, want, bound, "default swiglu")
    # block_m 16 plans gate/up in blocks of 2 warps (ops.MOE_GEMM_FORMAT_TILES): another split of K, other
    # sums, so those rows ask for the 4 warps of block_m 8 to compare bits, and the planned tiles are
    # checked against the reference below
    for tuning, vbm, down in [(dict(GRID=0), bm, {}), (dict(XR=1), bm, {}), (dict(XR=1, CHK=0), bm, {}),
                              (dict(NTD=1, KW=4), 16, {}), (dict(NTD=1, XR=1, KW=4), 16, {}), ({}, bm, dict(MT=2)),
                              (dict(GY=2), bm, {})]:
        vr = dev(make_routing(np.asarray(r.topk_ids), np.asarray(r.topk_weights), E, vbm)) if vbm != bm else dr
        Hv = ops.moe_gemm_swiglu(x, w1, vr, tuning=tuning)
        assert torch.equal(Hv.view(torch.int16), H.view(torch.int16)), (tuning, vbm)
        Yv = ops.moe_gemm_down(H, w2, vr, reduce="separate", tuning={**tuning, **down})
        assert torch.equal(Yv, Y), (tuning, vbm, down)
    r16 = dev(make_routing(np.asarray(r.topk_ids), np.asarray(r.topk_weights), E, 16))
    check(ops.moe_gemm_swiglu(x, w1, r16).view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16), want, bound,
          "block_m 16's planned tiles (KW 2)")
