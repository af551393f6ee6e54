"""The Hopper prefill of std.attention (stdlib/attention_sm90.kc) and the builtins it added: wgmma with
A from registers, TMA copies of more than two dimensions.

On every machine (CI): wgmma with a register A fragment against numpy in float64 on the CPU target's
emulation (``emulate_wgmma``), its PTX (``{a0, a1, a2, a3}`` operands, no imm-trans-a) assembled by
ptxas for sm_90a; the whole kernel (producer warpgroup, TMA into an mbarrier ring, two consumer
warpgroups, online softmax, P from registers) through ops.attention on the emulation, against
test_attention.py's float64 reference and bounds on fresh random inputs of odd shapes (causal, GQA,
Sq != Sk, both layouts); the kernel's PTX assembling for sm_90a without spills or serialised wgmma.

On an H100 or H200: test_attention_sm90_gpu.py (and std.attention_sm90_chain's forms below).
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler.pipeline import compile_source_to
from kcompiler.runtime.tensormap import tensor_map

from ..ptxas_util import needs_nvdisasm, needs_ptxas, ptxas, sass
from .attention_sm90_util import (emulated, exp2_under_pv, fresh_plans, ops_attention,  # noqa: F401
                                  packed_with_nan_tails, sm90_ptx)  # emulated: a fixture; fresh_plans: an autouse fixture

from ..draws import fresh_rng

RNG = fresh_rng()

# D (64 x 128) = A (64 x 64, in registers) B (64 x 128, N-major by two 4-D TMA boxes of 64 columns)
REG_A = """
kernel k(ta: ptr<bf16>, tb: tensor_map, out: ptr<f32>) {
    launch_bounds(128, 1);
    let smem = dynamic_shared[bf16]();
    let bar = bitcast[ptr<u64, shared>](smem + 64 * 128);
    if thread_id.x == 0 { mbarrier_init(bar, 1); fence_proxy_async(); }
    barrier();
    if thread_id.x == 0 {
        mbarrier_arrive_expect_tx(bar, 64 * 128 * 2);
        tma_load(smem, tb, bar, 0, 0, 0, 0);
        tma_load(smem + 64 * 64, tb, bar, 64, 0, 0, 0);
    }
    mbarrier_wait(bar, 0);
    let t = thread_id.x;
    let w = t / 32;
    let g = t % 32 / 4;
    let q = t % 4;
    var acc = vec<f32, 64>(0.0);
    wgmma_fence();
    for kk in comptime range(0, 4) {
        var a = vec<bf16, 8>(bf16(0.0));
        let r = 16 * w + g;
        let c = 16 * kk + 2 * q;
        a[0] = ta[r * 64 + c];
        a[1] = ta[r * 64 + c + 1];
        a[2] = ta[(r + 8) * 64 + c];
        a[3] = ta[(r + 8) * 64 + c + 1];
        a[4] = ta[r * 64 + c + 8];
        a[5] = ta[r * 64 + c + 9];
        a[6] = ta[(r + 8) * 64 + c + 8];
        a[7] = ta[(r + 8) * 64 + c + 9];
        let db = wgmma_desc(smem, swizzle = 128, lbo = 64 * 128, sbo = 1024);
        acc = wgmma[bf16](a, db + u64(128 * kk), acc, trans_b = true);
    }
    wgmma_commit();
    wgmma_wait[0]();
    for j in comptime range(0, 16) {
        for r in comptime range(0, 4) {
            out[(16 * w + g + 8 * (r / 2)) * 128 + 8 * j + 2 * q + r % 2] = acc[4 * j + r];
        }
    }
}
"""


def test_wgmma_register_a_emulated():
    """wgmma with A from registers (the fragments gathered over each quad) and an N-major B that 4-D
    TMA boxes wrote, against numpy in float64 (f32 accumulation of exact products)."""
    a = RNG.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    b = RNG.standard_normal((64, 128)).astype(ml_dtypes.bfloat16)
    mod = kc.compile(REG_A, target="cpu", target_options={"emulate_wgmma": True})
    out = np.full((64, 128), np.nan, np.float32)
    mod.k[1, 128](a, tensor_map(b.reshape(1, 1, 64, 128), (1, 1, 64, 64)), out, shared=64 * 128 * 2 + 16)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    assert np.abs(out - a64 @ b64).max() <= 4 * 64 * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)).max()


@needs_ptxas
def test_wgmma_register_a_ptx(tmp_path):
    """The register form's PTX: four .b32 A operands, then the B descriptor, scale-d and three
    immediates (no imm-trans-a); ptxas assembles it for sm_90a."""
    ptx = compile_source_to(REG_A, "k.kc", "asm", "nvptx", "sm_90a")
    line = next(x for x in ptx.splitlines() if "wgmma.mma_async" in x)
    assert "m64n128k16.f32.bf16.bf16" in line
    assert line.rstrip().endswith("p, 1, 1, 1;") and line.count("{") == 2, line
    ptxas(ptx, "sm_90a")


# --- the Hopper prefill through ops.attention ------------------------------------------------------------

def _emulated_case(monkeypatch, emulated, tiles, shape):
    """One bf16 call of the Hopper prefill with ``tiles`` on the emulation against the float64 reference:
    ``shape`` (B, Sq, Sk, H, HK, D, causal)."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    B, Sq, Sk, H, HK, D, causal = shape
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(B, Sq, Sk, H, HK, D, "bf16")
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    ref, ref_lse = reference(q, k, v, causal, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


# (B, Sq, Sk, H, HK, D, causal, layout): odd lengths, Sq != Sk both ways (the causal diagonal off the
# corner, rows that see no key), more than one tile of keys and of queries, GQA 2:1, both layouts
EMU_SHAPES = [(2, 37, 53, 2, 1, 64, False, "bshd"), (1, 150, 131, 2, 2, 64, True, "bhsd"),
              (1, 45, 70, 2, 1, 128, True, "bshd"), (1, 19, 300, 1, 1, 128, False, "bhsd")]


@pytest.mark.parametrize("shape", EMU_SHAPES,
                         ids=lambda s: "x".join(map(str, s[:6])) + f"-{'causal' if s[6] else 'full'}-{s[7]}")
def test_prefill_sm90_emulated(monkeypatch, emulated, shape):
    """The whole Hopper kernel (producer warpgroup, 4-D TMA into the K and V rings with zero fill past
    the sequence, both consumers, masking, online softmax, P from registers, O and LSE stores) on the
    CPU target's emulation, against test_attention.py's float64 reference and bounds."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    B, Sq, Sk, H, HK, D, causal, layout = shape
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(B, Sq, Sk, H, HK, D, "bf16")
    args = [x.transpose(0, 2, 1, 3).copy() for x in (q, k, v)] if layout == "bhsd" else [q, k, v]
    out, lse = ops.attention(*args, causal=causal, layout=layout, return_lse=True, path="sm90", target="cpu")
    if layout == "bhsd":
        out = out.transpose(0, 2, 1, 3)
    ref, ref_lse = reference(q, k, v, causal, D ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


@pytest.mark.slow(sample=2)  # opt-in forms: two by default (3-8 s each on CI's 2 cores); -m slow: all
@pytest.mark.parametrize("tiles", [dict(OVERLAP=True), dict(OVERLAP=True, PINGPONG=True),
                                   dict(BN=64, STAGES=3, OVERLAP=True, PINGPONG=True), dict(BN=64, STAGES=1),
                                   dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True),
                                   dict(BN=64, STAGES=3, OVERLAP=True, FA3_ORDER=True),
                                   dict(BN=64, PINGPONG=True, RESCALE_SKIP=True),
                                   dict(BN=64, PINGPONG=True, TURNS=1),
                                   dict(OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1),
                                   dict(BN=64, STAGES=3, PINGPONG=True),
                                   dict(BN=64, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, RESCALE_SKIP=True)],
                         ids=["overlap", "pingpong", "bn64-3stages-pingpong", "bn64-1stage", "fa3order-pingpong",
                              "bn64-3stages-fa3order", "bn64-seq-pingpong-rescale-skip", "bn64-seq-pingpong-named",
                              "fa3order-pingpong-named", "bn64-3stages-seq-pingpong",
                              "bn64-fa3order-pingpong-rescale-skip"])
def test_prefill_sm90_tiles_emulated(monkeypatch, emulated, tiles):
    """Other tiles, the intra-warpgroup overlap and the ping-pong of the consumers: the stage ring's
    parities over several laps (more tiles than stages), the turns' parities (TURNS 1: the turns as
    named barriers), causal with Sq != Sk."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(1, 77, 290, 2, 1, 64, "bf16")
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    ref, ref_lse = reference(q, k, v, True, 64 ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


def test_prefill_sm90_rescale_skip_emulated(monkeypatch, emulated):
    """RESCALE_SKIP where it skips: every row's maximum is in the first tile of keys (q >= 0, the first
    64 keys large and positive), so every later tile's factors are exactly 1 and each warp leaves O as
    it is; with ping-pong turns in the sequential form (the specialisation of the tiles test above)."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(1, 77, 290, 2, 1, 64, "bf16")
    q = np.abs(q.astype(np.float32)).astype(ml_dtypes.bfloat16)
    k[:, :64] = (np.abs(k[:, :64].astype(np.float32)) + 2).astype(ml_dtypes.bfloat16)
    tiles = dict(BN=64, PINGPONG=True, RESCALE_SKIP=True)
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", tiles=tiles, target="cpu")
    ref, ref_lse = reference(q, k, v, True, 64 ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")


def test_prefill_sm90_exp2_poly_emulated(monkeypatch, emulated):
    """bf16 with EXP2_POLY (16 of a thread's 64 exponentials a tile by std.math's polynomial, relative
    error 1.02e-4: far below P's rounding to bf16; the LSE's bound takes 2 of it more): causal with Sq >
    Sk (rows that see no key: the -inf scores through the polynomial give 0), two query blocks."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(1, 150, 131, 2, 1, 64, "bf16")
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", tiles=dict(EXP2_POLY=16),
                             target="cpu")
    ref, ref_lse = reference(q, k, v, True, 64 ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16", lse_tol=2 * 1.02e-4)


# (tiles, (B, Sq, Sk, H, HK, D, causal)): the block shapes of benchmarks/bench_attention_variants.py
# (CONSUMERS 1 to 3: 64 to 192 query rows a block; BLOCKS_PER_SM 2: the registers shared out for two
# resident blocks), each with more than one block of queries and more than STAGES tiles of keys
VARIANTS = [(dict(CONSUMERS=3), (1, 211, 150, 2, 1, 64, False)),
            (dict(CONSUMERS=3, BN=64, OVERLAP=True), (1, 200, 133, 2, 2, 64, True)),
            (dict(BN=64, BLOCKS_PER_SM=2), (1, 150, 290, 2, 1, 64, True)),
            (dict(CONSUMERS=1, BLOCKS_PER_SM=2, OVERLAP=True), (1, 77, 290, 2, 1, 64, True)),
            (dict(CONSUMERS=3, BN=64), (1, 200, 100, 1, 1, 128, True)),
            # D 256: four slabs a row; its default tiles (FlashAttention-3's block: two consumers, BN 80,
            # ping-pong on named barriers, the softmax under P V; full in ORDER 0) and BN 64
            (dict(STAGES=2), (1, 150, 133, 1, 1, 256, True)), (dict(STAGES=2), (1, 140, 201, 2, 1, 256, False)),
            (dict(BN=64, CONSUMERS=2), (1, 150, 133, 1, 1, 256, True)),
            # D 256's one consumer in the same order (where SMALL_GRID lowers the block; its softmax under
            # P V: test_prefill_sm90_d256_overlap_in_sass), more key tiles than stages
            (dict(CONSUMERS=1), (1, 130, 333, 2, 1, 256, True)),
            # the one-consumer BN 96 sequential block with LAZY_MAX (D 256's default before FA3_ORDER)
            (dict(CONSUMERS=1, BN=96, OVERLAP=False, FA3_ORDER=False, PINGPONG=False, LAZY_MAX=True),
             (1, 190, 250, 1, 1, 256, True))]


# D 256's are its default tiles and always run; of the opt-in block shapes three by default (CI time),
# all with -m slow
@pytest.mark.parametrize("tiles,shape", [v if v[1][5] == 256 else pytest.param(*v, marks=pytest.mark.slow(sample=3))
                                         for v in VARIANTS], ids=lambda x: "-".join(f"{k}{int(v)}" for k, v in x.items())
                         if isinstance(x, dict) else "x".join(map(str, x[:6])) + ("-causal" if x[6] else "-full"))
def test_prefill_sm90_variants_emulated(monkeypatch, emulated, tiles, shape):
    """The block shapes other than the default's two consumer warpgroups (one to three consumers, two
    blocks a multiprocessor) on the emulation: BM = 64 * CONSUMERS rows a block, the consumers' count
    on the empty barriers, causal with Sq != Sk, GQA."""
    _emulated_case(monkeypatch, emulated, tiles, shape)


def test_prefill_sm90_plans_emulated(monkeypatch, emulated):
    """A repeated call takes the prepared launch (ops.attention's PLANS): no shape checks the second
    time, the same result; a non-contiguous q, a new default in ATTENTION_SM90_TILES and other
    tiles are not served by it."""
    from kcompiler import ops

    from .attention_util import check, qkv, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    q, k, v = qkv(1, 20, 33, 2, 1, 64, "bf16")
    first, lse1 = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", target="cpu")
    assert len(ops_attention.PLANS) == 1
    checks = []
    real = ops_attention._prefill_shapes
    monkeypatch.setattr(ops_attention, "_prefill_shapes", lambda *a: checks.append(1) or real(*a))
    again, lse2 = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", target="cpu")
    assert not checks and again is not first
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(lse2, lse1)
    # a non-contiguous q (same shape): the plan declines, the checks run, the result is right
    qs = np.asfortranarray(q)
    out = ops.attention(qs, k, v, causal=True, path="sm90", target="cpu")
    assert checks
    np.testing.assert_array_equal(out, first)
    # new defaults and explicit tiles: new plans
    monkeypatch.setitem(ops_attention.ATTENTION_SM90_TILES, (64, True), dict(BN=64, STAGES=3, OVERLAP=False,
                                                                              PINGPONG=False))
    checks.clear()
    out, lse = ops.attention(q, k, v, causal=True, return_lse=True, path="sm90", target="cpu")
    assert checks and len(ops_attention.PLANS) == 2
    ref, ref_lse = reference(q, k, v, True, 64 ** -0.5)
    check(out, lse, ref, ref_lse, v, "bf16")
    ops.attention(q, k, v, causal=True, path="sm90", tiles=dict(CONSUMERS=1), target="cpu")
    assert len(ops_attention.PLANS) == 3


def test_prefill_sm90_varlen_emulated(monkeypatch, emulated):
    """Variable lengths: packed sequences (one empty, one longer than a tile), causal, GQA; the rows a
    box reads past a sequence belong to the next one, or past the last one are NaN, and must be masked,
    zeroed (V) or left unstored."""
    from kcompiler import ops

    from .attention_util import check, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    lq, lk = [5, 0, 140, 33], [9, 3, 131, 60]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    q = RNG.standard_normal((cu_q[-1] + 3, 4, 64)).astype(ml_dtypes.bfloat16)  # 3 rows past the last sequence
    k = RNG.standard_normal((cu_k[-1] + 5, 2, 64)).astype(ml_dtypes.bfloat16)
    v = RNG.standard_normal((cu_k[-1] + 5, 2, 64)).astype(ml_dtypes.bfloat16)
    k[cu_k[-1]:] = np.nan  # read by the last sequence's tiles (the maps cover all rows): must not leak
    v[cu_k[-1]:] = np.nan
    out, lse = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             path="sm90", target="cpu")
    n = cu_q[-1]
    ref, ref_lse = reference(q[:n], k, v, True, 64 ** -0.5, cu_q, cu_k)
    check(out[:n], lse[:, :n], ref, ref_lse, v[:cu_k[-1]], "bf16")


