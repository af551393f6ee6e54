"""The attention kernels (stdlib/attention.kc's prefill, decode.kc, mla.kc, merge_states.kc) through
kcompiler.ops: prefill against a float64 reference
(numpy here, torch's SDPA in float64 on the GPU) on fresh random inputs of odd shapes: causal and not,
grouped-query, variable lengths, the log-sum-exp.

On the CPU target ops takes the SIMT path; the tensor-core path (cp.async, ldmatrix, mma.sync) runs
on the CPU target's emulation of NVIDIA's warp-matrix instructions (``emulate_mma``, with bounds
checks), and on the H100 (tests marked gpu).

Tolerance, references and inputs: tests/ops/attention_util.py.
"""
from __future__ import annotations


import ml_dtypes
import numpy as np
import pytest

import kcompiler as kc
from kcompiler import ops
from kcompiler.ops import _common
from kcompiler.frontend.program import stdlib_dir
from ..ptxas_util import needs_ptxas, ptxas
# emulated: a fixture (pytest finds it in this module's names)
from .attention_util import (DTYPES, RNG, attention_in_layout, check, decode_reference, emulated,  # noqa: F401
                             mla_reference, paged_cache, qkv, reference, sdpa64)


@pytest.fixture(autouse=True)
def _fresh_decode_plans():
    """No prepared decode call (ops.decode.PLANS) crosses tests: a plan keeps the module it launches,
    and tests swap the standard library's modules for emulated ones."""
    from kcompiler.ops import decode
    decode.PLANS.clear()
    yield
    decode.PLANS.clear()


