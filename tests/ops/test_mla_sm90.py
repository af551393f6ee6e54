"""The Hopper MLA decode (stdlib/mla_sm90.kc) through ops.mla_decode.

On every machine (CI): the whole kernel (producer warpgroup issuing 3-D TMA copies that follow the block
table, the mbarrier ring, the softmax warpgroup handing P to the second through shared memory, the tail
of the last page zeroed, split-KV with merge_states) on the CPU target's emulation of the Hopper
instructions (``emulate_wgmma``), against test_attention.py's float64 MLA reference and bounds, on odd
lengths (an empty sequence, one token, lengths that end inside a page and inside a box), pages of 16 and
64, head counts that leave a block's rows unused, several stages and tile widths; NaN in the cache past
every sequence (never read, or zeroed before P V) and in the pages no sequence owns; the kernel's PTX
assembling for sm_90a without spills or serialised wgmma.

On an H100 (marked gpu): DeepSeek's shapes (latent 512, rope 64; 16, 64 and 128 heads; pages of 64 and
16) against torch in float64, and the same inputs through the mma.sync path.
"""
from __future__ import annotations

import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops
from kcompiler.ops import mla as ops_mla
from kcompiler.frontend.program import stdlib_dir

from ..ptxas_util import needs_ptxas, ptxas
from .attention_util import DTYPES, RNG, check, fold_lse_tol, mla_reference, paged_cache


@pytest.fixture(autouse=True)
def _fresh_decode_plans():
    """No prepared decode call (ops.decode.PLANS) crosses tests: a plan keeps the module it launches,
    and tests swap the standard library's modules for emulated ones."""
    from kcompiler.ops import decode
    decode.PLANS.clear()
    yield
    decode.PLANS.clear()


@pytest.fixture(scope="module")
def emulated():
    """std.mla_sm90 on the CPU target with the Hopper instructions emulated."""
    return kc.compile_file(stdlib_dir() / "mla_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


def mla_inputs(lens, H, D, DR, page, dtype="bf16", poison=True):
    """q_nope, q_pe, ckv, kpe, block table for sequences of ``lens`` tokens; with ``poison`` the cache
    rows past each sequence in its last page and every page no sequence owns hold NaN and Inf."""
    t = DTYPES[dtype]
    ckv, _, table, _ = paged_cache(lens, page, 1, D, t)
    ckv = np.ascontiguousarray(ckv[:, :, 0])
    kpe = RNG.standard_normal((ckv.shape[0], page, DR)).astype(t)
    if poison:
        owned = np.zeros(ckv.shape[0], bool)
        for b, n in enumerate(lens):
            need = -(-n // page)
            owned[table[b, :need]] = True
            if n % page:
                last = table[b, need - 1]
                ckv[last, n % page:] = np.nan
                kpe[last, n % page:] = np.inf
        ckv[~owned] = np.inf
        kpe[~owned] = np.nan
    q_nope = RNG.standard_normal((len(lens), H, D)).astype(t)
    q_pe = RNG.standard_normal((len(lens), H, DR)).astype(t)
    return q_nope, q_pe, ckv, kpe, table


def finite_rows(ckv, table, lens, page):
    """The cache rows the sequences own (for check()'s bound on |v|)."""
    rows = [ckv[table[b, :-(-n // page)]].reshape(-1, ckv.shape[-1])[:n] for b, n in enumerate(lens)]
    return np.concatenate(rows) if rows else ckv[:0]


# (D, DR, page, H, lens, tiles, splits): pages of 16 (several boxes a tile) and 64 (one box, or two at
# BN 32), 20 heads (44 unused rows), 70 (a second block of 6), lengths ending inside a page, inside a
# box and on a tile's edge, an empty sequence, one token; a ring of 1, 2 and 3 stages lapped several
# times; one split, and splits merged (some of them empty); the overlapped form; the seesaw form (tiles
# alternating between the consumer warpgroups: chunks of 1, 2, 3 and 7 tiles, so either ends the chunk;
# P in the tile's k_pe slab at BN 64, at DR 128 too, in buffers of its own at BN 32 and 16)
EMU_CASES = [(128, 64, 16, 20, [37, 0, 70, 129], dict(BN=64, STAGES=2), 1),
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=64, STAGES=2), 3),
             (256, 64, 64, 70, [1, 200, 64], dict(BN=32, STAGES=3), 2),
             (128, 128, 64, 16, [300, 5], dict(BN=64, STAGES=1), 1),
             (128, 64, 16, 8, [150, 33], dict(BN=16, STAGES=2), 4),
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=64, STAGES=2, OVERLAP=True), 1),
             (256, 64, 64, 70, [1, 200, 64], dict(BN=32, STAGES=3, OVERLAP=True), 2),
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=16, STAGES=8), 1),
             (256, 64, 64, 70, [1, 200, 64], dict(BN=32, STAGES=4, OVERLAP=True), 3),
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=64, STAGES=2, SEESAW=True), 1),
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=64, STAGES=2, SEESAW=True), 3),
             (256, 64, 64, 70, [1, 200, 64], dict(BN=32, STAGES=3, SEESAW=True), 2),
             (256, 64, 64, 70, [1, 200, 64], dict(BN=32, STAGES=2, SEESAW=True), 1),
             (128, 128, 64, 16, [300, 5], dict(BN=64, STAGES=2, SEESAW=True), 1),
             (128, 64, 16, 8, [150, 33], dict(BN=16, STAGES=3, SEESAW=True), 4),
             # Q's rows kept compact (QROWS: wgmma's rows past them read the next slabs and the ring,
             # NaN included), alone, with the seesaw form and with S transposed (ST)
             (128, 64, 16, 20, [37, 0, 70, 129], dict(BN=32, STAGES=4, QROWS=0), 2),
             (256, 64, 64, 8, [1, 200, 64], dict(BN=64, STAGES=2, QROWS=0, SEESAW=True), 1),
             (128, 64, 16, 12, [37, 0, 70, 129], dict(BN=64, STAGES=2, QROWS=0, ST=True), 2),
             (256, 64, 64, 16, [1, 200, 64, 300], dict(BN=64, STAGES=3, QROWS=16, ST=True), 1)]


