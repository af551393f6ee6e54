"""FP8 (E4M3) attention: std.attention_sm90 with T = f8e4m3 (kcompiler.ops.attention on e4m3 q, k, v
with FlashAttention-3's descale factors).

The reference is float64 attention of the dequantised inputs (the e4m3 codes' values times descale_q,
descale_k and descale_v). The kernel rounds P = exp(S - m) (m the running row maximum, so P <= 1) to
e4m3 for O += P V, which dominates its error. E4M3 has 3 mantissa bits: a normal value rounds within
2^-4 of itself, a value below the smallest normal 2^-6 to a multiple of 2^-9, within 2^-10 (and never
by more than itself: it cannot change sign). P's rounding error relative to the final maximum (tile j's
P is later scaled by alpha = exp(m_j - m) <= 1) is so at most e_j = min(p_j, max(p_j / 16, 2^-10)), p_j
= exp(s_j - m) the reference's, and the row sum l is f32's of the unrounded P, so that

    |O[i, d] - O_ref[i, d]| <= descale_v * sum_j e_j |V[j, d]| / l_i  (+ the f32 terms and O's rounding
    to bf16: 2^-8 |O_ref| + 10^-6 descale_v max |V| cover them),

and the LSE is off by f32 rounding only (10^-5 (1 + |LSE|)). With EXP2_POLY some exponentials are
std.math's polynomial (relative error d = 1.02e-4 where ex2.approx has 2 ulp): P and l are then off by d
p_j and d l more, which adds 2 d (sum_j p_j |V[j, d]| / l_i + |O_ref|) to the bound and 2 d to the LSE's. On the GPU, FP8 wgmma accumulates S with
less than f32's precision (unspecified by NVIDIA; DeepSeek-V3's report measured about 14 bits on
H800), so the GPU tests add a score error eps = 2^-12 * scale_eff * max_ij sum_d |Q_id K_jd| to every
score: 2 eps p_j more in e_j and eps in the LSE.
"""
from __future__ import annotations

import importlib
import re

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc

from ..ptxas_util import needs_nvdisasm, needs_ptxas, ptxas, sass
from .attention_sm90_util import exp2_under_pv, fresh_plans  # noqa: F401 - autouse: no prepared call crosses tests
from .attention_util import check_bounds

ops_attention = importlib.import_module("kcompiler.ops.attention")
F8 = ml_dtypes.float8_e4m3fn
RNG = np.random.default_rng(23)


def reference_fp8(q, k, v, causal, scale, dq, dk, dv, score_eps=0.0, p_rel=0.0):
    """(O_ref, LSE_ref, bound on |O - O_ref|, bound on |LSE - LSE_ref|) for bshd float64 q (B, Sq, H, D),
    k and v (B, Sk, HK, D) (the codes' values) and descales dq, dk, dv of shape (B, HK) (module docstring)."""
    B, Sq, H, D = q.shape
    Sk, HK = k.shape[1], k.shape[2]
    G = H // HK
    head = lambda d: np.repeat(np.asarray(d, np.float64).reshape(B, HK), G, axis=1)[:, :, None, None]  # noqa: E731
    qh = q.transpose(0, 2, 1, 3)
    kh = np.repeat(k.transpose(0, 2, 1, 3), G, axis=1)
    vh = np.repeat(v.transpose(0, 2, 1, 3), G, axis=1)
    seff = scale * head(dq) * head(dk)
    s = np.einsum("bhqd,bhkd->bhqk", qh, kh) * seff
    if causal:
        i, j = np.arange(Sq)[:, None], np.arange(Sk)[None]
        s = np.where(j <= i + Sk - Sq, s, -np.inf)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    lsafe = np.where(l > 0, l, 1.0)
    o = np.einsum("bhqk,bhkd->bhqd", p, vh) / lsafe * head(dv)
    e = np.minimum(p, np.maximum(p / 16, 2.0 ** -10)) + 2 * score_eps * p
    vmax = np.abs(vh).max() * head(dv)
    pv = np.einsum("bhqk,bhkd->bhqd", p, np.abs(vh)) / lsafe * head(dv)
    tol = (np.einsum("bhqk,bhkd->bhqd", e, np.abs(vh)) / lsafe * head(dv) + 2.0 ** -8 * np.abs(o) + 1e-6 * vmax
           + 2 * p_rel * (pv + np.abs(o)))
    lse = np.where(l > 0, m + np.log(lsafe), -np.inf)[..., 0]
    return (o.transpose(0, 2, 1, 3), lse, tol.transpose(0, 2, 1, 3),
            1e-5 * (1 + np.abs(np.where(np.isfinite(lse), lse, 0))) + score_eps + 2 * p_rel)


