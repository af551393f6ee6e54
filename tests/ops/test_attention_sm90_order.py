"""The Hopper prefill's launch shapes (kcompiler.ops.attention_order, stdlib/attention_sm90_order.kc):
the blocks' ORDER (0 today's grid; 1 every (head, batch entry)'s longest causal tile first; 2 the same by
groups of heads), one consumer warpgroup (CONSUMERS 1: 64 query rows a block) and the small-grid rule.

On every machine (CI): the grids and the rule in Python; the kernel on the CPU target's emulation of
the Hopper instructions through ops.attention, against test_attention.py's float64 reference and bounds
on odd shapes (Sq not a multiple of the tile, Sq != Sk, GQA, causal, variable lengths): a block that
decoded the wrong (tile, head, batch entry) leaves rows unwritten or writes them with another head's
result; the PTX of the new forms assembled by ptxas. On an H100 (marked gpu): the same against SDPA in
float64, outputs poisoned first.
"""
from __future__ import annotations

import importlib

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.ops.attention_order import heads_group, sm90_launch, small_grid_consumers

from ..ptxas_util import needs_ptxas, ptxas
from ..draws import fresh_rng

ops_attention = importlib.import_module("kcompiler.ops.attention")
RNG = fresh_rng()


@pytest.fixture(scope="module")
def emulated():
    """std.attention_sm90 on the CPU target with the Hopper instructions emulated."""
    from kcompiler.frontend.program import stdlib_dir
    return kc.compile_file(stdlib_dir() / "attention_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


@pytest.fixture(autouse=True)
def fresh_plans(monkeypatch):
    """No prepared Hopper-path call (ops.attention's PLANS) crosses tests (they swap the module)."""
    from collections import OrderedDict
    monkeypatch.setattr(ops_attention, "PLANS", OrderedDict())


# --- the host's side -------------------------------------------------------------------------------------

def test_sm90_launch_grids():
    """The grid of each ORDER (x fastest: the hardware's order), the host-only keys kept out of the
    compile-time values, ORDER 2's groups whole (the largest divisor of H up to GROUP)."""
    t = dict(BN=128, STAGES=2)
    assert sm90_launch(t, 300, 6, 2) == ((3, 6, 2), 384, t)  # ceil(300 / 128) tiles
    assert sm90_launch(dict(t, ORDER=1), 300, 6, 2)[0] == (6, 2, 3)
    grid, threads, kw = sm90_launch(dict(t, ORDER=2, GROUP=4), 300, 6, 2)
    assert grid == (3, 2 * 3, 2) and threads == 384 and kw == dict(t, ORDER=2)  # G = 3 divides 6
    assert sm90_launch(dict(t, ORDER=2), 300, 32, 1)[0] == (8, 4 * 3, 1)  # GROUP 8 by default
    assert sm90_launch(dict(t, ORDER=1, CONSUMERS=1), 300, 6, 2)[:2] == ((6, 2, 5), 256)
    assert [heads_group(h, 8) for h in (1, 6, 7, 12, 16, 40)] == [1, 6, 7, 6, 8, 8]
    with pytest.raises(ValueError, match="ORDER is 0, 1 or 2"):
        sm90_launch(dict(t, ORDER=3), 300, 6, 2)
    with pytest.raises(ValueError, match="65535"):
        sm90_launch(dict(t, ORDER=1), 128 * 70000, 1, 1)


def test_small_grid_rule():
    """SMALL_GRID: one consumer (64 rows a block) where the tiles' block leaves multiprocessors idle,
    the tiles' CONSUMERS where its grid fills its waves (rounded up) to SMALL_GRID_FILL, a single wave
    too; from 3 consumers 2 where that suffices."""
    assert small_grid_consumers(2, 512, 16, 1, 132) == 1      # 4 x 16 = 64 blocks of 128 rows
    assert small_grid_consumers(2, 1024, 32, 1, 132) == 2     # 8 x 32 = 256
    assert small_grid_consumers(2, 1024, 16, 1, 132) == 2     # 128 fill 97 % of one wave
    assert small_grid_consumers(3, 1024, 16, 4, 132) == 3     # 6 x 64 = 384
    assert small_grid_consumers(3, 512, 16, 2, 132) == 2      # 3 x 32 = 96 (73 %), 4 x 32 = 128 (97 %)
    assert small_grid_consumers(2, 512, 32, 1, 132) == 2      # 4 x 32 = 128 (97 %)
    assert small_grid_consumers(2, 512, 24, 1, 132) == 1      # 96 (73 %)
    assert small_grid_consumers(3, 384, 16, 3, 132) == 1      # 96; 144 fills 55 % of 2 waves; 288 fills 73 %
    assert small_grid_consumers(3, 512, 16, 4, 132) == 2      # 192 blocks fill 73 % of 2 waves, 256 fill 97 %
    assert small_grid_consumers(3, 1024, 32, 1, 132) == 2     # 192 (73 %) then 256 (97 %)
    assert small_grid_consumers(3, 512, 32, 4, 132) == 3      # 384 blocks fill 97 % of 3 waves
    assert small_grid_consumers(2, 4096, 32, 4, 132) == 2     # 32 waves
    # ORDER 1 too where the tiles give none and the grid is at most SMALL_GRID_WAVES (2) blocks an SM
    grid, threads, kw = sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True), 512, 16, 1, 132)
    assert grid == (16, 1, 8) and threads == 256 and kw == dict(BN=128, STAGES=2, CONSUMERS=1, ORDER=1)
    grid, threads, kw = sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True, ORDER=0), 512, 16, 1, 132)
    assert grid == (8, 16, 1) and kw == dict(BN=128, STAGES=2, CONSUMERS=1, ORDER=0)  # an ORDER given stays
    grid, threads, kw = sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True), 512, 16, 1, 64)
    assert grid == (16, 1, 4) and threads == 384 and kw == dict(BN=128, STAGES=2, CONSUMERS=2, ORDER=1)  # 64 SMs
    assert sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True), 1024, 32, 1, 132)[0] == (32, 1, 8)  # 256 <= 264
    assert sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True), 1024, 32, 2, 132)[0] == (8, 32, 2)  # 512 > 264
    grid, threads, kw = sm90_launch(dict(BN=128, STAGES=2, SMALL_GRID=True), 4096, 32, 4, 132)
    assert grid == (32, 32, 4) and kw == dict(BN=128, STAGES=2, CONSUMERS=2)  # 4096 blocks: as the tiles say
    # causal grids whose longest tile reads at least SMALL_GRID_CAUSAL_TILES (8) key tiles: up to
    # SMALL_GRID_CAUSAL_WAVES (4) waves
    t = dict(BN=128, STAGES=2, SMALL_GRID=True)
    assert sm90_launch(t, 4096, 16, 1, 132, causal=True)[0] == (16, 1, 32)  # 512 blocks, 32 key tiles
    assert sm90_launch(t, 4096, 16, 1, 132)[0] == (32, 16, 1)  # not causal: 2 waves at most
    assert sm90_launch(t, 4096, 16, 2, 132, causal=True)[0] == (32, 16, 2)  # 1024 blocks: past 4 waves
    assert sm90_launch(dict(t, BN=96, CONSUMERS=1), 512, 32, 2, 132, causal=True)[0] == (8, 32, 2)  # 6 key tiles of 96