@pytest.mark.slow(sample=3)
@pytest.mark.parametrize("case", EMU_CASES, ids=lambda c: f"D{c[0]}+{c[1]}-page{c[2]}-H{c[3]}-BN{c[5]['BN']}x"
                                                      f"{c[5]['STAGES']}{'-overlap' if c[5].get('OVERLAP') else ''}"
                                                      f"{'-seesaw' if c[5].get('SEESAW') else ''}"
                                                      f"{'-q%d' % c[5]['QROWS'] if 'QROWS' in c[5] else ''}"
                                                      f"{'-st' if c[5].get('ST') else ''}"
                                                      f"-split{c[6]}")
def test_mla_sm90_emulated(monkeypatch, emulated, case):
    """The whole Hopper kernel on the CPU target's emulation against float64 (module docstring)."""
    D, DR, page, H, lens, tiles, splits = case
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, H, D, DR, page)
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=scale,
                              num_splits=splits, return_lse=True, path="sm90", sm90_tiles=tiles, target="cpu")
    assert out.shape == (len(lens), H, D) and out.dtype == DTYPES["bf16"] and lse.shape == (len(lens), H)
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, page, scale)
    check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, page), "bf16")


def test_mla_sm90_four_stages_emulated(monkeypatch, emulated):
    """Tiles of 32 keys in a ring of 4 (bench_mla_variants.py's candidate for the memory-bound 16 heads:
    at D 512 + 64 it holds 3 tiles in flight, 110 KB, where 64 x 2 holds one, 74 KB), pages of 16 (two
    boxes a tile), odd lengths, two splits, against float64."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [37, 0, 70, 129]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 20, 128, 64, 16)
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=0.07, num_splits=2,
                              return_lse=True, path="sm90", sm90_tiles=dict(BN=32, STAGES=4), target="cpu")
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.07)
    check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, 16), "bf16")


def test_mla_sm90_probes_emulated(monkeypatch, emulated):
    """The timing diagnostics (sm90_tiles PROBE) end, on the emulation, with what they promise: PROBE 1
    (tiles streamed, nothing computed) O = 0 and the LSE -inf; PROBE 2 (S and the softmax, no P V) O = 0
    and the LSE of float64 within test_attention.check's bound, merged over 3 splits; PROBE with
    OVERLAP refused."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [37, 0, 70, 129]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 20, 128, 64, 16)
    sl = np.array(lens, np.int32)
    _, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.07)
    for probe, splits in ((1, 1), (2, 3)):
        out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, num_splits=splits, return_lse=True,
                                  path="sm90", sm90_tiles=dict(PROBE=probe), target="cpu")
        assert not np.asarray(out, np.float64).any(), probe
        if probe == 1:
            assert np.isneginf(lse).all()
            continue
        fin = np.isfinite(ref_lse)
        assert (np.isneginf(lse) == ~fin).all()
        lerr = np.abs(np.asarray(lse, np.float64)[fin] - ref_lse[fin])
        assert (lerr <= 1e-5 + np.abs(ref_lse[fin]) * 2.0 ** -20).all(), lerr.max()
    with pytest.raises(RuntimeError, match="PROBE is 0 to 4, and 0 or 3 with OVERLAP"):
        ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, path="sm90", target="cpu",
                       sm90_tiles=dict(PROBE=1, OVERLAP=True))


