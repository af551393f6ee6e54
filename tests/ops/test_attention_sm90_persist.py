"""std.attention_sm90's persistent form (PERSIST: a block a multiprocessor loops over the work units,
its producer loading the next unit's Q, K and V while the consumers finish the last): the units'
order (std.attention_sm90_order's unit_of, unit_bhm), the host's grid, the kernel on the CPU target's
wgmma emulation against a float64 reference with few multiprocessors (so that each block takes several
units: the rings' phases and Q's carry over), and on the H100."""
from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.ops import _common
from kcompiler.ops.attention_order import persist_balance, persist_loads, sm90_launch, sm90_tiles, unit_key_tiles

from ..ptxas_util import needs_ptxas, ptxas
from .attention_sm90_util import emulated, fresh_plans, ops_attention  # noqa: F401 - fixtures
from ..draws import fresh_rng

RNG = fresh_rng()

#: Each block of a persistent grid (P, 1, 1) writes, for each of its rounds, the unit it takes and that
#: unit's (batch entry, head, query tile) and key tiles, at (round, block); -1 past the units.
UNITS = """
import std.attention_sm90_order as order
kernel units[CAUSAL: bool, BM: i32](out: ptr<i32>, rounds: i32, seqlen_q: i32, seqlen_k: i32, heads: i32,
                                    batch: i32) {
    if thread_id.x == 0 {
        for r in range(0, rounds) {
            let u = order.unit[CAUSAL, false, true, 0, BM, 64](r, bitcast[ptr<i32>](out), bitcast[ptr<i32>](out),
                                                           seqlen_q, seqlen_k, heads, batch);
            let i = 5 * (r * grid_dim.x + block_id.x);
            if u[6] < u[4] {
                out[i] = order.unit_of[CAUSAL](r);
                out[i + 1] = u[0];
                out[i + 2] = u[1];
                out[i + 3] = u[6] / BM;
                out[i + 4] = u[7];
            }
        }
    }
}
"""


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("blocks", [13, 132])
def test_persistent_units(causal, blocks):
    """Every (query tile, head, batch entry) exactly once over the blocks' rounds, in ORDER 0's order
    (the tile fastest; causal: longest first) and, causal, snaked over the blocks, so that the blocks'
    key tiles summed over their rounds differ less than in a plain round robin (here 14 against 20).
    132 blocks take the 120 units in one round."""
    B, H, S, bm = 3, 5, 1000, 128
    nt = -(-S // bm)
    grid, threads, kw = sm90_launch(dict(BN=64, STAGES=2, PERSIST=True), S, H, B, blocks)
    units = nt * H * B
    assert grid == ((blocks, 1, 1) if units > blocks else (nt, H, B)) and threads == 384
    assert kw.get("PERSIST", False) == (units > blocks)
    p = min(blocks, units)
    rounds = -(-units // p)
    mod = kc.compile(UNITS, target="cpu", path="units_test.kc")
    out = np.full(5 * rounds * p, -1, np.int32)
    mod.units[(p, 1, 1), 32](out, rounds, S, S, H, B, CAUSAL=causal, BM=bm)
    got = out.reshape(rounds, p, 5)
    taken = got[got[..., 0] >= 0]
    assert sorted(taken[:, 0].tolist()) == list(range(units))
    assert sorted(map(tuple, taken[:, 1:4].tolist())) == [(b, h, t) for b in range(B) for h in range(H)
                                                          for t in range(nt)]
    assert (taken[:, 3] == (nt - 1 - taken[:, 0] % nt if causal else taken[:, 0] % nt)).all()
    work = np.where(got[..., 0] >= 0, got[..., 4], 0).sum(axis=0)
    # the host's model of the rounds (attention_order.persist_loads, which PERSIST's balance rule reads)
    sizes = unit_key_tiles(nt, bm, 64, S, S, causal)
    assert persist_loads(sizes, units, p, causal) == work.tolist()
    if causal and rounds > 1:  # against a plain round robin of the same units
        tiles_of = np.zeros(rounds * p, np.int64)
        tiles_of[taken[:, 0]] = taken[:, 4]
        plain = tiles_of.reshape(rounds, p).sum(axis=0)
        assert np.ptp(work) < np.ptp(plain), (work, plain)


def test_persist_host_rules():
    """The defaults' PERSIST is the host's to take: dropped for tiles a caller gives without it and for
    variable lengths (a caller's PERSIST there is a ValueError); taken only where the query tiles
    outnumber the blocks and each reads at most PERSIST_TILES key tiles, which no kernel is given; host
    keys of another type are refused."""
    dflt = dict(BN=128, STAGES=2, PINGPONG=True, TURNS=1, PERSIST=True, PERSIST_TILES=16)
    assert sm90_tiles(dflt, None)["PERSIST"] and sm90_tiles(dflt, {})["PERSIST"]
    assert "PERSIST" not in sm90_tiles(dflt, dict(OVERLAP=True))
    assert sm90_tiles(dflt, dict(OVERLAP=False, PERSIST=True))["PERSIST"]
    assert "PERSIST" not in sm90_tiles(dflt, None, varlen=True)
    with pytest.raises(ValueError, match="PERSIST .* takes no variable lengths"):
        sm90_tiles(dflt, dict(PERSIST=True), varlen=True)
    for bad in (dict(PERSIST_TILES=0), dict(PERSIST_TILES="8"), dict(PERSIST_TILES=True), dict(GROUP=2.5),
                dict(SMALL_GRID=1)):
        with pytest.raises(ValueError, match=f"the tiles' {next(iter(bad))} is"):
            sm90_tiles(dflt, bad)
    t = sm90_tiles(dflt, None)
    assert sm90_launch(t, 2048, 16, 8, 132, seqlen_k=2048)[:2] == ((132, 1, 1), 384)  # 16 key tiles
    grid, _, kw = sm90_launch(t, 2048, 16, 8, 132, seqlen_k=2049)  # 17
    assert grid == (16, 16, 8) and "PERSIST" not in kw and "PERSIST_TILES" not in kw
    assert sm90_launch(t, 4096, 16, 8, 132)[0] == (32, 16, 8)  # seqlen_k defaults to seqlen_q
    grid, _, kw = sm90_launch(dict(t, CONSUMERS=1, BLOCKS_PER_SM=2, ORDER=1), 1000, 4, 20, 132, seqlen_k=100)
    assert grid == (264, 1, 1) and kw["PERSIST"] and "PERSIST_TILES" not in kw and "ORDER" not in kw


def test_persist_balance():
    """PERSIST only where its static rounds are about as short as the plain grid's dynamic schedule:
    not at B1 H16 S4096 D128 causal (3.9 rounds; its busiest block reads 1.53x the mean: 0.88x the
    plain grid on the H200), yes at B4 H32 (31 rounds) and wherever the units are alike (full: the
    grid's waves are PERSIST's rounds), whatever the rounds with a PERSIST_SLACK that allows it."""
    t = sm90_tiles(ops_attention.ATTENTION_SM90_TILES[(128, True)], None)
    persist = lambda B, H, S, causal=True, tiles=t: "PERSIST" in sm90_launch(  # noqa: E731
        tiles, S, H, B, 132, seqlen_k=S, causal=causal)[2]
    assert not persist(1, 16, 4096) and persist(4, 32, 4096) and persist(2, 16, 3072)
    assert persist(1, 16, 4096, tiles=dict(t, PERSIST_SLACK=2))
    assert not persist(4, 32, 8192)  # 64 key tiles: past PERSIST_TILES
    full = sm90_tiles(dict(t, PERSIST_TILES=1 << 20), None)
    assert persist(1, 5, 4096, False, full)  # 160 units: two rounds, as the grid's two waves
    sizes = unit_key_tiles(32, 128, 128, 4096, 4096, True)
    assert sizes == list(range(1, 33))
    assert persist_balance(sizes, 512, 132, True) > 1.15 > 1.04 > persist_balance(sizes, 4096, 132, True)
    # Sq > Sk: bottom-right aligned, the first tiles read no key
    assert unit_key_tiles(4, 64, 64, 256, 100, True) == [0, 0, 1, 2]
    # by hand: two (head, batch entry)s of three causal tiles of 1, 1, 3 key tiles are the units 3, 1, 1,
    # 3, 1, 1 (the longest first). The grid's blocks on 2 multiprocessors: 3 | 1, 1, 3 | then 1, 1 on the
    # first: both end at 5. PERSIST's snake: rounds (3, 1), (3, 1) reversed, (1, 1): 7 and 3.
    assert persist_loads([1, 1, 3], 6, 2, True) == [7, 3] and persist_balance([1, 1, 3], 6, 2, True) == 7 / 5
    with pytest.raises(ValueError, match="PERSIST_SLACK is a number at least 1"):
        sm90_tiles(t, dict(PERSIST_SLACK=0.5))


# (tiles, (B, Sq, Sk, H, HK, D, causal), multiprocessors): more units than blocks, the last round
# partial; odd lengths, GQA, causal rows that see no key (Sq > Sk)
# (PERSIST_SLACK: PERSIST whatever the balance of these few rounds)
CASES = [(dict(PERSIST=True), (2, 150, 133, 4, 2, 64, False), 3),
         (dict(PERSIST=True, PINGPONG=True, TURNS=1, PERSIST_SLACK=100), (1, 300, 190, 2, 1, 64, True), 2),
         # Sq - Sk >= 2 tiles: the first two query tiles read no key tile (a unit of ntiles 0)
         (dict(PERSIST=True, PINGPONG=True, TURNS=1, PERSIST_SLACK=100), (1, 400, 100, 2, 1, 64, True), 2),
         pytest.param(dict(PERSIST=True, PINGPONG=True, TURNS=0, PERSIST_SLACK=100), (2, 150, 290, 2, 2, 64, True), 3,
                      marks=pytest.mark.slow(sample=0)),
         pytest.param(dict(PERSIST=True, CONSUMERS=1, STAGES=3), (1, 200, 133, 3, 1, 128, False), 4,
                      marks=pytest.mark.slow(sample=0)),
         # FlashAttention-3's order (its softmax under P V) persistent: the rings and turns across units,
         # units of no key tile among them (Sq - Sk >= 2 tiles)
         (dict(PERSIST=True, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1, PERSIST_SLACK=100),
          (1, 400, 100, 2, 1, 128, True), 2),
         pytest.param(dict(PERSIST=True, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, PERSIST_SLACK=100),
                      (2, 150, 290, 2, 2, 128, False), 3, marks=pytest.mark.slow(sample=0))]


@pytest.mark.parametrize("tiles,shape,sms", CASES, ids=["full", "causal-turns1", "causal-no-keys", "causal-turns0",
                                                       "1consumer", "fa3order-causal-no-keys", "fa3order-turns0"])
def test_prefill_sm90_persist_emulated(monkeypatch, emulated, tiles, shape, sms):
    """PERSIST on the CPU target's emulation, with ``sms`` multiprocessors so that each block loops
    over several units: against the float64 reference (a unit decoded wrongly leaves rows unwritten or
    writes another head's; a ring phase carried wrongly deadlocks or reads a stale tile)."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    monkeypatch.setattr(_common, "device_of", lambda mod, x: SimpleNamespace(
        multiprocessor_count=sms, shared_memory_per_block=227 * 1024))
    B, Sq, Sk, H, HK, D, causal = shape
    q, k, v = qkv(B, Sq, Sk, H, HK, D, "bf16")
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    (plan,) = ops_attention.PLANS.values()
    assert plan.kw["PERSIST"] and plan.launch.launch.grid == (sms, 1, 1)
    ref, ref_lse = reference(q, k, v, causal, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


@pytest.mark.parametrize("causal,form", [(True, {}), pytest.param(False, {}, marks=pytest.mark.slow(sample=0)),
                                         pytest.param(True, dict(BN=192, OVERLAP=True, PINGPONG=True, FA3_ORDER=True,
                                                                 TURNS=1), marks=pytest.mark.slow(sample=0)),
                                         (True, dict(VT_SMEM=2, STAGES=2, BN=128))],
                         ids=["causal", "full", "bn192-fa3order-causal", "vt-smem-causal"])
def test_prefill_sm90_persist_fp8_emulated(monkeypatch, emulated, causal, form):
    """FP8 (ATTENTION_FP8_TILES' key tiles of 256 and V^T pass; or ``form``: FA3_ORDER, V^T made in the
    kernel) with PERSIST on 2 multiprocessors: the same bits as the plain grid (each unit's sums in the
    same order), per-head descales read at each unit's (batch entry, head); the transposers follow the
    units' tiles as the producer does."""
    from kcompiler import ops

    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    B, Sq, Sk, H, HK = 2, 200, 300, 4, 2
    q, k, v = ((RNG.standard_normal(shape) * 2).astype(ml_dtypes.float8_e4m3fn)
               for shape in ((B, Sq, H, 128), (B, Sk, HK, 128), (B, Sk, HK, 128)))
    ds = {f"descale_{n}": (RNG.random((B, HK)) + 0.5).astype(np.float32) for n in "qkv"}
    want, want_lse = ops.attention(q, k, v, causal=causal, return_lse=True, target="cpu",
                                   tiles=dict(form, PERSIST=False), **ds)
    monkeypatch.setattr(_common, "device_of", lambda mod, x: SimpleNamespace(
        multiprocessor_count=2, shared_memory_per_block=227 * 1024))
    got, lse = ops.attention(q, k, v, causal=causal, return_lse=True, target="cpu",
                             tiles=dict(form, PERSIST=True, PERSIST_SLACK=100), **ds)
    np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
    np.testing.assert_array_equal(lse, want_lse)


@needs_ptxas
@pytest.mark.parametrize("T,causal,form", [("bf16", False, {}), ("f8e4m3", True, {}),
                                           ("bf16", True, dict(OVERLAP=True, FA3_ORDER=True))],
                         ids=["bf16", "fp8-causal", "bf16-causal-fa3order"])
def test_prefill_sm90_persist_ptx(T, causal, form):
    """PERSIST assembles for sm_90a in the defaults' form (sequential, turns on named barriers; and
    FA3_ORDER): no spill, no serialised wgmma, the consumers' 240 registers."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    fp8 = dict(OUT="bf16", BN=256) if T == "f8e4m3" else {}
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90",
                    comptime=dict(T=T, D=128, CAUSAL=causal, PINGPONG=True, TURNS=1, PERSIST=True, **fp8, **form))
    assert "setmaxnreg.inc.sync.aligned.u32 240;" in ptx
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert "C7514" not in log and "serialized" not in log, log
    assert int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1]) == 0, log


@pytest.mark.parametrize("tiles", [dict(OVERLAP=True), dict(CHAIN=True), dict(VARLEN=True)], ids=["overlap", "chain",
                                                                                                   "varlen"])
def test_prefill_sm90_persist_error(tiles):
    """PERSIST with a form it does not take is a located compile error (OVERLAP only in FA3_ORDER)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    with pytest.raises(kc.CompileError, match="PERSIST") as e:
        emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"),
                  kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=64, PERSIST=True, **tiles))
    assert "attention_sm90.kc:" in str(e.value)