#: Each block of a grid writes the (tile, head, batch entry) std.attention_sm90_order decodes from its
#: ids at its linear index (x fastest).
DECODE = """
import std.attention_sm90_order as order
kernel decode[ORDER: i32, CAUSAL: bool, BM: i32](out: ptr<i32>, seqlen_q: i32) {
    if thread_id.x == 0 {
        let i = 3 * (block_id.x + grid_dim.x * (block_id.y + grid_dim.y * block_id.z));
        out[i] = order.block_mb[ORDER, CAUSAL, BM](seqlen_q);
        out[i + 1] = order.block_h[ORDER, BM](seqlen_q);
        out[i + 2] = order.block_b[ORDER](seqlen_q);
    }
}
"""


@pytest.mark.parametrize("order", [0, 1, 2])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
def test_block_order(order, causal):
    """The blocks' order as the hardware hands them out (the grid's linear order) from the kernel's
    decode on the host's grid (sm90_launch): every (query tile, head, batch entry) once; causal tiles
    longest first (ORDER 0: within each (head, batch entry); ORDER 1: no block's tile longer than an
    earlier one's; ORDER 2: so within each group of G heads, the groups in turn, G heads a wave's
    group)."""
    B, H, S, bm = 3, 12, 1000, 128  # 8 tiles, the last partial; ORDER 2: GROUP 5 gives groups of 4
    grid, _, _ = sm90_launch(dict(ORDER=order, GROUP=5), S, H, B)
    mod = kc.compile(DECODE, target="cpu", path="order_test.kc")
    out = np.full(3 * int(np.prod(grid)), -1, np.int32)
    mod.decode[grid, 32](out, S, ORDER=order, CAUSAL=causal, BM=bm)
    got = out.reshape(-1, 3)
    ids = [tuple(r) for r in got[:, :3].tolist()]
    nt = -(-S // bm)
    assert sorted(ids) == [(t, h, b) for t in range(nt) for h in range(H) for b in range(B)]
    tile = got[:, 0]
    if not causal:
        return
    if order == 1:
        assert (np.diff(tile) <= 0).all()
    else:
        g = 4 if order == 2 else 1
        for key in {(h // g, b) for _, h, b in ids}:
            mine = [t for t, h, b in ids if (h // g, b) == key]
            assert mine == sorted(mine, reverse=True), key
    if order == 2:  # a (group, batch entry)'s blocks are consecutive: the wave's heads are the group's
        runs = [(h // 4, b) for _, h, b in ids]
        assert sum(a != c for a, c in zip(runs, runs[1:])) == H // 4 * B - 1


# --- the kernel on the CPU target's emulation ------------------------------------------------------------

def _run(monkeypatch, emulated, shape, tiles, layout="bshd"):
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    B, Sq, Sk, H, HK, D, causal = shape
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(B, Sq, Sk, H, HK, D, "bf16")
    args = [x.transpose(0, 2, 1, 3).copy() for x in (q, k, v)] if layout == "bhsd" else [q, k, v]
    out, lse = ops.attention(*args, causal=causal, layout=layout, return_lse=True, path="sm90", tiles=tiles,
                             target="cpu")
    if layout == "bhsd":
        out = out.transpose(0, 2, 1, 3)
    ref, ref_lse = reference(q, k, v, causal, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


# (tiles, (B, Sq, Sk, H, HK, D, causal), layout): 2 or 3 query tiles (the last partial), 2 batch
# entries, GQA 2:1 or 3:1, Sq != Sk both ways (causal rows that see no key), ORDER 2 with groups of 2 or 3
ORDER_CASES = [(dict(ORDER=1), (2, 150, 133, 4, 2, 64, True), "bshd"),
               (dict(ORDER=2, GROUP=2), (2, 150, 290, 4, 2, 64, True), "bhsd"),
               pytest.param(dict(ORDER=1), (2, 150, 133, 4, 2, 64, False), "bhsd", marks=pytest.mark.slow(sample=1)),
               pytest.param(dict(ORDER=2, GROUP=4, CONSUMERS=1), (1, 150, 133, 6, 2, 128, True), "bshd",
                            marks=pytest.mark.slow(sample=1)),
               pytest.param(dict(ORDER=1, CONSUMERS=3, BN=64), (2, 200, 133, 2, 1, 64, True), "bshd",
                            marks=pytest.mark.slow(sample=1))]


def _ids(x):
    if isinstance(x, dict):
        return "-".join(f"{k}{int(v)}" for k, v in x.items())
    if isinstance(x, tuple):
        return "x".join(map(str, x[:6])) + ("-causal" if x[6] else "-full")
    return str(x)


@pytest.mark.slow(sample=3)  # CI time: a deterministic sample by default, all with -m slow
@pytest.mark.parametrize("tiles,shape,layout", ORDER_CASES, ids=_ids)
def test_prefill_sm90_order_emulated(monkeypatch, emulated, tiles, shape, layout):
    """ORDER 1 and 2: every (query tile, head, batch entry) decoded from the block ids exactly as the
    host's grid laid them out (a wrong decode leaves rows unwritten or writes another head's)."""
    _run(monkeypatch, emulated, shape, tiles, layout)


@pytest.mark.parametrize("D,causal", [(64, True), (128, False), pytest.param(128, True, marks=pytest.mark.slow)],
                         ids=["d64-causal", "d128-full", "d128-causal"])
def test_prefill_sm90_one_consumer_emulated(monkeypatch, emulated, D, causal):
    """CONSUMERS 1 in one block a multiprocessor (the small-grid rule's block: 64 query rows, 256
    threads, a consumer of 256 registers): three query tiles, the last partial, GQA 2:1."""
    _run(monkeypatch, emulated, (1, 150, 133, 2, 1, D, causal), dict(CONSUMERS=1))


def test_prefill_sm90_small_grid_emulated(monkeypatch, emulated):
    """SMALL_GRID on the CPU target (132 multiprocessors, as the H100): a grid of 2 x 2 x 2 blocks of 128
    rows takes one consumer (3 x 2 x 2 blocks of 64 rows), with ORDER 1; the plan says so."""
    _run(monkeypatch, emulated, (2, 150, 133, 2, 1, 64, True), dict(SMALL_GRID=True, ORDER=1))
    (plan,) = ops_attention.PLANS.values()
    assert plan.kw["CONSUMERS"] == 1 and plan.kw["ORDER"] == 1 and "SMALL_GRID" not in plan.kw
    assert plan.boxes[0] == 64 and plan.launch.shared == ops_attention.attention_sm90_shared_bytes(plan.kw, 64)


def test_small_grid_is_the_defaults_rule(monkeypatch, emulated):
    """The defaults take the small-grid rule (the same small grid gets one consumer and ORDER 1);
    tiles the caller gives are taken as given (two consumers, ORDER 0) unless they say SMALL_GRID."""
    from kcompiler import ops
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = (RNG.standard_normal((1, 2, 150, 64)).astype(ml_dtypes.bfloat16) for _ in range(3))
    for tiles, consumers, order in ((None, 1, 1), (dict(STAGES=2), 2, 0), (dict(SMALL_GRID=True), 1, 1)):
        ops_attention.PLANS.clear()
        ops.attention(q, k, v, causal=True, layout="bhsd", path="sm90", tiles=tiles, target="cpu")
        (plan,) = ops_attention.PLANS.values()
        assert (plan.kw.get("CONSUMERS", 2), plan.kw.get("ORDER", 0)) == (consumers, order), tiles


def test_prefill_sm90_order_varlen_emulated(monkeypatch, emulated):
    """ORDER 1 with variable lengths (the query tiles on grid z, counted from max_seqlen_q as the host's
    grid): packed sequences, one empty, one longer than a tile, causal, GQA 2:1. ORDER 2, which counts a
    group's tiles from seqlen_q (the packed rows with VARLEN), is refused."""
    from kcompiler import ops

    from .attention_util import check, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    lq, lk = [5, 0, 140], [9, 3, 131]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = RNG.standard_normal((cu_q[-1], 4, 64)).astype(ml_dtypes.bfloat16)
    k = RNG.standard_normal((cu_k[-1], 2, 64)).astype(ml_dtypes.bfloat16)
    v = RNG.standard_normal((cu_k[-1], 2, 64)).astype(ml_dtypes.bfloat16)
    out, lse = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             path="sm90", tiles=dict(ORDER=1), target="cpu")
    ref, ref_lse = reference(q, k, v, True, 64 ** -0.5, cu_q, cu_k)
    check(out, lse, ref, ref_lse, v, "bf16")
    with pytest.raises(ValueError, match="ORDER 2 .* takes no variable lengths"):
        ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, path="sm90",
                      tiles=dict(ORDER=2, GROUP=2), target="cpu")


# --- PTX ---------------------------------------------------------------------------------------------------

@needs_ptxas
@pytest.mark.slow(sample=1)
@pytest.mark.parametrize("tiles,D", [(dict(ORDER=1), 128), (dict(ORDER=2), 128), (dict(CONSUMERS=1), 128),
                                     (dict(CONSUMERS=1), 64)], ids=_ids)
def test_prefill_sm90_order_ptx(tiles, D):
    """The new forms assemble for sm_90a, causal: no spill, no serialised wgmma; one consumer takes
    256 registers (setmaxnreg), 256 threads a block."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=D, CAUSAL=True, **tiles))
    c = tiles.get("CONSUMERS", 2)
    assert f".maxntid {128 * (c + 1)}" in ptx
    assert f"setmaxnreg.inc.sync.aligned.u32 {240 if c == 2 else 256};" in ptx
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert "C7514" not in log and "serialized" not in log, log
    assert int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1]) == 0, log


def test_prefill_sm90_order_error():
    """An ORDER the kernel does not have is a located compile error."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    with pytest.raises(kc.CompileError, match="ORDER") as e:
        emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"),
                  kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=64, ORDER=3))
    assert "attention_sm90.kc:" in str(e.value)


# --- on the GPU: against torch's SDPA in float64 ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [dict(ORDER=1), dict(ORDER=2), dict(ORDER=2, GROUP=3), dict(CONSUMERS=1),
                                   dict(CONSUMERS=1, ORDER=1), dict(SMALL_GRID=True)],
                         ids=["order1", "order2", "order2-group3", "1consumer", "1consumer-order1", "small-grid"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_sm90_order_gpu(tiles, causal):
    """ORDER 1 and 2, one consumer and the small-grid rule on the H100: D 64 and 128, odd lengths (Sq
    != Sk), GQA 3:1 (H 6: ORDER 2's GROUP 8 takes groups of 6, GROUP 3 of 3), outputs poisoned first;
    and variable lengths (where the tiles allow them: ORDER 2 takes none)."""
    import torch

    from kcompiler import ops

    from .attention_util import check, reference, sdpa64
    for D in (64, 128):
        q = torch.randn(2, 1111, 6, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, 1234, 2, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles)
        ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16")
    if tiles.get("ORDER") == 2:
        return
    lq, lk = [300, 0, 1000, 77], [300, 5, 1200, 64]
    cu_q = torch.tensor(np.concatenate([[0], np.cumsum(lq)]), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor(np.concatenate([[0], np.cumsum(lk)]), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), 6, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(sum(lk), 2, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out, lse = ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             path="sm90", tiles=tiles)
    qn, kn, vn = (x.float().cpu().numpy() for x in (q, k, v))
    ref, ref_lse = reference(qn, kn, vn, causal, 128 ** -0.5, cu_q.cpu().numpy(), cu_k.cpu().numpy())
    check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse, vn, "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("order", [1, 2])
def test_prefill_sm90_order_fp8_gpu(order):
    """FP8 with ORDER 1 and 2: the descale index of each block's (batch entry, key-value head) as
    std.attention_sm90_order decodes it: per-head descales, against the same call with ORDER 0."""
    import torch

    from kcompiler import ops
    q, k, v = (torch.randn(2, 700, h, 128, device="cuda").to(torch.float8_e4m3fn) for h in (6, 2, 2))
    ds = [torch.rand(2, 2, device="cuda") + 0.5 for _ in range(3)]
    want = ops.attention(q, k, v, causal=True, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2])
    got = ops.attention(q, k, v, causal=True, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2],
                        tiles=dict(ORDER=order, GROUP=3))
    assert torch.equal(got, want)


@pytest.mark.parametrize("shape", [(1, 16, 512, 256, False, None), (1, 16, 1024, 256, True, None),
                                   (4, 32, 4096, 128, True, None), (4, 32, 4096, 128, False, None),
                                   (1, 16, 512, 64, False, None), (3, 7, 999, 128, True, 1500)])
def test_explain_matches_launch(shape):
    """attention_order.explain says what ops.attention launches: its grid, threads and shared bytes are
    sm90_launch's and attention_sm90_shared_bytes' for the defaults; each rule that applied has its line
    (the small-grid rule with the fill that decided it, ORDER 1, PERSIST taken or why not); asking for
    the reasons (``why``) changes no decision."""
    from kcompiler.ops.attention import ATTENTION_SM90_TILES, attention_sm90_shared_bytes
    from kcompiler.ops.attention_order import explain, sm90_launch, sm90_tiles
    B, H, S, D, causal, sk = shape
    t = sm90_tiles(ATTENTION_SM90_TILES[(D, causal)], None)
    why = []
    launch = sm90_launch(t, S, H, B, 132, sk, causal, why=why)
    assert launch == sm90_launch(t, S, H, B, 132, sk, causal)
    grid, threads, kw = launch
    text = explain(B, H, S, D, causal, sk)
    head, *lines = text.splitlines()
    assert f"grid {grid}, {threads} threads, {attention_sm90_shared_bytes(kw, D)} bytes" in head
    assert [x.strip() for x in lines[:-1]] == why and lines[-1].strip().startswith("compile-time values:")
    assert all(f"{k} {v}" in lines[-1] for k, v in kw.items())
    c = kw.get("CONSUMERS", 2)
    assert any(x.startswith("SMALL_GRID") for x in why) == bool(t.get("SMALL_GRID"))
    if c < t.get("CONSUMERS", 2):
        assert "under 80%" in why[0]
    assert any(x.startswith("ORDER 1") for x in why) == (kw.get("ORDER") == 1 and "ORDER" not in t)
    if t.get("PERSIST"):
        assert any(x.startswith("PERSIST: " if grid[1:] == (1, 1) else "PERSIST dropped: ") for x in why)


def test_explain_cases():
    """explain's lines for a few shapes whose decisions are known: D 256's small grid in one consumer
    (64 blocks of 128 rows fill 48 % of a wave), PERSIST at D 128 causal S4096 and not without the mask
    (32 key tiles > PERSIST_TILES 8), a caller's tiles (their own values, no small-grid rule), FP8."""
    from kcompiler.ops.attention_order import explain
    small = explain(1, 16, 512, 256)
    assert "64 blocks of 128 query rows fill 48% of 1 wave(s), under 80%: 1 consumer(s)" in small
    assert "CONSUMERS 1" in small and "FA3_ORDER True" in small
    assert "PERSIST: 132 blocks" in explain(4, 32, 4096, 128, causal=True)
    assert "PERSIST dropped: 32 key tiles a query tile > PERSIST_TILES 8" in explain(4, 32, 4096, 128)
    given = explain(1, 16, 512, 256, tiles=dict(BN=64))
    assert "SMALL_GRID" not in given and "BN 64" in given and "CONSUMERS 2" in given
    fp8 = explain(4, 32, 4096, 128, fp8=True)
    assert "FP8" in fp8.splitlines()[0] and "BN 256" in fp8
    with pytest.raises(ValueError, match="D 64 or 128 or 256, not 96"):
        explain(1, 1, 128, 96)
    with pytest.raises(ValueError, match=r"\(FP8\) takes D 128, not 64"):
        explain(1, 1, 128, 64, fp8=True)
