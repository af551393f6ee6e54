"""std.attention_sm90's LAZY_MAX (std.attention_sm90_lazy: a tile's exponentials taken against the
rows' running bases before the tile's maxima are known; the bases raised, and O rescaled, only where a
row's maximum passes its base by more than 2^8): on the CPU target's wgmma emulation against the
float64 reference, where the slow path runs on later tiles too (scores that rise along the keys) and
on rows that see no key; its PTX and SASS; its compile errors; and on the H100."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc

from ..ptxas_util import needs_nvdisasm, needs_ptxas, ptxas, sass
from .attention_sm90_util import (emulated, fresh_plans, ops_attention, packed_with_nan_tails,  # noqa: F401
                                  sm90_ptx)  # emulated: a fixture; fresh_plans: an autouse fixture

from ..draws import fresh_rng

RNG = fresh_rng()


def _rising(k: np.ndarray, rate: float) -> np.ndarray:
    """K with key j scaled by 1 + rate j: a row's scores (and its maximum) rise along the keys, so that
    later tiles pass the base by more than 2^8 and take the slow path."""
    f = (1.0 + rate * np.arange(k.shape[1], dtype=np.float64))[None, :, None, None]
    return (k.astype(np.float64) * f).astype(k.dtype)


# (tiles, (B, Sq, Sk, H, HK, D, causal), rate of rise): odd lengths, GQA, causal rows that see no key
# (Sq > Sk), scores flat (the slow path on a row's first tile only) and rising (on later tiles too)
CASES = [(dict(LAZY_MAX=True), (2, 70, 133, 2, 1, 64, False), 0.0),
         (dict(LAZY_MAX=True, PINGPONG=True, TURNS=1), (1, 150, 300, 2, 2, 64, False), 0.05),
         (dict(LAZY_MAX=True, PINGPONG=True, TURNS=1), (1, 200, 131, 2, 1, 64, True), 0.1),
         (dict(LAZY_MAX=True, PERSIST=True, PERSIST_SLACK=100), (1, 140, 260, 3, 1, 128, True), 0.05),
         pytest.param(dict(LAZY_MAX=True, CONSUMERS=1, BN=64), (1, 90, 333, 1, 1, 256, False), 0.05,
                      marks=pytest.mark.slow(sample=0)),
         # D 256's defaults (FA3_ORDER) with LAZY_MAX: their block's sequential form (the host's rule)
         (dict(LAZY_MAX=True), (1, 130, 200, 1, 1, 256, True), 0.05)]


@pytest.mark.parametrize("tiles,shape,rate", CASES, ids=["flat", "rising-turns", "causal-no-keys", "persist-d128",
                                                        "d256", "d256-defaults"])
def test_prefill_sm90_lazy_emulated(monkeypatch, emulated, tiles, shape, rate):
    """LAZY_MAX on the emulation against the float64 reference. With rising scores the slow path runs
    past a row's first tile: one that raised the bases wrongly would mix two bases in O and l (a first
    version that rescaled l after adding the fast path's sum gave outputs off by 2x here). A fast path
    that never raised is test_prefill_sm90_lazy_jump_emulated's to catch."""
    from kcompiler import ops
    from kcompiler.ops import _common

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    if tiles.get("PERSIST"):
        from types import SimpleNamespace
        monkeypatch.setattr(_common, "device_of", lambda mod, x: SimpleNamespace(
            multiprocessor_count=2, shared_memory_per_block=227 * 1024))
    B, Sq, Sk, H, HK, D, causal = shape
    q, k, v = qkv(B, Sq, Sk, H, HK, D, "bf16")
    k = _rising(k, rate)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    ref, ref_lse = reference(q, k, v, causal, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")
    if rate:  # the scores did pass the bases by more than 2^8 after a row's first tile
        s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64)[:, :, :1], k.astype(np.float64)[:, :, :1]) * D ** -0.5
        assert (s[..., 64:].max(-1) - s[..., :64].max(-1)).max() * np.log2(np.e) > 8


@pytest.mark.parametrize("tiles,D", [(dict(LAZY_MAX=True), 64), (dict(LAZY_MAX=True, PINGPONG=True, TURNS=1), 128)],
                         ids=["d64", "d128-turns"])