@pytest.mark.parametrize("causal,max_given,tiles", [
    (True, True, None), (False, False, None),
    pytest.param(False, True, dict(OVERLAP=True, PINGPONG=True), marks=pytest.mark.slow(sample=0)),
    pytest.param(True, False, dict(BN=64, STAGES=3, MASK_SELECT=False), marks=pytest.mark.slow(sample=0))],
    ids=["causal-max_seqlen_q", "full-read", "full-max_seqlen_q-overlap-pingpong", "causal-read-bn64-3stages-if-mask"])
def test_prefill_sm90_varlen_nan_tail_emulated(monkeypatch, emulated, causal, max_given, tiles):
    """The tensor maps cover all rows of the packed q, k and v, so the last sequence's last tile of keys
    (60 keys: BN 128) reads 68 rows of NaN past it, and its query tile NaN rows of q: P is 0 for those
    keys but 0 * NaN is NaN, so the kernel zeroes V's rows past the sequence in shared memory (and
    masks K's scores by a select). Odd lengths (an empty sequence, one of 131 keys: two tiles, the
    second reading the next sequence's rows); with max_seqlen_q (nothing read on the host) and without
    (read and checked); other tiles (the consumers' other forms, 3 stages of BN 64, the mask by ifs);
    against a float64 reference per sequence."""
    from kcompiler import ops

    from .attention_util import check, reference
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: emulated)
    lq, lk = [7, 0, 37], [131, 3, 60]
    cu_q, cu_k, q, k, v = packed_with_nan_tails(lq, lk, 2, 1, 64, 100, 70)
    out, lse = ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             max_seqlen_q=max(lq) if max_given else None, tiles=tiles, path="sm90", target="cpu")
    n, nk = cu_q[-1], cu_k[-1]
    ref, ref_lse = reference(q[:n], k[:nk], v[:nk], causal, 64 ** -0.5, cu_q, cu_k)
    check(out[:n], lse[:, :n], ref, ref_lse, v[:nk], "bf16")


