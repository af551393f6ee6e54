"""kcompiler.ops.attention: prefill attention by std.attention (FlashAttention-2 on mma.sync, MFMA or SIMT)
or, on Hopper, std.attention_sm90 (FlashAttention-3's design)."""
from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common
from ._common import (ArrayKind, capturing, check_same, contiguous, data_ptr, empty_like, flat, hopper_reason_not,
                      host_ints, index_array, query_type, target_for)
from .attention_fp8 import attention_fp8, is_fp8, plan_options
from .attention_order import sm90_launch, sm90_tiles
from .decode import plan_key


#: Prefill tiles of std.attention on tensor cores, by head dimension: BM query rows a block (BM / WARPS
#: rows a warp), BN keys a step, STAGES K/V buffers; the fastest of benchmarks/bench_attention.py's
#: candidates on the H100 (B 4, H 32, S 4096, bf16, causal and not; benchmarks/RESULTS.md). Registers
#: (ptxas, sm_90a): 238 (D 64), 252 (D 128), 254 (D 256), none spilled.
ATTENTION_TILES = {64: dict(BM=128, BN=64, WARPS=4, STAGES=2), 128: dict(BM=128, BN=128, WARPS=8, STAGES=2),
                   256: dict(BM=128, BN=64, WARPS=8, STAGES=2)}
#: Prefill tiles of the SIMT path (a thread per query row).
ATTENTION_SIMT_TILES = dict(BM=64, BN=32, WARPS=2, STAGES=2)
#: Prefill tiles of the MFMA path (AMD CDNA; a wavefront per 16 query rows), by head dimension: within
#: gfx942's 64 KiB of LDS. Not tuned (no AMD GPU here).
ATTENTION_MFMA_TILES = {128: dict(BM=64, BN=64, WARPS=4, STAGES=1), 256: dict(BM=32, BN=32, WARPS=2, STAGES=1)}


def attention_shared_bytes(tiles: dict[str, int], head_dim: int, itemsize: int, tensor_cores: bool,
                           mfma: bool = False) -> int:
    """Dynamic shared memory of std.attention's prefill in bytes (the formulas stated in
    stdlib/attention.kc): Q's tile and STAGES tiles of K and V, rows padded to D + 8 elements, on
    tensor cores; on MFMA Q's and K's tiles (rows of D + 4) and V's transposed (rows of BN + 4); one
    tile of K and of V in SIMT."""
    if tensor_cores:
        return (tiles["BM"] + 2 * tiles["STAGES"] * tiles["BN"]) * (head_dim + 8) * itemsize
    if mfma:
        return ((tiles["BM"] + tiles["BN"]) * (head_dim + 4) + head_dim * (tiles["BN"] + 4)) * itemsize
    return 2 * tiles["BN"] * head_dim * itemsize