def check_fp8(out, lse, ref):
    check_bounds(out, lse, *ref)


def fp8_inputs(B, Sq, Sk, H, HK, D=128):
    """e4m3 q, k, v (q and k of spread 2: peaked rows, so that a wrong pairing of P and V shows)."""
    return ((RNG.standard_normal((B, Sq, H, D)) * 2).astype(F8), (RNG.standard_normal((B, Sk, HK, D)) * 2).astype(F8),
            RNG.standard_normal((B, Sk, HK, D)).astype(F8))


@pytest.fixture(scope="module")
def emulated():
    """std.attention_sm90 on the CPU target with the Hopper instructions emulated."""
    from kcompiler.frontend.program import stdlib_dir
    return kc.compile_file(stdlib_dir() / "attention_sm90.kc", target="cpu", target_options={"emulate_wgmma": True})


def run_fp8(monkeypatch, emulated, q, k, v, causal, layout="bshd", **kw):
    """ops.attention on e4m3 bshd arrays through the emulated module (in ``layout``), out and LSE in bshd."""
    from kcompiler import ops
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    args = [x.transpose(0, 2, 1, 3).copy() for x in (q, k, v)] if layout == "bhsd" else [q, k, v]
    out, lse = ops.attention(*args, causal=causal, layout=layout, return_lse=True, target="cpu", **kw)
    return (out.transpose(0, 2, 1, 3) if layout == "bhsd" else out), lse