def test_prefill_sm90_lazy_jump_emulated(monkeypatch, emulated, tiles, D):
    """Scores that jump, past a row's first tile, by far more than the 2^128 an f32 P can hold: a fast
    path that did not raise its base there would give P = inf (NaN outputs). (Smaller rises do not tell:
    P against a stale base is exact in 16-bit types, their rounding being relative, as long as it does
    not overflow; E4M3 saturates at 448, which the FP8 test meets.)"""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(1, 70, 300, 2, 1, D, "bf16")
    # From the second tile of 128 keys, every score rises by at least 2048 / sqrt(D) >= 181 (261 in
    # log2): q's first component is at least 1 in every row, the keys' is 2048 (exact in bf16); the
    # other components add a few units either way. (Scaling those keys' random components instead left
    # the jump to the draw: a CI run met a row whose jump was 118 in log2.)
    q[..., 0] = 1 + np.abs(q[..., 0].astype(np.float64))
    k[:, 130:, :, 0] = 2048
    out, lse = ops.attention(q, k, v, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    ref, ref_lse = reference(q, k, v, False, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")
    s = np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64)[:, :, :1], k.astype(np.float64)[:, :, :1]) * D ** -0.5
    assert ((s[..., 128:].max(-1) - s[..., :128].max(-1)) * np.log2(np.e)).min() > 128


def test_prefill_sm90_lazy_varlen_emulated(monkeypatch, emulated):
    """LAZY_MAX (D 128's default) with variable lengths: packed sequences with NaN rows past the last
    one (read by its last key tile, masked by a select before the fast path's exponentials), an empty
    sequence, one of several key tiles whose scores rise and then jump past 2^128 (the slow path past its
    first tile), causal."""
    from kcompiler import ops

    from .attention_util import check, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    assert ops_attention.ATTENTION_SM90_TILES[(128, True)]["LAZY_MAX"]
    lq, lk = [7, 0, 150], [300, 3, 160]
    cu_q, cu_k, q, k, v = packed_with_nan_tails(lq, lk, 2, 1, 128, 50, 70)
    nk = cu_k[-1]
    k[:nk] = (k[:nk].astype(np.float64) * (1.0 + 0.03 * np.arange(nk))[:, None, None]).astype(k.dtype)
    k[140:300] = (k[140:300].astype(np.float64) * 40).astype(k.dtype)  # the first sequence's later tiles jump
    out, lse = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             max_seqlen_q=max(lq), path="sm90", target="cpu")
    n = cu_q[-1]
    ref, ref_lse = reference(q[:n], k[:nk], v[:nk], True, 128 ** -0.5, cu_q, cu_k)
    check(out[:n], lse[:, :n], ref, ref_lse, v[:nk], "bf16")


def test_prefill_sm90_lazy_fp8_emulated(monkeypatch, emulated):
    """FP8 (key tiles of 128; P up to 2^8 rounded to E4M3, whose largest finite value is 448) with
    rising scores, against the float64 reference of the E4M3 inputs: within FP8's error (3e-2 relative,
    the plain softmax's on flat scores). It is not as close as the plain softmax on these inputs
    (1.2e-2 against 4e-3 in one draw): there a row's largest P is 1, exact in E4M3, and the few
    largest scores carry the result; here the largest P is 2^x, 0 < x <= 8, rounded like the rest."""
    from kcompiler import ops

    from .attention_util import reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    B, Sq, Sk, H, HK = 1, 130, 300, 2, 1
    q, k, v = (RNG.standard_normal(shape).astype(ml_dtypes.float8_e4m3fn)
               for shape in ((B, Sq, H, 128), (B, Sk, HK, 128), (B, Sk, HK, 128)))
    k = _rising(k, 0.05)
    ref, ref_lse = reference(q, k, v, False, 128 ** -0.5)
    got, lse = ops.attention(q, k, v, return_lse=True, target="cpu", tiles=dict(BN=128, LAZY_MAX=True))
    got = np.asarray(got, np.float64)
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 3e-2
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-5, atol=1e-4)


@needs_ptxas
@pytest.mark.parametrize("D,causal", [(128, False), (128, True), (64, False)], ids=["d128", "d128-causal", "d64"])
def test_prefill_sm90_lazy_ptx(D, causal):
    """LAZY_MAX in the defaults' form (sequential, turns on named barriers) assembles for sm_90a with
    no spill and no serialised wgmma."""
    log = ptxas(sm90_ptx(T="bf16", D=D, CAUSAL=causal, PINGPONG=True, TURNS=1, LAZY_MAX=True), "sm_90a", verbose=True)
    assert "C7512" not in log and "serialized" not in log, log
    assert int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1]) == 0, log