def attention(q: Any, k: Any, v: Any, *, causal: bool = False, scale: float | None = None,
              cu_seqlens_q: Any = None, cu_seqlens_k: Any = None, max_seqlen_q: int | None = None,
              layout: str = "bshd", return_lse: bool = False, tiles: dict[str, int] | None = None,
              path: str = "auto", target: str = "auto", descale_q: Any = None, descale_k: Any = None,
              descale_v: Any = None, out_dtype: str = "bf16") -> Any:
    """Softmax attention, flash-attention style (stdlib/attention.kc; no S x S matrix is formed):
    ``softmax(scale * q k^T [+ causal mask]) v`` per batch entry and query head, f32 accumulation,
    the result in q's dtype; with ``return_lse``, also the log-sum-exp of each row (f32, natural log,
    -inf for a row that sees no key, whose output is 0).

    Shapes (D the head dimension, a multiple of 16 up to 256 on tensor cores; Hq a multiple of Hkv,
    grouped-query attention where they differ):

    - ``layout='bshd'`` (FlashAttention's): q (B, Sq, Hq, D), k and v (B, Sk, Hkv, D), the result like
      q, LSE (B, Hq, Sq); ``layout='bhsd'`` (torch SDPA's): q (B, Hq, Sq, D), k and v (B, Hkv, Sk, D).
    - variable lengths (``cu_seqlens_q`` and ``cu_seqlens_k``, int32 of length B + 1: the sequences
      packed along the first axis, FlashAttention's varlen): q (total_q, Hq, D), k and v (total_k, Hkv,
      D), LSE (Hq, total_q); rows of the result and of the LSE past cu_seqlens_q[B] are left as
      allocated. Without ``max_seqlen_q`` the offsets are read on the host (a copy from the device,
      which waits for it) and checked: ValueError unless they start at 0, do not decrease and end
      within q's and k's rows; the longest query sequence is then ``max_seqlen_q``. With
      ``max_seqlen_q`` on the Hopper path nothing is read on the host (no wait; a CUDA graph can
      capture the call) and the caller promises what flash_attn_varlen_func's does: cu_seqlens_q and
      cu_seqlens_k on q's device (or copied there), starting at 0, non-decreasing, ending within q's
      and k's rows, and no query sequence longer than ``max_seqlen_q`` (rows of a longer one past it
      are not written). Offsets that break the promise give unspecified values, but no access outside
      q, k, v, the result or the LSE (the kernel cuts each sequence to the rows there are). The other
      paths read and check the offsets in any case.

    q, k and v: f16 or bf16 (tensor cores on NVIDIA sm_80+), or f32 (the SIMT path), one dtype; numpy
    in, numpy out; torch in, torch out. ``causal`` masks FlashAttention's way, bottom-right aligned:
    query i of a sequence of Sq queries and Sk keys sees keys j <= i + Sk - Sq (torch's is_causal when
    Sq == Sk). ``scale`` defaults to 1 / sqrt(D).

    ``path``: 'auto' takes the Hopper kernel (stdlib/attention_sm90.kc: TMA, wgmma, warp-specialised,
    FlashAttention-3's design) where :func:`attention_sm90_reason_not` finds nothing against it (an
    sm_90 GPU, torch CUDA tensors, f16/bf16, D 64, 128 or 256), else std.attention (FlashAttention-2 on
    mma.sync on NVIDIA; MFMA on AMD; SIMT elsewhere); 'sm90' insists on the Hopper kernel (RuntimeError
    where it cannot run), 'fa2' on std.attention. ``tiles``: the kernel's tiles instead of the
    defaults: BM, BN, WARPS, STAGES for std.attention (:data:`ATTENTION_TILES`; given with path
    'auto', they choose std.attention), BN, STAGES, OVERLAP, PINGPONG, CONSUMERS, BLOCKS_PER_SM, FA3_ORDER,
    PACK_ABS, MASK_SELECT, RESCALE_SKIP, EXP2_POLY, TURNS, ORDER, PERSIST, LAZY_MAX, CHAIN, TREE, UNIFORM_WG,
    VT_SMEM (FP8) for the Hopper kernel (:data:`ATTENTION_SM90_TILES`; the last thirteen: stdlib/attention_sm90.kc's
    header; ORDER: the blocks' order, 0, 1 longest causal tiles first, 2 the same by groups of GROUP
    heads) and the host's GROUP, SMALL_GRID, PERSIST_TILES, PERSIST_SLACK (:mod:`kcompiler.ops.attention_order`;
    given ``tiles`` drop the defaults' SMALL_GRID and PERSIST unless they name them, their LAZY_MAX where
    they ask for OVERLAP or CHAIN, their OVERLAP and FA3_ORDER where they ask for LAZY_MAX, unless they
    name them: attention_order.sm90_tiles). TypeError for other dtypes, ValueError for bad shapes.

    FP8: q, k and v of float8 e4m3 (ml_dtypes.float8_e4m3fn, torch.float8_e4m3fn) take the Hopper
    kernel's FP8 form (:func:`kcompiler.ops.attention_fp8.attention_fp8`: D 128, no variable lengths,
    an sm_90 GPU; ValueError elsewhere) with FlashAttention-3's ``descale_q``, ``descale_k``,
    ``descale_v`` (floats, or arrays of one element or of shape (B, Hkv); default 1): the scores are
    ``scale * descale_q * descale_k * q k^T``, the result times ``descale_v``, of ``out_dtype`` ('bf16'
    or 'f16'; these four are ignored for 16-bit inputs).

    A call on the Hopper path keeps its host work (:data:`PLANS`; varlen only with ``max_seqlen_q``, FP8
    only with number descales: attention_fp8.Fp8Plan): a later call on arrays of the same kinds, shapes,
    dtypes and devices, with the same options (varlen: B and ``max_seqlen_q``), checks contiguity and
    alignment (varlen: cu_seqlens int32 arrays of q's kind and device), allocates the result and
    launches, without the other checks and choices."""
    varlen = cu_seqlens_q is not None or cu_seqlens_k is not None
    fp8 = is_fp8(q)
    key, got = _planned(q, k, v, causal, scale, layout, tiles, path, target, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                        plan_options(descale_q, descale_k, descale_v, out_dtype) if fp8 else None, fp8)
    if got is not None:  # a prepared call
        return got if return_lse else got[0]
    if fp8:
        if cu_seqlens_q is not None or cu_seqlens_k is not None:
            raise ValueError("attention: FP8 attention takes no variable lengths (cu_seqlens) yet")
        if path == "fa2":
            raise ValueError("attention: FP8 attention has the Hopper path only (path 'auto' or 'sm90')")
        return attention_fp8(q, k, v, causal=causal, scale=scale, layout=layout, return_lse=return_lse, tiles=tiles,
                             target=target, descale_q=descale_q, descale_k=descale_k, descale_v=descale_v,
                             out_dtype=out_dtype, keep=lambda plan: _keep(key, plan, q))
    fn = "attention"
    src = query_type(q, fn)
    check_same("k", k, src, fn)
    check_same("v", v, src, fn)
    if varlen and (cu_seqlens_q is None or cu_seqlens_k is None):
        raise ValueError(f"{fn}: variable lengths need both cu_seqlens_q and cu_seqlens_k")
    if layout not in ("bshd", "bhsd"):
        raise ValueError(f"{fn}: layout must be 'bshd' or 'bhsd', not {layout!r}")
    if path not in ("auto", "sm90", "fa2"):
        raise ValueError(f"{fn}: path must be 'auto', 'sm90' or 'fa2', not {path!r}")
    q, k, v = contiguous(q), contiguous(k), contiguous(v)
    p = _prefill_shapes(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, layout, fn)
    out = empty_like(q, tuple(q.shape), src.name)
    lse = empty_like(q, p.lse_shape, "f32")
    if p.B == 0 or p.Sq == 0 or p.H == 0 or p.D == 0 or int(np.prod(tuple(q.shape))) == 0:
        if arrays.is_torch_tensor(lse):
            lse.fill_(float("-inf"))
        else:
            lse.fill(-np.inf)
        return (out, lse) if return_lse else out
    scale = p.D ** -0.5 if scale is None else scale
    if path == "sm90" or (path == "auto" and (tiles is None or "WARPS" not in tiles)):
        tgt = target_for(q, target)
        why = attention_sm90_reason_not(q, k, v, out, p.D, p.Sk, p.varlen, tgt)
        if why is None:
            plan = _Sm90Plan(q, p, layout, causal, scale, tiles, tgt)
            plan.run(q, k, v, out, lse, p.cq, p.ck)
            _keep(key, plan, q)
            return (out, lse) if return_lse else out
        if path == "sm90":
            raise RuntimeError(f"{fn}: the Hopper path cannot run here: {why}")
    if p.varlen and not p.checked:
        _check_cu_seqlens(p, fn)  # std.attention trusts them: read and checked on the host
    _attention_fa2(q, k, v, out, lse, p, causal, scale, tiles, target_for(q, target), fn)
    return (out, lse) if return_lse else out


