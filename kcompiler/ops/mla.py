"""Multi-head latent attention decode (DeepSeek-V2/V3, absorbed form) by std.mla's mla_decode or, on
Hopper, std.mla_sm90 (FlashMLA's design)."""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..runtime import arrays
from ..runtime.tensormap import cached_tensor_map
from . import _common
from ._common import (ArrayKind, check_same, contiguous, data_ptr, device_of, empty_like, flat, hopper_reason_not,
                      query_type, target_for)
from .decode import (PLANS, decode_lanes, decode_shared_bytes, decode_slots, max_len_of, paged_lengths, plan_key,
                     remember, split_count)

#: The fewest query heads for which ops.mla_decode's path 'auto' takes the Hopper kernel
#: (stdlib/mla_sm90.kc: 64 heads a block as wgmma's M, fewer are padded). H100, B 32, 8192 keys, latent
#: 512 + 64, bf16 (benchmarks/RESULTS.md, 2026-11-23): 128 heads 0.353 ms against the mma.sync kernel's
#: 0.612 (x1.73); 16 heads 0.227 against 0.191 (x0.84). 64 heads, one full tile, is the threshold.
MLA_SM90_MIN_HEADS = 64

#: The most query heads for which path 'auto' takes the Hopper kernel with :data:`MLA_SM90_SMALL_TILES`
#: (S transposed: the heads are wgmma's N, not padded to 64 rows of M). H100, B 32, 8192 keys, pages of
#: 64, latent 512 + 64, 16 heads (benchmarks/bench_mla_variants.py, 2026-11-27): 121 us = 2.49 TB/s = 82 %
#: of copy, against 163.6 us (61 %) for :data:`MLA_SM90_TILES` (and the mma.sync kernel's 0.19 ms).
MLA_SM90_SMALL_HEADS = 16