# (B, Sq, Sk, H, HK, D): odd lengths, Sq != Sk (the causal diagonal off the corner), GQA 3:1 and 2:1
SHAPES = [(2, 37, 53, 3, 1, 64), (1, 70, 45, 4, 2, 64), (1, 19, 19, 2, 2, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_simt_cpu(shape, causal):
    """ops.attention on the CPU target (the SIMT path), f32 and bf16."""
    B, Sq, Sk, H, HK, D = shape
    dtype = "bf16" if causal else "f32"
    q, k, v = qkv(B, Sq, Sk, H, HK, D, dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, target="cpu")
    assert out.shape == q.shape and out.dtype == q.dtype and lse.shape == (B, H, Sq)
    check(out, lse, *reference(q, k, v, causal, D ** -0.5), v, dtype)


TC_TILES = [dict(BM=32, BN=32, WARPS=2, STAGES=2), dict(BM=64, BN=16, WARPS=2, STAGES=3)]


@pytest.mark.parametrize("shape", SHAPES[:2], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_tensor_cores_emulated(monkeypatch, emulated, shape, causal):
    """The mma.sync path on the CPU target's emulation: one and two m16 tiles a warp, 2 and 3 stages."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    B, Sq, Sk, H, HK, D = shape
    dtype = "bf16" if causal else "f16"
    q, k, v = qkv(B, Sq, Sk, H, HK, D, dtype)
    scale = 0.3
    tiles = TC_TILES[int(causal)]
    out, lse = ops.attention(q, k, v, causal=causal, scale=scale, return_lse=True, tiles=tiles, target="cpu")
    check(out, lse, *reference(q, k, v, causal, scale), v, dtype)


def test_prefill_varlen_and_bhsd_emulated(monkeypatch, emulated):
    """Packed sequences of lengths 13, 0, 40 against 30, 5, 21 keys (causal: a row can see no key); and
    the (B, H, S, D) layout."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    H, HK, D = 4, 2, 64
    lq, lk = [13, 0, 40], [30, 5, 21]
    cu_q = np.concatenate([[0], np.cumsum(lq)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(lk)]).astype(np.int32)
    bf = DTYPES["bf16"]
    q = RNG.standard_normal((cu_q[-1], H, D)).astype(bf)
    k = RNG.standard_normal((cu_k[-1], HK, D)).astype(bf)
    v = RNG.standard_normal((cu_k[-1], HK, D)).astype(bf)
    tiles = TC_TILES[0]
    out, lse = ops.attention(q, k, v, causal=True, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True,
                             tiles=tiles, target="cpu")
    assert lse.shape == (H, cu_q[-1])
    ref, ref_lse = reference(q, k, v, True, D ** -0.5, cu_q, cu_k)
    assert np.isneginf(ref_lse).any()  # rows 0 .. 18 of the third sequence see no key
    check(out, lse, ref, ref_lse, v, "bf16")
    qb, kb, vb = qkv(2, 33, 33, 2, 1, D, "bf16")
    tr = lambda x: np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # noqa: E731
    out, lse = ops.attention(tr(qb), tr(kb), tr(vb), layout="bhsd", return_lse=True, tiles=tiles, target="cpu")
    ref, ref_lse = reference(qb, kb, vb, False, D ** -0.5)
    check(out.transpose(0, 2, 1, 3), lse, ref, ref_lse, vb, "bf16")


def test_tiles_that_do_not_fit_are_a_located_error(emulated):
    """Tiles the tensor-core path cannot serve are a compile error located in
    stdlib/attention_common.kc (prefill_mma's check)."""
    from kcompiler.diagnostics import CompileError

    q = np.zeros((1, 16, 1, 64), DTYPES["bf16"])
    prefill = emulated("attention").attention_prefill
    with pytest.raises(CompileError, match=r"attention_common\.kc:\d+:\d+.*BM of 16 \* WARPS") as e:
        prefill[(1, 1, 1), 64](q, q, q, q, np.zeros(16, np.float32), np.zeros(1, np.int32),
                               np.zeros(1, np.int32), 16, 16, 1, 0, 64, 64, 0, 64, 64, 0, 64, 64,
                               0, 64, 64, 16, 16, np.float32(0.1), D=64, BM=48, BN=16, WARPS=2)
    assert "^" in str(e.value)


def test_attention_misuse():
    q, k, v = qkv(1, 4, 4, 3, 2, 16, "f32")
    with pytest.raises(ValueError, match="multiple of k's 2"):
        ops.attention(q, k, v, target="cpu")
    with pytest.raises(TypeError, match="must be an array of f32 like q"):
        ops.attention(q, k.astype(np.float16), v, target="cpu")
    with pytest.raises(ValueError, match="4-D"):
        ops.attention(q[0], k[0], v[0], target="cpu")
    with pytest.raises(ValueError, match="both cu_seqlens_q and cu_seqlens_k"):
        ops.attention(q[0], k[0], v[0], cu_seqlens_q=np.array([0, 4], np.int32), target="cpu")
    with pytest.raises(TypeError, match="int32"):
        ops.attention(q[0], k[0], v[0], cu_seqlens_q=np.array([0, 4]), cu_seqlens_k=np.array([0, 4]),
                      target="cpu")


# --- decode over a paged KV cache, and merging states ---------------------------------------------------


@pytest.mark.parametrize("page,G,splits,cfg", [(16, 1, 1, {}), (64, 4, 3, {}), (16, 2, 5, {}),
                                               (16, 1, 2, dict(warps=2, unroll=3, stages=1)),
                                               (4, 2, 1, dict(warps=1, unroll=8, stages=2))])
def test_paged_decode_cpu(page, G, splits, cfg):
    """Lengths 1, 0, an odd one past several pages; split-KV (merge_states) with more splits than some
    sequences have keys; ring depths 1 to 3, U not dividing the page size or larger than it."""
    HK, D = 2, 64
    lens = [1, 0, 203, 77]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), num_splits=splits,
                                return_lse=True, target="cpu", **cfg)
    assert out.shape == q.shape and out.dtype == bf and lse.shape == (len(lens), HK * G)
    ref, ref_lse = decode_reference(q, dense, D ** -0.5)
    check(out, lse, ref, ref_lse, v_cache, "bf16")


def test_paged_decode_block_table_not_an_array_is_a_type_error():
    k_cache = np.zeros((2, 16, 1, 16), np.float32)
    q = np.zeros((1, 1, 16), np.float32)
    for bad in (None, [[0, 1]]):
        with pytest.raises(TypeError, match="block_table must be a \\(B, max_pages\\) int32 array"):
            ops.paged_decode(q, k_cache, k_cache, bad, np.array([20], np.int32), target="cpu")


@pytest.mark.parametrize("splits", [1, 3])
def test_paged_decode_several_query_tokens_cpu(splits):
    """QL = 3 new tokens a sequence (speculative decoding's verification step), GQA 2:1: token t sees
    the keys before len - (QL - 1 - t); a sequence of 2 keys leaves its first token none."""
    HK, G, D, page, QL = 2, 2, 64, 16, 3
    lens = [2, 40, 129]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), QL, HK * G, D)).astype(bf)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), num_splits=splits,
                                return_lse=True, target="cpu")
    assert out.shape == q.shape and lse.shape == q.shape[:-1]
    ref, ref_lse = [], []
    for b, (k, v) in enumerate(dense):
        o, l = reference(q[b:b + 1], k[None], v[None], True, D ** -0.5)  # causal, bottom-right aligned
        ref.append(o[0])
        ref_lse.append(l[0].T)
    assert np.isneginf(ref_lse[0][0]).all()
    check(out, lse, np.stack(ref), np.stack(ref_lse), v_cache, "bf16")