@dataclasses.dataclass
class _Prefill:
    """The shapes of an :func:`attention` call: batch entries, query and KV heads, query and key
    lengths (varlen: Sq the longest query sequence, Sk 0), head dimension; the kernel's cu_seqlens
    arrays, element strides of q, k and out (``q_sb``... by batch entry, sequence position, head) and
    of the LSE; ``varlen``; varlen's rows of q and of k (``rows``: the packed tensors' first axis); and
    whether cu_seqlens were read on the host and checked (``checked``)."""

    B: int
    H: int
    HK: int
    Sq: int
    Sk: int
    D: int
    cq: Any
    ck: Any
    strides: dict[str, int]
    lse_shape: tuple
    l_sb: int
    l_sh: int
    varlen: bool = False
    rows: tuple[int, int] = (0, 0)
    checked: bool = False


def _prefill_shapes(q: Any, k: Any, v: Any, cu_q: Any, cu_k: Any, max_seqlen_q: int | None, layout: str,
                    fn: str) -> _Prefill:
    """:func:`attention`'s shapes of q, k and v (contiguous), checked: ValueError where they do not
    match. Variable lengths: cu_seqlens are read on the host and checked (:func:`_check_cu_seqlens`)
    only without ``max_seqlen_q``, which is then the longest query sequence."""
    varlen = cu_q is not None
    rank = 3 if varlen else 4
    for name, x in (("q", q), ("k", k), ("v", v)):
        if len(x.shape) != rank:
            raise ValueError(f"{fn}: {name} must be {rank}-D ({'(total, H, D) with cu_seqlens' if varlen else layout}),"
                             f" not of shape {tuple(x.shape)}")
    if tuple(k.shape) != tuple(v.shape):
        raise ValueError(f"{fn}: k and v must have one shape, not {tuple(k.shape)} and {tuple(v.shape)}")
    D = q.shape[-1]
    if varlen:
        (tq, H, _), (tk, HK, Dk) = tuple(q.shape), tuple(k.shape)
        cq = index_array(cu_q, q, "cu_seqlens_q", fn)
        B = cq.shape[0] - 1
        if B < 1:
            raise ValueError(f"{fn}: cu_seqlens_q must hold B + 1 offsets for B >= 1 sequences, not {B + 1}")
        ck = index_array(cu_k, q, "cu_seqlens_k", fn, B + 1)
        if max_seqlen_q is not None and int(max_seqlen_q) < 0:
            raise ValueError(f"{fn}: max_seqlen_q must be >= 0, not {max_seqlen_q}")
        strides = dict(q_sb=0, q_ss=H * D, q_sh=D, k_sb=0, k_ss=HK * D, k_sh=D, o_sb=0, o_ss=H * D, o_sh=D)
        p = _Prefill(int(B), int(H), int(HK), 0 if max_seqlen_q is None else int(max_seqlen_q), 0, int(D), cq, ck,
                     strides, (H, tq), 0, tq, varlen=True, rows=(int(tq), int(tk)))
        if max_seqlen_q is None:
            p.Sq = _check_cu_seqlens(p, fn)
    else:
        if layout == "bshd":
            (B, Sq, H, _), (Bk, Sk, HK, Dk) = tuple(q.shape), tuple(k.shape)
            strides = dict(q_sb=Sq * H * D, q_ss=H * D, q_sh=D, k_sb=Sk * HK * D, k_ss=HK * D, k_sh=D,
                           o_sb=Sq * H * D, o_ss=H * D, o_sh=D)
        else:
            (B, H, Sq, _), (Bk, HK, Sk, Dk) = tuple(q.shape), tuple(k.shape)
            strides = dict(q_sb=H * Sq * D, q_ss=D, q_sh=Sq * D, k_sb=HK * Sk * D, k_ss=D, k_sh=Sk * D,
                           o_sb=H * Sq * D, o_ss=D, o_sh=Sq * D)
        if Bk != B:
            raise ValueError(f"{fn}: q has {B} batch entries but k has {Bk}")
        cq = ck = _common.zeros_i32(q)  # not read without VARLEN
        p = _Prefill(int(B), int(H), int(HK), int(Sq), int(Sk), int(D), cq, ck, strides, (B, H, Sq), H * Sq, Sq)
    if Dk != D:
        raise ValueError(f"{fn}: q's head dimension is {D} but k's is {Dk}")
    if HK == 0 or H % HK:
        raise ValueError(f"{fn}: q's {H} heads must be a multiple of k's {HK} (grouped-query attention)")
    return p


