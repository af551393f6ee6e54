"""The Hopper prefill of std.attention (stdlib/attention_sm90.kc) on an sm_90 GPU (marked gpu; skipped
elsewhere): ops.attention's Hopper path against torch's SDPA in float64, on many shapes, odd lengths,
causal, GQA, D 64 and 128, variable lengths (NaN tails, a CUDA graph), with the output poisoned first.
The same kernel on the CPU target's emulation, its PTX and SASS: test_attention_sm90.py."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from .attention_sm90_util import fresh_plans, ops_attention  # noqa: F401 - fresh_plans: an autouse fixture
from ..draws import fresh_rng

RNG = fresh_rng()

GPU_SHAPES = [("bf16", (3, 301, 517, 8, 2), "bshd"), ("f16", (2, 1000, 1000, 4, 4), "bhsd"),
              ("bf16", (1, 700, 129, 4, 1), "bshd"), ("bf16", (2, 1, 4097, 2, 2), "bhsd"),
              ("f16", (1, 2049, 2047, 2, 1), "bshd")]


@pytest.mark.gpu
@pytest.mark.parametrize("D,tiles", [(64, None), (128, None), (256, None),
                                     (256, dict(CONSUMERS=2)), (128, dict(OVERLAP=True, FA3_ORDER=True)),
                                     (128, dict(OVERLAP=True, FA3_ORDER=True, PERSIST=True, PERSIST_TILES=1 << 20,
                                                PERSIST_SLACK=100))],
                         ids=["d64", "d128", "d256", "d256-2consumers", "d128-fa3order", "d128-fa3order-persist"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_sm90_gpu(D, tiles, causal):
    """The Hopper path on the H100 on odd shapes (Sq != Sk both ways, one query, GQA 4:1), bf16 and
    f16, both layouts, against SDPA in float64 (test_attention.py's bounds); outputs poisoned first.
    The defaults (on these small grids, D 256's in one consumer: SMALL_GRID), D 256's two consumers in
    PINGPONG, and FA3_ORDER's softmax under P V (its wait kept below by sched_barrier) at D 128."""
    import torch

    from .attention_util import attention_in_layout, check, sdpa64
    for dt, (B, Sq, Sk, H, HK), layout in GPU_SHAPES:
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[dt]
        q = torch.randn(B, Sq, H, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Sk, HK, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Sk, HK, D, device="cuda", dtype=dtype)
        torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
        out, lse = attention_in_layout(q, k, v, causal, layout, "sm90", tiles)
        ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), dt)


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [dict(OVERLAP=True), dict(OVERLAP=True, PINGPONG=True), dict(BN=64, STAGES=3),
                                   dict(BN=192, STAGES=2, OVERLAP=True, PINGPONG=True), dict(CONSUMERS=3, BN=64),
                                   dict(CONSUMERS=3, BN=64, OVERLAP=True), dict(BN=64, BLOCKS_PER_SM=2),
                                   dict(CONSUMERS=1, BLOCKS_PER_SM=2, OVERLAP=True), dict(BN=192, STAGES=2),
                                   dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True),
                                   dict(OVERLAP=True, FA3_ORDER=True, CONSUMERS=3, BN=64),
                                   dict(PINGPONG=True), dict(PINGPONG=True, RESCALE_SKIP=True, STAGES=3),
                                   dict(BN=176, PINGPONG=True),
                                   dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True, RESCALE_SKIP=True),
                                   dict(EXP2_POLY=16), dict(PINGPONG=True, TURNS=1),
                                   dict(PINGPONG=True, RESCALE_SKIP=True, TURNS=1),
                                   dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1)],
                         ids=["overlap", "pingpong", "bn64-3stages", "bn192-pingpong", "3consumers-bn64",
                              "3consumers-bn64-overlap", "bn64-2blocks", "1consumer-2blocks-overlap", "bn192",
                              "fa3order-pingpong", "3consumers-bn64-fa3order", "seq-pingpong",
                              "seq-pingpong-skip-3stages", "bn176-seq-pingpong", "fa3order-pingpong-skip", "exp2poly16",
                              "seq-pingpong-named", "seq-pingpong-named-skip", "fa3order-pingpong-named"])