@needs_nvdisasm
def test_prefill_sm90_lazy_in_sass():
    """In SASS the tile's exponentials do not wait for its maxima: between the wait for S and the
    branch on the warp's vote on raising the bases, at least 64 MUFU.EX2 a thread, the first of them
    before the first shuffle of the maxima's reduction; O's 64 FMUL a thread lie past the branch (the
    slow path)."""
    code = sass(sm90_ptx(T="bf16", D=128, CAUSAL=False, PINGPONG=True, TURNS=1, LAZY_MAX=True))
    qk_end = next(i for i, x in enumerate(code) if x.startswith("HGMMA.64x128x16") and x.endswith("gsb0")
                  and "tnspB" not in x)
    wait_s = next(i for i in range(qk_end, len(code)) if code[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    vote = next(i for i in range(wait_s, len(code)) if code[i].startswith("VOTE.ANY") and "PT, PT" not in code[i])
    branch = next(i for i in range(vote, len(code)) if "BRA" in code[i])
    exps = [i for i in range(wait_s, branch) if code[i].startswith("MUFU.EX2")]
    shfl = next(i for i in range(wait_s, vote) if code[i].startswith("SHFL"))
    assert len(exps) >= 64 and exps[0] < shfl, (len(exps), exps[:1], shfl)
    pv = next(i for i in range(branch, len(code)) if "tnspB" in code[i])
    assert sum(code[i].startswith("FMUL") for i in range(branch, pv)) >= 64
    assert sum(code[i].startswith("FMUL") for i in range(wait_s, branch)) < 8


def test_lazy_host_rules():
    """The defaults' LAZY_MAX stays with tiles a caller gives, but not with a form that does not take it
    (OVERLAP, CHAIN) unless the caller names it (then the kernel's compile error); the other way round,
    a caller's LAZY_MAX drops the defaults' OVERLAP (D 256's FA3_ORDER) unless the caller names it."""
    from kcompiler.ops.attention_order import sm90_tiles
    dflt = ops_attention.ATTENTION_SM90_TILES[(128, False)]
    assert dflt["LAZY_MAX"] and sm90_tiles(dflt, None)["LAZY_MAX"] and sm90_tiles(dflt, dict(BN=64))["LAZY_MAX"]
    for form in (dict(OVERLAP=True), dict(CHAIN=True), dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True)):
        assert "LAZY_MAX" not in sm90_tiles(dflt, form)
        assert sm90_tiles(dflt, dict(form, LAZY_MAX=True))["LAZY_MAX"]
    assert sm90_tiles(dflt, dict(OVERLAP=True, LAZY_MAX=False))["LAZY_MAX"] is False
    # D 256's defaults overlap (FA3_ORDER): a caller's LAZY_MAX takes the sequential form of the same
    # block, unless the caller names OVERLAP (then the kernel's compile error)
    d256 = ops_attention.ATTENTION_SM90_TILES[(256, False)]
    assert d256["OVERLAP"] and d256["FA3_ORDER"]
    t = sm90_tiles(d256, dict(LAZY_MAX=True))
    assert t["LAZY_MAX"] and not t["OVERLAP"] and "FA3_ORDER" not in t
    assert {k: v for k, v in t.items() if k not in ("OVERLAP", "FA3_ORDER", "LAZY_MAX", "SMALL_GRID")} == \
        {k: v for k, v in d256.items() if k not in ("OVERLAP", "FA3_ORDER", "SMALL_GRID")}
    assert sm90_tiles(d256, dict(LAZY_MAX=True, OVERLAP=True))["OVERLAP"]
    assert sm90_tiles(d256, dict(LAZY_MAX=False))["OVERLAP"] and sm90_tiles(d256, dict(BN=64))["FA3_ORDER"]


@pytest.mark.parametrize("tiles", [dict(OVERLAP=True), dict(CHAIN=True)], ids=["overlap", "chain"])
def test_prefill_sm90_lazy_error(tiles):
    """LAZY_MAX with a form it does not take is a located compile error."""
    with pytest.raises(kc.CompileError, match="LAZY_MAX") as e:
        sm90_ptx(T="bf16", D=64, LAZY_MAX=True, **tiles)
    assert "attention_sm90.kc:" in str(e.value)


# --- on the GPU: against torch's SDPA in float64 ---------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_sm90_lazy_gpu(causal):
    """LAZY_MAX on the H100 in each head dimension's default tiles, and at D 256 (whose defaults overlap)
    in the block the host's rule makes of ``LAZY_MAX=True`` (two consumers, BN 80, sequential) and the
    one-consumer BN 96 block that was its default before FA3_ORDER: odd lengths (Sq != Sk), GQA 3:1,
    flat and rising scores, outputs poisoned first, against SDPA in float64; FP8 (BN 128) within FP8's
    error (3e-2 relative) of SDPA in float64."""
    import torch

    from kcompiler import ops

    from .attention_util import check, sdpa64
    d256 = dict(OVERLAP=False, FA3_ORDER=False, PINGPONG=False, CONSUMERS=1, BN=96)
    for D, form in ((64, None), (128, None), (256, "rule"), (256, d256)):
        for rate in (0.0, 0.01):
            q = torch.randn(2, 1111, 12, D, device="cuda", dtype=torch.bfloat16)
            k, v = (torch.randn(2, 1234, 4, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
            k = (k.double() * (1 + rate * torch.arange(1234, device="cuda", dtype=torch.float64))[None, :, None, None]
                 ).to(torch.bfloat16)
            torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
            if form == "rule":
                tiles = dict(LAZY_MAX=True)
            else:
                tiles = dict(ops_attention.ATTENTION_SM90_TILES[(D, causal)], LAZY_MAX=True, **(form or {}))
            out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles)
            ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
            check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
                  v.cpu().float().numpy(), "bf16")
    q, k, v = (torch.randn(2, 1500, h, 128, device="cuda").to(torch.float8_e4m3fn) for h in (12, 4, 4))
    ref = sdpa64(q, k, v, causal, 128 ** -0.5)[0]
    got = ops.attention(q, k, v, causal=causal, tiles=dict(BN=128, LAZY_MAX=True)).double()
    err = ((got - ref).norm() / ref.norm()).item()
    assert torch.isfinite(got).all() and err < 3e-2, err


# --- every shipped default, as ops launches it -------------------------------------------------------------

def _default_cases():
    """(name, comptime values) of each default of ATTENTION_SM90_TILES and ATTENTION_FP8_TILES as ops
    compiles it (kcompiler.ops.attention_order.sm90_launch) at B 4, H 32 (no small-grid rule) and at 1,024
    and 8,192 keys (with and without the defaults' PERSIST)."""
    from kcompiler.ops.attention_fp8 import ATTENTION_FP8_TILES
    from kcompiler.ops.attention_order import sm90_launch, sm90_tiles
    cases = {}
    tables = [(f"bf16-d{D}-{'causal' if c else 'full'}", dict(T="bf16", D=D, CAUSAL=c), t)
              for (D, c), t in ops_attention.ATTENTION_SM90_TILES.items()]
    tables += [(f"fp8-{'causal' if c else 'full'}", dict(T="f8e4m3", OUT="bf16", D=128, CAUSAL=c), t)
               for c, t in ATTENTION_FP8_TILES.items()]
    for name, fixed, t in tables:
        for S in (1024, 8192):
            kw = sm90_launch(sm90_tiles(t, None), S, 32, 4, 132, seqlen_k=S)[2]
            cases[tuple(sorted({**fixed, **kw}.items()))] = f"{name}-{'persist' if kw.get('PERSIST') else 'grid'}"
    return [pytest.param(dict(k), id=v) for k, v in cases.items()]


@needs_ptxas
@pytest.mark.parametrize("comptime", _default_cases())
def test_defaults_assemble_without_spills(comptime):
    """Each default (ops' tiles tables, as ops launches them) assembles for sm_90a with no spill and no
    serialised wgmma (C7510-C7515): a default that spilled, as LAZY_MAX at FP8's BN 256 or D 64's three
    consumers would, fails here before it is timed."""
    log = ptxas(sm90_ptx(**comptime), "sm_90a", verbose=True)
    assert "Performance Loss" not in log, log
    assert int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1]) == 0, log