def _check_cu_seqlens(p: _Prefill, fn: str) -> int:
    """Reads varlen's cu_seqlens on the host (a copy from the device, which waits for it) and checks
    them: ValueError unless both start at 0, do not decrease and end within q's and k's rows. Returns
    the longest query sequence; marks ``p`` checked."""
    hq, hk = host_ints(p.cq), host_ints(p.ck)
    tq, tk = p.rows
    if hq[0] != 0 or hk[0] != 0 or (np.diff(hq) < 0).any() or (np.diff(hk) < 0).any() or hq[-1] > tq or hk[-1] > tk:
        raise ValueError(f"{fn}: cu_seqlens must start at 0, not decrease, and end within q's {tq} and "
                         f"k's {tk} rows")
    p.checked = True
    return int(np.diff(hq).max())


def _attention_fa2(q: Any, k: Any, v: Any, out: Any, lse: Any, p: _Prefill, causal: bool, scale: float,
                   tiles: dict[str, int] | None, target: str, fn: str) -> None:
    """The launch of std.attention's prefill (:func:`attention` checked the arguments)."""
    src = arrays.array_scalar_type(q)
    D = p.D
    mod = _common.attention_module(target)
    # the module's target decides the path, as the kernel's comptime test does (the CPU target with
    # emulate_mma takes the tensor-core path too)
    tensor_cores = mod.target_has("mma") and src.name in ("f16", "bf16")
    mfma = not tensor_cores and mod.target_has("mfma") and src.name in ("f16", "bf16")
    if (tensor_cores or mfma) and (D % 16 or D > 256):
        raise ValueError(f"{fn}: the head dimension must be a multiple of 16 up to 256, not {D}")
    if tensor_cores:
        t = dict(ATTENTION_TILES.get(D, ATTENTION_TILES[256 if D > 128 else 128 if D > 64 else 64]))
    elif mfma:
        t = dict(ATTENTION_MFMA_TILES[256 if D > 128 else 128])
    else:
        t = dict(ATTENTION_SIMT_TILES)
    if tiles is not None:
        t = _common.check_tiles(tiles, t, fn)
    threads = t["WARPS"] * 32 if tensor_cores else t["WARPS"] * 64 if mfma else t["BM"]
    fq, fk, fv, fo = flat(q, 16), flat(k, 16), flat(v, 16), flat(out, 1)
    aligned = D % 8 == 0 and all(data_ptr(x) % 16 == 0 for x in (fq, fk, fv, fo))
    s = p.strides
    grid = (-(-p.Sq // t["BM"]), p.H, p.B)
    mod.attention_prefill[grid, threads](
        fq, fk, fv, fo, flat(lse, 1), p.cq, p.ck, p.Sq, p.Sk, p.H // p.HK,
        s["q_sb"], s["q_ss"], s["q_sh"], s["k_sb"], s["k_ss"], s["k_sh"], s["k_sb"], s["k_ss"], s["k_sh"],
        s["o_sb"], s["o_ss"], s["o_sh"], p.l_sb, p.l_sh, np.float32(scale),
        T=src.name, D=D, CAUSAL=bool(causal), VARLEN=p.varlen, ALIGNED=aligned,
        shared=attention_shared_bytes(t, D, src.size, tensor_cores, mfma), stream=_common.stream_of(q), **t)


#: Tiles of std.attention_sm90 (the Hopper prefill: 128 query rows a block, two consumer warpgroups of
#: 64), by (head dimension, causal): BN keys a step, STAGES K/V buffers, OVERLAP (FlashAttention-3's
#: intra-warpgroup overlap of the softmax with P V), PINGPONG (its inter-warpgroup turns), TURNS (the
#: turns on mbarriers, 0, or named barriers, 1). At D 128 the sequential form with the turns on named
#: barriers since 2026-11-27 (H100, benchmarks/bench_attention_variants.py, one run, cubins assembled by
#: ptxas as a whole program; x SDPA flash, benchmarks/RESULTS.md): B4 H32 S4096 595 TFLOP/s (0.95x
#: cuDNN) against 562 for the sequential form without turns, causal 506 against 480; geometric mean over
#: B16 H16 S1024 D64 .. B4 H16 S512 (16 shapes) x1.41 against x1.34 (full), x1.64 against x1.68
#: (causal: the small causal grids, which SMALL_GRID runs with one consumer and so without turns, move
#: within noise; B8 H16 S2048 1.63 against 1.47). OVERLAP + PINGPONG 587 / 518; FA3_ORDER non-finite
#: (refused). Before 2026-11-27 (cubins from nvJitLink's relocatable compile, every wgmma serialised)
#: the sequential form without turns had won. Registers (ptxas, sm_90a): no spill but in the causal
#: D 128 OVERLAP forms (at most 16 bytes).
#: An entry may also give CONSUMERS (1 to 3 consumer warpgroups of 64 query rows: BM = 64 * CONSUMERS rows
#: a block; default 2) and BLOCKS_PER_SM (1 or 2: the registers are shared out for that many resident
#: blocks; default 1); benchmarks/bench_attention_variants.py times them (SM90_VARIANTS). D 64 without a
#: mask takes 3 consumers since 2026-11-27: geometric mean 1.14x SDPA flash against 1.03x for the
#: OVERLAP + PINGPONG 2-warpgroup form over B16 H16 S1024 and B4 H16 S8192 (RESULTS.md). D 256 (since
#: 2026-11-27, before std.attention's FA2 form): BN 64 (Q 64 KiB, K and V 32 KiB a stage) with O's rescale
#: skipped where no row's maximum rose, 323 / 272 TFLOP/s (full / causal, B4 H16 S4096) against ~300 / 258
#: without the skip and 225 at BN 80 (bench_attention_variants.py --shapes 6,7). D 64 and 128 take
#: SMALL_GRID (kcompiler.ops.attention_order: one consumer where the default block leaves multiprocessors
#: idle, and ORDER 1 on grids of at most two waves, four causal ones of long tiles since 2026-11-29) since
#: 2026-11-27: over the 12 small grids of bench_attention_variants.py (B1 H16 S512, B1 H32 S1024, B4 H16
#: S512) geometric mean x SDPA flash D64 0.88 -> 1.00 (full) and 1.13 -> 1.46 (causal), D128 1.22 -> 1.29
#: and 1.30 -> 1.44 (H200); no change on the large shapes, where the rule does not apply. D 256 (H100,
#: 2026-11-27, x SDPA flash; the form before FA3_ORDER overlapped, below): one consumer warpgroup (64 query
#: rows a block) with BN 96 (Q 32 KiB, K and V 48 KiB a stage: 224 KiB), against two with BN 64: full 0.93
#: -> 1.08 (B4 H32 S2048), 0.99 -> 1.17 (B4 H16 S4096), 0.90 -> 0.99 (B1 H16 S1024), 0.81 -> 0.85 (B16 H32
#: S512); causal 0.97 -> 1.08 (B16 H32 S1024), 1.00 -> 1.14 (B4 H16 S4096); one consumer at BN 64 had given
#: causal 0.83-0.94 -> 0.95-1.10, in 3 stages level, two at BN 80 0.61-1.10. SMALL_GRID's ORDER 1 helps
#: causal tiny grids (B1 H16 S512-1024: 1.56-1.62 against 0.91-0.95) and lost without a mask (B4 H16 S512
#: 0.75 against 0.88), so full runs in ORDER 0.
#: PERSIST (since 2026-11-29; a block a multiprocessor looping over the query tiles, the next one's
#: loads under the last one's end; PERSIST_TILES: only where a query tile reads at most that many key
#: tiles): x SDPA flash, default -> PERSIST, H200, bench_attention_variants.py --shapes lengths (one run;
#: benchmarks/RESULTS.md): D 64 full S1024 1.21 -> 1.37, S2048 1.42 -> 1.55, S8192 1.52 -> 1.60; causal
#: S1024 1.26 -> 1.44, S8192 1.35 both. D 128 causal S1024 1.51 -> 1.64, S2048 1.61 -> 1.66, S4096 1.67
#: -> 1.63, S8192 1.72 -> 1.68 (hence 16 key tiles); D 128 full gains nowhere (S1024 1.52 both, S4096
#: 1.66 -> 1.64), D 256 level or lower (S4096 causal 1.51 -> 1.46): not taken there.
#: LAZY_MAX (since 2026-11-29; std.attention_sm90_lazy: a tile's exponentials against the rows' running
#: bases, before the tile's maxima are reduced, O rescaled only where a maximum passes its base by 2^8) at
#: D 128 and 256 (D 256 until its FA3_ORDER block, below), not D 64 (there 3 consumers of 160 registers
#: spill with it and lose 0.88-0.90x):
#: H200, benchmarks/bench_attention_ab.py (7 interleaved rounds, median of the rounds' ratios; RESULTS.md):
#: D 128 full S1024 x1.048, with PERSIST up to 8 key tiles x1.065, S2048 x1.035, S4096 x1.034-1.047 (0.96x
#: -> 1.00x cuDNN), S8192 x1.035; causal x1.01-1.04; D 256 x1.045-1.052.
#: D 128 causal PERSIST up to 32 key tiles (was 16) where its rounds are balanced (the host's
#: PERSIST_SLACK, kcompiler.ops.attention_order.persist_balance), since 2026-11-29: x the plain grid,
#: S4096 B1 H32 1.087, B2 H32 1.051, B4 H32 1.026-1.035, B8 H16 1.027, B16 H32 1.010; S3072 B2 H16 1.121,
#: B4 H32 1.036; at 64 key tiles level (B2 H32 S8192 1.001; H200, bench_attention_ab.py, 7-9 rounds).
#: D 256 in FlashAttention-3's form since 2026-11-29 (twenty-fourth session): two consumers of 64 rows, BN
#: 80 (Q 64 KiB, K and V 40 KiB a stage: 224 KiB), PINGPONG with named-barrier turns, and FA3_ORDER's
#: softmax of S_j under P_{j-1} V_{j-1} (kept there by sched_barrier(); before it ptxas hoisted the wait
#: and no FA3_ORDER form overlapped). x the one-consumer BN 96 LAZY_MAX form it replaces (H200,
#: bench_attention_ab.py, 5-7 interleaved rounds, median of the rounds' ratios; RESULTS.md): B4 H16 S4096
#: full 1.33-1.35 (0.80 -> 1.02-1.03x cuDNN), causal 1.27-1.29 (0.79 -> 1.00x), B4 H32 S2048 full 1.38
#: (0.74 -> 0.99x), B2 H16 S1024 full 1.30, B16 H32 S512 causal 1.18 (0.65 -> 0.76x). One consumer in
#: the same order gained 1.03-1.12; BN 64 and PERSIST were within noise of BN 80 without it.
ATTENTION_SM90_TILES = {(128, False): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1, SMALL_GRID=True,
                                           LAZY_MAX=True, PERSIST=True, PERSIST_TILES=8),
                        (128, True): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=True, TURNS=1, SMALL_GRID=True,
                                          PERSIST=True, PERSIST_TILES=32, LAZY_MAX=True),
                        (64, False): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False, CONSUMERS=3,
                                          SMALL_GRID=True, PERSIST=True),
                        (64, True): dict(BN=128, STAGES=2, OVERLAP=False, PINGPONG=False, SMALL_GRID=True,
                                         PERSIST=True),
                        (256, False): dict(BN=80, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1,
                                           CONSUMERS=2, SMALL_GRID=True, ORDER=0),
                        (256, True): dict(BN=80, STAGES=2, OVERLAP=True, PINGPONG=True, FA3_ORDER=True, TURNS=1,
                                          CONSUMERS=2, SMALL_GRID=True)}