# --- on the GPU: against torch's SDPA in float64 ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_sm90_persist_gpu(causal):
    """PERSIST on the H100 (132 blocks, several units each): D 64, 128 and 256 in their default
    tiles, odd lengths (Sq != Sk), GQA 3:1, outputs poisoned first; FP8's default (PERSIST at 1500
    keys) against the same call without PERSIST (bit for bit: the same sums in the same order)."""
    import torch

    from kcompiler import ops

    from .attention_util import check, sdpa64
    for D in (64, 128, 256):
        q = torch.randn(4, 1111, 12, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(4, 1234, 4, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
        # PERSIST whatever the default's PERSIST_TILES (at D 128 at most 8 key tiles; these rows read 10)
        # and the balance of its rounds
        tiles = dict(ops_attention.ATTENTION_SM90_TILES[(D, causal)], PERSIST=True, PERSIST_TILES=1 << 20,
                     PERSIST_SLACK=100)
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles)
        (plan,) = [p for p in ops_attention.PLANS.values() if p.kw.get("PERSIST")]
        assert plan.launch.launch.grid[1:] == (1, 1)
        ops_attention.PLANS.clear()
        ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16")
    q, k, v = (torch.randn(4, 1500, h, 128, device="cuda").to(torch.float8_e4m3fn) for h in (12, 4, 4))
    ds = [torch.rand(4, 4, device="cuda") + 0.5 for _ in range(3)]
    want = ops.attention(q, k, v, causal=causal, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2],
                         tiles=dict(PERSIST=False))
    # the defaults' tiles with PERSIST (which their balance rule leaves to the plain grid at this causal shape)
    got = ops.attention(q, k, v, causal=causal, descale_q=ds[0], descale_k=ds[1], descale_v=ds[2],
                        tiles=dict(PERSIST=True, PERSIST_SLACK=100))
    assert torch.equal(got, want)