@pytest.mark.slow(sample=1)  # a form a case, one by default (CI time); -m slow: all four
@pytest.mark.parametrize("tiles", [dict(BN=32, STAGES=2), dict(BN=32, STAGES=2, OVERLAP=True),
                                   dict(BN=32, STAGES=3, SEESAW=True), dict(BN=64, STAGES=2, QROWS=0, ST=True)],
                         ids=["sequential", "overlap", "seesaw", "st"])
def test_mla_sm90_compute_probes_emulated(monkeypatch, emulated, tiles):
    """PROBE 3 (a form's compute without the loads: the producer copies the ring's first STAGES tiles
    and then hands each slot back uncopied) ends, in each form it takes (sequential, OVERLAP,
    SEESAW, ST: a case each), with what the sequential kernel computes over those tiles where the chunk fits in the
    ring, so the consumers' protocol is the kernel's; PROBE 4 (S alone) ends; PROBE 2 / 4 with OVERLAP
    and PROBE 5 refused."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [37, 0, 60, 129]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 16, 128, 64, 16)
    sl = np.array(lens, np.int32)
    run = lambda tiles, splits=1: ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, num_splits=splits,
                                                 return_lse=True, path="sm90", sm90_tiles=tiles, target="cpu")
    want, want_lse = run(tiles)
    got, got_lse = run({**tiles, "PROBE": 3})
    # sequences 0, 1, 2 fit in the ring's first fill (at most STAGES tiles): the same result
    np.testing.assert_array_equal(np.asarray(got[:3], np.float64), np.asarray(want[:3], np.float64))
    np.testing.assert_array_equal(got_lse[:3], want_lse[:3])
    assert not np.array_equal(np.asarray(got[3], np.float64), np.asarray(want[3], np.float64)), tiles
    out, lse = run(dict(PROBE=4), 2)
    assert out.shape == (4, 16, 128) and lse.shape == (4, 16)
    for bad in (dict(PROBE=2, OVERLAP=True), dict(PROBE=4, OVERLAP=True), dict(PROBE=5)):
        with pytest.raises(RuntimeError, match="PROBE is 0 to 4"):
            run(bad)


@pytest.mark.slow(sample=2)  # opt-in forms, measured slower: two by default (CI time), -m slow all
@pytest.mark.parametrize("tiles", [dict(BN=32, STAGES=2, SACC=2), dict(BN=16, STAGES=3, SACC=4),
                                   dict(BN=32, STAGES=2, PSS=True), dict(BN=64, STAGES=2, SACC=1, PSS=True),
                                   dict(BN=32, STAGES=3, SACC=2, PSS=True), dict(BN=32, STAGES=2, SSPLIT=True),
                                   dict(BN=64, STAGES=2, SSPLIT=True), dict(BN=16, STAGES=3, SACC=2, PSS=True, SSPLIT=True)],
                         ids=["sacc2", "sacc4", "pss", "pss-bn64", "pss-sacc2", "ssplit", "ssplit-bn64",
                              "ssplit-sacc2-pss"])
def test_mla_sm90_sacc_pss_ssplit_emulated(monkeypatch, emulated, tiles):
    """SACC (S's k steps over 2 or 4 accumulators: independent wgmma chains, added after the wait), PSS
    (warpgroup 1's P V with P from shared memory) and SSPLIT (S's k steps split over both consumer
    warpgroups, warpgroup 2's half through shared memory) against float64: odd lengths, an empty
    sequence, pages of 16, 20 heads, 2 splits; the LSE alone through PROBE 2 too (not SSPLIT: its
    second half is warpgroup 2's); SACC where it cannot run (with OVERLAP, SEESAW or ST, SACC * BN > 64,
    5) and PSS / SSPLIT outside the sequential form refused with the reason."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [37, 0, 70, 129]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 20, 128, 64, 16)
    sl = np.array(lens, np.int32)
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.07)
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, num_splits=2, return_lse=True,
                              path="sm90", sm90_tiles=tiles, target="cpu")
    check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, 16), "bf16")
    if not tiles.get("SSPLIT"):
        _, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, num_splits=3, return_lse=True,
                                path="sm90", sm90_tiles={**tiles, "PROBE": 2}, target="cpu")
        fin = np.isfinite(ref_lse)
        assert (np.isneginf(lse) == ~fin).all()
        assert (np.abs(np.asarray(lse, np.float64)[fin] - ref_lse[fin]) <= 1e-5 + np.abs(ref_lse[fin]) * 2.0 ** -20).all()
    if tiles.get("SACC", 1) > 1:
        for bad in (dict(OVERLAP=True), dict(BN=64, SEESAW=True), dict(BN=64, QROWS=0, ST=True), dict(BN=64),
                    dict(SACC=5)):
            with pytest.raises(RuntimeError, match="SACC is 1 to 4"):
                ops.mla_decode(q_nope[:, :16], q_pe[:, :16], ckv, kpe, table, sl, scale=0.07, path="sm90",
                               target="cpu", sm90_tiles={**tiles, **bad})
    for key in ("PSS", "SSPLIT"):
        if tiles.get(key):
            for bad in (dict(OVERLAP=True), dict(SEESAW=True), dict(BN=64, QROWS=0, ST=True)):
                with pytest.raises(RuntimeError, match=f"{key} .* is of the sequential form"):
                    ops.mla_decode(q_nope[:, :16], q_pe[:, :16], ckv, kpe, table, sl, scale=0.07, path="sm90",
                                   target="cpu", sm90_tiles={**tiles, "SACC": 1, "PSS": False, "SSPLIT": False,
                                                             key: True, **bad})
    if tiles.get("SSPLIT"):
        with pytest.raises(RuntimeError, match="SSPLIT .* without OVERLAP, SEESAW, ST or PROBE 1, 2, 4"):
            ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, path="sm90", target="cpu",
                           sm90_tiles={**tiles, "PROBE": 2})