def mla_decode(q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, block_table: Any, seq_lens: Any, *,
               scale: float, num_splits: int | None = None, max_seq_len: int | None = None,
               return_lse: bool = False, heads_per_block: int | None = None, warps: int | None = None,
               unroll: int = 2, stages: int = 3, tensor_cores: bool | None = None, path: str = "auto",
               sm90_tiles: dict[str, int] | None = None, target: str = "auto") -> Any:
    """Multi-head latent attention decode (DeepSeek-V2/V3, absorbed form) over a paged latent cache
    (stdlib/mla.kc, ``mla_decode``): ``o[b, h] = sum_j softmax_j(scale * (q_nope[b, h] . c_j +
    q_pe[b, h] . k_pe_j)) c_j`` over the first ``seq_lens[b]`` tokens of sequence b.

    - q_nope: (B, H, D) (D = 512 in DeepSeek's models: the latent rank), q_pe: (B, H, DR) (64: the rope
      dimensions); f16 or bf16 (f32 on the CPU target too), one dtype. The result: (B, H, D) of that
      dtype (multiply by W_UV outside); with ``return_lse`` also the log-sum-exp (B, H), f32.
    - ckv_cache: (pages, page_size, D), kpe_cache: (pages, page_size, DR) (FlashInfer's MLA layout), of
      q's dtype; block_table (B, max_pages) int32; seq_lens (B,) int32.
    - ``scale``: the softmax scale (DeepSeek: 1 / sqrt(128 + 64) before the YaRN factor), required.
    - ``num_splits``, ``max_seq_len``: as :func:`paged_decode`; ``heads_per_block``: query heads a block
      (H must be a multiple; default 16 or the largest divisor of H below on tensor cores, 2 in SIMT);
      ``warps``, ``stages``: the kernel's (default 4 where D + DR and D are multiples of 64, and 3);
      ``unroll``: the SIMT kernel's U (see paged_decode).
    - ``tensor_cores``: stdlib/mla.kc's mla_decode_tc (the heads of a block as the rows of an m16
      tile, S's D + DR dimensions split over the warps, O's columns too; mma.sync, cp.async; f16/bf16,
      NVIDIA sm_80+, 16-byte aligned arrays). Default: where it can run; else the SIMT loop, which
      spends 2 (D + DR) + 2 D f32 operations a key and head on the FMA units (compute-bound at many
      heads: benchmarks/RESULTS.md).

    - ``path``: 'sm90' takes the Hopper kernel (stdlib/mla_sm90.kc: TMA through the block table, wgmma,
      a producer warpgroup and two consumers, 64 heads a block; FlashMLA's design; RuntimeError where
      :func:`mla_sm90_reason_not` finds something against it); 'generic' std.mla's
      ``mla_decode`` (mma.sync or SIMT as ``tensor_cores`` says). 'auto' takes the Hopper kernel
      where it can run, H is at least :data:`MLA_SM90_MIN_HEADS` (64: one full tile) or at most
      :data:`MLA_SM90_SMALL_HEADS` (16: S transposed, :data:`MLA_SM90_SMALL_TILES`; between the two
      the mma.sync kernel's 16-row tiles were faster on the H100) and none of ``heads_per_block``,
      ``warps``, ``tensor_cores`` is given; else 'generic'. ``sm90_tiles``: the Hopper kernel's BN
      (keys a step), STAGES, OVERLAP or SEESAW, QROWS, ST, SACC, PSS, SSPLIT (and the diagnostic PROBE) over
      :data:`MLA_SM90_TILES` (:func:`mla_sm90_tiles`; None or empty: the defaults by heads).

    Every block reads its sequence's latent rows once per group of heads (the groups after the first
    mostly from L2). Raises TypeError / ValueError for dtypes and shapes that do not match.

    As :func:`paged_decode`, a call is prepared once by its arrays' kinds, shapes, dtypes and devices
    and its options (kcompiler.ops.decode.PLANS): without ``max_seq_len``, seq_lens on a GPU is not
    read (the splits are planned for the block table's capacity), so a call never waits for the
    device and can be captured in a CUDA graph."""
    key = plan_key("mla_decode", (q_nope, q_pe, ckv_cache, kpe_cache, block_table, seq_lens),
                   (scale, num_splits, heads_per_block, warps, unroll, stages, tensor_cores, path,
                    None if sm90_tiles is None else tuple(sorted(sm90_tiles.items())), target))
    plan = PLANS.get(key) if key is not None else None
    if plan is not None:
        got = plan(q_nope, q_pe, ckv_cache, kpe_cache, block_table, seq_lens, max_seq_len)
        if got is not None:
            return got if return_lse else got[0]
    fn = "mla_decode"
    if path not in ("auto", "sm90", "generic"):
        raise ValueError(f"{fn}: path must be 'auto', 'sm90' or 'generic', not {path!r}")
    if sm90_tiles is not None and set(sm90_tiles) - set(MLA_SM90_TILES):
        raise ValueError(f"{fn}: sm90_tiles takes {', '.join(MLA_SM90_TILES)}, not {sorted(set(sm90_tiles))}")
    src = query_type(q_nope, fn, "q_nope")
    for name, x in (("q_pe", q_pe), ("ckv_cache", ckv_cache), ("kpe_cache", kpe_cache)):
        check_same(name, x, src, fn)
    if len(q_nope.shape) != 3 or len(q_pe.shape) != 3 or len(ckv_cache.shape) != 3 or len(kpe_cache.shape) != 3:
        raise ValueError(f"{fn}: q_nope (B, H, D), q_pe (B, H, DR), ckv_cache (pages, page, D) and kpe_cache "
                         f"(pages, page, DR) expected, not {tuple(q_nope.shape)}, {tuple(q_pe.shape)}, "
                         f"{tuple(ckv_cache.shape)}, {tuple(kpe_cache.shape)}")
    (B, H, D), (B2, H2, DR) = tuple(q_nope.shape), tuple(q_pe.shape)
    pages, page, D2 = tuple(ckv_cache.shape)
    if (B2, H2) != (B, H) or D2 != D or tuple(kpe_cache.shape) != (pages, page, DR):
        raise ValueError(f"{fn}: shapes do not match: q_nope {tuple(q_nope.shape)}, q_pe {tuple(q_pe.shape)}, "
                         f"ckv_cache {tuple(ckv_cache.shape)}, kpe_cache {tuple(kpe_cache.shape)}")
    if D % 16 or DR % 16 or DR == 0:
        raise ValueError(f"{fn}: D ({D}) and DR ({DR}) must be multiples of 16")
    bt, sl, max_pages, max_len = paged_lengths(block_table, seq_lens, max_seq_len, q_nope, page, fn)
    inputs = (q_nope, q_pe, ckv_cache, kpe_cache)
    q_nope, q_pe, ckv_cache, kpe_cache = (contiguous(x) for x in inputs)
    planned = key is not None and all(arrays.is_contiguous(x) for x in inputs + (block_table, seq_lens))
    generic_options = heads_per_block is not None or warps is not None or tensor_cores is not None
    sm90_heads = H >= MLA_SM90_MIN_HEADS or H <= MLA_SM90_SMALL_HEADS
    if path == "sm90" or (path == "auto" and sm90_heads and not generic_options):
        tgt = target_for(q_nope, target)
        tiles = mla_sm90_tiles(H, sm90_tiles)
        why = mla_sm90_reason_not(q_nope, q_pe, ckv_cache, kpe_cache, tiles, tgt)
        if why is None:
            return _mla_decode_sm90(q_nope, q_pe, ckv_cache, kpe_cache, bt, sl, max_pages, max_len, scale,
                                    num_splits, return_lse, tiles, tgt, key=key if planned else None,
                                    inputs=inputs + (block_table, seq_lens))
        if path == "sm90":
            raise RuntimeError(f"{fn}: the Hopper path cannot run here: {why}")
    tgt = target_for(q_nope, target)
    mod = _common.ftz_module("mla", tgt)
    can_tc = (mod.target_has("mma") and src.name in ("f16", "bf16")
              and all(data_ptr(x) % 16 == 0 for x in (q_nope, q_pe, ckv_cache, kpe_cache)))
    if tensor_cores and not can_tc:
        raise ValueError(f"{fn}: the tensor-core path needs NVIDIA sm_80+, f16/bf16 arrays, 16-byte aligned")
    tc = can_tc if tensor_cores is None else bool(tensor_cores)
    G, warps, stages, shared, regs, kw = _generic_tiles(tc, H, D, DR, src.size, heads_per_block, warps, unroll, stages)
    launch = _MlaLaunch(mod.mla_decode, _common.ftz_module("merge_states", tgt), q_nope, (B, H, D, DR), src.name,
                        page, max_pages, np.float32(scale), num_splits, G=G, threads=warps * 32,
                        slots=decode_slots(device_of(mod, q_nope), warps * 32, shared, regs),
                        kw=dict(D=D, DR=DR, G=G, PAGE=page, WARPS=warps, STAGES=stages, shared=shared, **kw))
    # the flat views as the kernel reads them: a misaligned torch view copied (and then no plan)
    args = (flat(q_nope, 64), flat(q_pe, 16), flat(ckv_cache, 64), flat(kpe_cache, 16))
    planned = planned and all(a.data_ptr() == x.data_ptr() for a, x in zip(args, inputs)) \
        if arrays.is_torch_tensor(q_nope) else planned
    return _mla_run(launch, key if planned else None, inputs + (block_table, seq_lens), *args, bt, sl, max_len,
                    return_lse)