@pytest.mark.parametrize("Sk", [77, 300])
def test_fp8_vt_cpu(Sk):
    """std.attention_vt_fp8 on the CPU target: V^T with keys permuted in chunks of 32 (p = 32c + 16h + 4t + i
    holds key 32c + 16h + 2t + i % 2 + 8 (i / 2)), zeros past Sk, from a bshd V, against numpy: one block
    of keys, part full, and three (128 keys each, the swizzled rows of shared memory among them), the last
    partial."""
    B, HK, D = 2, 3, 128
    v = RNG.standard_normal((B, Sk, HK, D)).astype(F8)
    skp = -(-Sk // 32) * 32
    vt = np.full((B, HK, D, skp), np.nan, F8)
    words = lambda x: x.reshape(-1).view(np.uint8).view(np.int32)  # noqa: E731
    from kcompiler.ops import _common
    _common.stdlib_module("attention_vt_fp8", "cpu").attention_vt_fp8[(-(-Sk // 128), HK, B), 256](
        words(v), words(vt), Sk, skp, Sk * HK * D, HK * D, D, D=D, shared=128 * (D + 4))
    pos = np.arange(skp)
    r = pos % 16
    key = pos // 16 * 16 + 2 * (r // 4) + r % 2 + 8 * (r % 4 // 2)
    padded = np.concatenate([v.astype(np.float32), np.zeros((B, skp - Sk, HK, D), np.float32)], 1)
    want = padded[:, key].transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(vt.astype(np.float32), want)


def test_fp8_prefill_emulated(monkeypatch, emulated):
    """The FP8 kernel whole (TMA of Q, K and V^T in 128-byte rows, k32 wgmma for S and for P V with P
    from registers, online softmax with descales folded in) on the emulation: odd lengths (two query
    blocks, two key tiles, the second partial), causal with Sq > Sk (rows that see no key: O 0, LSE
    -inf), GQA 2:1, per-(batch, KV head) descales; within the module docstring's bound."""
    B, Sq, Sk, H, HK = 2, 150, 131, 4, 2
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    dq, dk, dv = (RNG.uniform(0.25, 2.0, (B, HK)).astype(np.float32) for _ in range(3))
    out, lse = run_fp8(monkeypatch, emulated, q, k, v, True, descale_q=dq, descale_k=dk, descale_v=dv)
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == q.shape and lse.shape == (B, H, Sq)
    check_fp8(out, lse, reference_fp8(*(x.astype(np.float64) for x in (q, k, v)), True, 128 ** -0.5, dq, dk, dv))
    assert (np.asarray(out[:, :Sq - Sk], np.float64) == 0).all()


def test_fp8_plans_emulated(monkeypatch, emulated):
    """A repeated FP8 call with number descales takes the prepared launch (ops.attention's PLANS,
    attention_fp8.Fp8Plan: V^T and the prefill, no shape checks): the same result; other descales make
    another plan and their own result; descale arrays make none (their values live on the device)."""
    B, Sq, Sk, H, HK = 1, 70, 45, 2, 1
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    first, lse1 = run_fp8(monkeypatch, emulated, q, k, v, True, descale_q=0.5, descale_k=2.0, descale_v=0.75)
    assert len(ops_attention.PLANS) == 1
    checks = []
    real = ops_attention._prefill_shapes
    monkeypatch.setattr(ops_attention, "_prefill_shapes", lambda *a: checks.append(1) or real(*a))
    again, lse2 = run_fp8(monkeypatch, emulated, q, k, v, True, descale_q=0.5, descale_k=2.0, descale_v=0.75)
    assert not checks and again is not first
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(lse2, lse1)
    ones = np.ones((B, HK))
    f64 = [x.astype(np.float64) for x in (q, k, v)]
    check_fp8(first, lse1, reference_fp8(*f64, True, 128 ** -0.5, 0.5 * ones, 2.0 * ones, 0.75 * ones))
    other, lse3 = run_fp8(monkeypatch, emulated, q, k, v, True, descale_q=1.0, descale_k=1.0, descale_v=2.0)
    assert checks and len(ops_attention.PLANS) == 2
    check_fp8(other, lse3, reference_fp8(*f64, True, 128 ** -0.5, ones, ones, 2.0 * ones))
    run_fp8(monkeypatch, emulated, q, k, v, True, descale_v=np.full((B, HK), 0.5, np.float32))
    assert len(ops_attention.PLANS) == 2


#: std.math.fast_exp2_poly's relative error (tests/stdlib/test_exp2_poly.py)
POLY_REL = 1.02e-4


@pytest.mark.parametrize("poly", [24, pytest.param(64, marks=pytest.mark.slow(sample=0))])
def test_fp8_prefill_exp2_poly_emulated(monkeypatch, emulated, poly):
    """EXP2_POLY (FlashAttention-4's exponentials on the FMA pipe: 24 of a thread's 64 a tile, or all)
    on the emulation at a small shape: causal with Sq > Sk (rows that see no key: -inf scores through
    the polynomial give 0, O 0, LSE -inf), two query blocks, two key tiles; within the bound with the
    polynomial's error added."""
    B, Sq, Sk, H, HK = 1, 140, 131, 2, 1
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    out, lse = run_fp8(monkeypatch, emulated, q, k, v, True, tiles=dict(EXP2_POLY=poly), descale_q=0.5,
                       descale_k=1.25, descale_v=3.0)
    ones = np.ones((B, HK))
    check_fp8(out, lse, reference_fp8(*(x.astype(np.float64) for x in (q, k, v)), True, 128 ** -0.5, 0.5 * ones,
                                      1.25 * ones, 3.0 * ones, p_rel=POLY_REL))
    assert (np.asarray(out[:, :Sq - Sk], np.float64) == 0).all()


#: (B, Sq, Sk, H, HK, causal, layout, tiles, out_dtype): no mask with keys over three tiles; causal
#: with Sq < Sk in tiles of 256 keys; the overlapped, ping-pong schedule (its turns on mbarriers, and
#: the sequential one's on named barriers); f16 out
EMU_SWEEP = [(1, 37, 300, 2, 1, False, "bhsd", None, "bf16"),
             (1, 45, 290, 2, 2, True, "bshd", dict(BN=256), "f16"),
             (1, 140, 200, 2, 1, True, "bshd", dict(OVERLAP=True, PINGPONG=True), "bf16"),
             (1, 140, 300, 2, 1, True, "bshd", dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True), "bf16"),
             (1, 70, 300, 2, 1, False, "bhsd", dict(PACK_ABS=False, STAGES=3), "bf16"),
             # the sequential form's turns on named barriers (TURNS 1)
             (1, 140, 200, 2, 1, True, "bshd", dict(PINGPONG=True, TURNS=1), "bf16"),
             # key tiles of 192 (V^T's stages in two boxes of 128 keys), the sequential form
             (1, 70, 450, 2, 2, False, "bhsd", dict(BN=192), "bf16")]


@pytest.mark.slow(sample=0)  # 10-30 s each on the CPU target; -m slow runs them
@pytest.mark.parametrize("case", EMU_SWEEP, ids=lambda c: "x".join(map(str, c[:5])) + f"-{c[5]}-{c[6]}-{c[7]}")
def test_fp8_prefill_emulated_sweep(monkeypatch, emulated, case):
    """More FP8 forms on the emulation: float descales, both layouts, BN 256, OVERLAP + PINGPONG, f16."""
    B, Sq, Sk, H, HK, causal, layout, tiles, od = case
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    out, lse = run_fp8(monkeypatch, emulated, q, k, v, causal, layout, tiles=tiles, out_dtype=od,
                       descale_q=0.5, descale_k=1.25, descale_v=3.0)
    assert out.dtype == {"bf16": ml_dtypes.bfloat16, "f16": np.float16}[od]
    ones = np.ones((B, HK))
    check_fp8(out, lse, reference_fp8(*(x.astype(np.float64) for x in (q, k, v)), causal, 128 ** -0.5,
                                      0.5 * ones, 1.25 * ones, 3.0 * ones))


@pytest.mark.parametrize("bn", [192, 224])
def test_fp8_prefill_fa3order_emulated(monkeypatch, emulated, bn):
    """Key tiles of 192 and 224 (FlashAttention-3's FP8 D 128 tile) in FlashAttention-3's order with the
    turns on named barriers (FP8 forms whose softmax runs under P V without spills:
    test_fp8_fa3order_in_sass): V^T's stage in two boxes of 128 keys, the second's last 64 or 32 read by
    no wgmma; key tiles over three, the last partial, causal with Sq < Sk, GQA 2:1, per-(batch, KV
    head) descales."""
    B, Sq, Sk, H, HK = 1, 140, 2 * bn + 66, 4, 2
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    dq, dk, dv = (RNG.uniform(0.25, 2.0, (B, HK)).astype(np.float32) for _ in range(3))
    out, lse = run_fp8(monkeypatch, emulated, q, k, v, True, descale_q=dq, descale_k=dk, descale_v=dv,
                       tiles=dict(BN=bn, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1))
    check_fp8(out, lse, reference_fp8(*(x.astype(np.float64) for x in (q, k, v)), True, 128 ** -0.5, dq, dk, dv))


#: (B, Sq, Sk, H, HK, causal, tiles): V^T made in the kernel (VT_SMEM, std.attention_sm90_vt) with one and two
#: raw stages over ring laps, key tiles in whole boxes and partial ones (224: 96 of the second box's 128
#: keys unwritten; 96: part of one), FlashAttention-3's order, the persistent form, Sk past the last tile
VT_CASES = [(1, 140, 700, 4, 2, True, dict(VT_SMEM=2, STAGES=2)),
            (2, 77, 500, 2, 1, False, dict(VT_SMEM=1, STAGES=2, BN=224)),
            (1, 45, 333, 2, 2, True, dict(VT_SMEM=2, STAGES=2, BN=96, OVERLAP=True, PINGPONG=True, FA3_ORDER=True,
                                          TURNS=1)),
            (1, 300, 290, 4, 2, True, dict(VT_SMEM=2, STAGES=2, BN=128, PERSIST=True))]


@pytest.mark.parametrize("case", VT_CASES, ids=lambda c: "x".join(map(str, c[:5])) + f"-{c[5]}-" + "-".join(
    f"{k}{int(v)}" for k, v in c[6].items()))
def test_fp8_prefill_vt_smem_emulated(monkeypatch, emulated, case):
    """FP8 with V^T made in the kernel's shared memory by the producer's warps 1 .. 3 (VT_SMEM) on the
    emulation, against float64: the transposed, key-permuted, swizzled stages must be exactly what
    std.attention_vt_fp8's TMA boxes leave there (a wrong byte order or row fails the bound), with
    per-(batch, KV head) descales and GQA."""
    B, Sq, Sk, H, HK, causal, tiles = case
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    dq, dk, dv = (RNG.uniform(0.25, 2.0, (B, HK)).astype(np.float32) for _ in range(3))
    out, lse = run_fp8(monkeypatch, emulated, q, k, v, causal, descale_q=dq, descale_k=dk, descale_v=dv, tiles=tiles)
    check_fp8(out, lse, reference_fp8(*(x.astype(np.float64) for x in (q, k, v)), causal, 128 ** -0.5, dq, dk, dv))


def test_vt_smem_banks():
    """The transposers' lane order (stdlib/attention_sm90_vt.kc's header): for every key group, step w and
    i, the 32 lanes' LDS (word lane % 4 of chunk lane / 4 ^ key % 8 of a 128-byte key row) and STS (word
    w' of chunk q ^ d % 8 of row d) hit 32 distinct banks, and each lane's 16 stores cover its 4 rows x
    4 words once: the arithmetic the kernel's addresses follow, checked for all q."""
    for q in range(8):
        for w in range(4):
            loads = {e: set() for e in range(4)}
            stores = {i: set() for i in range(4)}
            for lane in range(32):
                pa = (0x1320 >> (4 * (lane // 8))) & 3
                rot = 2 * (lane // 4 % 2) + lane % 4 // 2
                wp = w ^ pa
                for e in range(4):
                    key = 16 * q + 2 * wp + e % 2 + 8 * (e // 2)
                    loads[e].add((((lane // 4) ^ (key % 8)) * 4 + lane % 4) % 32)
                for i in range(4):
                    d = 4 * lane + (i + rot) % 4
                    stores[i].add(((q ^ (d % 8)) * 4 + wp) % 32)
            assert all(len(b) == 32 for b in loads.values()) and all(len(b) == 32 for b in stores.values())
    for lane in range(32):  # each lane: all 4 key pairs and all 4 rows
        pa, rot = (0x1320 >> (4 * (lane // 8))) & 3, 2 * (lane // 4 % 2) + lane % 4 // 2
        assert {w ^ pa for w in range(4)} == set(range(4)) == {(i + rot) % 4 for i in range(4)}


def test_fp8_short_defaults():
    """ATTENTION_FP8_SHORT: a call with no tiles of its own takes V^T in the kernel up to 1,024 keys (2,048
    causal; key tiles of 128 up to 512 causal keys), half as many with grouped-query attention, the pass
    before it past them; a caller's tiles are taken over ATTENTION_FP8_TILES alone; explain says which."""
    from kcompiler.ops.attention_fp8 import ATTENTION_FP8_TILES, fp8_tiles
    from kcompiler.ops.attention_order import explain
    assert fp8_tiles(False, 1024)["VT_SMEM"] == 2 and "VT_SMEM" not in fp8_tiles(False, 1025)
    assert fp8_tiles(True, 2048)["VT_SMEM"] == 2 and fp8_tiles(True, 2048)["BN"] == 256
    assert fp8_tiles(True, 512) == {**ATTENTION_FP8_TILES[True], "VT_SMEM": 2, "STAGES": 2, "BN": 128}
    assert fp8_tiles(True, 4096) == ATTENTION_FP8_TILES[True] == fp8_tiles(True, 512, dict(BN=64))
    assert "VT_SMEM" not in fp8_tiles(False, 1024, grouped=True) and fp8_tiles(False, 512, grouped=True)["VT_SMEM"]
    assert "VT_SMEM" not in fp8_tiles(True, 2048, grouped=True) and fp8_tiles(True, 1024, grouped=True)["VT_SMEM"]
    assert fp8_tiles(True, 512, grouped=True)["BN"] == 128
    assert "VT_SMEM 2" in explain(16, 16, 1024, 128, causal=True, fp8=True)
    assert "VT_SMEM" not in explain(4, 32, 4096, 128, fp8=True)
    assert "VT_SMEM" not in explain(8, 32, 1024, 128, fp8=True, kv_heads=8)
    assert "1024 keys (grouped)" in explain(8, 32, 1024, 128, causal=True, fp8=True, kv_heads=8)


def test_fp8_shared_memory_error(monkeypatch, emulated):
    """Tiles whose stages need more shared memory than an sm_90 block has (3 stages of BN 256 and two raw
    V stages: 273 KiB) are a ValueError naming the bytes, before anything is compiled or launched."""
    q, k, v = fp8_inputs(1, 64, 300, 2, 1)
    with pytest.raises(ValueError, match="bytes of shared memory"):
        run_fp8(monkeypatch, emulated, q, k, v, True, tiles=dict(VT_SMEM=2, STAGES=3))


@needs_ptxas
@pytest.mark.parametrize("causal,bn", [(False, 256), (True, 256), (True, 128)])
def test_fp8_vt_smem_ptx(causal, bn):
    """The short-sequence defaults' kernels (VT_SMEM 2, PERSIST) assemble for sm_90a without spills: the
    producer warpgroup at 48 registers a thread (the transposers spill at 40), the consumers at 224."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90",
                    comptime=dict(T="f8e4m3", OUT="bf16", D=128, CAUSAL=causal, BN=bn, STAGES=2, PINGPONG=True, TURNS=1,
                                  PERSIST=True, VT_SMEM=2))
    assert "setmaxnreg.dec.sync.aligned.u32 48;" in ptx and "setmaxnreg.inc.sync.aligned.u32 224;" in ptx
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert " 0 bytes spill stores" in log, log


@needs_nvdisasm
@pytest.mark.parametrize("bn", [192, 224])
def test_fp8_fa3order_in_sass(bn):
    """FP8 in key tiles of 192 and 224, FA3_ORDER: all of the tile's BN / 2 exp2 a thread (and a
    factor) between the wait for S and the wait for P V (sched_barrier: stdlib/attention_sm90.kc's
    header), no spills; at BN 256 the same form spills (what these tiles are for)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90", comptime=dict(T="f8e4m3", OUT="bf16", D=128, CAUSAL=False, BN=bn,
                                                                   OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1))
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert " 0 bytes spill stores" in log and "C7512" not in log, log
    assert exp2_under_pv(sass(ptx)) >= bn // 2


@pytest.mark.parametrize("bn", [80, 288])
def test_fp8_bn_error(bn):
    """FP8's key tiles are a multiple of 32 (wgmma's k for e4m3) up to 256: another is a located
    compile error."""
    import kcompiler as kc
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    with pytest.raises(kc.CompileError, match="BN a multiple of 32 up to 256") as e:
        emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"), kernel="attention_prefill_sm90",
                  comptime=dict(T="f8e4m3", OUT="bf16", D=128, CAUSAL=False, BN=bn))
    assert "attention_sm90.kc:" in str(e.value)


def test_fp8_errors(monkeypatch, emulated):
    """Clear errors: no wgmma on the target, D other than 128, variable lengths, mixed dtypes, a bad
    descale shape, an output type other than bf16 / f16."""
    from kcompiler import ops
    q, k, v = fp8_inputs(1, 8, 8, 2, 1)
    with pytest.raises(ValueError, match="FP8 attention needs wgmma"):
        ops.attention(q, k, v, target="cpu")  # the plain CPU target: no wgmma
    with pytest.raises(ValueError, match="head dimension of 128"):
        ops.attention(*fp8_inputs(1, 8, 8, 2, 1, D=64), target="cpu")
    with pytest.raises(ValueError, match="variable lengths"):
        ops.attention(q[0], k[0], v[0], cu_seqlens_q=np.array([0, 8], np.int32),
                      cu_seqlens_k=np.array([0, 8], np.int32), target="cpu")
    with pytest.raises(ValueError, match="Hopper path only"):
        ops.attention(q, k, v, path="fa2", target="cpu")
    with pytest.raises(TypeError, match="k must be an array of f8e4m3"):
        ops.attention(q, k.astype(ml_dtypes.bfloat16), v, target="cpu")
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    with pytest.raises(ValueError, match=r"descale_k must be .* \(B, Hkv\) = \(1, 1\)"):
        ops.attention(q, k, v, target="cpu", descale_k=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="bf16 or f16"):
        ops.attention(q, k, v, target="cpu", out_dtype="f32")


@needs_ptxas
@pytest.mark.parametrize("causal", [True, pytest.param(False, marks=pytest.mark.slow(sample=0))])
def test_fp8_prefill_ptx(causal):
    """sm_90a PTX of the FP8 kernel (as ops builds it: approx_ftz) assembles without spills or
    serialised wgmma: S and P V as m64n128k32 e4m3 wgmma, P V's A from registers, P packed by
    cvt.rn.satfinite.e4m3x2; V^T's transpose kernel assembles too."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90", comptime=dict(T="f8e4m3", OUT="bf16", D=128, CAUSAL=causal))
    lines = [x for x in ptx.splitlines() if "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in x]
    assert len(lines) == 8 and sum("}, {" in x for x in lines) == 4, lines  # 4 of S, 4 of P V (A in registers)
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    # P's fragments: a cvt a pair, two joined to a word; with PACK_ABS (default) no NaN-sign fix-up, no
    # byte split and re-join (313 SASS instructions a tile before: prmt, bfi, shifts, logical ops)
    assert not re.search(r"\b(prmt|bfi|shr\.u16|and\.b16|or\.b16)\b", ptx)
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert "C7514" not in log and "serialized" not in log, log
    assert " 0 bytes spill stores" in log, log
    vt = emit_file(stdlib_dir() / "attention_vt_fp8.kc", "asm", NvptxTarget("sm_90a"), kernel="attention_vt_fp8",
                   comptime=dict(D=128))
    assert " 0 bytes spill stores" in ptxas(vt, "sm_90a", verbose=True)


@needs_ptxas
def test_fp8_exp2_poly_ptx():
    """EXP2_POLY 16 takes 16 of the softmax's 66 ex2.approx (64 a thread a tile, and the 2 factors; the
    sequential form has one softmax) off the MUFU: 50 remain, and 16 polynomials (their 1.5 2^23
    rounding constant) take their place; the kernel still assembles without spills or serialised
    wgmma (ptxas 13.0: 168 registers before setmaxnreg, as without); 65 (more than a thread's 64) is
    a located compile error."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                    kernel="attention_prefill_sm90", comptime=dict(T="f8e4m3", OUT="bf16", D=128, EXP2_POLY=16))
    assert ptx.count("ex2.approx") == 50 and ptx.count(", 0f4B400000;") == 16, ptx.count("ex2.approx")
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert "C7514" not in log and "serialized" not in log and " 0 bytes spill stores" in log, log
    with pytest.raises(kc.CompileError, match="EXP2_POLY") as e:
        emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"), kernel="attention_prefill_sm90",
                  comptime=dict(T="f8e4m3", OUT="bf16", D=128, EXP2_POLY=65))
    assert "attention_sm90.kc:" in str(e.value)


def test_fp8_compile_errors():
    """The kernel refuses FP8 forms it does not have, at a located compile_error."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    for bad in (dict(D=64),):
        with pytest.raises(kc.CompileError) as e:
            emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"),
                      kernel="attention_prefill_sm90", comptime=dict(T="f8e4m3", **{"OUT": "bf16", **bad}))
        assert "attention_sm90.kc:" in str(e.value) and "FP8" in str(e.value)


# --- the H100 -------------------------------------------------------------------------------------------

#: (B, Sq, Sk, H, HK, layout, per-head descales)
GPU_SHAPES = [(2, 1000, 1000, 4, 4, "bshd", False), (2, 1000, 1000, 4, 4, "bhsd", True),
              (1, 777, 1500, 8, 2, "bshd", True), (3, 1500, 613, 4, 1, "bhsd", False), (1, 1, 300, 4, 2, "bshd", False)]


def _gpu_case(shape, tiles, causal, p_rel=0.0):
    """One FP8 call on the GPU against float64 of the dequantised inputs, outputs poisoned first."""
    import torch

    from kcompiler import ops
    B, Sq, Sk, H, HK, layout, per_head = shape
    q, k, v = fp8_inputs(B, Sq, Sk, H, HK)
    if per_head:
        dq, dk, dv = (RNG.uniform(0.25, 2.0, (B, HK)).astype(np.float32) for _ in range(3))
        desc = [torch.from_numpy(x).cuda() for x in (dq, dk, dv)]
    else:
        dq, dk, dv = (np.full((B, HK), x, np.float32) for x in (0.5, 1.5, 2.0))
        desc = [0.5, 1.5, 2.0]
    tq, tk, tv = (torch.from_numpy(x.view(np.uint8)).cuda().view(torch.float8_e4m3fn) for x in (q, k, v))
    if layout == "bhsd":
        tq, tk, tv = (x.transpose(1, 2).contiguous() for x in (tq, tk, tv))
    torch.empty(64 << 20, device="cuda", dtype=torch.uint8).fill_(0xFF)  # NaN where ops allocates next
    out, lse = ops.attention(tq, tk, tv, causal=causal, layout=layout, return_lse=True, tiles=tiles,
                             descale_q=desc[0], descale_k=desc[1], descale_v=desc[2])
    if layout == "bhsd":
        out = out.transpose(1, 2)
    q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
    seff = 128 ** -0.5 * float((dq * dk).max())
    # max_ij sum_d |Q_id K_jd| <= sum_d max_i |Q_id| max_j |K_jd|
    eps = 2.0 ** -12 * seff * float((np.abs(q64).max(axis=(0, 1, 2)) * np.abs(k64).max(axis=(0, 1, 2))).sum())
    check_fp8(out.float().cpu().numpy(), lse.cpu().numpy(),
              reference_fp8(q64, k64, v64, causal, 128 ** -0.5, dq, dk, dv, score_eps=eps, p_rel=p_rel))


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_prefill_gpu(causal):
    """FP8 attention on the H100 against float64 of the dequantised inputs (module docstring's bound
    with the GPU's score error): odd lengths, Sq != Sk both ways, GQA 2:1 and 4:1, both layouts, float
    and per-head descales, BN 128 and 256, the overlapped schedule; outputs poisoned first."""
    for shape, tiles in zip(GPU_SHAPES, (None, dict(BN=128), dict(PACK_ABS=False), dict(OVERLAP=True, PINGPONG=True),
                                         dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True))):
        _gpu_case(shape, tiles, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_prefill_named_turns_gpu(causal):
    """PINGPONG's turns on named barriers (TURNS 1) on the H100: the sequential form (with and without
    RESCALE_SKIP) and FlashAttention-3's order, as bench_attention_fp8.py's -pp-named / -fa3-named."""
    for shape, tiles in zip(GPU_SHAPES, (dict(PINGPONG=True, TURNS=1), dict(PINGPONG=True, TURNS=1, RESCALE_SKIP=True),
                                         dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1))):
        _gpu_case(shape, tiles, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_prefill_exp2_poly_gpu(causal):
    """EXP2_POLY on the H100 (8, 16 and 24 of a thread's 64 exponentials a tile by std.math's polynomial,
    sequential, 3 stages, FA3_ORDER): the bound with the polynomial's error (POLY_REL) added."""
    for shape, tiles in zip(GPU_SHAPES, (dict(EXP2_POLY=16), dict(EXP2_POLY=24, STAGES=3), dict(EXP2_POLY=8),
                                         dict(EXP2_POLY=16, OVERLAP=True, PINGPONG=True, FA3_ORDER=True),
                                         dict(EXP2_POLY=64))):
        _gpu_case(shape, tiles, causal, POLY_REL)


@pytest.mark.gpu
@pytest.mark.parametrize("bn", [192, 224])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_prefill_bn_gpu(causal, bn):
    """Key tiles of 192 and 224 (V^T's stage in two boxes of 128 keys, the second's last 64 or 32
    unread) on the H100: the sequential form, FlashAttention-3's order with its turns on named barriers
    (2 and 3 stages)."""
    fa3 = dict(BN=bn, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1)
    for shape, tiles in zip(GPU_SHAPES, (dict(BN=bn), fa3, dict(fa3, STAGES=3), dict(BN=bn, STAGES=3), fa3)):
        _gpu_case(shape, tiles, causal)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_prefill_vt_smem_gpu(causal):
    """V^T made in the kernel (VT_SMEM) on the GPU: one and two raw stages, key tiles of 256, 128, 224
    and 96, FlashAttention-3's order, the persistent form; the defaults themselves at the first shape
    (1,000 keys: ATTENTION_FP8_SHORT) and at 700 keys with 4 query heads a KV head (causal: in the kernel;
    full: the pass)."""
    for shape, tiles in zip(GPU_SHAPES, (None, dict(VT_SMEM=1, STAGES=2, BN=224), dict(VT_SMEM=2, STAGES=2, BN=128),
                                         dict(VT_SMEM=2, STAGES=2, BN=96, OVERLAP=True, PINGPONG=True,
                                              FA3_ORDER=True, TURNS=1),
                                         dict(VT_SMEM=2, STAGES=2, PERSIST=True))):
        _gpu_case(shape, tiles, causal)
    _gpu_case((2, 300, 700, 8, 2, "bshd", True), None, causal)


def test_fp8_torch_op_refused():
    """torch_ops.attention (torch.ops.kcompiler.attention's Python entry) refuses e4m3 tensors with a
    TypeError naming ops.attention, which takes them with their descales."""
    torch = pytest.importorskip("torch")
    from kcompiler.ops import torch_ops
    q = torch.zeros(1, 8, 2, 128, dtype=torch.float8_e4m3fn)
    with pytest.raises(TypeError, match="kcompiler.ops.attention for FP8"):
        torch_ops.attention(q, q, q)