def test_prefill_sm90_varlen_plan_emulated(monkeypatch, emulated):
    """With max_seqlen_q the Hopper path reads nothing on the host (host_ints would fail here) and
    keeps its launch (PLANS, keyed by B and max_seqlen_q): a second call with other offsets of as many
    sequences makes no new plan and is right for its offsets; offsets that break the caller's promise
    (decreasing, past the rows) raise nothing and write only within O and the LSE (the module is
    bounds-checked); without max_seqlen_q they are read and a located ValueError."""
    from kcompiler import ops
    from kcompiler.frontend.program import stdlib_dir

    from .attention_util import check, reference
    checked = kc.compile_file(stdlib_dir() / "attention_sm90.kc", target="cpu",
                              target_options={"emulate_wgmma": True}, check_bounds=True)
    monkeypatch.setattr(ops_attention, "_attention_sm90_module", lambda target: checked)

    def no_read(x):
        raise AssertionError("cu_seqlens read on the host")
    cu_q, cu_k, q, k, v = packed_with_nan_tails([5, 20], [9, 30], 2, 1, 64, 3, 3)
    for lq, lk in (([5, 20], [9, 30]), ([20, 5], [38, 1])):
        cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
        cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
        with monkeypatch.context() as m:
            m.setattr(ops_attention, "host_ints", no_read)
            out, lse = ops.attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=20,
                                     return_lse=True, path="sm90", target="cpu")
        assert len(ops_attention.PLANS) == 1
        ref, ref_lse = reference(q[:25], k[:39], v[:39], False, 64 ** -0.5, cu_q, cu_k)
        check(out[:25], lse[:, :25], ref, ref_lse, v[:39], "bf16")
    bad = np.array([0, 30, 20], np.int32)  # past q's 28 rows, then decreasing
    bad_k = np.array([0, 50, 7], np.int32)  # past k's 42 rows, then decreasing
    with monkeypatch.context() as m:
        m.setattr(ops_attention, "host_ints", no_read)
        ops.attention(q, k, v, cu_seqlens_q=bad, cu_seqlens_k=bad_k, max_seqlen_q=20, path="sm90", target="cpu")
    with pytest.raises(ValueError, match="cu_seqlens must start at 0, not decrease"):
        ops.attention(q, k, v, cu_seqlens_q=bad, cu_seqlens_k=bad_k, path="sm90", target="cpu")