def test_mla_sm90_deepseek_shape_emulated(monkeypatch, emulated):
    """DeepSeek's latent 512 + rope 64 (each consumer's P V a wgmma of 256 columns), f16, pages of 64,
    a length ending inside the last page, two splits."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [75, 3]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 16, 512, 64, 64, "f16")
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=scale, num_splits=2,
                              return_lse=True, path="sm90", target="cpu")
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 64, scale)
    check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, 64), "f16")


@pytest.mark.slow(sample=0)  # ~20-30 s each on CI's cores, an opt-in form measured slower; -m slow: both
@pytest.mark.parametrize("tiles", [dict(BN=64, STAGES=2, SEESAW=True), dict(BN=32, STAGES=3, SEESAW=True)],
                         ids=["bn64x2", "bn32x3"])
def test_mla_sm90_seesaw_deepseek_shape_emulated(monkeypatch, emulated, tiles):
    """The seesaw form at DeepSeek's latent 512 + rope 64 (each warpgroup's P V a wgmma of 256 columns,
    P in the tile's k_pe slab at BN 64), f16, pages of 64, an empty sequence, lengths ending inside a
    page and on a tile's edge, 2 splits, against float64; SEESAW with 1 stage, with OVERLAP or with a
    PROBE refused with the reason."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    lens = [75, 0, 3, 192]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 16, 512, 64, 64, "f16")
    sl = np.array(lens, np.int32)
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=scale, num_splits=2,
                              return_lse=True, path="sm90", sm90_tiles=tiles, target="cpu")
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 64, scale)
    check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, 64), "f16")
    assert np.isneginf(lse[1]).all() and not np.asarray(out[1], np.float64).any()
    for bad in (dict(STAGES=1), dict(OVERLAP=True), dict(PROBE=2)):
        with pytest.raises(RuntimeError, match="SEESAW is a schedule of its own"):
            ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=scale, path="sm90", target="cpu",
                           sm90_tiles={**tiles, **bad})