@pytest.mark.parametrize("ring", [True, False], ids=["ring", "single"])
def test_paged_decode_tensor_cores_emulated(monkeypatch, emulated, ring):
    """Both mma.sync paths (query heads of a KV head as the rows of an m16 tile; warps with cp.async
    rings, or one warp on prefill's paged tiles) on the CPU target's emulation: 3 query heads a KV head,
    2 splits, sequences shorter than a chunk and empty; keys 32 a step or tile in pages of 32 (one
    table read a tile). (One specialisation each: compiling it takes most of the time.)"""
    page, G, splits = 32, 3, 2
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    HK, D = 2, 64
    lens = [90, 0, 1, 45]
    bf = DTYPES["bf16"]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, bf)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(bf)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), num_splits=splits,
                                tensor_cores=True, tc_tiles=dict(RING=ring, BN=32, WARPS=2), return_lse=True,
                                target="cpu")
    ref, ref_lse = decode_reference(q, dense, D ** -0.5)
    check(out, lse, ref, ref_lse, v_cache, "bf16")


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_paged_decode_simt_cp_async_emulated(monkeypatch, emulated, fp8):
    """The SIMT path with its cp.async ring (the CPU target's emulation of cp.async, bounds-checked):
    GQA 2:1, odd lengths, an empty sequence, 3 splits; FP8 with per-head scales and codes over the
    whole range (subnormals, +-448)."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    HK, G, D, page = 2, 2, 128, 16
    lens = [45, 0, 130, 3]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, np.float32)
    ks = vs = np.ones(HK, np.float32)
    if fp8:
        f8 = ml_dtypes.float8_e4m3fn
        k_cache = (k_cache * np.exp2(RNG.integers(-9, 8, k_cache.shape))).clip(-448, 448).astype(f8)
        v_cache = (v_cache * np.exp2(RNG.integers(-9, 8, v_cache.shape))).clip(-448, 448).astype(f8)
        ks = RNG.uniform(0.005, 0.02, HK).astype(np.float32)
        vs = RNG.uniform(0.05, 0.2, HK).astype(np.float32)
    else:
        k_cache, v_cache = k_cache.astype(DTYPES["bf16"]), v_cache.astype(DTYPES["bf16"])
    dense = [(k_cache[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n],
              v_cache[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n]) for b, n in enumerate(lens)]
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(DTYPES["bf16"])
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), k_scale=ks if fp8 else None,
                                v_scale=vs if fp8 else None, num_splits=3, return_lse=True, tensor_cores=False,
                                target="cpu")
    ref, ref_lse = decode_reference(q, dense, D ** -0.5, ks[None, :, None], vs[None, :, None])
    scaled_v = v_cache.astype(np.float64) * vs[None, None, :, None]
    check(out, lse, ref, ref_lse, scaled_v, "bf16")


def test_paged_decode_fp8_cpu():
    """An FP8 E4M3 cache with per-KV-head scales: the reference dequantises the same codes."""
    f8 = ml_dtypes.float8_e4m3fn
    HK, G, D, page = 2, 2, 128, 16
    lens = [45, 130]
    k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, np.float32)
    k_cache, v_cache = (k_cache * 8).astype(f8), (v_cache * 8).astype(f8)
    dense = [(k_cache[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n],
              v_cache[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n]) for b, n in enumerate(lens)]
    ks = RNG.uniform(0.05, 0.2, HK).astype(np.float32)
    vs = RNG.uniform(0.05, 0.2, HK).astype(np.float32)
    q = RNG.standard_normal((len(lens), HK * G, D)).astype(np.float16)
    out, lse = ops.paged_decode(q, k_cache, v_cache, table, np.array(lens, np.int32), k_scale=ks, v_scale=vs,
                                num_splits=2, return_lse=True, target="cpu")
    ref, ref_lse = decode_reference(q, dense, D ** -0.5, np.repeat(ks, 1)[None, :, None],
                                    np.repeat(vs, 1)[None, :, None])
    vmax = np.abs(v_cache.astype(np.float64)).max() * vs.max()
    err = np.abs(out.astype(np.float64) - ref)
    assert (err <= 2e-5 * vmax + 2 ** -11 * np.abs(ref)).all(), f"error {err.max():.3g}"
    assert np.abs(lse - ref_lse).max() <= 1e-4


def test_merge_states_cpu():
    """States over disjoint key sets merge into the state over their union; an empty state (-inf)
    weighs nothing, all empty gives 0 and -inf."""
    N, S, H, D = 3, 4, 2, 40
    q = RNG.standard_normal((N, 1, H, D))
    keys = [RNG.standard_normal((N, n, H, D)) for n in (5, 0, 9, 2)]
    vals = [RNG.standard_normal((N, n, H, D)) for n in (5, 0, 9, 2)]
    parts = [reference(q, k, v, False, 0.2) for k, v in zip(keys, vals)]
    v = np.stack([p[0][:, 0] for p in parts], 1).astype(np.float32)     # (N, S, H, D)
    s = np.stack([p[1][:, :, 0] for p in parts], 1).astype(np.float32)  # (N, S, H)
    s[2, :, 1] = -np.inf  # row (2, 1): every state empty
    o, lse = ops.merge_states(v, s, target="cpu")
    ref, ref_lse = reference(q, np.concatenate(keys, 1), np.concatenate(vals, 1), False, 0.2)
    ref, ref_lse = ref[:, 0], ref_lse[:, :, 0]
    ref[2, 1], ref_lse[2, 1] = 0.0, -np.inf
    np.testing.assert_allclose(o, ref, atol=2e-6 * np.abs(v).max())
    assert np.isneginf(lse[2, 1]) and (o[2, 1] == 0).all()
    fin = np.isfinite(ref_lse)
    np.testing.assert_allclose(lse[fin], ref_lse[fin], atol=1e-5)


# --- the code for the GPUs: PTX that ptxas assembles, AMD code objects ----------------------------------

#: (kernel, compile-time parameters): each NVIDIA path once, with the library's tiles (the PTX test);
#: the SIMT decode ones also for AMD (AMD_KERNELS).
GPU_KERNELS = [
    ("attention_prefill", dict(T="f16", D=128, CAUSAL=True, VARLEN=True, ALIGNED=True, **ops.ATTENTION_TILES[128])),
    ("paged_decode", dict(T="bf16", KT="bf16", OUT="f32", D=128, G=8, PAGE=16, SPLIT=True, TC=True)),
    ("paged_decode", dict(T="bf16", KT="bf16", OUT="f32", D=128, G=4, PAGE=16, SPLIT=True, TC=True, RING=True,
                          **{k: v for k, v in ops.decode_tc_tiles(4).items() if k not in ("RING", "MIN_WAVES")})),
    ("mla_decode", dict(T="bf16", OUT="f32", D=512, DR=64, G=16, PAGE=64, SPLIT=True, TC=True)),
    ("paged_decode", dict(T="bf16", KT="f8e4m3", OUT="f32", D=128, G=8, PAGE=64, SPLIT=True,
                          L=ops.decode_lanes(128, 1, rows=8), STAGES=3)),
    ("paged_decode", dict(T="bf16", KT="bf16", OUT="bf16", D=128, G=1, PAGE=16, L=16, STAGES=3)),
    ("merge_states", dict(T="f32", OUT="bf16")),
    ("mla_decode", dict(T="bf16", OUT="f32", D=512, DR=64, G=2, PAGE=64, SPLIT=True)),
]
AMD_KERNELS = [k for k in GPU_KERNELS[1:] if not k[1].get("TC")]
#: The file of each kernel (stdlib/).
KERNEL_FILES = {"attention_prefill": "attention.kc", "paged_decode": "decode.kc", "mla_decode": "mla.kc",
                "merge_states": "merge_states.kc"}


@needs_ptxas
def test_ptx_assembles_without_spills(tmp_path):
    """sm_90a PTX of every kernel assembles; the prefill uses mma.sync, ldmatrix and cp.async; no
    register is spilled (ptxas -v)."""
    from kcompiler.pipeline import emit_file

    for name, params in GPU_KERNELS:
        ptx = emit_file(stdlib_dir() / KERNEL_FILES[name], "asm", "nvptx", "sm_90a", kernel=name, comptime=params)
        if name == "attention_prefill" or params.get("TC"):
            for op in ("mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.trans", "cp.async.cg",
                       "ex2.approx"):
                assert op in ptx, (params, op)
        if name in ("paged_decode", "mla_decode") and not params.get("TC"):
            assert "cp.async" in ptx and "ld.shared.v" in ptx  # the ring: cp.async copies, vector reads
        if params.get("KT") == "f8e4m3":  # FP8 rows by the chip's convert, no NaN fix-up (std.decode's header)
            assert "cvt.rn.f16x2.e4m3x2" in ptx and "2143289344" not in ptx
        log = ptxas(ptx, verbose=True)
        assert " 0 bytes spill stores" in log, (name, params, log)


@needs_ptxas
def test_approx_ftz_option(tmp_path):
    """NVPTX's approx_ftz target option: the approximations as .ftz forms (tanh.approx has none), the
    PTX assembles; the default keeps the non-ftz forms."""
    from kcompiler.backends import get_target
    from kcompiler.pipeline import Source, emit

    src = Source("kernel f(x: ptr<f32>) { x[0] = fast_exp2(x[1]) + fast_tanh(x[2]) + fast_rsqrt(x[3]); }", "<ftz>", ".")
    ptx = emit(src, "asm", get_target("nvptx", "sm_90a", approx_ftz=True))
    assert "ex2.approx.ftz.f32" in ptx and "rsqrt.approx.ftz.f32" in ptx and "tanh.approx.f32" in ptx
    ptxas(ptx)
    plain = emit(src, "asm", get_target("nvptx", "sm_90a"))
    assert "ex2.approx.f32" in plain and ".ftz" not in plain


@pytest.mark.slow(sample=1)  # ~19 s an arch on CI's cores; -m slow: both
@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_amd_code_objects(arch):
    """Every kernel compiles and links into a code object for gfx942 and gfx950, the prefill on the
    matrix cores (v_mfma_f32_16x16x16_bf16, no scratch), decode, merge and MLA in SIMT; never run, no
    AMD GPU is at hand."""
    from kcompiler.pipeline import emit_file
    from kcompiler.runtime.codeobject import read_code_object

    mfma_prefill = ("attention_prefill", dict(T="bf16", D=128, CAUSAL=True, VARLEN=True, ALIGNED=True,
                                              **ops.ATTENTION_MFMA_TILES[128]))
    asm = emit_file(stdlib_dir() / "attention.kc", "asm", "amdgcn", arch, kernel=mfma_prefill[0],
                    comptime=mfma_prefill[1])
    assert "v_mfma_f32_16x16x16_bf16" in asm and "scratch_" not in asm
    for name, params in [mfma_prefill] + AMD_KERNELS:
        obj = emit_file(stdlib_dir() / KERNEL_FILES[name], "obj", "amdgcn", arch, kernel=name, comptime=params)
        co = read_code_object(obj)
        assert co.arch == arch and [k.name.split("__")[0] for k in co.kernels] == [name], (co.arch, co.kernels)


# --- on the GPU: against torch's SDPA in float64 -----------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_gpu(D, causal):
    """Tensor cores (mma.sync: path 'fa2'; test_attention_sm90.py tests the Hopper path) on the GPU,
    odd shapes (Sq != Sk, GQA 4:1), bf16 and f16, BSHD and BHSD."""
    import torch

    for dtype, (B, Sq, Sk, H, HK), layout in [(torch.bfloat16, (3, 301, 517, 8, 2), "bshd"),
                                              (torch.float16, (2, 1000, 1000, 4, 4), "bhsd")]:
        q = torch.randn(B, Sq, H, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Sk, HK, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Sk, HK, D, device="cuda", dtype=dtype)
        scale = D ** -0.5
        out, lse = attention_in_layout(q, k, v, causal, layout, "fa2")
        ref, ref_lse = sdpa64(q, k, v, causal, scale)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16" if dtype == torch.bfloat16 else "f16")


@pytest.mark.gpu
def test_prefill_without_approx_ftz_gpu(monkeypatch):
    """std.attention compiled without approx_ftz (ops uses the .ftz build on NVIDIA; the benchmark
    times both) computes the same: flushing probabilities below 2^-126 to 0 changes nothing beyond
    the bounds."""
    import torch

    monkeypatch.setattr(_common, "attention_module", lambda tgt: _common.stdlib_module("attention", tgt))
    B, Sq, Sk, H, HK, D = 2, 513, 700, 4, 2, 128
    q = torch.randn(B, Sq, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(B, Sk, HK, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(B, Sk, HK, D, device="cuda", dtype=torch.bfloat16)
    for causal in (False, True):
        out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, path="fa2")
        ref, ref_lse = sdpa64(q, k, v, causal, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref.cpu().numpy(), ref_lse.cpu().numpy(),
              v.cpu().float().numpy(), "bf16")


@pytest.mark.gpu
def test_prefill_varlen_gpu():
    import torch

    H, HK, D = 6, 2, 128
    lq, lk = [1, 257, 0, 999, 64], [77, 300, 5, 999, 1]
    cu_q = torch.tensor([0] + list(np.cumsum(lq)), dtype=torch.int32, device="cuda")
    cu_k = torch.tensor([0] + list(np.cumsum(lk)), dtype=torch.int32, device="cuda")
    q = torch.randn(sum(lq), H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(sum(lk), HK, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(sum(lk), HK, D, device="cuda", dtype=torch.bfloat16)
    for causal in (False, True):
        out, lse = ops.attention(q, k, v, causal=causal, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, return_lse=True)
        ref, ref_lse = reference(q.float().cpu().numpy(), k.float().cpu().numpy(), v.float().cpu().numpy(), causal,
                                 D ** -0.5, cu_q.cpu().numpy(), cu_k.cpu().numpy())
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref, ref_lse, v.cpu().float().numpy(), "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("page", [16, 64])
def test_paged_decode_gpu(page):
    """bf16 and FP8 caches, GQA 16:1, 12:1, 8:1, 4:1 and 1:1, the tensor-core paths (warps with rings,
    one warp on prefill's tiles) and the SIMT path (its cp.async ring, FP8 at 8 and 16 lanes a row),
    one split and several, against a float64 reference."""
    import torch

    lens = [1, 4097, 333, 0, 2048, 77]
    for HK, G, fp8, splits, tc in [(4, 8, False, None, None), (8, 1, True, 4, None), (2, 4, False, 1, False),
                                   (2, 16, False, 3, True), (4, 1, False, None, None), (2, 8, True, 2, None),
                                   (4, 4, False, None, "single"), (2, 12, False, 2, True)]:
        D = 128
        k_cache, v_cache, table, dense = paged_cache(lens, page, HK, D, np.float32)
        if fp8:
            k_cache, v_cache = (k_cache * 16).astype(ml_dtypes.float8_e4m3fn), (v_cache * 16).astype(ml_dtypes.float8_e4m3fn)
            ks, vs = RNG.uniform(0.03, 0.1, HK).astype(np.float32), RNG.uniform(0.03, 0.1, HK).astype(np.float32)
            kc_t = torch.from_numpy(k_cache.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
            vc_t = torch.from_numpy(v_cache.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        else:
            ks = vs = np.ones(HK, np.float32)
            kc_t = torch.from_numpy(k_cache).cuda().bfloat16()
            vc_t = torch.from_numpy(v_cache).cuda().bfloat16()
        kc = kc_t.float().cpu().numpy() * ks[None, None, :, None]
        vc = vc_t.float().cpu().numpy() * vs[None, None, :, None]
        q = torch.randn(len(lens), HK * G, D, device="cuda", dtype=torch.bfloat16)
        out, lse = ops.paged_decode(q, kc_t, vc_t, torch.from_numpy(table).cuda(),
                                    torch.tensor(lens, dtype=torch.int32, device="cuda"),
                                    k_scale=torch.from_numpy(ks).cuda() if fp8 else None,
                                    v_scale=torch.from_numpy(vs).cuda() if fp8 else None,
                                    num_splits=splits, tensor_cores=True if tc == "single" else tc, return_lse=True,
                                    tc_tiles=dict(RING=False) if tc == "single" else None)
        dense = [(kc[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n], vc[table[b, :-(-n // page)]].reshape(-1, HK, D)[:n])
                 for b, n in enumerate(lens)]
        ref, ref_lse = decode_reference(q.float().cpu().numpy(), dense, D ** -0.5)
        check(out.cpu().float().numpy(), lse.cpu().numpy(), ref, ref_lse, vc, "bf16")


def test_mla_decode_tensor_cores_emulated(monkeypatch, emulated):
    """MLA on tensor cores (heads as the rows of an m16 tile, S's dimensions split over 4 warps and added
    through shared memory, O's columns split) on the CPU target's emulation: 20 heads (blocks of 10),
    odd lengths, an empty sequence, 2 splits."""
    monkeypatch.setattr(_common, "stdlib_module", emulated)
    B, H, D, DR, page = 4, 20, 128, 64, 16
    lens = [37, 0, 70, 129]
    bf = DTYPES["bf16"]
    ckv, _, table, _ = paged_cache(lens, page, 1, D, bf)
    ckv = ckv[:, :, 0]
    kpe = RNG.standard_normal((ckv.shape[0], page, DR)).astype(bf)
    q_nope = RNG.standard_normal((B, H, D)).astype(bf)
    q_pe = RNG.standard_normal((B, H, DR)).astype(bf)
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=scale, num_splits=2,
                              return_lse=True, tensor_cores=True, target="cpu")
    check(out, lse, *mla_reference(q_nope, q_pe, ckv, kpe, table, lens, page, scale), ckv, "bf16")


@pytest.mark.gpu
@pytest.mark.parametrize("page", [16, 64])
def test_decode_on_a_stream_and_in_a_cuda_graph_gpu(page):
    """paged_decode (GQA 4:1 split with merge_states, MHA, GQA 8:1 on tensor cores, FP8 with number
    scales, one of them first seen inside the capture) and mla_decode launch on torch's current
    stream: on a side stream, and captured in a CUDA graph, with max_seq_len given and without it (then
    seq_lens is not read on the host: no copy, no synchronisation inside the capture), and replayed
    after q and seq_lens changed, they give what an eager call on the default stream gives for the
    same inputs."""
    import torch

    lens, later = [700, 1, 333], [650, 1, 300]
    D = 128
    caches = {}
    for HK, fp8 in ((2, False), (4, False), (1, False), (4, True)):
        k_cache, v_cache, table, _ = paged_cache(lens, page, HK, D, np.float32)
        kc, vc = torch.from_numpy(k_cache).cuda(), torch.from_numpy(v_cache).cuda()
        caches[HK, fp8] = ((kc * 16).to(torch.float8_e4m3fn), (vc * 16).to(torch.float8_e4m3fn)) if fp8 else \
            (kc.bfloat16(), vc.bfloat16())
    bt, sl = torch.from_numpy(table).cuda(), torch.tensor(lens, dtype=torch.int32, device="cuda")
    q = torch.randn(len(lens), 8, D, device="cuda", dtype=torch.bfloat16)
    ckv = torch.randn(k_cache.shape[0], page, 512, device="cuda", dtype=torch.bfloat16)
    kpe = torch.randn(k_cache.shape[0], page, 64, device="cuda", dtype=torch.bfloat16)
    qn = torch.randn(len(lens), 16, 512, device="cuda", dtype=torch.bfloat16)
    qp = torch.randn(len(lens), 16, 64, device="cuda", dtype=torch.bfloat16)
    fresh = 0.37 + page / 1000  # a scale no call has used before the capture

    def run(first_in_capture=False):
        outs = []
        for given in (max(lens), None):
            outs += [ops.paged_decode(q, *caches[2, False], bt, sl, num_splits=3, max_seq_len=given),
                     ops.paged_decode(q, *caches[4, False], bt, sl, max_seq_len=given),
                     ops.paged_decode(q, *caches[1, False], bt, sl, max_seq_len=given, tensor_cores=True),
                     ops.paged_decode(q, *caches[4, True], bt, sl, k_scale=0.05, v_scale=0.07, max_seq_len=given),
                     ops.mla_decode(qn, qp, ckv, kpe, bt, sl, scale=0.1, max_seq_len=given)]
        if first_in_capture:
            outs.append(ops.paged_decode(q, *caches[4, True], bt, sl, k_scale=fresh, v_scale=fresh))
        return outs

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # compiled and loaded before the capture
            run()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run(first_in_capture=True)
    torch.cuda.current_stream().wait_stream(side)
    for x in (q, qn, qp):
        x.copy_(torch.randn_like(x))
    sl.copy_(torch.tensor(later, dtype=torch.int32))
    graph.replay()
    torch.cuda.synchronize()
    want = run(first_in_capture=True)
    assert len(out) == len(want) == 11
    for i, (got, ref) in enumerate(zip(out, want)):
        assert torch.isfinite(ref.float()).all() and torch.equal(got, ref), i


def test_mla_decode_cpu():
    """MLA decode (latent rows as K and V, a separate rope part) against float64: odd lengths, two
    splits, heads in groups of 2."""
    B, H, D, DR, page = 3, 4, 64, 16, 16
    lens = [37, 0, 70]
    bf = DTYPES["bf16"]
    ckv, _, table, dense = paged_cache(lens, page, 1, D, bf)
    kpe = RNG.standard_normal((ckv.shape[0], page, DR)).astype(bf)
    ckv = ckv[:, :, 0]
    q_nope = RNG.standard_normal((B, H, D)).astype(bf)
    q_pe = RNG.standard_normal((B, H, DR)).astype(bf)
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=scale, num_splits=2,
                              return_lse=True, target="cpu")
    assert out.shape == (B, H, D) and out.dtype == bf
    # the reference: attention with keys [c, k_pe] and values c, queries [q_nope, q_pe]
    q = np.concatenate([q_nope, q_pe], -1).astype(np.float64)
    rows = []
    for b, n in enumerate(lens):
        pages = table[b, :-(-n // page)]
        c = ckv[pages].reshape(-1, D)[:n].astype(np.float64)
        kp = kpe[pages].reshape(-1, DR)[:n].astype(np.float64)
        rows.append((np.concatenate([c, kp], -1)[:, None], c[:, None]))
    ref, ref_lse = [], []
    for b, (k, v) in enumerate(rows):
        o, l = reference(q[b:b + 1, None], k[None], v[None], False, scale)
        ref.append(o[0, 0])
        ref_lse.append(l[0, :, 0])
    check(out, lse, np.stack(ref), np.stack(ref_lse), ckv, "bf16")
    # a split count past the keys is cut to them (2^40 allocated its scratch: MemoryError)
    again = ops.mla_decode(q_nope, q_pe, ckv, kpe, table, np.array(lens, np.int32), scale=scale, num_splits=1 << 40,
                           target="cpu")
    np.testing.assert_allclose(np.asarray(again, np.float32), np.asarray(out, np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("H,tc", [(16, None), (128, None), (16, False)], ids=["tc16", "tc128", "simt16"])
def test_mla_decode_gpu(H, tc):
    """DeepSeek's shapes (latent 512, rope 64, pages of 64; 16 and 128 heads) on the GPU against float64,
    std.attention's kernel (path 'generic') on tensor cores (mma.sync) and in SIMT; the Hopper kernel,
    the default on sm_90, in test_mla_sm90.py."""
    import torch

    B, D, DR, page = 4, 512, 64, 64
    lens = [1, 1000, 4097, 300]
    ckv, _, table, _ = paged_cache(lens, page, 1, D, np.float32)
    ckv = torch.from_numpy(ckv[:, :, 0]).cuda().bfloat16()
    kpe = torch.randn(ckv.shape[0], page, DR, device="cuda", dtype=torch.bfloat16)
    q_nope = torch.randn(B, H, D, device="cuda", dtype=torch.bfloat16)
    q_pe = torch.randn(B, H, DR, device="cuda", dtype=torch.bfloat16)
    scale = (128 + 64) ** -0.5
    out, lse = ops.mla_decode(q_nope, q_pe, ckv, kpe, torch.from_numpy(table).cuda(),
                              torch.tensor(lens, dtype=torch.int32, device="cuda"), scale=scale, return_lse=True,
                              tensor_cores=tc, path="generic")
    ref, ref_lse = [], []
    for b, n in enumerate(lens):
        pages = torch.from_numpy(table[b, :-(-n // page)]).cuda().long()
        c = ckv[pages].reshape(-1, D)[:n].double()
        kp = kpe[pages].reshape(-1, DR)[:n].double()
        s = (q_nope[b].double() @ c.T + q_pe[b].double() @ kp.T) * scale
        ref.append((torch.softmax(s, -1) @ c).cpu().numpy())
        ref_lse.append(torch.logsumexp(s, -1).cpu().numpy())
    check(out.cpu().float().numpy(), lse.cpu().numpy(), np.stack(ref), np.stack(ref_lse), ckv.cpu().float().numpy(),
          "bf16")


# --- the MFMA path (AMD CDNA), on the CPU target's emulation ---------------------------------------------

@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_prefill_mfma_emulated(monkeypatch, causal):
    """The MFMA path (S^T = K Q^T, O^T = V^T P^T on 16x16x16 bf16/f16 MFMA, wavefronts of 64) on the
    CPU target's emulation of gfx942's matrix cores: odd lengths, GQA, causal rows without keys."""
    mod = kc.compile_file(stdlib_dir() / "attention.kc", target="cpu", target_options={"emulate_mfma": "gfx942"},
                          check_bounds=True)
    monkeypatch.setattr(_common, "stdlib_module", lambda name, target: mod)
    B, Sq, Sk, H, HK, D = 1, 45, 37, 2, 1, 64
    dtype = "bf16" if causal else "f16"
    q, k, v = qkv(B, Sq, Sk, H, HK, D, dtype)
    out, lse = ops.attention(q, k, v, causal=causal, return_lse=True, tiles=dict(BM=32, BN=32, WARPS=2, STAGES=1),
                             target="cpu")
    check(out, lse, *reference(q, k, v, causal, D ** -0.5), v, dtype)