def attention_sm90_shared_bytes(tiles: dict[str, Any], head_dim: int, itemsize: int = 2, varlen: bool = False) -> int:
    """Dynamic shared memory of std.attention_sm90 in bytes (the formula stated in
    stdlib/attention_sm90.kc): Q's BM = 64 * CONSUMERS rows (CONSUMERS default 2) and STAGES tiles of BN
    rows of K and of V (FP8, ``itemsize`` 1: V^T's stages in whole boxes of 128 keys), D elements each,
    then 3 + 4 * STAGES mbarriers, one more with ``varlen`` (VARLEN's edge tile of V) or PERSIST (Q's
    buffer free for the next unit). FP8's VT_SMEM (V transposed in the kernel, std.attention_sm90_vt):
    1,024 bytes for the mbarriers, then VT_SMEM stages of BN rows of V."""
    bm = 64 * tiles.get("CONSUMERS", 2)
    nbar = 3 + 4 * tiles["STAGES"] + int(varlen or bool(tiles.get("PERSIST")))
    bn = tiles["BN"]
    v_keys = -(-bn // 128) * 128 if itemsize == 1 else bn  # std.attention_sm90_produce's v_keys
    rvt = tiles.get("VT_SMEM", 0)
    return (bm + tiles["STAGES"] * (bn + v_keys)) * head_dim * itemsize + \
        (1024 + rvt * bn * head_dim * itemsize if rvt else 8 * nbar)


def _attention_sm90_module(target: str) -> Any:
    """std.attention_sm90 for ``target`` (with approx_ftz where the target has it, as
    :func:`kcompiler.ops._common.attention_module`)."""
    return _common.ftz_module("attention_sm90", target)


def attention_sm90_reason_not(q: Any, k: Any, v: Any, out: Any, head_dim: int, seqlen_k: int, varlen: bool,
                              target: str = "auto") -> str | None:
    """Why :func:`attention`'s Hopper path cannot compute this attention, or None when it can: it
    needs a target with wgmma (an sm_90 GPU; the CPU target's emulation for tests), f16 or bf16, D 64,
    128 or 256 (those of :data:`ATTENTION_SM90_TILES`), arrays the tensor maps can describe (device
    arrays on a GPU, numpy on the CPU target; 16-byte aligned rows) and keys (``seqlen_k`` > 0; with
    ``varlen``, k's rows: the packed tensors' first axis)."""
    t = arrays.array_scalar_type(q)
    if t is None or t.name not in ("f16", "bf16"):
        return "the Hopper path computes f16 and bf16"
    if head_dim not in {d for d, _ in ATTENTION_SM90_TILES}:
        return f"the Hopper path takes D = {' or '.join(map(str, sorted({d for d, _ in ATTENTION_SM90_TILES})))}, " \
               f"not {head_dim}"
    if (k.shape[0] if varlen else seqlen_k) == 0:
        return "no keys: a tensor map describes no empty tensor"
    why = hopper_reason_not("attention_sm90", lambda: _attention_sm90_module(target), target, (q, k, v, out))
    if why is None and (any(data_ptr(flat(x, 1)) % 16 for x in (q, k, v)) or data_ptr(flat(out, 1)) % 4):
        return "TMA needs 16-byte aligned tensors"
    return why


def _bhsd_view(x: Any, layout: str, varlen: bool) -> Any:
    """``x`` as a (B, H, S, D) view for a tensor map: bshd transposed; varlen (total, H, D) as one batch
    entry of all its rows (the kernel bounds each sequence by cu_seqlens)."""
    if varlen:
        return x.permute(1, 0, 2)[None] if arrays.is_torch_tensor(x) else x.transpose(1, 0, 2)[None]
    if layout == "bhsd":
        return x
    return x.permute(0, 2, 1, 3) if arrays.is_torch_tensor(x) else x.transpose(0, 2, 1, 3)


#: Prepared calls of :func:`attention` on the Hopper path (:class:`_Sm90Plan`; FP8:
#: kcompiler.ops.attention_fp8.Fp8Plan) by :func:`_sm90_plan_key`, the least recently made dropped past
#: 256. A plan holds no array but the kernel's unused cu_seqlens stand-ins (dense calls; varlen ones pass
#: theirs) and FP8's descale factors (kept constants); its tensor maps come from runtime.tensormap's
#: cache (by address) at each call.
PLANS: "OrderedDict[tuple, Any]" = OrderedDict()  # _Sm90Plan or attention_fp8.Fp8Plan
_PLANS_MAX = 256


def _planned(q: Any, k: Any, v: Any, causal: bool, scale: Any, layout: str, tiles: Any, path: str, target: str,
             cu_q: Any, cu_k: Any, max_seqlen_q: Any, fp8_options: tuple | None = None,
             fp8: bool = False) -> tuple[tuple | None, tuple | None]:
    """:func:`attention`'s prepared call: the key of a call the Hopper path may keep (:data:`PLANS`: not
    on path 'fa2', nor with variable lengths but no ``max_seqlen_q``, nor FP8 with a descale array
    (``fp8_options`` None: kcompiler.ops.attention_fp8.plan_options); None where it may not) and, where
    PLANS holds a plan for it that takes these arrays, its (out, lse) (else None). Raises TypeError
    for ``tiles`` that are not a mapping (this runs first)."""
    if tiles is not None and not isinstance(tiles, Mapping):
        raise TypeError(f"attention: tiles is a dict of the kernel's tile sizes, not {type(tiles).__name__}")
    varlen = cu_q is not None or cu_k is not None
    if path == "fa2" or (varlen and max_seqlen_q is None) or (fp8 and fp8_options is None):
        return None, None
    key = _sm90_plan_key(q, k, v, causal, scale, layout, tiles, path, target,
                         _varlen_key(cu_q, cu_k, max_seqlen_q) if varlen else None, fp8_options)
    plan = PLANS.get(key) if key is not None else None
    return key, None if plan is None else plan(q, k, v, cu_q, cu_k)


def _varlen_key(cu_q: Any, cu_k: Any, max_seqlen_q: Any) -> tuple | None:
    """What a prepared varlen call's key (:func:`_sm90_plan_key`) holds of its variable lengths: the
    number of sequences B (from cu_seqlens_q's length: nothing is read) and ``max_seqlen_q``; None
    where one of cu_seqlens is missing (the checks then say so)."""
    if cu_q is None or cu_k is None:
        return None
    try:
        return "varlen", len(cu_q) - 1, int(max_seqlen_q)
    except (TypeError, ValueError):
        return None


def _sm90_plan_key(q: Any, k: Any, v: Any, causal: bool, scale: Any, layout: str, tiles: Any, path: str,
                   target: str, varlen: tuple | None = None, fp8: tuple | None = None) -> tuple | None:
    """The key of a prepared Hopper-path call (:data:`PLANS`): the arrays' kinds, shapes, dtypes and
    devices, the options, the default tiles of (D, causal) (so that a change of
    :data:`ATTENTION_SM90_TILES` takes effect), for variable lengths ``varlen``
    (:func:`_varlen_key`) and for FP8 its options (``fp8``: attention_fp8.plan_options); None where
    something is not hashable or not an array."""
    try:
        d = q.shape[-1]
        tkey = None if tiles is None else tuple(sorted(tiles.items()))
        dflt = ATTENTION_SM90_TILES.get((d, bool(causal)))
        return plan_key("attention", (q, k, v), (bool(causal), scale, layout, tkey, path, target,
                                                 None if dflt is None else tuple(dflt.items()), varlen, fp8))
    except (AttributeError, TypeError, IndexError):
        return None


def _keep(key: tuple | None, plan: Any, q: Any) -> None:
    """Keep ``plan`` in :data:`PLANS` under ``key`` (not while torch captures a CUDA graph on q's
    stream, nor without a key), the oldest dropped past :data:`_PLANS_MAX`."""
    if key is not None and not capturing(q):
        PLANS[key] = plan
        if len(PLANS) > _PLANS_MAX:
            PLANS.popitem(last=False)


class _Sm90Plan:
    """The launch of std.attention_sm90 for one shape (:func:`attention` checked the arguments): the
    tiles, grid, block, shared memory, scalars and compile-time values, fixed at the first call.
    ``run`` launches on checked arrays; calling the plan checks what its key does not say (contiguity,
    16-byte alignment on a GPU; varlen: cu_seqlens int32 arrays of B + 1 elements of the plan's kind,
    contiguous), allocates O and the LSE and runs (None: not for this plan). Variable lengths: the
    tensor maps cover all rows of q, k and v, and the kernel gets their counts as seqlen_q and
    seqlen_k, to which it cuts each sequence (stdlib/attention_sm90.kc)."""

    __slots__ = ("kind", "launch", "scalars", "kw", "maps", "boxes", "layout", "cq", "ck", "shapes", "dtypes",
                 "cuda", "descale", "varlen", "ncu")

    def __init__(self, q: Any, p: _Prefill, layout: str, causal: bool, scale: float, tiles: dict | None,
                 target: str):
        t = sm90_tiles(ATTENTION_SM90_TILES[(p.D, bool(causal))], tiles, p.varlen)
        mod = _attention_sm90_module(target)
        grid, threads, t = sm90_launch(t, p.Sq, p.H, p.B, _common.device_of(mod, q).multiprocessor_count,
                                       seqlen_k=p.Sk, causal=bool(causal))
        c = t.get("CONSUMERS", 2)
        s = p.strides
        self.kind = ArrayKind(q)
        self.cuda = self.kind.cuda
        lens = p.rows if p.varlen else (p.Sq, p.Sk)
        self.scalars = (*lens, p.H // p.HK, p.H, p.B, s["o_sb"], s["o_ss"], s["o_sh"], p.l_sb, p.l_sh,
                        np.float32(scale))
        self.kw = dict(T=arrays.array_scalar_type(q).name, D=p.D, CAUSAL=bool(causal), VARLEN=p.varlen, **t)
        self.launch = mod.attention_prefill_sm90[grid, threads].bind(
            shared=attention_sm90_shared_bytes(t, p.D, varlen=p.varlen), **self.kw)
        self.maps: OrderedDict[tuple, tuple] = OrderedDict()
        self.boxes = (64 * c, t["BN"], t["BN"])
        self.layout = layout
        self.varlen, self.ncu = p.varlen, p.B + 1
        self.cq, self.ck = (None, None) if p.varlen else (p.cq, p.ck)
        self.descale = _common.const_f32(1.0, 1, q)  # FP8's descale factors: not read for 16-bit T
        self.shapes = (tuple(q.shape), p.lse_shape)
        self.dtypes = (self.kind.dtype(self.kw["T"]), self.kind.dtype("f32"))

    def run(self, q: Any, k: Any, v: Any, out: Any, lse: Any, cq: Any = None, ck: Any = None) -> None:
        """Launch on ``q``, ``k``, ``v`` (contiguous, of the plan's shapes; varlen: with its int32
        cu_seqlens ``cq`` and ``ck`` of the kind), writing ``out`` and ``lse``."""
        if self.cuda:  # O and the LSE come from torch.empty: contiguous and aligned
            key = (q.data_ptr(), k.data_ptr(), v.data_ptr())
            maps = self.maps.get(key)
            if maps is None:
                maps = self.maps[key] = self._maps(q, k, v)
                if len(self.maps) > 8:
                    self.maps.popitem(last=False)
        else:
            maps, out, lse = self._maps(q, k, v), flat(out, 1), flat(lse, 1)
        if not self.varlen:
            cq, ck = self.cq, self.ck
        self.launch(*maps, out, lse, cq, ck, *self.scalars, self.descale, stream=self.kind.stream())

    def _maps(self, q: Any, k: Any, v: Any) -> tuple:
        """The tensor maps of q, k and v (by runtime.tensormap's cache: the encoding depends on the
        address, shape, strides and dtype; the plan fixes all but the address)."""
        return tuple(cached_tensor_map(_bhsd_view(x, self.layout, self.varlen), (1, 1, box, 64))
                     for x, box in zip((q, k, v), self.boxes))

    def _cu(self, x: Any) -> bool:
        """Whether varlen's ``x`` can go to the kernel as it is: a contiguous int32 array of the plan's
        kind (and device) of B + 1 elements."""
        if not self.kind.holds(x) or tuple(x.shape) != (self.ncu,) or not self.kind.contiguous(x):
            return False
        return x.dtype == self.kind.dtype("i32")

    def __call__(self, q: Any, k: Any, v: Any, cq: Any = None, ck: Any = None) -> tuple | None:
        ok = self.kind.contiguous
        if not (ok(q) and ok(k) and ok(v)):
            return None
        if self.cuda and (q.data_ptr() | k.data_ptr() | v.data_ptr()) % 16:
            return None
        if self.varlen and not (self._cu(cq) and self._cu(ck)):
            return None
        out = self.kind.empty(self.shapes[0], self.dtypes[0])
        lse = self.kind.empty(self.shapes[1], self.dtypes[1])
        self.run(q, k, v, out, lse, cq, ck)
        return out, lse


__all__ = ["ATTENTION_MFMA_TILES", "ATTENTION_SIMT_TILES", "ATTENTION_SM90_TILES", "ATTENTION_TILES", "PLANS",
           "attention", "attention_shared_bytes", "attention_sm90_reason_not", "attention_sm90_shared_bytes"]