def test_mla_sm90_default_tiles_by_heads():
    """path 'auto''s Hopper tiles by heads: S transposed with as few Q rows as the heads need up to
    MLA_SM90_SMALL_HEADS (the measured choice at 16 heads), the 64-row tiles above; tiles the caller
    gives go over MLA_SM90_TILES whatever the heads; and the small tiles pass the kernel's own rules
    (ST: BN 64, QROWS at most 16)."""
    for heads in (1, 7, 12, 16):
        t = ops_mla.mla_sm90_tiles(heads)
        assert t["ST"] and t["BN"] == 64 and t["QROWS"] == max(8, -(-heads // 8) * 8) <= 16
    for heads in (17, 64, 128):
        assert ops_mla.mla_sm90_tiles(heads) == ops_mla.mla_sm90_qrows(dict(ops_mla.MLA_SM90_TILES), heads)
    assert ops_mla.mla_sm90_tiles(16, dict(BN=32, STAGES=3)) == dict(ops_mla.MLA_SM90_TILES, BN=32, STAGES=3)
    assert ops_mla.mla_sm90_tiles(16, {}) == ops_mla.mla_sm90_tiles(16)


def test_mla_sm90_compact_q_and_st_emulated(monkeypatch, emulated):
    """At 16 heads the compact Q (QROWS 0: 16 rows) and the transposed S (ST, 64 keys a tile) against
    float64 (latent 128 + 64, pages of 16, odd lengths, an empty sequence, 2 splits); QROWS resolved
    from the heads (ops.mla_sm90_qrows) and the shared memory it saves; ST refused with its reason
    where it cannot run (tiles of 32 keys; 20 heads: 24 rows; with SEESAW); QROWS below the heads
    refused."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    assert ops_mla.mla_sm90_qrows(dict(QROWS=0), 16)["QROWS"] == 16
    assert ops_mla.mla_sm90_qrows(dict(QROWS=0), 20)["QROWS"] == 24
    assert ops_mla.mla_sm90_qrows(dict(QROWS=0), 128)["QROWS"] == 64
    assert ops_mla.mla_sm90_qrows(dict(QROWS=32), 16)["QROWS"] == 32
    full = ops_mla.mla_sm90_shared_bytes(512, 64, dict(BN=32, STAGES=2))
    assert full - ops_mla.mla_sm90_shared_bytes(512, 64, dict(BN=32, STAGES=2, QROWS=16)) == 48 * 576 * 2
    lens = [37, 0, 70, 129]
    sl = np.array(lens, np.int32)
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 16, 128, 64, 16)
    ref, ref_lse = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.07)
    for tiles in (dict(BN=32, STAGES=2, QROWS=0), dict(BN=64, STAGES=2, QROWS=0, ST=True)):
        out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, num_splits=2, return_lse=True,
                                  path="sm90", sm90_tiles=tiles, target="cpu")
        check(out, lse, ref, ref_lse, finite_rows(ckv, table, lens, 16), "bf16")
    for bad in (dict(BN=32, ST=True), dict(BN=64, STAGES=2, SEESAW=True, ST=True)):
        with pytest.raises(RuntimeError, match="ST \\(S transposed\\) takes BN 64"):
            ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, path="sm90", target="cpu", sm90_tiles=bad)
    with pytest.raises(RuntimeError, match="at least the heads \\(16\\)"):
        ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.07, path="sm90", target="cpu",
                       sm90_tiles=dict(QROWS=8))
    a, b, c, d, t = mla_inputs(lens, 20, 128, 64, 16, poison=False)
    with pytest.raises(RuntimeError, match="QROWS of 16 at most"):
        ops.mla_decode(a, b, c, d, t, sl, scale=0.07, path="sm90", target="cpu",
                       sm90_tiles=dict(BN=64, QROWS=0, ST=True))


def test_mla_path_choice(monkeypatch, emulated):
    """path is 'auto', 'sm90' or 'generic'; 'sm90' where the Hopper kernel cannot run is a RuntimeError
    that says why (the CPU target without the emulation; D not a multiple of 128; a page of 24 with
    tiles of 64; on the emulation, tiles beyond the shared memory a block may have on its device),
    'auto' then runs std.attention's kernel."""
    lens = [20]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 4, 128, 64, 16, poison=False)
    sl = np.array(lens, np.int32)
    with pytest.raises(ValueError, match="path must be"):
        ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.1, path="fa3", target="cpu")
    with pytest.raises(ValueError, match="sm90_tiles takes BN, STAGES, OVERLAP"):
        ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.1, sm90_tiles=dict(bn=32), target="cpu")
    with pytest.raises(RuntimeError, match="sm_90"):
        ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.1, path="sm90", target="cpu")
    a, b, c, d, t = mla_inputs(lens, 4, 64, 64, 16, poison=False)
    with pytest.raises(RuntimeError, match="multiple of 128"):
        ops.mla_decode(a, b, c, d, t, sl, scale=0.1, path="sm90", target="cpu")
    a, b, c, d, t = mla_inputs(lens, 4, 128, 64, 24, poison=False)
    with pytest.raises(RuntimeError, match="pages of a multiple of 8"):
        ops.mla_decode(a, b, c, d, t, sl, scale=0.1, path="sm90", target="cpu")
    big = mla_inputs(lens, 4, 512, 64, 64, poison=False)
    with monkeypatch.context() as m:
        m.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
        with pytest.raises(RuntimeError, match="bytes of shared memory, more than the 232448 a block may have"):
            ops.mla_decode(*big, sl, scale=0.1, path="sm90", sm90_tiles=dict(BN=64, STAGES=3), target="cpu")
    out = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.1, target="cpu")  # auto: std.attention
    ref, _ = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.1)
    assert np.abs(out.astype(np.float64) - ref).max() < 0.05