@needs_ptxas
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("overlap,pingpong,fa3", [(False, False, False),
                                                  *(pytest.param(*f, marks=pytest.mark.slow(sample=2))
                                                    for f in ((True, False, False), (True, True, False),
                                                              (True, True, True), (False, True, False)))],
                         ids=["sequential", "overlap", "pingpong", "fa3order-pingpong",
                              "sequential-pingpong"])  # all but the default (sequential) opt-in: a sample of 2
def test_prefillsm90_ptx(D, overlap, pingpong, fa3):
    """sm_90a PTX of the kernel (built as ops builds it: approx_ftz) assembles with ptxas; wgmma with A
    from registers and TMA 4-D copies are there; ptxas serialises no wgmma (warning C7514: it would
    where it cannot prove a wgmma waited for) and spills at most 16 bytes (the causal D = 128 overlapped
    forms, at the 240-register limit of a consumer; the others none)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    for causal in (False, True):
        ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                        kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=D, CAUSAL=causal, OVERLAP=overlap,
                                                                      PINGPONG=pingpong, FA3_ORDER=fa3))
        assert "cp.async.bulk.tensor.4d" in ptx and "setmaxnreg.inc.sync.aligned.u32 240" in ptx
        assert any("wgmma.mma_async" in x and "}, {" in x for x in ptx.splitlines())  # A from registers
        log = ptxas(ptx, "sm_90a", verbose=True)
        assert "C7514" not in log and "serialized" not in log, log
        spill = int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1])
        assert spill <= (16 if causal and overlap and D == 128 else 0), log


@needs_ptxas
@pytest.mark.parametrize("overlap,fa3", [(False, False), pytest.param(True, True, marks=pytest.mark.slow(sample=0))],
                         ids=["seq-pingpong", "fa3order-pingpong"])
def test_prefill_sm90_named_turns_ptx(overlap, fa3):
    """TURNS 1: PINGPONG's turns as FlashAttention-3's warp scheduler barrier, named barriers 1 and 2
    of 256 threads (a warpgroup's id in a register), not the turn mbarriers' try_wait loops (the
    stage ring's remain); warpgroup 1's first arrival on barrier 1 up front. Assembles, no spills
    (D 128, causal: the tightest), no serialised wgmma."""
    ptx = sm90_ptx(T="bf16", D=128, CAUSAL=True, OVERLAP=overlap, PINGPONG=True, FA3_ORDER=fa3, TURNS=1)
    base = sm90_ptx(T="bf16", D=128, CAUSAL=True, OVERLAP=overlap, PINGPONG=True, FA3_ORDER=fa3)
    assert "barrier.arrive.aligned 1, 256;" in ptx
    assert len(re.findall(r"barrier\.sync\.aligned %r\d+, 256;", ptx)) >= 2
    assert len(re.findall(r"barrier\.arrive\.aligned %r\d+, 256;", ptx)) >= 2
    assert "\tbarrier.sync.aligned" not in base and "\tbarrier.arrive.aligned" not in base
    assert ptx.count("mbarrier.try_wait") < base.count("mbarrier.try_wait")
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert "C7514" not in log and "serialized" not in log, log
    assert " 0 bytes spill stores" in log, log


@pytest.mark.parametrize("select", [True, False], ids=["select", "old-mask"])
def test_prefill_sm90_mask_is_one_select_an_element(select):
    """An edge tile's mask (causal, or past the keys) is one selp a score (64 a thread at BN 128, with
    the softmax's few); the older form (MASK_SELECT false) assigned under ifs, which LLVM made into
    selects of the whole vector (1,060 selp, ~1,000 FSEL in SASS)."""
    n = sm90_ptx(T="bf16", D=128, CAUSAL=True, MASK_SELECT=select).count("selp.f32")
    assert (n <= 4 * 64 + 16) if select else (n > 500), n


@needs_nvdisasm
@pytest.mark.parametrize("T", ["bf16", "f8e4m3"])
@pytest.mark.parametrize("fa3", [True, False], ids=["fa3order", "overlap"])
def test_prefill_sm90_overlap_in_sass(T, fa3):
    """What ptxas 13.0 keeps of the intra-warpgroup overlap. FA3_ORDER: all of the tile's exp2 (BN / 2
    = 64 a thread, and the factors') lie between the wait for S (WARPGROUP.DEPBAR.LE gsb0, 0x1) and the
    wait for P V (0x0), thanks to the sched_barrier before the latter: without it ptxas hoisted that
    wait to the top of the softmax's block, and no exp2 ran under P V (the header). OVERLAP: P_j takes
    the registers P_{j-1} V_{j-1} is reading, so the wait must come before the softmax: none."""
    comptime = dict(T=T, D=128, CAUSAL=False, OVERLAP=True, PINGPONG=True, FA3_ORDER=fa3)
    if T == "f8e4m3":
        comptime["OUT"] = "bf16"
    code = sass(sm90_ptx(**comptime))
    exps = exp2_under_pv(code)
    assert exps >= 64 if fa3 else exps == 0, exps


@needs_nvdisasm
@pytest.mark.parametrize("consumers", [2, 1], ids=["default", "small-grid"])
def test_prefill_sm90_d256_overlap_in_sass(consumers):
    """D 256's default form (ATTENTION_SM90_TILES: FA3_ORDER, BN 80; two consumers in PINGPONG, or one
    where SMALL_GRID lowers them): the tile's softmax (40 exp2 a thread and a factor) runs under P V,
    with no spills."""
    from kcompiler.ops.attention import ATTENTION_SM90_TILES
    t = {k: v for k, v in ATTENTION_SM90_TILES[(256, False)].items() if k not in ("SMALL_GRID", "ORDER")}
    t["CONSUMERS"] = consumers
    assert t["FA3_ORDER"] and t["BN"] == 80
    ptx = sm90_ptx(T="bf16", D=256, CAUSAL=False, **t)
    assert exp2_under_pv(sass(ptx)) >= 40
    log = ptxas(ptx, "sm_90a", verbose=True)
    assert " 0 bytes spill stores" in log and "C7512" not in log, log


@needs_nvdisasm
def test_prefill_sm90_sequential_pingpong_in_sass():
    """The sequential form's turns (PINGPONG without OVERLAP) in SASS, FlashAttention-3's order: the
    turn passes (a SYNCS.ARRIVE) after the last wgmma of S and before the wait for S (so the other
    warpgroup's products queue behind S while this one's softmax runs), and this warpgroup waits for
    its next turn (a TRYWAIT) after its softmax, just before P V's wgmmas. RESCALE_SKIP: one vote of
    the warp and a branch around O's 64 FMUL a thread."""
    code = sass(sm90_ptx(T="bf16", D=128, CAUSAL=False, PINGPONG=True, RESCALE_SKIP=True))
    qk_end = next(i for i, x in enumerate(code) if x.startswith("HGMMA.64x128x16") and x.endswith("gsb0")
                  and "tnspB" not in x)
    wait_s = next(i for i in range(qk_end, len(code)) if code[i].startswith("WARPGROUP.DEPBAR.LE gsb0, 0x0"))
    assert any("SYNCS.ARRIVE" in x for x in code[qk_end:wait_s]), code[qk_end:wait_s]
    pv = next(i for i in range(wait_s, len(code)) if "tnspB" in code[i])
    exps = [i for i in range(wait_s, pv) if code[i].startswith("MUFU.EX2")]
    assert len(exps) >= 64
    waits = [i for i in range(exps[-1], pv) if "SYNCS.PHASECHK" in code[i]]
    assert waits, code[exps[-1]:pv]  # the V stage's wait and the turn's, after the softmax
    vote = next(i for i in range(wait_s, pv) if code[i].startswith("VOTE.ANY") and "PT, PT" not in code[i])
    branch = next(i for i in range(vote, pv) if "BRA" in code[i])
    assert sum(code[i].startswith("FMUL") for i in range(branch, pv)) >= 64


#: (tiles, D, spill stores in bytes causal / not): the block shapes of bench_attention_variants.py's
#: SM90_VARIANTS as ptxas reported them when they were added (sm_90a, approx_ftz), none with a
#: serialised wgmma
PTX_VARIANTS = [(dict(CONSUMERS=3, OVERLAP=False), 64, (64, 0)), (dict(CONSUMERS=3, BN=64, OVERLAP=True), 64, (0, 0)),
                (dict(BN=64, BLOCKS_PER_SM=2, OVERLAP=False), 64, (20, 0)),
                (dict(CONSUMERS=1, BLOCKS_PER_SM=2, OVERLAP=True), 64, (0, 0)),
                (dict(CONSUMERS=3, BN=64), 128, (0, 0)), (dict(CONSUMERS=3, BN=64, OVERLAP=True), 128, (4, 0)),
                (dict(CONSUMERS=1, BLOCKS_PER_SM=2, BN=64), 128, (0, 0)),
                (dict(CONSUMERS=1, BLOCKS_PER_SM=2, BN=64, OVERLAP=True), 128, (0, 0))]


@needs_ptxas
@pytest.mark.slow(sample=3)
@pytest.mark.parametrize("tiles,D,spills", PTX_VARIANTS, ids=lambda x: "-".join(
    f"{k}{int(v)}" for k, v in x.items()) if isinstance(x, dict) else str(x))
def test_prefill_sm90_variants_ptx(tiles, D, spills):
    """The variants' PTX assembles for sm_90a: block of 128 (CONSUMERS + 1) threads, the registers
    shared out for BLOCKS_PER_SM blocks (setmaxnreg), no serialised wgmma, spills within the bounds
    measured when they were added (benchmarks/bench_attention_variants.py prints them)."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    c, n = tiles.get("CONSUMERS", 2), tiles.get("BLOCKS_PER_SM", 1)
    r = 65536 // (128 * (c + 1) * n) // 8 * 8
    for causal, bound in zip((True, False), spills):
        ptx = emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a", approx_ftz=True),
                        kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=D, CAUSAL=causal, **tiles))
        assert f".maxntid {128 * (c + 1)}" in ptx and f".minnctapersm {n}" in ptx
        assert f"setmaxnreg.inc.sync.aligned.u32 {min(r + (r - 24) // c, 256) // 8 * 8};" in ptx
        log = ptxas(ptx, "sm_90a", verbose=True)
        assert "C7514" not in log and "serialized" not in log, log
        assert f"Used {r} registers" in log, log
        spill = int(log.split(" bytes spill stores")[0].rsplit(None, 1)[-1])
        assert spill <= bound, log


def test_prefill_sm90_variant_errors():
    """Block shapes the kernel does not have are a located compile error, not a bad launch."""
    from kcompiler.backends.nvptx.target import NvptxTarget
    from kcompiler.frontend.program import stdlib_dir
    from kcompiler.pipeline import emit_file
    for bad in (dict(CONSUMERS=4), dict(CONSUMERS=3, BLOCKS_PER_SM=2), dict(BLOCKS_PER_SM=3)):
        with pytest.raises(kc.CompileError, match="CONSUMERS 1 to 3") as e:
            emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"),
                      kernel="attention_prefill_sm90", comptime=dict(T="bf16", D=64, **bad))
        assert "attention_sm90.kc:" in str(e.value)
    # wgmma accumulators past the registers a thread has before setmaxnreg: ptxas stopped at each (C7602,
    # an internal compiler error for the caller: D 128 with 2 consumers in 2 blocks on the H100 machine's
    # test run, FP8 BN 256 with 1 consumer in 2 blocks on the H200's benchmark); now a located error
    for t, d, bad in (("bf16", 128, dict(BLOCKS_PER_SM=2)), ("bf16", 64, dict(BN=128, BLOCKS_PER_SM=2)),
                      ("bf16", 128, dict(BN=256, CONSUMERS=3)), ("bf16", 256, dict(BN=64, CONSUMERS=1, BLOCKS_PER_SM=2)),
                      ("f8e4m3", 128, dict(BN=256, CONSUMERS=1, BLOCKS_PER_SM=2)),
                      ("f8e4m3", 128, dict(BN=224, CONSUMERS=1, BLOCKS_PER_SM=2))):
        ct = dict(T=t, D=d, OUT="bf16", **bad)
        with pytest.raises(kc.CompileError, match="cannot take this block shape") as e:
            emit_file(stdlib_dir() / "attention_sm90.kc", "asm", NvptxTarget("sm_90a"),
                      kernel="attention_prefill_sm90", comptime=ct)
        assert "attention_sm90.kc:" in str(e.value)


# --- std.attention_sm90_chain's opt-in forms (CHAIN, TREE, UNIFORM_WG) ----------------------------------

#: (tiles, (B, Sq, Sk, H, HK, D, causal)): the chained issue with and without turns, the tree
#: reductions with the rescale skip, over ring laps (290 keys, BN 64: 5 tiles, 2 stages), blocks with
#: no key and one tile (causal, Sq 200 > Sk 40: block 0 sees none), D 128 with BN 192 (a partial tile)
CHAIN_FORMS = [(dict(BN=64, CHAIN=True), (1, 77, 290, 2, 1, 64, True)),
               (dict(BN=64, CHAIN=True, PINGPONG=True, TURNS=1, TREE=True, UNIFORM_WG=True),
                (1, 77, 290, 2, 1, 64, True)),
               (dict(BN=64, CHAIN=True, TREE=True), (1, 200, 40, 2, 1, 64, True)),
               (dict(BN=64, TREE=True, RESCALE_SKIP=True, UNIFORM_WG=True), (2, 37, 150, 2, 2, 64, False)),
               (dict(BN=192, CHAIN=True, TREE=True, UNIFORM_WG=True), (1, 45, 300, 1, 1, 128, False))]


@pytest.mark.slow(sample=2)  # opt-in forms, measured slower: two by default (CI time), -m slow all
@pytest.mark.parametrize("tiles,shape", CHAIN_FORMS, ids=lambda x: "-".join(
    f"{k}{int(v)}" for k, v in x.items()) if isinstance(x, dict) else "x".join(map(str, x[:6])))
def test_prefill_sm90_chain_forms_emulated(monkeypatch, emulated, tiles, shape):
    """CHAIN (P_{j-1} V_{j-1} and S_j issued together, one wait a tile; the stage releases after it),
    TREE (4-chain maxima and sums, the clamped base) and UNIFORM_WG on the emulation, against the
    float64 reference: the peeled first tile, the last tile's P V, ntiles 0 and 1, the turns."""
    _emulated_case(monkeypatch, emulated, tiles, shape)


#: the D 128 forms bench_attention_variants.py times (tiles on top of the default's), each causal and not
CHAIN_PTX = [dict(CHAIN=True), dict(TREE=True), dict(UNIFORM_WG=True), dict(CHAIN=True, TREE=True, UNIFORM_WG=True),
             dict(CHAIN=True, PINGPONG=True, TURNS=1, TREE=True, UNIFORM_WG=True),
             dict(BN=192, TREE=True, UNIFORM_WG=True), dict(BN=176, TREE=True, UNIFORM_WG=True),
             dict(BN=192, CHAIN=True, TREE=True, UNIFORM_WG=True)]


@needs_ptxas
@pytest.mark.slow(sample=1)  # opt-in forms measured slower: one by default (CI time), -m slow all
@pytest.mark.parametrize("tiles", CHAIN_PTX, ids=lambda x: "-".join(f"{k}{int(v)}" for k, v in x.items()))
def test_prefill_sm90_chain_forms_ptx(tiles):
    """The opt-in forms assemble for sm_90a at D 128 without spills and without serialised wgmma
    (C7511: too few registers for the pipeline; C7514), causal and not; TREE leaves no compare with
    -inf for the base (a max with -FLT_MAX instead), UNIFORM_WG broadcasts the warpgroup by shfl.idx."""
    for causal in (False, True):
        ptx = sm90_ptx(T="bf16", D=128, CAUSAL=causal, **tiles)
        log = ptxas(ptx, "sm_90a", verbose=True)
        assert "C7511" not in log and "C7514" not in log and "serialized" not in log, log
        assert " 0 bytes spill stores" in log, log
        assert ("0fFF7FFFFF" in ptx) == bool(tiles.get("TREE")), tiles
        assert ("shfl.sync.idx" in ptx) == bool(tiles.get("UNIFORM_WG")), tiles


def _tile_loop(code: list[str]) -> list[str]:
    """The consumer's loop over the tiles in SASS (the shortest loop holding S's HGMMA and P V's, tnspB),
    without the edge tile's mask (the block a forward branch skips, of FSEL ... -INF)."""
    at = {x[:-1]: i for i, x in enumerate(code) if x.endswith(":")}
    loops = []
    for i, x in enumerate(code):
        m = re.search(r"BRA\s+`?\(?(\.L_x_\d+)", x)
        if m and at.get(m.group(1), len(code)) < i:
            body = code[at[m.group(1)]:i + 1]
            if any("tnspB" in y for y in body) and any(y.startswith("HGMMA") and "tnspB" not in y for y in body):
                loops.append((at[m.group(1)], i))
    a, b = min(loops, key=lambda r: r[1] - r[0])
    skip = set()
    for i in range(a, b):
        m = re.match(r"@!?P\d BRA\s+`?\(?(\.L_x_\d+)", code[i])
        if m and i < at.get(m.group(1), -1) <= b:
            blk = range(i + 1, at[m.group(1)])
            if any(code[k].startswith("FSEL") and "-INF" in code[k] for k in blk):
                skip |= set(blk)
    return [code[i] for i in range(a, b + 1) if i not in skip and not code[i].endswith(":")]


@needs_nvdisasm
def test_prefill_sm90_chain_forms_sass():
    """What each form takes out of a tile (BN 128, D 128, not causal; std.attention_sm90_chain's header):
    the default's loop has 2 wgmma waits, 16 R2UR (Q's descriptors rebuilt from vector registers) and
    64 FFMA + 66 MUFU.EX2 + 32 F2FP; CHAIN one wait; UNIFORM_WG no R2UR; TREE no FSETP/FSEL for the
    base and 2 FADD fewer; the softmax's counts stay."""
    def loop(**tiles):
        return _tile_loop(sass(sm90_ptx(T="bf16", D=128, CAUSAL=False, **tiles)))

    def n(code, op):
        return sum(x.split()[0 if not x.startswith("@") else 1].startswith(op) for x in code)
    base, chained, uniform, tree = loop(), loop(CHAIN=True), loop(UNIFORM_WG=True), loop(TREE=True)
    assert n(base, "WARPGROUP.DEPBAR") == 2 and n(chained, "WARPGROUP.DEPBAR") == 1
    assert n(base, "R2UR") == 16 and n(uniform, "R2UR") == 0
    assert n(base, "FSETP") == 2 and n(tree, "FSETP") == 0 and n(tree, "FADD") == n(base, "FADD") - 2
    for code in (base, chained, uniform, tree):
        assert n(code, "MUFU.EX2") == 66 and n(code, "F2FP") == 32 and n(code, "HGMMA") == 16
    assert len(uniform) < len(base) - 10, (len(uniform), len(base))


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", CHAIN_PTX + [dict(CHAIN=True, RESCALE_SKIP=True, TREE=True, UNIFORM_WG=True)],
                         ids=lambda x: "-".join(f"{k}{int(v)}" for k, v in x.items()))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_sm90_chain_forms_gpu(tiles, causal):
    """std.attention_sm90_chain's forms on the H100 (the D 128 tiles bench_attention_variants.py times,
    BN 176 and 192 included; D 64 too), odd lengths with Sq != Sk and GQA 2:1, against SDPA in float64."""
    import torch

    from kcompiler import ops

    from .attention_util import check, sdpa64
    for D in (64, 128):
        q = torch.randn(2, 1111, 4, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(2, 1234, 2, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="sm90", tiles=tiles)
        ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16")