def test_prefill_sm90_tiles_gpu(tiles):
    """The other tile choices the benchmark times, on the GPU (D 128 and 64, causal); EXP2_POLY's LSE
    bound takes 2 of the polynomial's relative error (1.02e-4) more."""
    import torch

    from kcompiler import ops

    from .attention_util import check, sdpa64
    two_blocks_d128 = tiles.get("BLOCKS_PER_SM") == 2 and tiles.get("CONSUMERS", 2) == 2  # refused at D 128
    for D in (64,) if tiles.get("BN") == 192 or two_blocks_d128 else (64, 128):
        q = torch.randn(2, 1111, 4, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, 1234, 2, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", tiles=tiles)
        ref, ref_lse = sdpa64(q, k, v, True, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16", lse_tol=2 * 1.02e-4 if "EXP2_POLY" in tiles else 0.0)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("tiles", [None, dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1),
                                   dict(OVERLAP=True, FA3_ORDER=True), dict(OVERLAP=True, PINGPONG=True)],
                         ids=["default", "fa3order-pingpong-named", "fa3order", "overlap-pingpong"])
def test_prefill_sm90_long_gpu(tiles, causal):
    """The benchmark's shape (B4 H32 S4096 D128: 1,024 blocks, 32 tiles of keys a block), where an
    earlier FA3_ORDER (P V in flight across the loop's back edge) gave NaN once the wgmmas ran
    pipelined while the short shapes above passed: finite, and within 2e-2 (relative Frobenius) of
    torch's SDPA on the same bf16 tensors."""
    import torch

    from kcompiler import ops
    g = torch.Generator(device="cuda").manual_seed(23)
    q, k, v = (torch.randn(4, 32, 4096, 128, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    out = ops.attention(q, k, v, causal=causal, layout="bhsd", path="sm90", tiles=tiles).float()
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal).float()
    assert torch.isfinite(out).all()
    assert ((out - ref).norm() / ref.norm()).item() < 2e-2


@pytest.mark.gpu
def test_prefill_sm90_plans_gpu():
    """A repeated call (ops.attention's PLANS) on the GPU: the same result, and right on other tensors
    of the same shape (new addresses: new tensor maps), on a side stream too."""
    import torch

    from kcompiler import ops

    from .attention_util import check, sdpa64
    ops_attention.PLANS.clear()
    for _ in range(2):
        q = torch.randn(2, 333, 4, 64, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, 400, 2, 64, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        first = ops.attention(q, k, v, causal=True, path="sm90")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90")
        torch.cuda.current_stream().wait_stream(s)
        assert len(ops_attention.PLANS) == 1
        assert torch.equal(out, first)
        ref, ref_lse = sdpa64(q, k, v, True, 64 ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16")


@pytest.mark.gpu
def test_prefill_sm90_varlen_gpu():
    """Variable lengths on the GPU (packed, causal, GQA 2:1, an empty sequence, NaN past the last)."""
    import torch

    from kcompiler import ops

    from .attention_util import check, reference
    lq, lk = [300, 0, 1000, 77], [300, 5, 1200, 64]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32, device="cuda")
    nq, nk = sum(lq), sum(lk)
    q = torch.randn(nq, 4, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(nk + 7, 2, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(nk + 7, 2, 128, device="cuda", dtype=torch.bfloat16)
    k[nk:], v[nk:] = float("nan"), float("nan")
    out, lse = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             path="sm90")
    qn, kn, vn = (x.float().cpu().numpy() for x in (q, k[:nk], v[:nk]))
    ref, ref_lse = reference(qn, kn, vn, True, 128 ** -0.5, cu_q.cpu().numpy(), cu_k.cpu().numpy())
    check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse, vn, "bf16")


def _varlen_gpu_inputs(lq, lk, H, HK, D, tail):
    """Packed bf16 CUDA q, k, v with ``tail`` rows of NaN past the last sequence (q's and k's), and the
    int32 cu_seqlens on the device."""
    import torch
    cu = [torch.tensor(np.concatenate([[0], np.cumsum(x)]), dtype=torch.int32, device="cuda") for x in (lq, lk)]
    q = torch.full((sum(lq) + tail, H, D), float("nan"), device="cuda", dtype=torch.bfloat16)
    k, v = (torch.full((sum(lk) + tail, HK, D), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2))
    for x, n in ((q, sum(lq)), (k, sum(lk)), (v, sum(lk))):
        x[:n] = torch.randn(n, *x.shape[1:], device="cuda", dtype=torch.bfloat16)
    return (*cu, q, k, v)


def _check_varlen_gpu(out, lse, cu_q, cu_k, q, k, v, causal):
    """out and lse of the packed sequences against test_attention's float64 reference."""
    from .attention_util import check, reference
    n, nk = int(cu_q[-1]), int(cu_k[-1])
    qn, kn, vn = (x.float().cpu().numpy() for x in (q[:n], k[:nk], v[:nk]))
    ref, ref_lse = reference(qn, kn, vn, causal, q.shape[-1] ** -0.5, cu_q.cpu().numpy(), cu_k.cpu().numpy())
    check(out[:n].float().cpu().numpy(), lse[:, :n].cpu().numpy(), ref, ref_lse, vn, "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_prefill_sm90_varlen_nan_tail_gpu(D, causal):
    """Variable lengths with NaN in every row past the last sequence (q, k, v; 300 rows, more than a
    tile: the maps cover them) at odd lengths, with max_seqlen_q (nothing read on the host; the second
    call keeps the plan and gives the same result) and without (read and checked)."""
    from kcompiler import ops
    lq, lk = [300, 0, 1000, 77, 1], [301, 5, 1200, 63, 129]
    cu_q, cu_k, q, k, v = _varlen_gpu_inputs(lq, lk, 4, 2, D, 300)
    for mx in (None, max(lq)):
        out, lse = ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=mx,
                                 return_lse=True, path="sm90")
        _check_varlen_gpu(out, lse, cu_q, cu_k, q, k, v, causal)
    assert len(ops_attention.PLANS) == 1
    again, lse2 = ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=max(lq),
                                return_lse=True, path="sm90")
    assert len(ops_attention.PLANS) == 1
    n = sum(lq)
    assert again[:n].equal(out[:n]) and lse2[:, :n].equal(lse[:, :n])


@pytest.mark.gpu
def test_prefill_sm90_varlen_cuda_graph_gpu():
    """With max_seqlen_q the varlen call reads nothing on the host, so torch.cuda.graph captures it;
    replayed after the offsets (same count) and the inputs change in place, it is right for the new
    ones. Offsets out of range (negative, past the rows, decreasing, a sequence longer than
    max_seqlen_q) raise nothing and leave the memory around O and the LSE untouched (guard regions on
    both sides)."""
    import torch

    from kcompiler import ops
    lq, lk = [129, 0, 64, 333], [200, 7, 64, 333]
    cu_q, cu_k, q, k, v = _varlen_gpu_inputs(lq, lk, 4, 1, 128, 64)
    kw = dict(causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=400, return_lse=True)
    for _ in range(2):
        ops.attention(q, k, v, **kw)  # compiled and planned before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, lse = ops.attention(q, k, v, **kw)
    graph.replay()
    torch.cuda.synchronize()
    _check_varlen_gpu(out, lse, cu_q, cu_k, q, k, v, True)
    lq2, lk2 = [400, 1, 0, 125], [3, 300, 0, 301]
    cu_q2, cu_k2, q2, k2, v2 = _varlen_gpu_inputs(lq2, lk2, 4, 1, 128, 64)
    for x, y in ((cu_q, cu_q2), (cu_k, cu_k2), (q, q2), (k, k2), (v, v2)):
        x.copy_(y)
    graph.replay()
    torch.cuda.synchronize()
    _check_varlen_gpu(out, lse, cu_q, cu_k, q, k, v, True)
    n, m = q.numel(), lse.numel()
    o_guard = torch.full((3 * n,), 7.0, device="cuda", dtype=torch.bfloat16)
    l_guard = torch.full((3 * m,), 7.0, device="cuda", dtype=torch.float32)
    plan = next(iter(ops_attention.PLANS.values()))
    bad_q = torch.tensor([0, 500, 100, -50, 9999], dtype=torch.int32, device="cuda")
    bad_k = torch.tensor([-9, 600, 3, 100000, 2], dtype=torch.int32, device="cuda")
    plan.run(q, k, v, o_guard[n:2 * n].view(q.shape), l_guard[m:2 * m].view(lse.shape), bad_q, bad_k)
    torch.cuda.synchronize()
    for g, size in ((o_guard, n), (l_guard, m)):
        assert (g[:size] == 7.0).all() and (g[2 * size:] == 7.0).all()


def test_path_choice_errors():
    """path is 'auto', 'sm90' or 'fa2'; 'sm90' where the Hopper kernel cannot run is a RuntimeError that
    says why (here: the CPU target without the emulation, D 96), not a silent fallback."""
    from kcompiler import ops
    q = RNG.standard_normal((1, 8, 2, 64)).astype(ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="path must be"):
        ops.attention(q, q, q, path="fa3", target="cpu")
    with pytest.raises(RuntimeError, match="sm_90"):
        ops.attention(q, q, q, path="sm90", target="cpu")
    q96 = RNG.standard_normal((1, 8, 2, 96)).astype(ml_dtypes.bfloat16)
    with pytest.raises(RuntimeError, match="D = 64 or 128 or 256, not 96"):
        ops.attention(q96, q96, q96, path="sm90", target="cpu")
    out = ops.attention(q, q, q, path="fa2", target="cpu")  # the explicit FA2 path still runs here
    assert out.shape == q.shape