def test_mla_auto_takes_the_hopper_kernel_from_64_heads(monkeypatch, emulated):
    """path 'auto' runs std.mla_sm90 where H >= ops.MLA_SM90_MIN_HEADS (64) or H <= MLA_SM90_SMALL_HEADS
    (16, S transposed) and std.attention's kernel between (fewer heads pad wgmma's 64 rows: slower on
    the H100), or where a generic option is given; both results against float64."""
    monkeypatch.setattr(ops_mla, "_mla_sm90_module", lambda target: emulated)
    ran = []
    sm90 = ops_mla._mla_decode_sm90
    monkeypatch.setattr(ops_mla, "_mla_decode_sm90", lambda *a, **k: ran.append(a[0].shape[1]) or sm90(*a, **k))
    lens = [37, 5]
    sl = np.array(lens, np.int32)
    for H, options, hopper in ((64, {}, True), (16, {}, True), (32, {}, False), (64, dict(heads_per_block=16), False)):
        q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, H, 128, 64, 16, poison=False)
        del ran[:]
        out = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, sl, scale=0.1, target="cpu", **options)
        assert ran == ([H] if hopper else []), (H, options)
        ref, _ = mla_reference(q_nope, q_pe, ckv, kpe, table, lens, 16, 0.1)
        assert np.abs(out.astype(np.float64) - ref).max() < 0.05, (H, options)


@needs_ptxas
@pytest.mark.parametrize("params", [dict(T="bf16", OUT="f32", PAGE=64), dict(T="bf16", OUT="bf16", PAGE=64),
                                    dict(T="f16", OUT="f32", PAGE=16),
                                    dict(T="bf16", OUT="f32", PAGE=64, OVERLAP=True),
                                    dict(T="bf16", OUT="f32", PAGE=16, BN=32, STAGES=3, OVERLAP=True),
                                    dict(T="bf16", OUT="f32", PAGE=64, BN=32, STAGES=4),
                                    # the opt-in forms (SEESAW, a PROBE, deeper rings, SACC, PSS, SSPLIT), all
                                    # measured slower: with -m slow (20-70 s each on CI's cores)
                                    *(pytest.param(p, marks=pytest.mark.slow(sample=0)) for p in (
                                        dict(T="bf16", OUT="f32", PAGE=64, BN=64, STAGES=2, SEESAW=True),
                                        dict(T="bf16", OUT="bf16", PAGE=16, BN=32, STAGES=3, SEESAW=True),
                                        dict(T="f16", OUT="f32", PAGE=64, BN=32, STAGES=2, SEESAW=True),
                                        dict(T="bf16", OUT="f32", PAGE=64, PROBE=2),
                                        dict(T="bf16", OUT="f32", PAGE=64, BN=32, STAGES=4, PROBE=3),
                                        dict(T="bf16", OUT="f32", PAGE=64, BN=32, STAGES=2, SACC=2, PROBE=4))),
                                    dict(T="bf16", OUT="f32", PAGE=64, BN=64, STAGES=2, QROWS=16, ST=True),
                                    pytest.param(dict(T="bf16", OUT="bf16", PAGE=64, BN=32, STAGES=5, QROWS=16),
                                                 marks=pytest.mark.slow(sample=0)),
                                    *(pytest.param(p, marks=pytest.mark.slow(sample=0)) for p in (
                                        dict(T="bf16", OUT="f32", PAGE=64, BN=32, STAGES=2, SACC=2),
                                        dict(T="bf16", OUT="bf16", PAGE=64, BN=32, STAGES=2, SACC=2, PSS=True),
                                        dict(T="bf16", OUT="f32", PAGE=64, BN=32, STAGES=2, SSPLIT=True),
                                        dict(T="f16", OUT="bf16", PAGE=16, BN=16, STAGES=4, SACC=4)))],
                         ids=["bf16-split", "bf16", "f16-page16", "overlap", "overlap-bn32", "bn32x4", "seesaw",
                              "seesaw-bn32x3", "seesaw-bn32x2", "probe2", "probe3-bn32x4", "probe4-sacc2", "st-q16",
                              "q16-bn32x5", "sacc2", "pss-sacc2", "ssplit", "sacc4-bn16"])
