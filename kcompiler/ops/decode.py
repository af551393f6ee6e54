"""Decode attention over a paged KV cache by std.attention (split-KV, FlashDecoding), and merge_states,
which combines the splits' partial states."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime import arrays
from ..runtime.device import Device
from . import _common
from ._common import (contiguous, data_ptr, device_of, empty_like, flat, host_ints, index_array,
                      query_type, scalar_of, stream_of, target_for)


#: The SIMT decode's (WARPS, U, STAGES) by kind of cache: one query head a KV head (or two) in 16-bit
#: types, more (grouped-query attention, several query tokens), and FP8.
DECODE_SIMT = {"mha": dict(WARPS=4, U=4, STAGES=3), "gqa": dict(WARPS=4, U=2, STAGES=3),
               "fp8": dict(WARPS=4, U=8, STAGES=3)}
#: The tensor-core decode: RING (std.attention's paged_decode_ring: warps with private cp.async rings of
#: BN keys a step, STAGES deep; else paged_decode_tc: one warp a block, prefill_mma's tiles of BN
#: keys) and its tiles.
DECODE_TC_TILES = dict(RING=True, WARPS=4, BN=32, STAGES=2)
#: paged_decode_tc's tiles where RING is false.
DECODE_TC_SINGLE = dict(BN=64, STAGES=2)


def decode_splits(units: int, max_len: int, device: Device, threads: int, shared: int, regs: int,
                  min_chunk: int = 256, max_splits: int = 64) -> int:
    """The number of chunks (split-KV) :func:`paged_decode` and :func:`mla_decode` cut each sequence
    into: ``units`` blocks a split (B x KV heads, or head groups), on ``device``'s multiprocessors
    (``multiprocessor_count``), each holding as many blocks of ``threads`` threads, ``shared`` bytes
    and about ``regs`` registers a thread as its shared memory (``shared_memory_per_multiprocessor``,
    1 KB of it reserved a block), threads (``threads_per_multiprocessor``) and 64 K registers allow
    (the slots). The fewest splits whose blocks fill the slots in waves used to 90 % or more (so no
    last wave runs a few blocks alone; deeper cuts cost a merge_states pass), chunks of at least
    ``min_chunk`` keys; else the best-used count up to that bound."""
    per_sm = max(1, min(device.shared_memory_per_multiprocessor // (shared + 1024),
                        device.threads_per_multiprocessor // threads, 65536 // (threads * max(regs, 32)), 32))
    slots = device.multiprocessor_count * per_sm
    most = max(1, min(max_splits, -(-int(max_len) // min_chunk)))
    best, best_use = 1, 0.0
    for s in range(1, most + 1):
        waves = units * s / slots
        use = waves / -(-units * s // slots)
        if waves >= 1 and use >= 0.9:
            return s
        if use > best_use + 0.02:
            best, best_use = s, use
    return best


def decode_lanes(D: int, itemsize: int, DR: int = 0, rows: int = 1) -> int:
    """Lanes a cache row of the SIMT decode (its L), a power of two up to 32 dividing D (and DR) with
    a multiple of 4 bytes a lane (cp.async's sizes): one 16-byte piece a lane where that fits, more
    lanes where the block's ``rows`` query rows (heads times tokens) would otherwise hold more than 64
    values of q and of the output a lane (registers: FP8 with GQA 8:1 spilled at 16 elements a lane)."""
    def fits(L: int) -> bool:
        return L <= 32 and D % L == 0 and (not DR or DR % L == 0) and (D // L * itemsize) % 4 == 0 \
            and (not DR or (DR // L * itemsize) % 4 == 0)
    for L in (32, 16, 8, 4, 2, 1):
        if L <= max(D * itemsize // 16, 1) and fits(L):
            while rows * (D // L) > 64 and fits(2 * L):
                L *= 2
            return L
    raise ValueError(f"decode: no lane count fits a row of {D} (+ {DR}) elements of {itemsize} bytes")


def decode_shared_bytes(D: int, itemsize: int, G: int, QL: int, warps: int, unroll: int, stages: int, lanes: int,
                        DR: int = 0) -> int:
    """Dynamic shared memory of the SIMT decode (stdlib/attention.kc): the larger of the warps' rings
    of cache rows and the merge of the groups' states."""
    ring = warps * stages * (32 // lanes) * unroll * (D + DR if DR else 2 * D) * itemsize
    merge = warps * (32 // lanes) * QL * G * (D + 2) * 4
    return max(ring, merge)


def paged_lengths(block_table: Any, seq_lens: Any, max_seq_len: int | None, like: Any, page: int,
                  fn: str) -> tuple[Any, Any, int, int]:
    """(block table flat, seq_lens, max_pages, max_seq_len) of a paged decode over B = len(like)
    sequences: the block table (B, max_pages) and seq_lens (B,) as int32 arrays of ``like``'s kind;
    ``max_seq_len`` read off seq_lens (which must lie in 0 .. max_pages * ``page``) when not given.
    ValueError / TypeError for ones that do not fit."""
    B = int(like.shape[0])
    if len(block_table.shape) != 2 or block_table.shape[0] != B:
        raise ValueError(f"{fn}: block_table must be (B, max_pages) = ({B}, ...), not {tuple(block_table.shape)}")
    max_pages = int(block_table.shape[1])
    bt = index_array(block_table.reshape(-1), like, "block_table", fn)
    sl = index_array(seq_lens, like, "seq_lens", fn, B)
    if max_seq_len is None:
        lens = host_ints(sl)
        if (lens < 0).any() or (lens > max_pages * page).any():
            raise ValueError(f"{fn}: seq_lens must lie in 0 .. max_pages * page_size = {max_pages * page}")
        max_seq_len = int(lens.max()) if B else 0
    return bt, sl, max_pages, max_seq_len


def _f32_vector(x: Any, n: int, like: Any, name: str, fn: str) -> Any:
    """``x`` (a number or n numbers) as a contiguous f32 array of length n of q's kind. A number for a
    torch tensor is filled in on its device (no copy from the host, which would wait for the device's
    queue before the launch)."""
    if arrays.is_torch_tensor(like):
        import torch  # deferred: torch is optional
        if isinstance(x, (int, float, np.floating, np.integer)):
            return torch.full((n,), float(x), dtype=torch.float32, device=like.device)
        t = torch.as_tensor(x, dtype=torch.float32, device=like.device).reshape(-1)
        t = t.expand(n).contiguous() if t.numel() == 1 else t.contiguous()
    else:
        t = np.ascontiguousarray(np.broadcast_to(np.asarray(host_ints(x) if arrays.is_torch_tensor(x) else x,
                                                            np.float32).reshape(-1), (n,)))
    if tuple(t.shape) != (n,):
        raise ValueError(f"{fn}: {name} must be one number or {n} (one per KV head), not {tuple(t.shape)}")
    return t


def paged_decode(q: Any, k_cache: Any, v_cache: Any, block_table: Any, seq_lens: Any, *,
                 scale: float | None = None, k_scale: Any = None, v_scale: Any = None,
                 num_splits: int | None = None, max_seq_len: int | None = None, return_lse: bool = False,
                 warps: int | None = None, unroll: int | None = None, stages: int | None = None,
                 tensor_cores: bool | None = None, tc_tiles: dict[str, int] | None = None,
                 target: str = "auto") -> Any:
    """Decode attention of one query token a sequence over a paged KV cache (stdlib/attention.kc):
    ``softmax(scale * q k^T) v`` over the first ``seq_lens[b]`` tokens of sequence b.

    - q: (B, Hq, D) of f16, bf16 or f32; the result has q's shape and dtype; with ``return_lse`` also
      the log-sum-exp (B, Hq), f32, natural log. Or q: (B, QL, Hq, D), the last QL tokens of each
      sequence (their keys already in the cache, counted in seq_lens), token t seeing the keys before
      seq_lens[b] - (QL - 1 - t) (speculative decoding's verification); result (B, QL, Hq, D), LSE (B,
      QL, Hq); the SIMT path.
    - k_cache, v_cache: (pages, page_size, Hkv, D) (vLLM's and FlashAttention's paged layout), of q's
      dtype, or FP8 E4M3 (``float8_e4m3fn``) with per-KV-head scales ``k_scale`` and ``v_scale`` (a
      number or Hkv numbers: K = k_scale * k). Hq a multiple of Hkv (grouped-query attention). D a
      multiple of 16.
    - block_table: (B, max_pages) int32, the pages of each sequence in order; seq_lens: (B,) int32.
    - ``num_splits``: the keys of each sequence are cut into this many chunks, a block each, and the
      partial results combined by :func:`merge_states` (split-KV, FlashDecoding). Default
      (:func:`decode_splits`): the fewest that fill the multiprocessors of the device that runs the
      kernel (its ``multiprocessor_count``; the CPU target answers with an H100's, see
      kcompiler.runtime.device.Device) with whole waves of resident blocks, chunks of at least 256
      keys.
    - ``max_seq_len``: the longest of seq_lens, if known: then seq_lens is not read on the host (no
      synchronisation with the GPU) nor checked against the block table.
    - ``warps``, ``unroll``, ``stages``: the SIMT kernel's WARPS, U (keys a group of lanes takes a
      step) and STAGES (steps of cache rows a warp has in shared memory, STAGES - 1 of them loading by
      cp.async while it computes one). Defaults: :data:`DECODE_SIMT` (the fastest on the H100,
      benchmarks/RESULTS.md).
    - ``tensor_cores``: the mma.sync path (the G = Hq / Hkv query heads of a KV head as the rows of an
      m16 tile, G <= 16; one query token; a cache of q's dtype, f16 or bf16; NVIDIA sm_80+), for
      grouped-query attention, where the SIMT path spends 4 shuffles a key and query head. Default:
      where G >= 4 and the target has it (benchmarks/RESULTS.md), the SIMT path otherwise.
      ``tc_tiles``: its kernel and tiles, default :data:`DECODE_TC_TILES` (RING: warps streaming
      their own keys through cp.async rings; RING False: one warp a block on prefill_mma's tiles,
      :data:`DECODE_TC_SINGLE`).

    numpy in, numpy out; torch in, torch out. Raises TypeError for other dtypes and ValueError for
    shapes that do not match."""
    fn = "paged_decode"
    src = query_type(q, fn)
    kt = arrays.array_scalar_type(k_cache) if arrays.is_array(k_cache) else None
    if kt is None or kt.name not in (src.name, "f8e4m3") or arrays.array_scalar_type(v_cache) != kt:
        raise TypeError(f"{fn}: k_cache and v_cache must both be of q's dtype ({src}) or f8e4m3, not "
                        f"{arrays.describe(k_cache)} and {arrays.describe(v_cache)}")
    fp8 = kt.name == "f8e4m3"
    if fp8 and (k_scale is None or v_scale is None):
        raise ValueError(f"{fn}: an FP8 cache needs k_scale and v_scale")
    if len(q.shape) not in (3, 4) or len(k_cache.shape) != 4 or tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"{fn}: q must be (B, Hq, D) or (B, QL, Hq, D) and both caches (pages, page_size, Hkv, D),"
                         f" not {tuple(q.shape)}, {tuple(k_cache.shape)} and {tuple(v_cache.shape)}")
    qshape = tuple(q.shape)
    (B, QL, H, D), (_, page, HK, Dk) = (qshape if len(qshape) == 4 else (qshape[0], 1) + qshape[1:]), \
        tuple(k_cache.shape)
    if Dk != D or D % 16:
        raise ValueError(f"{fn}: the head dimension must be a multiple of 16 and equal in q and the caches "
                         f"({D}, {Dk})")
    if HK == 0 or H % HK:
        raise ValueError(f"{fn}: q's {H} heads must be a multiple of the cache's {HK} (grouped-query attention)")
    bt, sl, max_pages, max_seq_len = paged_lengths(block_table, seq_lens, max_seq_len, q, page, fn)
    q, k_cache, v_cache = contiguous(q), contiguous(k_cache), contiguous(v_cache)
    ks = _f32_vector(k_scale if fp8 else 1.0, HK, q, "k_scale", fn)
    vs = _f32_vector(v_scale if fp8 else 1.0, HK, q, "v_scale", fn)
    G = H // HK
    out = empty_like(q, qshape, src.name)
    lse = empty_like(q, qshape[:-1], "f32")
    if B == 0 or H == 0:
        return (out, lse) if return_lse else out
    mod = _common.attention_module(target_for(q, target))
    sc = np.float32(D ** -0.5 if scale is None else scale)
    args = (flat(q, 16), flat(k_cache, 16), flat(v_cache, 16), bt, sl, ks, vs)
    can_tc = (mod.target_has("mma") and not fp8 and src.name in ("f16", "bf16") and G <= 16 and QL == 1
              and all(data_ptr(x) % 16 == 0 for x in args[:3] + (out,)))
    if tensor_cores and not can_tc:
        raise ValueError(f"{fn}: the tensor-core path needs NVIDIA sm_80+, f16/bf16 q and cache, one query token, "
                         f"at most 16 query heads a KV head and 16-byte aligned arrays")
    tc = can_tc and (G >= 4 if tensor_cores is None else bool(tensor_cores))
    if tc:
        tiles, threads, regs, shared = _tc_tiles(tc_tiles, D, src.size, fn)
    else:
        cfg = DECODE_SIMT["fp8" if fp8 else "gqa" if G * QL > 2 else "mha"]
        tiles, threads, regs, shared = _simt_tiles(warps or cfg["WARPS"], unroll or cfg["U"], stages or cfg["STAGES"],
                                                   D, kt.size, G, QL, fn)
    if num_splits is None:
        num_splits = decode_splits(B * HK, max_seq_len, device_of(mod, q), threads, shared, regs)
    num_splits = int(num_splits)
    if num_splits < 1:
        raise ValueError(f"{fn}: num_splits must be at least 1, not {num_splits}")
    part = out if num_splits == 1 else empty_like(q, (B, num_splits, QL * H, D), "f32")
    part_lse = lse if num_splits == 1 else empty_like(q, (B, num_splits, QL * H), "f32")
    kw = dict(T=src.name, KT=kt.name, D=D, G=G, PAGE=page, TC=tc, QL=QL, shared=shared, **tiles)
    mod.paged_decode[(num_splits, HK, B), threads](*args, flat(part, 1), flat(part_lse, 1), HK, max_pages,
                                                   num_splits, sc, OUT=arrays.array_scalar_type(part).name,
                                                   SPLIT=num_splits > 1, stream=stream_of(q), **kw)
    if num_splits > 1:
        merge_states(part, part_lse, out=out.reshape(B, QL * H, D), lse_out=lse.reshape(B, QL * H), target=target)
    return (out, lse) if return_lse else out


def _tc_tiles(tc_tiles: dict[str, int] | None, D: int, itemsize: int, fn: str) -> tuple[dict, int, int, int]:
    """(tiles, threads, registers a thread, shared bytes) of the tensor-core decode: ``tc_tiles`` over
    :data:`DECODE_TC_TILES` (RING: paged_decode_ring) or :data:`DECODE_TC_SINGLE` (paged_decode_tc)."""
    tiles = {**DECODE_TC_TILES, **(tc_tiles or {})}
    if tiles["RING"]:
        tiles = {k: int(tiles[k]) for k in ("WARPS", "BN", "STAGES")}
        if min(tiles.values()) < 1 or tiles["BN"] % 16:
            raise ValueError(f"{fn}: tc_tiles: WARPS and STAGES at least 1, BN a multiple of 16, not {tiles}")
        tiles["RING"] = True
        shared = 16 * (D + 8) * itemsize + max(tiles["WARPS"] * tiles["STAGES"] * 2 * tiles["BN"] * (D + 8)
                                               * itemsize, tiles["WARPS"] * 16 * (D + 2) * 4)
        return tiles, tiles["WARPS"] * 32, 168, shared
    tiles = {**DECODE_TC_SINGLE, **{k: v for k, v in (tc_tiles or {}).items() if k in ("BN", "STAGES")},
             "BM": 16, "RING": False}
    return tiles, 32, 255, (tiles["BM"] + 2 * tiles["STAGES"] * tiles["BN"]) * (D + 8) * itemsize


def _simt_tiles(warps: int, unroll: int, stages: int, D: int, itemsize: int, G: int, QL: int,
                fn: str) -> tuple[dict, int, int, int]:
    """(tiles, threads, registers a thread, shared bytes) of the SIMT decode of ``G`` query heads a KV
    head and ``QL`` tokens over a cache of ``itemsize`` bytes an element."""
    lanes = decode_lanes(D, itemsize, rows=G * QL)
    tiles = dict(WARPS=int(warps), U=int(unroll), STAGES=int(stages), L=lanes)
    if min(tiles.values()) < 1:
        raise ValueError(f"{fn}: warps, unroll and stages must be at least 1, not {warps}, {unroll}, {stages}")
    regs = 48 + 8 * QL * G * (D // lanes) // 4  # about what ptxas -v reports at sm_90a
    shared = decode_shared_bytes(D, itemsize, G, QL, tiles["WARPS"], tiles["U"], tiles["STAGES"], lanes)
    return tiles, tiles["WARPS"] * 32, regs, shared


def merge_states(v: Any, s: Any, *, out: Any = None, lse_out: Any = None, out_dtype: Any = None,
                 target: str = "auto") -> tuple[Any, Any]:
    """Combine S attention states of each row into one (stdlib/attention.kc's merge_states;
    FlashInfer's ``merge_states``, with natural-log LSEs): ``v`` (N, S, H, D), each state's output
    normalised over its own keys, ``s`` (N, S, H) f32 their log-sum-exps (-inf: no keys); returns
    ``(o, lse)``, o (N, H, D) = sum_s exp(s_s - lse) v_s and lse (N, H) = log sum_s exp(s_s), exactly
    the attention over the union of the states' keys (cascade attention, split-KV). ``v``: f32, f16 or
    bf16; o in ``out_dtype`` (default v's), or written into ``out`` / ``lse_out``. Raises TypeError /
    ValueError for dtypes and shapes that do not match."""
    fn = "merge_states"
    src = arrays.array_scalar_type(v) if arrays.is_array(v) else None
    if src is None or src.name not in ("f16", "bf16", "f32"):
        raise TypeError(f"{fn}: v must be an array of f32, f16 or bf16, not {arrays.describe(v)}")
    if not arrays.is_array(s) or arrays.array_scalar_type(s) is None or arrays.array_scalar_type(s).name != "f32":
        raise TypeError(f"{fn}: s must be an array of f32, not {arrays.describe(s)}")
    if len(v.shape) != 4 or tuple(s.shape) != tuple(v.shape[:3]):
        raise ValueError(f"{fn}: v must be (N, S, H, D) and s (N, S, H), not {tuple(v.shape)} and {tuple(s.shape)}")
    N, S, H, D = tuple(v.shape)
    if out is None:
        dst = src if out_dtype is None else scalar_of(out_dtype)
        if dst is None or dst.name not in ("f16", "bf16", "f32"):
            raise TypeError(f"{fn}: out_dtype must be f32, f16 or bf16, not {out_dtype!r}")
        out = empty_like(v, (N, H, D), dst.name)
    dst = arrays.array_scalar_type(out)
    if tuple(out.shape) != (N, H, D) or not arrays.is_contiguous(out) or dst is None \
            or dst.name not in ("f16", "bf16", "f32"):
        raise ValueError(f"{fn}: out must be a contiguous ({N}, {H}, {D}) array of f32, f16 or bf16")
    if lse_out is None:
        lse_out = empty_like(v, (N, H), "f32")
    if N * H == 0 or D == 0:
        return out, lse_out
    v, s = contiguous(v), contiguous(s)
    mod = _common.attention_module(target_for(v, target))
    warps = 4
    mod.merge_states[-(-N * H // warps), warps * 32](flat(v, 1), flat(s, 1), flat(out, 1), flat(lse_out, 1),
                                                     N, S, H, D, T=src.name, OUT=dst.name, WARPS=warps,
                                                     stream=stream_of(v))
    return out, lse_out


__all__ = ["DECODE_SIMT", "DECODE_TC_SINGLE", "DECODE_TC_TILES", "decode_lanes", "decode_shared_bytes", "decode_splits",
           "merge_states", "paged_decode"]