def _mla_run(launch: "_MlaLaunch", key: tuple | None, inputs: tuple, q_nope: Any, q_pe: Any, ckv: Any, kpe: Any,
             bt: Any, sl: Any, max_len: int, return_lse: bool) -> Any:
    """Run :func:`mla_decode`'s ``launch`` on checked arrays; kept as the plan under ``key`` where the
    caller's ``inputs`` (the four arrays and the two tables, as given) are of its kind."""
    B, H, D, _ = launch.dims
    out = empty_like(q_nope, (B, H, D), launch.dtype)
    lse = empty_like(q_nope, (B, H), "f32")
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    if key is not None and all(launch.kind.holds(x) for x in inputs):
        remember(key, launch)
    launch.run(q_nope, q_pe, ckv, kpe, bt, sl, out, lse, max_len)
    return (out, lse) if return_lse else out


class _MlaLaunch:
    """The launches of one :func:`mla_decode` shape on one path (its plan, kcompiler.ops.decode.PLANS):
    std.mla's mla_decode over (splits, H / G, B) blocks (``G``, ``threads``, ``slots``, ``kw``) or
    std.mla_sm90's over (head blocks, splits, B) (``tiles``, ``sms``), then merge_states (``merge_mod``'s,
    std.merge_states) after a split. Calling it checks what the plan's key does not say and launches (None: not for this
    plan)."""

    __slots__ = ("kernel", "merge", "kind", "dims", "dtype", "dt_out", "dt_f32", "page", "max_pages", "sc", "fixed",
                 "G", "threads", "slots", "kw", "tiles", "sms", "kw_merge", "align")

    def __init__(self, kernel: Any, merge_mod: Any, like: Any, dims: tuple, dtype: str, page: int, max_pages: int,
                 sc: Any, num_splits: int | None, *, G: int = 0, threads: int = 384, slots: int = 0,
                 kw: dict | None = None, tiles: dict | None = None, sms: int = 0):
        if num_splits is not None and int(num_splits) < 1:
            raise ValueError(f"mla_decode: num_splits must be at least 1, not {num_splits}")
        self.kernel, self.merge, self.kind = kernel, merge_mod.merge_states, ArrayKind(like)
        self.dims, self.dtype, self.page, self.max_pages, self.sc = dims, dtype, page, max_pages, sc
        self.dt_out, self.dt_f32 = self.kind.dtype(dtype), self.kind.dtype("f32")
        self.fixed = None if num_splits is None else int(num_splits)
        self.G, self.threads, self.slots, self.tiles, self.sms = G, threads, slots, tiles, sms
        B, H, D, DR = dims
        if tiles is not None:
            self.kw = dict(T=dtype, D=D, DR=DR, PAGE=page, BN=int(tiles["BN"]), STAGES=int(tiles["STAGES"]),
                           OVERLAP=bool(tiles.get("OVERLAP", False)), PROBE=int(tiles.get("PROBE", 0)),
                           SEESAW=bool(tiles.get("SEESAW", False)), QROWS=int(tiles.get("QROWS", 64)),
                           ST=bool(tiles.get("ST", False)), SACC=int(tiles.get("SACC", 1)),
                           PSS=bool(tiles.get("PSS", False)), SSPLIT=bool(tiles.get("SSPLIT", False)),
                           shared=mla_sm90_shared_bytes(D, DR, tiles, 4 if dtype == "f32" else 2))
            self.align = (16, 16, 16, 16)
        else:
            self.kw = dict(T=dtype, **kw)
            self.align = (64, 16, 64, 16)
        self.kw_merge = dict(T="f32", OUT=dtype, WARPS=4)

    def splits(self, max_len: int) -> int:
        """The split count for sequences of up to ``max_len`` keys (``num_splits`` if given)."""
        B, H = self.dims[:2]
        if self.fixed:  # at most a chunk a key (more would be empty, their scratch allocated for nothing)
            return min(self.fixed, max(max_len, 1))
        if self.tiles is not None:
            return _sm90_splits(B * -(-H // 64), max_len, self.sms, int(self.tiles["BN"]))
        return split_count(B * H // self.G, max_len, self.slots)

    def run(self, q_nope: Any, q_pe: Any, ckv: Any, kpe: Any, bt: Any, sl: Any, out: Any, lse: Any,
            max_len: int) -> None:
        """Launch on checked arrays, writing ``out`` and ``lse``; the split count for sequences of up
        to ``max_len`` keys."""
        B, H, D, _ = self.dims
        n = self.splits(max_len)
        part, part_lse = (out, lse) if n == 1 else \
            (self.kind.empty((B, n, H, D), self.dt_f32), self.kind.empty((B, n, H), self.dt_f32))
        stream = self.kind.stream()
        out_t = self.dtype if n == 1 else "f32"
        if self.tiles is not None:
            rows = min(self.page, int(self.tiles["BN"]))
            qr = int(self.tiles.get("QROWS", 64))
            maps = (cached_tensor_map(q_nope, (1, qr, 64)), cached_tensor_map(q_pe, (1, qr, 64)),
                    cached_tensor_map(ckv, (1, rows, 64)), cached_tensor_map(kpe, (1, rows, 64)))
            self.kernel[(-(-H // 64), n, B), 384](*maps, bt, sl, part, part_lse, H, self.max_pages, n, self.sc,
                                                  OUT=out_t, stream=stream, **self.kw)
        else:
            self.kernel[(n, H // self.G, B), self.threads](q_nope, q_pe, ckv, kpe, bt, sl, part, part_lse, H // self.G,
                                                           self.max_pages, n, self.sc, OUT=out_t, SPLIT=n > 1,
                                                           stream=stream, **self.kw)
        if n > 1:
            self.merge[-(-B * H // 4), 128](part, part_lse, out, lse, B, n, H, D, stream=stream, **self.kw_merge)

    def __call__(self, q_nope: Any, q_pe: Any, ckv: Any, kpe: Any, bt: Any, sl: Any,
                 max_seq_len: int | None) -> tuple | None:
        kind = self.kind
        ok = kind.contiguous
        if not (ok(q_nope) and ok(q_pe) and ok(ckv) and ok(kpe) and ok(bt) and ok(sl)):
            return None
        if kind.cuda:
            a = self.align
            if q_nope.data_ptr() % a[0] or q_pe.data_ptr() % a[1] or ckv.data_ptr() % a[2] or kpe.data_ptr() % a[3]:
                return None
        capacity = self.max_pages * self.page
        max_len = int(max_seq_len) if max_seq_len is not None else \
            capacity if kind.cuda else max_len_of(sl, None, capacity, "mla_decode")
        B, H, D, _ = self.dims
        out = kind.empty((B, H, D), self.dt_out)
        lse = kind.empty((B, H), self.dt_f32)
        self.run(q_nope, q_pe, ckv, kpe, bt, sl, out, lse, max_len)
        return out, lse


def _generic_tiles(tc: bool, H: int, D: int, DR: int, itemsize: int, heads_per_block: int | None,
                   warps: int | None, unroll: int, stages: int) -> tuple[int, int, int, int, int, dict]:
    """(G, warps, stages, shared bytes, registers a thread, the other compile-time values) of
    std.mla's mla_decode on tensor cores (``tc``) or in SIMT, from :func:`mla_decode`'s
    options (ValueError for ones that do not fit)."""
    fn = "mla_decode"
    G = int(heads_per_block) if heads_per_block is not None else \
        (max(g for g in range(1, 17) if H % g == 0) if tc and H else 2)
    if G < 1 or (H and H % G) or (tc and G > 16):
        raise ValueError(f"{fn}: H ({H}) must be a multiple of heads_per_block ({G}), at most 16 on tensor cores")
    unroll, stages = int(unroll), int(stages)
    if tc:
        warps = int(warps) if warps is not None else next((w for w in (4, 2, 1) if (D + DR) % (16 * w) == 0
                                                          and D % (16 * w) == 0))
        if warps < 1 or (D + DR) % (16 * warps) or D % (16 * warps) or stages < 1:
            raise ValueError(f"{fn}: on tensor cores D + DR and D must be multiples of 16 * warps ({warps}), "
                             f"stages at least 1")
        bn = 16
        shared = (16 + stages * bn) * (D + DR + 8) * itemsize + warps * bn * 16 * 4
        return G, warps, stages, shared, 224, dict(TC=True, BN=bn)
    warps = int(warps) if warps is not None else 4
    if min(warps, unroll, stages) < 1:
        raise ValueError(f"{fn}: warps, unroll and stages must be at least 1, not {warps}, {unroll}, {stages}")
    lanes = decode_lanes(D, itemsize, DR, G)
    shared = decode_shared_bytes(D, itemsize, G, 1, warps, unroll, stages, lanes, DR)
    return G, warps, stages, shared, 48 + 8 * G * (D // lanes) // 4, dict(U=unroll, L=lanes)


#: Tiles of std.mla_sm90 (the Hopper MLA decode): BN keys a step (a tile serves as K and V), STAGES
#: tiles in the ring, OVERLAP (the softmax warpgroup issues S_j = Q K_j^T with P_{j-1} V_{j-1} and runs
#: tile j's softmax under the latter; needs 2 stages). 64 keys in 2 stages (FlashMLA's) since
#: 2026-11-27, measured on an H100 (benchmarks/bench_mla_variants.py, B32, 8192 keys, latent 512 + 64,
#: pages of 64, one run, cubins assembled by ptxas as a whole program): at 128 heads 153 us = 477 TFLOP/s
#: against 186-192 us (381-392) for 32 keys in 2 stages, 32 x 3 and 32 x 4 level with 32 x 2, OVERLAP
#: 264 us, SEESAW 64 x 2 203 us. Before that (cubins from nvJitLink's relocatable compile, every wgmma
#: serialised) 32 x 2 had won: 227 against 214 TFLOP/s. Up to 16 heads :data:`MLA_SM90_SMALL_TILES`.
#: :func:`mla_sm90_shared_bytes` gives the shared memory (64 x 2 fills sm_90's: 229,672 of 232,448
#: bytes). PROBE: a timing diagnostic, 0 (the kernel) unless
#: benchmarks/bench_mla_variants.py asks for 1 (the tiles streamed through the ring, nothing computed:
#: the result is 0 and the LSE -inf), 2 (no P V: the result is 0, the LSE right), 3 (any form's
#: compute without the loads: the ring filled once and reused; the result means nothing) or 4 (S
#: alone; the result means nothing); see the kernel's header.
#: SACC: S = Q K^T's k steps over SACC (1 to 4) accumulators, SACC independent wgmma chains instead of
#: one chain of 36 short m64nBNk16 (SACC * BN <= 64; the sequential form and PROBE 2 / 4); 1 unless asked.
#: PSS: warpgroup 1's P V with P from its shared copy (as warpgroup 2's) instead of registers; the
#: sequential form only; off unless asked. SSPLIT: S's k steps split over both consumer warpgroups (warpgroup
#: 2's half through shared memory: 16 + 256 BN bytes more); the sequential form, without PROBE 1, 2, 4; off
#: unless asked.
#: SEESAW: FlashMLA's later schedule (each consumer warpgroup owns half of O's columns and computes S and
#: the softmax of every other tile, handing P, the row maxima and the rescale factors to the other; one
#: warpgroup's S and softmax run under the other's P V); off: level at 128 heads, slower at 16. Without OVERLAP or
#: PROBE 1, 2, 4.
#: QROWS: Q's rows kept in shared memory, 64 (every row of wgmma's M), or 0 for as few as the heads need
#: (H rounded up to 8 where H < 64: at 16 heads Q takes 18 KB instead of 72 and the ring can have the
#: rest; :func:`mla_sm90_qrows`); 0 in :data:`MLA_SM90_SMALL_TILES`.
#: ST: warpgroup 1 computes S transposed (S^T = K Q^T: the tile's 64 keys as wgmma's M, Q's QROWS rows
#: as N; the softmax down its columns, P stored transposed): for up to 16 heads (QROWS 0, or 8 or 16:
#: more spilled at D 512); BN 64, without OVERLAP, SEESAW or PROBE; on in :data:`MLA_SM90_SMALL_TILES`.
MLA_SM90_TILES = dict(BN=64, STAGES=2, OVERLAP=False, PROBE=0, SEESAW=False, QROWS=64, ST=False, SACC=1, PSS=False,
                      SSPLIT=False)

#: The Hopper kernel's tiles for up to :data:`MLA_SM90_SMALL_HEADS` query heads: S transposed, tiles of
#: 64 keys in 2 stages, Q's rows as few as the heads need.
MLA_SM90_SMALL_TILES = dict(MLA_SM90_TILES, BN=64, QROWS=0, ST=True)


def mla_sm90_tiles(heads: int, sm90_tiles: dict[str, int] | None = None) -> dict[str, int]:
    """The Hopper kernel's tiles for ``heads`` query heads: ``sm90_tiles`` over :data:`MLA_SM90_TILES`
    where given (not empty), else :data:`MLA_SM90_SMALL_TILES` up to :data:`MLA_SM90_SMALL_HEADS`
    heads and :data:`MLA_SM90_TILES` above; QROWS resolved (:func:`mla_sm90_qrows`)."""
    if sm90_tiles:
        tiles = {**MLA_SM90_TILES, **sm90_tiles}
    else:
        tiles = dict(MLA_SM90_SMALL_TILES if heads <= MLA_SM90_SMALL_HEADS else MLA_SM90_TILES)
    return mla_sm90_qrows(tiles, heads)


def mla_sm90_qrows(tiles: dict[str, int], heads: int) -> dict[str, int]:
    """``tiles`` with QROWS resolved for ``heads`` query heads: 0 becomes the heads rounded up to a
    multiple of 8, at most 64 (the kernel then keeps that many of Q's rows in shared memory; the
    rows of wgmma's 64 past them read other shared memory and are never stored); other values kept
    (:func:`mla_sm90_reason_not` says where they cannot run)."""
    if int(tiles.get("QROWS", 64)) != 0:
        return tiles
    return {**tiles, "QROWS": min(64, max(8, -(-int(heads) // 8) * 8))}


def mla_sm90_shared_bytes(D: int, DR: int, tiles: dict[str, int], itemsize: int = 2) -> int:
    """Dynamic shared memory of std.mla_sm90 in bytes (the formula stated in stdlib/mla_sm90.kc): Q's
    64 rows and STAGES tiles of BN rows, D + DR elements each, P (64 x BN, in slabs of 64 columns), 64
    f32 rescale factors, 5 + 2 STAGES mbarriers. SEESAW: a P a slot (none where BN is a multiple of 64:
    P then takes the tile's first k_pe slab), 128 f32 a slot (row maxima, factors) and 128 (row sums),
    4 + 3 STAGES mbarriers. Q's rows: QROWS (resolved: :func:`mla_sm90_qrows`), 64 if absent. ST: an
    mbarrier and 320 f32 more (the warps' column maxima, the final maxima); SSPLIT: 2 mbarriers and 64 BN
    f32 more (warpgroup 2's half of S)."""
    bn, st, qr = tiles["BN"], tiles["STAGES"], int(tiles.get("QROWS", 64))
    if tiles.get("SEESAW"):
        ps = 0 if bn % 64 == 0 else st * 64 * 64 * -(-bn // 64)
        return ((qr + st * bn) * (D + DR) + ps) * itemsize + 4 * (128 * st + 128) + 8 * (4 + 3 * st)
    extra = 8 + 4 * 320 if tiles.get("ST") else 16 + 4 * 64 * bn if tiles.get("SSPLIT") else 0
    return ((qr + st * bn) * (D + DR) + 64 * 64 * -(-bn // 64)) * itemsize + 256 + 8 * (5 + 2 * st) + extra


def mla_sm90_splits(units: int, max_len: int, sms: int, bn: int, min_chunk: int = 256,
                    max_splits: int = 64) -> int:
    """The chunks (split-KV) std.mla_sm90 cuts each sequence into: ``units`` blocks a split (B x head
    blocks), one block a multiprocessor (its shared memory), ``sms`` of them. Going up from 1, a count
    is taken where it cuts the tiles of BN keys the busiest multiprocessor computes (waves x tiles a
    chunk, for sequences of ``max_len``) by 10 % or more, since each split adds merge_states work over
    f32 partial states (B 32, H 128, 2 splits: 17 MB written and read again); chunks of at least
    ``min_chunk`` keys. E.g. B 32, 8192 keys, 132 SMs: H 128, 2 (128 blocks, one wave, 64 tiles each;
    4 splits also give 64, in two waves); H 16: 4."""
    tiles = max(-(-int(max_len) // bn), 1)
    best, cost = 1, tiles * -(-units // sms)
    for s in range(2, max(1, min(max_splits, -(-int(max_len) // min_chunk))) + 1):
        c = -(-units * s // sms) * -(-tiles // s)
        if c < 0.9 * cost:
            best, cost = s, c
    return best


def _mla_sm90_module(target: str) -> Any:
    """std.mla_sm90 for ``target`` (with approx_ftz where the target has it, as
    :func:`kcompiler.ops._common.attention_module`)."""
    return _common.ftz_module("mla_sm90", target)


def mla_sm90_reason_not(q_nope: Any, q_pe: Any, ckv_cache: Any, kpe_cache: Any, tiles: dict[str, int],
                        target: str = "auto") -> str | None:
    """Why :func:`mla_decode`'s Hopper path cannot run on these arrays, or None when it can: it needs a
    target with wgmma (an sm_90 GPU; the CPU target's emulation for tests), f16 or bf16, D a multiple
    of 128 up to 512 and DR of 64 (slabs of 64 columns; half of D a consumer's wgmma of at most 256
    columns), a page size that is a multiple of 8 dividing BN or divided by it, up to 256 (TMA boxes of
    whole pages or whole tiles), arrays the tensor maps can describe (device arrays on a GPU, numpy on
    the CPU target; 16-byte aligned), and the tiles within the shared memory a block may have on the
    device (its ``shared_memory_per_block``)."""
    t = arrays.array_scalar_type(q_nope)
    D, DR, page = int(q_nope.shape[-1]), int(q_pe.shape[-1]), int(ckv_cache.shape[1])
    bn, st = int(tiles["BN"]), int(tiles["STAGES"])
    if t is None or t.name not in ("f16", "bf16"):
        return "the Hopper path computes f16 and bf16"
    if D % 128 or D > 512 or DR % 64 or DR == 0:
        return f"the Hopper path takes D a multiple of 128 up to 512 and DR of 64, not {D} and {DR}"
    probe = tiles.get("PROBE", 0)
    cprobe = probe in (1, 2, 4)  # the probes that replace the consumers' loop (3: the producer's)
    if probe not in (0, 1, 2, 3, 4) or (cprobe and tiles.get("OVERLAP")):
        return f"sm90_tiles: PROBE is 0 to 4, and 0 or 3 with OVERLAP, not {tiles}"
    sacc = tiles.get("SACC", 1)
    if sacc not in (1, 2, 3, 4) or (sacc > 1 and (tiles.get("SEESAW") or tiles.get("ST") or tiles.get("OVERLAP")
                                                  or sacc * bn > 64)):
        return f"sm90_tiles: SACC is 1 to 4 with SACC * BN <= 64 (more spills), and 1 with SEESAW, ST or " \
               f"OVERLAP, not {tiles}"
    if tiles.get("PSS") and (tiles.get("OVERLAP") or tiles.get("SEESAW") or tiles.get("ST")):
        return f"sm90_tiles: PSS (P from shared memory for both warpgroups' P V) is of the sequential form: " \
               f"without OVERLAP, SEESAW or ST, not {tiles}"
    if tiles.get("SSPLIT") and (tiles.get("OVERLAP") or tiles.get("SEESAW") or tiles.get("ST") or cprobe):
        return f"sm90_tiles: SSPLIT (S's k steps over both consumer warpgroups) is of the sequential form: " \
               f"without OVERLAP, SEESAW, ST or PROBE 1, 2, 4, not {tiles}"
    if tiles.get("SEESAW") and (cprobe or tiles.get("OVERLAP") or st < 2):
        return f"sm90_tiles: SEESAW is a schedule of its own, without OVERLAP or PROBE 1, 2, 4, in 2 stages or more " \
               f"(each warpgroup holds a tile the other still reads), not {tiles}"
    if bn % 16 or not 16 <= bn <= 256 or st < 1 or (tiles.get("OVERLAP") and st < 2):
        return f"sm90_tiles: BN a multiple of 16 from 16 to 256 and STAGES at least 1 (2 with OVERLAP), not {tiles}"
    qr, heads = int(tiles.get("QROWS", 64)), int(q_nope.shape[1])
    if tiles.get("ST") and (bn != 64 or qr > 16 or tiles.get("OVERLAP") or tiles.get("SEESAW") or cprobe):
        return f"sm90_tiles: ST (S transposed) takes BN 64 and QROWS of 16 at most (more spill at D 512), " \
               f"without OVERLAP, SEESAW or PROBE, not {tiles}"
    if qr % 8 or not 8 <= qr <= 64 or (qr < 64 and heads > qr):
        return f"sm90_tiles: QROWS is 0 (as the heads need), or a multiple of 8 up to 64, at least the " \
               f"heads ({heads}) where below 64, not {tiles.get('QROWS')}"
    if page % 8 or page > 256 or (page % bn and bn % page):
        return f"the Hopper path takes pages of a multiple of 8 up to 256 that divide BN ({bn}) or that it " \
               f"divides, not {page}"
    xs = (q_nope, q_pe, ckv_cache, kpe_cache)
    why = hopper_reason_not("mla_sm90", lambda: _mla_sm90_module(target), target, xs)
    if why is None and any(data_ptr(x) % 16 for x in xs):
        return "TMA needs 16-byte aligned tensors"
    limit = device_of(_mla_sm90_module(target), q_nope).shared_memory_per_block if why is None else 0
    if why is None and mla_sm90_shared_bytes(D, DR, tiles, t.size) > limit:
        return f"BN {bn} in {st} stages needs {mla_sm90_shared_bytes(D, DR, tiles, t.size)} bytes of shared " \
               f"memory, more than the {limit} a block may have on this device"
    return why


def _mla_decode_sm90(q_nope: Any, q_pe: Any, ckv: Any, kpe: Any, bt: Any, sl: Any, max_pages: int,
                     max_len: int, scale: float, num_splits: int | None, return_lse: bool, tiles: dict,
                     target: str, *, key: tuple | None = None, inputs: tuple = ()) -> Any:
    """The launch of std.mla_sm90 (:func:`mla_decode` checked the arguments, ``bt`` the flat block
    table, ``sl`` the lengths, both int32 of q's kind), with merge_states after a split; kept as the
    plan under ``key`` (see :func:`_mla_run`)."""
    (B, H, D), DR, page = tuple(q_nope.shape), int(q_pe.shape[-1]), int(ckv.shape[1])
    mod = _mla_sm90_module(target)
    launch = _MlaLaunch(mod.mla_decode_sm90, _common.ftz_module("merge_states", target), q_nope, (B, H, D, DR),
                        arrays.array_scalar_type(q_nope).name, page, max_pages, np.float32(scale), num_splits,
                        tiles=tiles, sms=device_of(mod, q_nope).multiprocessor_count)
    return _mla_run(launch, key, inputs, q_nope, q_pe, ckv, kpe, bt, sl, max_len, return_lse)


#: :func:`mla_sm90_splits` memoised (a decode step asks it again at each call).
_sm90_splits = functools.lru_cache(maxsize=4096)(mla_sm90_splits)


__all__ = ["MLA_SM90_MIN_HEADS", "MLA_SM90_SMALL_HEADS", "MLA_SM90_SMALL_TILES", "MLA_SM90_TILES", "mla_decode", "mla_sm90_qrows", "mla_sm90_tiles", "mla_sm90_reason_not",
           "mla_sm90_shared_bytes", "mla_sm90_splits"]