def test_mla_sm90_ptx(params):
    """sm_90a PTX of the kernel at D 512 + 64 (built as ops builds it: approx_ftz) assembles with ptxas;
    3-D TMA copies, wgmma with A from registers (P V of the softmax warpgroup) and from shared memory
    (the other's), n256 for the output halves; no serialised wgmma (C7511 / C7513 / C7514 / C7518), no
    spill (8 bytes in the overlapped form at BN 64, at the 240-register limit of warpgroup 1)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "mla_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="mla_decode_sm90", comptime=params)
    assert "cp.async.bulk.tensor.3d" in ptx and "setmaxnreg.inc.sync.aligned.u32 240" in ptx
    lines = [x for x in ptx.splitlines() if "wgmma.mma_async" in x]
    if params.get("ST"):  # S^T: n16 (Q's 16 rows as N); both halves of P V with P from shared memory
        assert any("m64n16k16" in x for x in lines) and not any("m64n256k16" in x and "}, {" in x for x in lines)
    elif params.get("PSS"):  # both halves of P V with P from shared memory
        assert any("m64n256k16" in x for x in lines) and not any("m64n256k16" in x and "}, {" in x for x in lines)
    elif params.get("PROBE", 0) in (0, 3):  # PROBE 2 and 4 (diagnostics) leave P V out
        assert any("m64n256k16" in x and "}, {" in x for x in lines)  # A from registers
        assert any("m64n256k16" in x and "}, {" not in x for x in lines)  # A from shared memory
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert not any(c in log for c in ("C7511", "C7513", "C7514", "C7518", "serialized")), log
    spill = int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1])
    assert spill <= (8 if params.get("OVERLAP") and params.get("BN", 64) == 64 else 0), log


# --- on the GPU: against torch in float64 ---------------------------------------------------------------

def _torch_reference(q_nope, q_pe, ckv, kpe, table, lens, page, scale):
    import torch
    ref, ref_lse = [], []
    for b, n in enumerate(lens):
        pages = torch.from_numpy(table[b, :-(-n // page)]).cuda().long()
        c = ckv[pages].reshape(-1, ckv.shape[-1])[:n].double()
        kp = kpe[pages].reshape(-1, kpe.shape[-1])[:n].double()
        s = (q_nope[b].double() @ c.T + q_pe[b].double() @ kp.T) * scale
        ref.append((torch.softmax(s, -1) @ c).cpu().numpy())
        ref_lse.append(torch.logsumexp(s, -1).cpu().numpy())
    return np.stack(ref), np.stack(ref_lse)


@pytest.mark.gpu
@pytest.mark.parametrize("H", [16, 64, 128])
@pytest.mark.parametrize("page", [64, 16])
def test_mla_sm90_gpu(H, page):
    """The Hopper path on the H100 (DeepSeek's latent 512 + rope 64, bf16) against float64: odd lengths
    (one token, lengths ending inside a page), the default splits and one split; the cache past every
    sequence NaN/Inf; and the mma.sync path on the same inputs within the same bound."""
    import torch
    lens = [1, 1000, 4097, 300, 64]
    q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, H, 512, 64, page)
    qn, qp, c, k = (torch.from_numpy(x.astype(np.float32)).cuda().bfloat16() for x in (q_nope, q_pe, ckv, kpe))
    bt = torch.from_numpy(table).cuda()
    sl = torch.tensor(lens, dtype=torch.int32, device="cuda")
    scale = (128 + 64) ** -0.5
    ref, ref_lse = _torch_reference(qn, qp, c, k, table, lens, page, scale)
    v = finite_rows(c.float().cpu().numpy(), table, lens, page)
    fold = fold_lse_tol(max(lens), ops.MLA_SM90_TILES["BN"])  # one split folds a whole sequence
    for splits in (None, 1):
        torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
        out, lse = ops.mla_decode(qn, qp, c, k, bt, sl, scale=scale, num_splits=splits, return_lse=True,
                                  path="sm90")
        check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse, v, "bf16", lse_tol=fold)
    out, lse = ops.mla_decode(qn, qp, c, k, bt, sl, scale=scale, return_lse=True, path="generic")
    check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse, v, "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [dict(OVERLAP=True), dict(BN=32, STAGES=3), dict(BN=32, STAGES=3, OVERLAP=True),
                                   dict(BN=16, STAGES=4), dict(BN=32, STAGES=4), dict(BN=32, STAGES=4, OVERLAP=True),
                                   dict(BN=16, STAGES=8), dict(BN=64, STAGES=2, SEESAW=True),
                                   dict(BN=32, STAGES=2, SEESAW=True), dict(BN=32, STAGES=3, SEESAW=True),
                                   dict(BN=32, STAGES=2, SACC=2), dict(BN=32, STAGES=3, SACC=2),
                                   dict(BN=16, STAGES=4, SACC=4), dict(BN=32, STAGES=2, PSS=True),
                                   dict(BN=32, STAGES=2, SACC=2, PSS=True), dict(BN=64, STAGES=2, PSS=True),
                                   dict(BN=32, STAGES=2, SSPLIT=True), dict(BN=32, STAGES=3, SSPLIT=True, SACC=2)],
                         ids=["overlap", "bn32", "bn32-overlap", "bn16", "bn32x4", "bn32x4-overlap", "bn16x8",
                              "seesaw-bn64x2", "seesaw-bn32x2", "seesaw-bn32x3", "sacc2", "sacc2-bn32x3", "sacc4-bn16x4",
                              "pss", "pss-sacc2", "pss-bn64x2", "ssplit", "ssplit-bn32x3-sacc2"])
def test_mla_sm90_tiles_gpu(tiles):
    """The other tiles the benchmark times, on the H100 (128 heads, pages of 16 and 64, f16)."""
    import torch
    lens = [777, 1, 2048, 63]
    scale = (128 + 64) ** -0.5
    for page in (16, 64):
        q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, 128, 512, 64, page, "f16")
        qn, qp, c, k = (torch.from_numpy(x).cuda() for x in (q_nope, q_pe, ckv, kpe))
        out, lse = ops.mla_decode(qn, qp, c, k, torch.from_numpy(table).cuda(),
                                  torch.tensor(lens, dtype=torch.int32, device="cuda"), scale=scale,
                                  return_lse=True, path="sm90", sm90_tiles=tiles)
        ref, ref_lse = _torch_reference(qn, qp, c, k, table, lens, page, scale)
        check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse,
              finite_rows(ckv.astype(np.float32), table, lens, page), "f16",
              lse_tol=fold_lse_tol(max(lens), tiles.get("BN", ops.MLA_SM90_TILES["BN"])))


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", [dict(BN=32, STAGES=4, QROWS=0), dict(BN=32, STAGES=5, QROWS=0),
                                   dict(BN=64, STAGES=2, QROWS=0), dict(BN=64, STAGES=2, QROWS=0, ST=True),
                                   dict(BN=64, STAGES=2, QROWS=0, SEESAW=True)],
                         ids=["q16-bn32x4", "q16-bn32x5", "q16-bn64x2", "st", "q16-seesaw-bn64x2"])
def test_mla_sm90_small_heads_gpu(tiles):
    """The 16-head forms bench_mla_variants.py times (Q's rows compact, S transposed), on the H100
    (bf16, pages of 64 and 16, 16 heads and 12: rows 12 .. 15 zero-filled) against float64, the cache
    past every sequence NaN/Inf."""
    import torch
    lens = [777, 1, 2048, 63, 0]
    scale = (128 + 64) ** -0.5
    for page, H in ((64, 16), (16, 12)):
        q_nope, q_pe, ckv, kpe, table = mla_inputs(lens, H, 512, 64, page)
        qn, qp, c, k = (torch.from_numpy(x.astype(np.float32)).cuda().bfloat16() for x in (q_nope, q_pe, ckv, kpe))
        out, lse = ops.mla_decode(qn, qp, c, k, torch.from_numpy(table).cuda(),
                                  torch.tensor(lens, dtype=torch.int32, device="cuda"), scale=scale,
                                  return_lse=True, path="sm90", sm90_tiles=tiles)
        ref, ref_lse = _torch_reference(qn, qp, c, k, table, lens, page, scale)
        check(out.float().cpu().numpy(), lse.cpu().numpy(), ref, ref_lse,
              finite_rows(c.float().cpu().numpy(), table, lens, page), "bf16",
              lse_tol=fold_lse_tol(max(lens), tiles["BN"]))
